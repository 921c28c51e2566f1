"""Container engines on this machine: which one is installed (docker with buildx, docker, podman, buildah)
and whether it answers. Shared by `tfchart build` (images/build.py) and `tfchart local --engine`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from tfchart.errors import EngineNotFound, UsageError

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
    """The container engine to build with (a key of BUILD_COMMANDS), as installed on PATH (`check_engine_reachable`
    asks whether it answers).

    With no preference: `docker buildx build` when docker's buildx plugin answers `docker buildx version`,
    else plain `docker build`, else `podman build`, else `buildah build`; but podman (or buildah) before a docker
    whose engine does not answer `docker info`. A preference is used as given once its CLI is found. Raises
    EngineNotFound, with a hint, when none is installed."""
    if preferred is not None:
        if preferred not in BUILD_COMMANDS:
            raise UsageError(f"unknown container engine: {preferred}", f"use one of: {', '.join(BUILD_COMMANDS)}")
        if shutil.which(BUILD_COMMANDS[preferred][0]) is None:
            raise _not_installed(preferred)
        if preferred == "buildx" and answer(BUILDX_PROBE).returncode != 0:
            raise EngineNotFound(
                "docker is installed but its buildx plugin is not (`docker buildx version` fails)",
                "install the docker-buildx plugin, or use the classic builder with --engine docker",
            )
        return preferred
    daemonless = [name for name in DAEMONLESS if shutil.which(name) is not None]
    if shutil.which("docker") is not None and (not daemonless or answer(DOCKER_PROBE).stdout.strip()):
        return "buildx" if answer(BUILDX_PROBE).returncode == 0 else "docker"
    if daemonless:
        return daemonless[0]
    raise EngineNotFound(NONE_INSTALLED, INSTALL_HINT)


def _not_installed(engine: str) -> EngineNotFound:
    executable = BUILD_COMMANDS[engine][0]
    for other in ("docker", "podman", "buildah"):
        if other != executable and shutil.which(other) is not None:
            return EngineNotFound(f"{executable} is not installed (not found on PATH)",
                                  f"{other} is installed: use --engine {other}")  # fmt: skip
    return EngineNotFound(NONE_INSTALLED, INSTALL_HINT)


def check_engine_reachable(engine: str) -> None:
    """Raise EngineNotFound unless the engine behind the CLI answers (a running Docker daemon, a working podman):
    `docker info --format {{.ServerVersion}}` for docker and buildx, `<podman|buildah> info` otherwise."""
    executable = BUILD_COMMANDS[engine][0]
    if shutil.which(executable) is None:
        raise _not_installed(engine)
    docker = executable == "docker"
    answered = answer(DOCKER_PROBE if docker else [executable, "info"])  # 125 where it cannot start or hangs
    if answered.returncode == 0 and (answered.stdout.strip() or not docker):
        return
    said = [line.strip() for line in (answered.stderr + "\n" + answered.stdout).splitlines() if line.strip()]
    reason = said[0] if said else f"exit code {answered.returncode}"  # stderr's first line, else stdout's
    what = "no Docker engine answers" if docker else f"{executable} does not work"
    hint = NO_DOCKER_ENGINE_HINT if docker else NO_PODMAN_HINT.replace("podman", executable)
    raise EngineNotFound(f"the {executable} CLI is installed but {what}: {reason}", hint)
