"""Container engines on this machine: which one is installed (docker with buildx, docker, podman, buildah)
and whether it answers. Shared by `tfchart build` (images/build.py) and `tfchart local --engine`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tfchart.errors import EngineNotFound, UsageError

EngineName = Literal["docker", "buildx", "podman", "buildah"]
ENGINES: tuple[EngineName, ...] = ("docker", "buildx", "podman", "buildah")
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


@dataclass(frozen=True)
class Engine:
    """A container engine CLI: `docker build`, `docker buildx build`, `podman build` or `buildah build`."""

    name: EngineName

    @property
    def executable(self) -> str:
        return "docker" if self.name == "buildx" else self.name  # buildx is a docker plugin

    @property
    def daemonless(self) -> bool:
        return self.name in ("podman", "buildah")  # they build in-process; docker and buildx need a running engine

    @property
    def build_command(self) -> list[str]:
        return ["docker", "buildx", "build"] if self.name == "buildx" else [self.executable, "build"]

    @property
    def pushes_while_building(self) -> bool:
        return self.name == "buildx"  # with `--push`; docker and podman need a `push` step per image


def answer(argv: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Runs a command, its output captured; one that cannot start or does not finish in time reads as a
    failed command (exit code 125, the reason as its stderr)."""
    try:
        return subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess(list(argv), 125, "", str(error))


def engine_name(preferred: str) -> EngineName:
    if preferred not in ENGINES:
        raise UsageError(f"unknown container engine: {preferred}", f"use one of: {', '.join(ENGINES)}")
    return preferred


def detect_engine(preferred: str | None = None) -> Engine:
    """The container engine to build with, as installed on PATH (`check_engine_reachable` asks whether it answers).

    With no preference: `docker buildx build` when docker's buildx plugin answers `docker buildx version`,
    else plain `docker build`, else `podman build`, else `buildah build`; but podman (or buildah) before a docker
    whose engine does not answer `docker info`. A preference is used as given once its CLI is found. Raises
    EngineNotFound, with a hint, when none is installed."""
    if preferred is not None:
        engine = Engine(engine_name(preferred))
        if shutil.which(engine.executable) is None:
            raise _not_installed(engine)
        if engine.name == "buildx" and answer(BUILDX_PROBE).returncode != 0:
            raise EngineNotFound(
                "docker is installed but its buildx plugin is not (`docker buildx version` fails)",
                "install the docker-buildx plugin, or use the classic builder with --engine docker",
            )
        return engine
    daemonless = [Engine(name) for name in ("podman", "buildah") if shutil.which(name) is not None]
    if shutil.which("docker") is not None and (not daemonless or answer(DOCKER_PROBE).stdout.strip()):
        return Engine("buildx") if answer(BUILDX_PROBE).returncode == 0 else Engine("docker")
    if daemonless:
        return daemonless[0]
    raise EngineNotFound(NONE_INSTALLED, INSTALL_HINT)


def _not_installed(engine: Engine) -> EngineNotFound:
    for other in ("docker", "podman", "buildah"):
        if other != engine.executable and shutil.which(other) is not None:
            message = f"{engine.executable} is not installed (not found on PATH)"
            return EngineNotFound(message, f"{other} is installed: use --engine {other}")
    return EngineNotFound(NONE_INSTALLED, INSTALL_HINT)


def check_engine_reachable(engine: Engine) -> None:
    """Raise EngineNotFound unless the engine behind the CLI answers (a running Docker daemon, a working podman):
    `docker info --format {{.ServerVersion}}` for docker and buildx, `<podman|buildah> info` otherwise."""
    if shutil.which(engine.executable) is None:
        raise _not_installed(engine)
    docker = engine.executable == "docker"
    argv = list(DOCKER_PROBE) if docker else [engine.executable, "info"]
    answered = answer(argv)  # one that cannot start or does not finish in time: exit code 125, the reason on stderr
    if answered.returncode == 0 and (answered.stdout.strip() or not docker):
        return
    said = [line.strip() for line in (answered.stderr + "\n" + answered.stdout).splitlines() if line.strip()]
    reason = said[0] if said else f"exit code {answered.returncode}"  # stderr's first line, else stdout's
    what = "no Docker engine answers" if docker else f"{engine.executable} does not work"
    hint = NO_PODMAN_HINT.replace("podman", engine.executable) if engine.daemonless else NO_DOCKER_ENGINE_HINT
    raise EngineNotFound(f"the {engine.executable} CLI is installed but {what}: {reason}", hint)
