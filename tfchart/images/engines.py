"""Container engines on this machine: which one is installed (docker with buildx, docker, podman,
buildah) and whether it answers. Shared by `tfchart build` (images/build.py) and `tfchart local --engine`
(local/containers.py).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tfchart.errors import EngineNotFound, UsageError

EngineName = Literal["docker", "buildx", "podman", "buildah"]

ENGINES: tuple[EngineName, ...] = ("docker", "buildx", "podman", "buildah")

PROBE_TIMEOUT_S = 30

INSTALL_HINT = (
    "install Docker (Docker Engine or Docker Desktop, with the buildx plugin), Podman or Buildah, "
    "or pass --dry-run to only print the build commands"
)

NO_DOCKER_ENGINE_HINT = (
    "start Docker (`sudo systemctl start docker`, or open Docker Desktop), "
    "point DOCKER_HOST at a running engine (e.g. DOCKER_HOST=ssh://user@build-host), "
    "or use podman with --engine podman; --dry-run prints the commands without an engine"
)

NO_PODMAN_HINT = (
    "check `podman info`; on macOS or Windows start the VM with `podman machine start`; "
    "or use docker with --engine docker"
)


@dataclass(frozen=True)
class Engine:
    """A container engine CLI: `docker build`, `docker buildx build`, `podman build` or `buildah build`."""

    name: EngineName

    @property
    def executable(self) -> str:
        """The CLI to run: buildx is a docker plugin."""
        return "docker" if self.name == "buildx" else self.name

    @property
    def daemonless(self) -> bool:
        """podman and buildah build in-process; docker and buildx need a running engine."""
        return self.name in ("podman", "buildah")

    @property
    def build_command(self) -> list[str]:
        if self.name == "buildx":
            return ["docker", "buildx", "build"]
        return [self.executable, "build"]

    @property
    def pushes_while_building(self) -> bool:
        """buildx pushes with `--push`; docker and podman need a `push` step per image."""
        return self.name == "buildx"


def answers(argv: Sequence[str]) -> subprocess.CompletedProcess[str] | None:
    """Run a probe; None when it cannot be started or does not finish in time."""
    try:
        return subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _buildx_available() -> bool:
    answer = answers(["docker", "buildx", "version"])
    return answer is not None and answer.returncode == 0


def engine_name(preferred: str) -> EngineName:
    for name in ENGINES:
        if preferred == name:
            return name
    raise UsageError(f"unknown container engine: {preferred}", f"use one of: {', '.join(ENGINES)}")


def detect_engine(preferred: str | None = None) -> Engine:
    """The container engine to build with, as installed on PATH.

    With no preference: `docker buildx build` when docker's buildx plugin answers `docker buildx
    version`, else plain `docker build`, else `podman build`. A preference (docker, buildx, podman)
    is used as given once its CLI is found. Raises EngineNotFound, with a hint, when none is installed.
    Only the CLI is looked for here; `check_engine_reachable` asks whether an engine answers.
    """
    if preferred is not None:
        name = engine_name(preferred)
        engine = Engine(name)
        if shutil.which(engine.executable) is None:
            raise _not_installed(engine)
        if name == "buildx" and not _buildx_available():
            raise EngineNotFound(
                "docker is installed but its buildx plugin is not (`docker buildx version` fails)",
                "install the docker-buildx plugin, or use the classic builder with --engine docker",
            )
        return engine
    if shutil.which("docker") is not None:
        return Engine("buildx") if _buildx_available() else Engine("docker")
    for name in ("podman", "buildah"):
        if shutil.which(name) is not None:
            return Engine(name)
    raise EngineNotFound(NONE_INSTALLED, INSTALL_HINT)


NONE_INSTALLED = "no container engine found: none of docker, podman or buildah is installed (on PATH)"


def _not_installed(engine: Engine) -> EngineNotFound:
    for other in ("docker", "podman", "buildah"):
        if other != engine.executable and shutil.which(other) is not None:
            message = f"{engine.executable} is not installed (not found on PATH)"
            return EngineNotFound(message, f"{other} is installed: use --engine {other}")
    return EngineNotFound(NONE_INSTALLED, INSTALL_HINT)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def check_engine_reachable(engine: Engine) -> None:
    """Raise EngineNotFound unless the engine behind the CLI answers (a running Docker daemon, a working podman).

    docker and buildx: `docker info --format {{.ServerVersion}}`; podman: `podman info`; buildah:
    `buildah info`.
    """
    docker = engine.executable == "docker"
    argv = ["docker", "info", "--format", "{{.ServerVersion}}"] if docker else [engine.executable, "info"]
    try:
        answer = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise _not_installed(engine) from None
    except OSError as error:
        raise EngineNotFound(f"{engine.executable} could not be run: {error}", INSTALL_HINT) from None
    except subprocess.TimeoutExpired:
        answer = None
    hint = NO_PODMAN_HINT.replace("podman", engine.executable) if engine.daemonless else NO_DOCKER_ENGINE_HINT
    if answer is None:
        raise EngineNotFound(
            f"the {engine.executable} CLI is installed but no engine answered `{shlex.join(argv)}` "
            f"within {PROBE_TIMEOUT_S} s",
            hint,
        )
    if answer.returncode != 0 or (engine.executable == "docker" and not answer.stdout.strip()):
        reason = _first_line(answer.stderr) or _first_line(answer.stdout) or f"exit code {answer.returncode}"
        what = "no Docker engine answers" if engine.executable == "docker" else f"{engine.executable} does not work"
        raise EngineNotFound(f"the {engine.executable} CLI is installed but {what}: {reason}", hint)
