"""`tfchart build`: the trainer images (Dockerfile.cpu, Dockerfile.gpu) built with docker, buildx, podman or buildah.

`plan` needs no engine, so `--dry-run` prints the commands a real run would make on that machine; `run` prints each
as a copy-pasteable shell line and runs them in order until one fails. Images are tagged
`<registry>/<repository>:<version>` (CPU) and `...:<version>-gpu` (GPU), the references the chart uses by default
(image.tag empty = the chart's appVersion, the project version), which `tag` replaces in the tag
only (the OCI version label keeps it). Everything is built before anything is pushed, so a failed GPU build never
leaves half a release in the registry. Which engine is installed and answers (`detect_engine`,
`check_engine_reachable`) is asked here for `tfchart local --engine` too.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import NamedTuple

import yaml

from tfchart.errors import EngineNotFound, TfchartError, UsageError

VARIANTS = ("cpu", "gpu")
DEFAULT_REGISTRY = "ghcr.io"
DEFAULT_REPOSITORY = "tf-distributed/trainer"
VERSION_LABEL = "org.opencontainers.image.version"
REVISION_LABEL = "org.opencontainers.image.revision"

# Docker's reference grammar (distribution/reference), as far as tfchart needs it: what each name option must match,
# and the fix. A tag is at most 124 characters: the GPU tag adds "-gpu" within Docker's 128.
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
NAME_RULES = {
    "registry": (re.compile(rf"(?:{HOST_LABEL}(?:\.{HOST_LABEL})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"),
                 "a host name with an optional port, e.g. ghcr.io or localhost:5000"),
    "repository": (re.compile(rf"{PATH_COMPONENT}(?:/{PATH_COMPONENT})*"),
                   "lowercase path components separated by '/', e.g. tf-distributed/trainer (no registry, no tag)"),
    "tag": (re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,123}"),
            "letters, digits, '_', '.' and '-', not starting with '.' or '-', at most 124 characters"),
}  # fmt: skip

# each engine's build command (its executable first: buildx is a docker plugin); podman and buildah build
# in-process, docker and buildx need a running engine
BUILD_COMMANDS = {"docker": ["docker", "build"], "buildx": ["docker", "buildx", "build"],
                  "podman": ["podman", "build"], "buildah": ["buildah", "build"]}  # fmt: skip
DAEMONLESS = ("podman", "buildah")
PROBE_TIMEOUT_S = 30
BUILDX_PROBE = ("docker", "buildx", "version")  # answers where docker's buildx plugin is installed
DOCKER_PROBE = ("docker", "info", "--format", "{{.ServerVersion}}")  # prints a version where an engine answers

NONE_INSTALLED = "no container engine found: none of docker, podman or buildah is installed (on PATH)"
INSTALL_HINT = ("install Docker (Docker Engine or Docker Desktop, with the buildx plugin), Podman or Buildah, "
                "or pass --dry-run to only print the build commands")
NO_DOCKER_ENGINE_HINT = ("start Docker (`sudo systemctl start docker`, or open Docker Desktop), point DOCKER_HOST at "
                         "a running engine (e.g. DOCKER_HOST=ssh://user@build-host), or use podman with --engine "
                         "podman; --dry-run prints the commands without an engine")
NO_PODMAN_HINT = ("check `podman info`; on macOS or Windows start the VM with `podman machine start`; "
                  "or use docker with --engine docker")


def answer(argv: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Runs a command, its output captured; one that cannot start or does not finish in time reads as a
    failed command (exit code 125, the reason as its stderr)."""
    try:
        return subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess(list(argv), 125, "", str(error))


def detect_engine(preferred: str | None = None) -> str:
    """The engine to build with (a key of BUILD_COMMANDS, as the CLI's --engine choices are), as installed on PATH: a
    preference once its CLI is found; else buildx where `docker buildx version` answers, docker, podman, buildah, in
    that order, but podman (or buildah) before a docker whose engine does not answer `docker info`. EngineNotFound
    where none is installed."""
    installed = [name for name in ("docker", *DAEMONLESS) if shutil.which(name) is not None]
    if preferred is None and installed:
        if installed[0] == "docker" and (len(installed) == 1 or answer(DOCKER_PROBE).stdout.strip()):
            return "buildx" if answer(BUILDX_PROBE).returncode == 0 else "docker"
        return installed[1] if installed[0] == "docker" else installed[0]  # podman, else buildah
    if not installed:
        raise EngineNotFound(NONE_INSTALLED, INSTALL_HINT)
    executable = BUILD_COMMANDS[str(preferred)][0]
    if executable not in installed:
        raise EngineNotFound(f"{executable} is not installed (not found on PATH)",
                             f"{installed[0]} is installed: use --engine {installed[0]}")  # fmt: skip
    if preferred == "buildx" and answer(BUILDX_PROBE).returncode != 0:
        raise EngineNotFound("docker is installed but its buildx plugin is not (`docker buildx version` fails)",
                             "install the docker-buildx plugin, or use the classic builder with --engine docker")
    return str(preferred)


def check_engine_reachable(engine: str) -> None:
    """Raise EngineNotFound unless the engine behind the CLI (found by detect_engine) answers (a running Docker
    daemon, a working podman): `docker info --format {{.ServerVersion}}` for docker and buildx, `<podman|buildah>
    info` otherwise."""
    executable = BUILD_COMMANDS[engine][0]
    docker = executable == "docker"
    answered = answer(DOCKER_PROBE if docker else [executable, "info"])  # 125 where it cannot start or hangs
    if answered.returncode == 0 and (answered.stdout.strip() or not docker):
        return
    said = [line.strip() for line in (answered.stderr + "\n" + answered.stdout).splitlines() if line.strip()]
    reason = said[0] if said else f"exit code {answered.returncode}"  # stderr's first line, else stdout's
    what = "no Docker engine answers" if docker else f"{executable} does not work"
    hint = NO_DOCKER_ENGINE_HINT if docker else NO_PODMAN_HINT.replace("podman", executable)
    raise EngineNotFound(f"the {executable} CLI is installed but {what}: {reason}", hint)


class BuildStep(NamedTuple):
    """One command of a build: the exact argv (`<engine> push ...` for a push), what it does, the image it builds
    or pushes, and the engine (a key of BUILD_COMMANDS)."""

    argv: list[str]
    description: str
    image: str
    engine: str


def project_version(repo_root: Path) -> str:
    """The version of the images the checkout's chart pulls by default: its Chart.yaml's appVersion (the project
    version: tests hold it equal to pyproject.toml's)."""
    chart = repo_root / "charts" / "tf-distributed" / "Chart.yaml"
    try:
        version = (yaml.safe_load(chart.read_text(encoding="utf-8")) or {}).get("appVersion")
    except (OSError, yaml.YAMLError, AttributeError) as error:
        raise TfchartError(f"cannot read the project version from {chart}: {error}", "run tfchart build from a "
                           "tf-distributed checkout (the images are built from its Dockerfiles)") from None  # fmt: skip
    if not version:
        raise TfchartError(f"no appVersion in {chart}", 'set `appVersion: "X.Y.Z"` (the project version)')
    return str(version)


def build_context(explicit: Path | None, start: Path, installed_from: Path) -> Path:
    """The checkout to build from: --source, else the nearest directory at or above `start` (the
    working directory) holding pyproject.toml and Dockerfile.cpu, else the checkout tfchart runs from
    (an editable install). A plain `pip install` puts tfchart in site-packages, far from any
    Dockerfile: that case is an error naming --source, not a failed build."""
    def is_checkout(directory: Path) -> bool:
        return (directory / "pyproject.toml").is_file() and (directory / "Dockerfile.cpu").is_file()

    if explicit is not None:
        if not is_checkout(explicit):
            raise UsageError(f"--source {explicit} holds no tf-distributed checkout (pyproject.toml and "
                             "Dockerfile.cpu)", "point --source at the repository root")  # fmt: skip
        return explicit.resolve()
    found = next((d for d in (start.resolve(), *start.resolve().parents, installed_from) if is_checkout(d)), None)
    if found is None:
        raise UsageError(f"no tf-distributed checkout at or above {start} (the images are built from its "
                         "Dockerfiles)", "run tfchart build inside a clone of the repository, or pass --source "
                         "<repository root>")  # fmt: skip
    return found


def git_revision(repo_root: Path) -> str | None:
    """HEAD's commit when repo_root is the top of a git checkout (git finds no prefix below its top); None otherwise
    (no git, not a checkout, a plain directory in another checkout)."""
    answered = answer(["git", "-C", str(repo_root), "rev-parse", "--show-prefix", "HEAD"])
    prefix, _, head = answered.stdout.partition("\n")
    commit = re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", head.strip())
    return commit.group(0) if answered.returncode == 0 and not prefix and commit else None


def plan(variants: Collection[str], tag: str | None, registry: str, repository: str, push: bool,
         platform: str | None, engine: str | None, repo_root: Path, *, base_image: str | None = None,
         gpu_base_image: str | None = None, tls_verify: bool = True) -> list[BuildStep]:  # fmt: skip
    """The commands that build (and with push, publish) the images of `variants` ("cpu", "gpu", "all"), in order.

    registry "" gives `repository:tag` images; engine None: the one `detect_engine` finds (docker where none is
    installed, so a dry run works anywhere). tls_verify=False pushes over plain HTTP (podman and buildah
    `--tls-verify=false`; docker reads insecure registries from its daemon configuration only: refused there)."""
    root, registry = repo_root.resolve(), registry.strip().rstrip("/")
    version = project_version(root)
    version_part = version if tag is None else tag
    try:
        builder = detect_engine(None) if engine is None else engine
    except EngineNotFound:
        builder = "docker"  # none installed: a dry run prints docker's commands
    for what, value in (("registry", registry), ("repository", repository), ("tag", version_part)):
        if (value or what != "registry") and not NAME_RULES[what][0].fullmatch(value):
            raise UsageError(f"invalid {what}: {value!r}", NAME_RULES[what][1])
    if not tls_verify and push and builder not in DAEMONLESS:
        raise UsageError(f"{builder} cannot be told per push to use plain HTTP", 'add the registry to '
                         '"insecure-registries" in the Docker daemon configuration, or use --engine podman')
    for option, base, example in (("--base-image", base_image, "python:3.11-slim-bookworm"),
                                  ("--gpu-base-image", gpu_base_image, "tensorflow/tensorflow:2.21.0-gpu")):
        if base is not None and not base.strip():
            raise UsageError(f"{option} is empty", f"name an image, e.g. {example}")
    revision, executable = git_revision(root), BUILD_COMMANDS[builder][0]
    builds: list[BuildStep] = []
    pushes: list[BuildStep] = []
    for variant in (v for v in VARIANTS if v in variants or "all" in variants):
        dockerfile = root / f"Dockerfile.{variant}"
        if not dockerfile.is_file():
            raise TfchartError(f"{dockerfile} not found", "run tfchart build from a tf-distributed checkout")
        image = f"{registry}/" * bool(registry) + f"{repository}:{version_part}" + "-gpu" * (variant == "gpu")
        argv = [*BUILD_COMMANDS[builder], "-f", str(dockerfile), "-t", image, "--label", f"{VERSION_LABEL}={version}"]
        argv += ["--label", f"{REVISION_LABEL}={revision}"] if revision else []
        base = gpu_base_image if variant == "gpu" and gpu_base_image else base_image
        argv += ["--build-arg", f"BASE_IMAGE={base.strip()}"] if base else []
        argv += ["--platform", platform] if platform else []
        argv += ["--format", "docker"] if builder in DAEMONLESS else []  # OCI format would drop the HEALTHCHECK
        # buildx pushes while building; without --push or --load a docker-container builder keeps only its cache
        argv += ["--push" if push else "--load"] if builder == "buildx" else []
        pushed = " and push" if push and builder == "buildx" else ""
        builds.append(BuildStep([*argv, str(root)], f"build{pushed} the {variant.upper()} trainer image {image}",
                                image, builder))  # fmt: skip
        if push and builder != "buildx":
            tls = [] if tls_verify else ["--tls-verify=false"]
            pushes.append(BuildStep([executable, "push", *tls, image], f"push {image}", image, builder))
    return builds + pushes


def run(steps: Sequence[BuildStep], dry_run: bool, echo: Callable[[str], None],
        progress: Callable[[str], None] = lambda line: None) -> None:  # fmt: skip
    """Print every command (a shell line), and unless dry_run, run them in order. The engines are checked
    first (installed, answering), so a machine without a working one fails with EngineNotFound and
    nothing half-done. A failing command raises TfchartError naming the image and the exit code."""
    if not dry_run:
        for engine in dict.fromkeys(step.engine for step in steps):
            check_engine_reachable(detect_engine(engine))
    for number, step in enumerate(steps, 1):
        if not dry_run:
            progress(f"[{number}/{len(steps)}] {step.description}")
        echo(shlex.join(step.argv))  # one copy-pasteable shell line
        if dry_run:
            continue
        started = time.monotonic()
        try:
            code = subprocess.run(step.argv, stdin=subprocess.DEVNULL, check=False).returncode
        except OSError as error:
            reason = error.strerror or error
            raise EngineNotFound(f"cannot run {step.argv[0]}: {reason}", INSTALL_HINT) from None
        if code != 0 and step.argv[1] == "push":
            registry = step.image.split("/", 1)[0] if "/" in step.image else "the registry"
            raise TfchartError(f"pushing {step.image} failed: `{shlex.join(step.argv[:2])}` exited with code {code}",
                               f"log in first (`{step.argv[0]} login {registry}`) and check that you may push to "
                               f"{step.image}")  # fmt: skip
        if code != 0:
            raise TfchartError(f"building {step.image} failed: `{shlex.join(BUILD_COMMANDS[step.engine])}` exited "
                               f"with code {code}", "the build output above shows the failing Dockerfile step; "
                               "--dry-run prints the commands to rerun by hand")  # fmt: skip
        progress(f"[{number}/{len(steps)}] done in {time.monotonic() - started:.0f} s: {step.image}")
