"""`tfchart build`: the trainer images (Dockerfile.cpu, Dockerfile.gpu) built with docker, buildx, podman or buildah.

`plan` turns the options into `BuildStep`s holding the exact argv and needs no engine, so `--dry-run`
prints the commands a real run would make on that machine; `run` prints each as a copy-pasteable shell
line and runs them in order until one fails (progress, `[i/n] what` and the seconds each step took, to
`progress`; the engine's own output to the terminal).

Images are tagged `<registry>/<repository>:<version>` (CPU) and `...:<version>-gpu` (GPU), the
references the chart uses by default (image.tag empty = the chart's appVersion). The version is the
project version from pyproject.toml; `tag` replaces it in the tag (the OCI version label keeps the
project version). Everything is built before anything is pushed, so a failed GPU build never
leaves half a release in the registry.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tfchart.errors import EngineNotFound, TfchartError, UsageError
from tfchart.images.engines import INSTALL_HINT, Engine, answer, check_engine_reachable, detect_engine, engine_name

VARIANTS = ("cpu", "gpu")
DEFAULT_REGISTRY = "ghcr.io"
DEFAULT_REPOSITORY = "tf-distributed/trainer"
VERSION_LABEL = "org.opencontainers.image.version"
REVISION_LABEL = "org.opencontainers.image.revision"

# Docker's reference grammar (distribution/reference), as far as tfchart needs it.
TAG_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_PATTERN = re.compile(rf"{PATH_COMPONENT}(?:/{PATH_COMPONENT})*")
HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
REGISTRY_PATTERN = re.compile(rf"(?:{HOST_LABEL}(?:\.{HOST_LABEL})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")


@dataclass(frozen=True)
class BuildStep:
    """One command of a build: the exact argv, what it does, and the image it builds or pushes."""

    argv: list[str]
    description: str
    image: str
    engine: Engine
    action: Literal["build", "push"] = "build"

    @property
    def shell(self) -> str:
        return shlex.join(self.argv)  # one copy-pasteable shell line


def project_version(repo_root: Path) -> str:
    """[project] version from the repository's pyproject.toml."""
    pyproject = repo_root / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError as error:
        raise TfchartError(
            f"cannot read the project version from {pyproject}: {error.strerror or error}",
            "run tfchart build from a tf-distributed checkout (the images are built from its Dockerfiles)",
        ) from None
    version = _scan_project_version(text)
    if not version:
        raise TfchartError(f"no [project] version in {pyproject}", "set `version = \"X.Y.Z\"` under [project]")
    return version


def _scan_project_version(text: str) -> str | None:
    """The `version = "..."` line of the [project] table (read so on every Python: 3.10 has no tomllib)."""
    section = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    found = section and re.search(r"""^version\s*=\s*["']([^"']+)["']""", section.group(1), re.M)
    return found.group(1) if found else None


def build_context(explicit: Path | None, start: Path, installed_from: Path) -> Path:
    """The checkout to build from: --source, else the nearest directory at or above `start` (the
    working directory) holding pyproject.toml and Dockerfile.cpu, else the checkout tfchart runs from
    (an editable install). A plain `pip install` puts tfchart in site-packages, far from any
    Dockerfile: that case is an error naming --source, not a failed build."""
    def is_checkout(directory: Path) -> bool:
        return (directory / "pyproject.toml").is_file() and (directory / "Dockerfile.cpu").is_file()

    if explicit is not None:
        if not is_checkout(explicit):
            raise UsageError(
                f"--source {explicit} holds no tf-distributed checkout (pyproject.toml and Dockerfile.cpu)",
                "point --source at the repository root",
            )
        return explicit.resolve()
    found = next((d for d in (start.resolve(), *start.resolve().parents, installed_from) if is_checkout(d)), None)
    if found is None:
        raise UsageError(
            f"no tf-distributed checkout at or above {start} (the images are built from its Dockerfiles)",
            "run tfchart build inside a clone of the repository, or pass --source <repository root>",
        )
    return found


def git_revision(repo_root: Path) -> str | None:
    """HEAD's commit when repo_root is the top of a git checkout; None otherwise (no git, not a checkout)."""
    answered = answer(["git", "-C", str(repo_root), "rev-parse", "--show-toplevel", "HEAD"])
    lines = answered.stdout.split() if answered.returncode == 0 else []
    if len(lines) != 2 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", lines[1]):
        return None
    with suppress(OSError):
        if Path(lines[0]).resolve() == repo_root.resolve():  # else repo_root is a plain directory in another checkout
            return lines[1]
    return None


def image_reference(registry: str, repository: str, tag: str) -> str:
    """`registry/repository:tag`, or `repository:tag` with no registry (as the chart renders it)."""
    registry = registry.strip().rstrip("/")
    return f"{registry}/{repository}:{tag}" if registry else f"{repository}:{tag}"


def _variants(variants: Sequence[str]) -> list[str]:
    names = [name for variant in variants for name in (VARIANTS if variant == "all" else (variant,))]
    unknown = next((name for name in names if name not in VARIANTS), None)
    if unknown is not None:
        raise UsageError(f"unknown image variant: {unknown}", "use --cpu, --gpu or --all")
    if not names:
        raise UsageError("no image to build", "use --cpu, --gpu or --all")
    return [name for name in VARIANTS if name in names]


def _check_reference(registry: str, repository: str, tag: str) -> None:
    registry = registry.strip().rstrip("/")
    if registry and not REGISTRY_PATTERN.fullmatch(registry):
        raise UsageError(f"invalid registry: {registry!r}", "a host name with an optional port, e.g. ghcr.io or "
                         "localhost:5000")  # fmt: skip
    if not REPOSITORY_PATTERN.fullmatch(repository):
        raise UsageError(f"invalid repository: {repository!r}", "lowercase path components separated by '/', e.g. "
                         "tf-distributed/trainer (no registry, no tag)")  # fmt: skip
    if not TAG_PATTERN.fullmatch(tag) or len(tag) > 124:  # the GPU tag adds "-gpu": room for it within 128 characters
        raise UsageError(f"invalid tag: {tag!r}", "letters, digits, '_', '.' and '-', not starting with '.' or '-', "
                         "at most 124 characters")  # fmt: skip


def plan(variants: list[str], tag: str | None, registry: str, repository: str, push: bool, platform: str | None,
         engine: str | None, repo_root: Path, *, base_image: str | None = None, gpu_base_image: str | None = None,
         tls_verify: bool = True) -> list[BuildStep]:  # fmt: skip
    """The commands that build (and with push, publish) the trainer images, in the order to run them.

    variants: "cpu", "gpu" (or "all"); tag: replaces the project version in the tags; registry may be ""
    for `repository:tag` images; engine: docker, buildx, podman or buildah, or None for the one
    `detect_engine` finds (docker when none is installed, so a dry run works anywhere). base_image:
    `--build-arg BASE_IMAGE=...` for every variant (the Dockerfiles default to the official TensorFlow
    images; a GPU build on another base needs CUDA libraries in it to use GPUs). tls_verify=False: push
    over plain HTTP (podman and buildah `--tls-verify=false`; docker reads insecure registries from its
    daemon configuration only, so it is refused there). Raises UsageError for bad names, TfchartError
    without pyproject.toml or a Dockerfile."""
    chosen = _variants(variants)
    root = repo_root.resolve()
    version = project_version(root)
    version_part = version if tag is None else tag
    _check_reference(registry, repository, version_part)
    try:
        builder = Engine(engine_name(engine)) if engine is not None else detect_engine(None)
    except EngineNotFound:
        builder = Engine("docker")  # none installed: a dry run prints docker's commands
    if not tls_verify and push and not builder.daemonless:
        raise UsageError(
            f"{builder.name} cannot be told per push to use plain HTTP",
            'add the registry to "insecure-registries" in the Docker daemon configuration, or use --engine podman',
        )
    if base_image is not None and not base_image.strip():
        raise UsageError("--base-image is empty", "name an image, e.g. python:3.11-slim-bookworm")
    if gpu_base_image is not None and not gpu_base_image.strip():
        raise UsageError("--gpu-base-image is empty", "name an image, e.g. tensorflow/tensorflow:2.21.0-gpu")
    revision = git_revision(root)
    builds: list[BuildStep] = []
    pushes: list[BuildStep] = []
    for variant in chosen:
        dockerfile = root / f"Dockerfile.{variant}"
        if not dockerfile.is_file():
            raise TfchartError(f"{dockerfile} not found", "run tfchart build from a tf-distributed checkout")
        image = image_reference(registry, repository, version_part if variant == "cpu" else f"{version_part}-gpu")
        argv = [*builder.build_command, "-f", str(dockerfile), "-t", image, "--label", f"{VERSION_LABEL}={version}"]
        argv += ["--label", f"{REVISION_LABEL}={revision}"] if revision else []
        base = gpu_base_image if variant == "gpu" and gpu_base_image else base_image
        argv += ["--build-arg", f"BASE_IMAGE={base.strip()}"] if base else []
        argv += ["--platform", platform] if platform else []
        if builder.daemonless:
            argv += ["--format", "docker"]  # OCI format would drop the Dockerfiles' HEALTHCHECK
        if builder.pushes_while_building:
            # without --push or --load a docker-container builder keeps the result in its cache only
            argv.append("--push" if push else "--load")
        argv.append(str(root))
        pushed = " and push" if push and builder.pushes_while_building else ""
        builds.append(BuildStep(argv, f"build{pushed} the {variant.upper()} trainer image {image}", image, builder))
        if push and not builder.pushes_while_building:
            tls = [] if tls_verify else ["--tls-verify=false"]
            pushes.append(BuildStep([builder.executable, "push", *tls, image], f"push {image}", image, builder, "push"))
    return builds + pushes


def _failure_hint(step: BuildStep) -> str:
    if step.action == "push":
        registry = step.image.split("/", 1)[0] if "/" in step.image else "the registry"
        return f"log in first (`{step.engine.executable} login {registry}`) and check that you may push to {step.image}"
    return "the build output above shows the failing Dockerfile step; --dry-run prints the commands to rerun by hand"


def run(steps: Sequence[BuildStep], dry_run: bool, echo: Callable[[str], None],
        progress: Callable[[str], None] = lambda line: None) -> None:  # fmt: skip
    """Print every command (a shell line), and unless dry_run, run them in order. The engines are checked
    first (installed, answering), so a machine without a working one fails with EngineNotFound and
    nothing half-done. A failing command raises TfchartError naming the image and the exit code."""
    if not dry_run:
        for engine in dict.fromkeys(step.engine for step in steps):
            check_engine_reachable(detect_engine(engine.name))
    for number, step in enumerate(steps, 1):
        if not dry_run:
            progress(f"[{number}/{len(steps)}] {step.description}")
        echo(step.shell)
        if dry_run:
            continue
        started = time.monotonic()
        try:
            code = subprocess.run(step.argv, stdin=subprocess.DEVNULL, check=False).returncode
        except OSError as error:
            raise EngineNotFound(f"cannot run {step.argv[0]}: {error.strerror or error}", INSTALL_HINT) from None
        if code != 0:
            verb = "pushing" if step.action == "push" else "building"
            command = step.engine.build_command if step.action == "build" else step.argv[:2]
            message = f"{verb} {step.image} failed: `{shlex.join(command)}` exited with code {code}"
            raise TfchartError(message, _failure_hint(step))
        progress(f"[{number}/{len(steps)}] done in {time.monotonic() - started:.0f} s: {step.image}")
