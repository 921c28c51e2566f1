"""tfchart build (tfchart.images.build): the exact commands for each engine, and what happens without one.

Engines are faked: small executables named docker/podman on a temporary PATH record their argv
and answer `buildx version`, `info`, `build` and `push` as each test configures. One test runs
against this machine's real PATH (a docker CLI with no reachable daemon, no podman).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tfchart.errors import EngineNotFound, TfchartError, UsageError
from tfchart.images import build as images

REPO = Path(__file__).resolve().parents[2]
VERSION = "1.2.3"
VERSION_LABEL = f"org.opencontainers.image.version={VERSION}"
CPU_IMAGE = f"ghcr.io/tf-distributed/trainer:{VERSION}"
GPU_IMAGE = f"ghcr.io/tf-distributed/trainer:{VERSION}-gpu"

FAKE_CLI = """#!{python}
import json, os, sys
config = json.loads({config!r})
args = sys.argv[1:]
with open(config["log"], "a") as log:
    log.write(json.dumps([os.path.basename(sys.argv[0]), *args]) + "\\n")
if args[:2] == ["buildx", "version"]:
    if config["buildx"]:
        print("github.com/docker/buildx v0.25.0 faked")
        sys.exit(0)
    print("docker: unknown command: docker buildx", file=sys.stderr)
    sys.exit(1)
if args[:1] == ["info"]:
    if config["info"]:
        print("28.2.2")
        sys.exit(0)
    print(config["info_error"], file=sys.stderr)
    sys.exit(1)
if args[:1] == ["build"] or args[:2] == ["buildx", "build"]:
    sys.exit(config["build_exit"])
if args[:1] == ["push"]:
    sys.exit(config["push_exit"])
sys.exit(0)
"""
DAEMON_DOWN = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"


class FakeEngines:
    """A PATH holding only fake docker/podman CLIs (and git), and the argv they were called with."""

    def __init__(self, bin_dir: Path, log: Path) -> None:
        self.bin_dir = bin_dir
        self.log = log

    def install(self, name: str, **answers: object) -> None:
        """A fake `name` CLI; answers: buildx (False), info (True), info_error, build_exit and push_exit (0)."""
        config = {"log": str(self.log), "buildx": False, "info": True, "info_error": DAEMON_DOWN, "build_exit": 0,
                  "push_exit": 0, **answers}  # fmt: skip
        script = self.bin_dir / name
        script.write_text(FAKE_CLI.format(python=sys.executable, config=json.dumps(config)))
        script.chmod(0o755)

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def runs(self) -> list[list[str]]:
        """The calls that build or push, leaving out the probes (buildx version, info)."""
        return [call for call in self.calls() if "build" in call[1:3] or call[1] == "push"]


@pytest.fixture
def engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngines:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = shutil.which("git")
    if git:
        (bin_dir / "git").symlink_to(git)
    monkeypatch.setenv("PATH", str(bin_dir))
    return FakeEngines(bin_dir, tmp_path / "calls.jsonl")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout-like directory (not a git repository): pyproject.toml, the chart's Chart.yaml and both
    Dockerfiles."""
    root = tmp_path / "repo"
    (root / "charts" / "tf-distributed").mkdir(parents=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "x"\nversion = "{VERSION}"\n')
    (root / "charts" / "tf-distributed" / "Chart.yaml").write_text(f'name: tf-distributed\nappVersion: "{VERSION}"\n')
    for variant in ("cpu", "gpu"):
        (root / f"Dockerfile.{variant}").write_text("FROM scratch\n")
    return root.resolve()


def default_plan(
    repo: Path, variants: list[str], push: bool = False, engine: str | None = None
) -> list[images.BuildStep]:
    return images.plan(variants, None, "ghcr.io", "tf-distributed/trainer", push, None, engine, repo)


def run_collecting(steps: list[images.BuildStep], dry_run: bool) -> list[str]:
    echoed: list[str] = []
    images.run(steps, dry_run=dry_run, echo=echoed.append)
    return echoed


# ---------------------------------------------------------------------------------------------
# the commands, engine by engine


def test_all_with_buildx_and_push_builds_and_pushes_in_one_command_each(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=True)
    steps = default_plan(repo, ["all"], push=True)
    cpu = ["docker", "buildx", "build", "-f", f"{repo}/Dockerfile.cpu", "-t", CPU_IMAGE,
           "--label", VERSION_LABEL, "--push", str(repo)]
    gpu = ["docker", "buildx", "build", "-f", f"{repo}/Dockerfile.gpu", "-t", GPU_IMAGE,
           "--label", VERSION_LABEL, "--push", str(repo)]
    assert [step.argv for step in steps] == [cpu, gpu]
    assert [step.image for step in steps] == ["ghcr.io/tf-distributed/trainer:1.2.3",
                                              "ghcr.io/tf-distributed/trainer:1.2.3-gpu"]
    assert all(step.description for step in steps)

    echoed = run_collecting(steps, dry_run=False)
    assert echoed == [shlex.join(cpu), shlex.join(gpu)]
    assert engines.runs() == [cpu, gpu]
    assert ["docker", "info", "--format", "{{.ServerVersion}}"] in engines.calls()


def test_buildx_without_push_loads_the_image_into_docker(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=True)
    (step,) = default_plan(repo, ["cpu"])
    assert step.argv[-2:] == ["--load", str(repo)]


def test_gpu_with_plain_docker_and_push_is_a_build_then_a_push(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=False)
    steps = default_plan(repo, ["gpu"], push=True)
    build = ["docker", "build", "-f", f"{repo}/Dockerfile.gpu", "-t", "ghcr.io/tf-distributed/trainer:1.2.3-gpu",
             "--label", VERSION_LABEL, str(repo)]
    push = ["docker", "push", "ghcr.io/tf-distributed/trainer:1.2.3-gpu"]
    assert [step.argv for step in steps] == [build, push]

    echoed = run_collecting(steps, dry_run=False)
    assert echoed == [shlex.join(build), shlex.join(push)]
    assert engines.runs() == [build, push]


def test_all_with_plain_docker_builds_everything_before_pushing(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=False)
    steps = default_plan(repo, ["cpu", "gpu"], push=True)
    assert [(step.argv[1], step.image.rsplit(":", 1)[1]) for step in steps] == [
        ("build", "1.2.3"), ("build", "1.2.3-gpu"), ("push", "1.2.3"), ("push", "1.2.3-gpu")]


def test_podman_when_it_is_the_only_engine(engines: FakeEngines, repo: Path) -> None:
    engines.install("podman")
    assert images.detect_engine(None) == "podman"
    steps = default_plan(repo, ["all"], push=True)
    expected = [
        ["podman", "build", "-f", f"{repo}/Dockerfile.cpu", "-t", "ghcr.io/tf-distributed/trainer:1.2.3",
         "--label", VERSION_LABEL, "--format", "docker", str(repo)],
        ["podman", "build", "-f", f"{repo}/Dockerfile.gpu", "-t", "ghcr.io/tf-distributed/trainer:1.2.3-gpu",
         "--label", VERSION_LABEL, "--format", "docker", str(repo)],
        ["podman", "push", "ghcr.io/tf-distributed/trainer:1.2.3"],
        ["podman", "push", "ghcr.io/tf-distributed/trainer:1.2.3-gpu"],
    ]
    assert [step.argv for step in steps] == expected

    run_collecting(steps, dry_run=False)
    assert ["podman", "info"] in engines.calls()
    assert engines.runs() == expected


def test_explicit_engine_wins_over_detection(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=True)
    engines.install("podman")
    assert images.detect_engine(None) == "buildx"
    assert images.detect_engine("docker") == "docker"
    assert images.detect_engine("podman") == "podman"
    assert default_plan(repo, ["cpu"], engine="docker")[0].argv[:2] == ["docker", "build"]
    assert default_plan(repo, ["cpu"], engine="podman")[0].argv[:2] == ["podman", "build"]


def test_custom_tag_registry_repository_and_platform(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=False)
    steps = images.plan(["all"], "2025.06-rc1", "registry.example.com:5000", "ml/tf-trainer", True, "linux/amd64",
                        None, repo)
    cpu_image = "registry.example.com:5000/ml/tf-trainer:2025.06-rc1"
    gpu_image = "registry.example.com:5000/ml/tf-trainer:2025.06-rc1-gpu"
    assert [step.argv for step in steps] == [
        ["docker", "build", "-f", f"{repo}/Dockerfile.cpu", "-t", cpu_image, "--label", VERSION_LABEL,
         "--platform", "linux/amd64", str(repo)],
        ["docker", "build", "-f", f"{repo}/Dockerfile.gpu", "-t", gpu_image, "--label", VERSION_LABEL,
         "--platform", "linux/amd64", str(repo)],
        ["docker", "push", cpu_image],
        ["docker", "push", gpu_image],
    ]


def test_empty_registry_gives_repository_only_references_like_the_chart(engines: FakeEngines, repo: Path) -> None:
    steps = images.plan(["cpu"], "dev", "", "tf-distributed/trainer", False, None, "docker", repo)
    assert steps[0].image == "tf-distributed/trainer:dev"


# ---------------------------------------------------------------------------------------------
# without an engine


def test_dry_run_without_any_engine_prints_docker_commands_and_runs_nothing(engines: FakeEngines, repo: Path) -> None:
    assert shutil.which("docker") is None and shutil.which("podman") is None
    steps = default_plan(repo, ["all"], push=True)
    assert [step.argv[:2] for step in steps] == [["docker", "build"]] * 2 + [["docker", "push"]] * 2
    echoed = run_collecting(steps, dry_run=True)
    assert echoed == [shlex.join(step.argv) for step in steps]
    assert echoed[0] == (f"docker build -f {repo}/Dockerfile.cpu -t ghcr.io/tf-distributed/trainer:1.2.3 "
                         f"--label {VERSION_LABEL} {repo}")
    assert engines.calls() == []


def test_dry_run_with_an_explicit_engine_needs_none_installed(engines: FakeEngines, repo: Path) -> None:
    steps = default_plan(repo, ["gpu"], push=True, engine="buildx")
    echoed = run_collecting(steps, dry_run=True)
    assert echoed == [f"docker buildx build -f {repo}/Dockerfile.gpu -t ghcr.io/tf-distributed/trainer:1.2.3-gpu "
                      f"--label {VERSION_LABEL} --push {repo}"]


def test_build_without_any_engine_fails_before_running_anything(engines: FakeEngines, repo: Path) -> None:
    steps = default_plan(repo, ["all"])
    echoed: list[str] = []
    with pytest.raises(EngineNotFound) as raised:
        images.run(steps, dry_run=False, echo=echoed.append)
    assert "none of docker, podman or buildah is installed" in raised.value.message
    assert "--dry-run" in raised.value.hint
    assert echoed == []
    with pytest.raises(EngineNotFound, match="none of docker, podman or buildah"):
        images.detect_engine(None)


def test_docker_cli_without_daemon_fails_with_the_fix(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=False, info=False)
    steps = default_plan(repo, ["cpu"], push=True)
    echoed: list[str] = []
    with pytest.raises(EngineNotFound) as raised:
        images.run(steps, dry_run=False, echo=echoed.append)
    error = raised.value
    assert error.message == f"the docker CLI is installed but no Docker engine answers: {DAEMON_DOWN}"
    for fix in ("start Docker", "DOCKER_HOST", "--engine podman"):
        assert fix in error.hint
    assert error.exit_code == 1
    assert echoed == [] and engines.runs() == []


def test_buildx_without_daemon_fails_the_same_way(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=True, info=False)
    with pytest.raises(EngineNotFound, match="no Docker engine answers"):
        images.check_engine_reachable("buildx")


def test_podman_that_does_not_work(engines: FakeEngines) -> None:
    engines.install("podman", info=False, info_error="Error: unable to connect to Podman socket")
    with pytest.raises(EngineNotFound) as raised:
        images.check_engine_reachable("podman")
    assert raised.value.message == "the podman CLI is installed but podman does not work: " \
                                   "Error: unable to connect to Podman socket"
    assert "podman machine start" in raised.value.hint


def test_reachable_engines_pass(engines: FakeEngines) -> None:
    engines.install("docker", buildx=True)
    engines.install("podman")
    for name in ("docker", "buildx", "podman"):
        images.check_engine_reachable(name)


def test_missing_preferred_engine(engines: FakeEngines) -> None:
    with pytest.raises(EngineNotFound, match="none of docker, podman or buildah"):
        images.detect_engine("podman")
    engines.install("docker", buildx=False)
    with pytest.raises(EngineNotFound) as raised:
        images.detect_engine("podman")
    assert raised.value.message == "podman is not installed (not found on PATH)"
    assert "--engine docker" in raised.value.hint
    with pytest.raises(EngineNotFound, match="buildx plugin") as buildx:
        images.detect_engine("buildx")
    assert "--engine docker" in buildx.value.hint


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        answer = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                                timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return answer.returncode == 0 and bool(answer.stdout.strip())


def test_this_machine_build_fails_with_engine_not_found() -> None:
    """The real PATH: here a docker CLI whose daemon is unreachable, and no podman.

    Where an engine does answer, running this would build the real images, so it stops there.
    """
    if docker_engine_answers() or shutil.which("podman"):
        pytest.skip("a container engine is installed here; this checks machines without a working one")
    steps = default_plan(REPO, ["all"])
    with pytest.raises(EngineNotFound) as raised:
        images.run(steps, dry_run=False, echo=lambda line: None)
    if shutil.which("docker"):
        assert raised.value.message.startswith("the docker CLI is installed but no Docker engine answers: ")
        assert "DOCKER_HOST" in raised.value.hint and "start Docker" in raised.value.hint
    else:
        assert "none of docker, podman or buildah is installed" in raised.value.message
    # and a dry run still prints the commands
    echoed: list[str] = []
    images.run(steps, dry_run=True, echo=echoed.append)
    assert echoed == [shlex.join(step.argv) for step in steps]


# ---------------------------------------------------------------------------------------------
# failures while running


def test_failing_build_names_image_and_exit_code_and_stops(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=False, build_exit=3)
    steps = default_plan(repo, ["all"], push=True)
    echoed: list[str] = []
    with pytest.raises(TfchartError) as raised:
        images.run(steps, dry_run=False, echo=echoed.append)
    assert raised.value.message == "building ghcr.io/tf-distributed/trainer:1.2.3 failed: `docker build` exited " \
                                   "with code 3"
    assert not isinstance(raised.value, EngineNotFound)
    assert echoed == [shlex.join(steps[0].argv)]
    assert engines.runs() == [steps[0].argv]


def test_failing_push_says_to_log_in(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=False, push_exit=1)
    steps = default_plan(repo, ["gpu"], push=True)
    with pytest.raises(TfchartError) as raised:
        images.run(steps, dry_run=False, echo=lambda line: None)
    assert raised.value.message == "pushing ghcr.io/tf-distributed/trainer:1.2.3-gpu failed: `docker push` exited " \
                                   "with code 1"
    assert "docker login ghcr.io" in raised.value.hint


def test_failing_buildx_build(engines: FakeEngines, repo: Path) -> None:
    engines.install("docker", buildx=True, build_exit=17)
    with pytest.raises(TfchartError, match=r"building ghcr.io/tf-distributed/trainer:1.2.3-gpu failed: "
                                           r"`docker buildx build` exited with code 17"):
        images.run(default_plan(repo, ["gpu"], push=True), dry_run=False, echo=lambda line: None)


# ---------------------------------------------------------------------------------------------
# versions, labels, bad input


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_checkout_adds_the_revision_label(engines: FakeEngines, repo: Path) -> None:
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "init")
    head = git(repo, "rev-parse", "HEAD")
    (step,) = default_plan(repo, ["cpu"], engine="docker")
    assert step.argv == ["docker", "build", "-f", f"{repo}/Dockerfile.cpu", "-t", CPU_IMAGE,
                         "--label", VERSION_LABEL, "--label", f"org.opencontainers.image.revision={head}", str(repo)]

    # a plain directory inside some other checkout is not "the repo": no revision label
    inner = repo / "sub"
    inner.mkdir()
    shutil.copy(repo / "pyproject.toml", inner)
    shutil.copytree(repo / "charts", inner / "charts")
    shutil.copy(repo / "Dockerfile.cpu", inner)
    (inner_step,) = default_plan(inner, ["cpu"], engine="docker")
    assert not any("revision" in arg for arg in inner_step.argv)


def test_this_repository_builds_the_images_the_chart_expects() -> None:
    chart = yaml.safe_load((REPO / "charts/tf-distributed/Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts/tf-distributed/values.yaml").read_text())["image"]
    expected = f"{values['registry']}/{values['repository']}:{chart['appVersion']}"
    steps = default_plan(REPO, ["all"], engine="docker")
    assert [step.image for step in steps] == [expected, f"{expected}-gpu"]
    project = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M)  # [project]'s, the first
    assert project is not None and images.project_version(REPO) == chart["appVersion"] == project.group(1)
    label = f"org.opencontainers.image.version={images.project_version(REPO)}"
    assert all(label in step.argv for step in steps)
    assert [step.argv[3] for step in steps] == [str(REPO / "Dockerfile.cpu"), str(REPO / "Dockerfile.gpu")]
    assert all(step.argv[-1] == str(REPO) for step in steps)


def test_tag_override_keeps_the_project_version_label(engines: FakeEngines, repo: Path) -> None:
    (step,) = images.plan(["gpu"], "nightly", "ghcr.io", "tf-distributed/trainer", False, None, "docker", repo)
    assert step.image == "ghcr.io/tf-distributed/trainer:nightly-gpu"
    assert VERSION_LABEL in step.argv


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda args: args.update(tag="-bad"), UsageError, "invalid tag"),
        (lambda args: args.update(tag="a" * 125), UsageError, "invalid tag"),
        (lambda args: args.update(repository="Tf/Trainer"), UsageError, "invalid repository"),
        (lambda args: args.update(repository="tf/trainer:1.0"), UsageError, "invalid repository"),
        (lambda args: args.update(registry="https://ghcr.io"), UsageError, "invalid registry"),
    ],
)
def test_bad_options_are_usage_errors(
    repo: Path, change: Callable[[dict[str, object]], None], error: type[TfchartError], match: str
) -> None:
    args: dict[str, object] = {"variants": ["cpu"], "tag": None, "registry": "ghcr.io",
                               "repository": "tf-distributed/trainer", "push": False, "platform": None,
                               "engine": "docker", "repo_root": repo}
    change(args)
    with pytest.raises(error, match=match) as raised:
        images.plan(**args)  # type: ignore[arg-type]
    assert raised.value.exit_code == 2


def test_a_chart_without_its_app_version_says_so(repo: Path) -> None:
    (repo / "charts" / "tf-distributed" / "Chart.yaml").write_text("name: tf-distributed\n")
    with pytest.raises(TfchartError, match=r"no appVersion in .*Chart\.yaml"):
        images.project_version(repo)


def test_missing_dockerfile_or_chart(repo: Path) -> None:
    (repo / "Dockerfile.gpu").unlink()
    with pytest.raises(TfchartError, match=r"Dockerfile\.gpu not found"):
        default_plan(repo, ["all"], engine="docker")
    (repo / "charts" / "tf-distributed" / "Chart.yaml").unlink()
    with pytest.raises(TfchartError, match="cannot read the project version"):
        default_plan(repo, ["cpu"], engine="docker")


def test_variants_are_deduplicated_in_cpu_gpu_order(engines: FakeEngines, repo: Path) -> None:
    steps = default_plan(repo, ["gpu", "cpu", "all", "gpu"], engine="docker")
    assert [step.image for step in steps] == ["ghcr.io/tf-distributed/trainer:1.2.3",
                                              "ghcr.io/tf-distributed/trainer:1.2.3-gpu"]


def test_buildah_is_found_after_podman_and_builds_and_pushes_over_plain_http(engines: FakeEngines, repo: Path) -> None:
    engines.install("buildah")
    assert images.detect_engine(None) == "buildah"
    steps = images.plan(
        ["all"], "t1", "127.0.0.1:5000", "ml/trainer", True, None, None, repo,
        base_image="localhost/tf-base:2.21.0", tls_verify=False,
    )  # fmt: skip
    assert [step.argv[:2] for step in steps] == [["buildah", "build"]] * 2 + [["buildah", "push"]] * 2
    for build in steps[:2]:
        assert build.argv[build.argv.index("--build-arg") + 1] == "BASE_IMAGE=localhost/tf-base:2.21.0"
        assert build.argv[build.argv.index("--format") + 1] == "docker"
    assert steps[2].argv == ["buildah", "push", "--tls-verify=false", "127.0.0.1:5000/ml/trainer:t1"]
    progress: list[str] = []
    images.run(steps, dry_run=False, echo=lambda line: None, progress=progress.append)
    assert [call[:2] for call in engines.calls() if call[1] != "info"] == [
        ["buildah", "build"], ["buildah", "build"], ["buildah", "push"], ["buildah", "push"],
    ]  # fmt: skip
    assert progress[0] == "[1/4] build the CPU trainer image 127.0.0.1:5000/ml/trainer:t1"
    assert progress[-1].startswith("[4/4] done in ") and progress[-1].endswith("127.0.0.1:5000/ml/trainer:t1-gpu")


def test_the_gpu_image_may_have_its_own_base(repo: Path) -> None:
    """CPU and GPU default to different official bases (slim Python, the TensorFlow GPU image)."""
    steps = images.plan(["all"], None, "ghcr.io", "ml/trainer", False, None, "podman", repo,
                        base_image="localhost/python-base:3.11", gpu_base_image="localhost/tf-base:2.21.0")  # fmt: skip
    bases = [step.argv[step.argv.index("--build-arg") + 1] for step in steps]
    assert bases == ["BASE_IMAGE=localhost/python-base:3.11", "BASE_IMAGE=localhost/tf-base:2.21.0"]
    only_gpu = images.plan(["all"], None, "ghcr.io", "ml/trainer", False, None, "podman", repo,
                           gpu_base_image="localhost/tf-base:2.21.0")  # fmt: skip
    assert ["--build-arg" in step.argv for step in only_gpu] == [False, True]
    with pytest.raises(UsageError, match="--gpu-base-image is empty"):
        images.plan(["gpu"], None, "ghcr.io", "ml/trainer", False, None, "podman", repo, gpu_base_image="")


def test_plain_http_push_is_refused_for_docker_with_the_fix(repo: Path) -> None:
    with pytest.raises(UsageError) as raised:
        images.plan(["cpu"], None, "127.0.0.1:5000", "ml/trainer", True, None, "docker", repo, tls_verify=False)
    assert "insecure-registries" in raised.value.hint
    with pytest.raises(UsageError, match="--base-image is empty"):
        images.plan(["cpu"], None, "ghcr.io", "ml/trainer", False, None, "podman", repo, base_image=" ")


def test_build_context_is_found_from_the_working_directory_not_the_installed_package(tmp_path: Path) -> None:
    """After a plain `pip install .` tfchart lives in site-packages; the checkout comes from the cwd."""
    checkout = tmp_path / "clone"
    (checkout / "sub" / "dir").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nversion = "9.9.9"\n')
    (checkout / "Dockerfile.cpu").write_text("FROM scratch\n")
    site_packages = tmp_path / "site-packages"
    site_packages.mkdir()
    assert images.build_context(None, checkout / "sub" / "dir", site_packages) == checkout.resolve()
    assert images.build_context(checkout, tmp_path, site_packages) == checkout.resolve()
    assert images.build_context(None, tmp_path, REPO) == REPO  # an editable install's own checkout
    with pytest.raises(UsageError, match="no tf-distributed checkout at or above") as raised:
        images.build_context(None, tmp_path, site_packages)
    assert "--source" in raised.value.hint
    with pytest.raises(UsageError, match=r"--source .* holds no tf-distributed checkout"):
        images.build_context(site_packages, tmp_path, REPO)
