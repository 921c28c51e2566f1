"""`tfchart build`: the trainer images (Dockerfile.cpu, Dockerfile.gpu) built with docker, buildx, podman or buildah.

The work is split so every part can be checked without a container engine:

* `plan` turns the options into `BuildStep`s, each holding the exact argv. It never needs an engine:
  with no `engine` given it probes PATH for the one that would be used (`docker buildx build` when
  the buildx plugin answers, then plain `docker`, then `podman`, then `buildah`) and falls back to
  docker, so
  `--dry-run` prints the same commands a real run would on that machine.
* `run` prints each command as a copy-pasteable shell line (shlex.join) and, unless it is a dry run,
  first checks that the engine is installed and answers (`check_engine_reachable`), then runs the
  steps in order and stops at the first failure. Progress (`[i/n] what`, then the seconds each step
  took) goes to `progress`; the engine's own output streams to the terminal in between.

`base_image` becomes `--build-arg BASE_IMAGE=...` (the Dockerfiles default to the official
TensorFlow images); `tls_verify=False` pushes to a plain-HTTP registry (podman, buildah).

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
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tfchart.errors import EngineNotFound, TfchartError, UsageError
from tfchart.images.engines import INSTALL_HINT, Engine, answers, check_engine_reachable, detect_engine, engine_name

VARIANTS = ("cpu", "gpu")
DEFAULT_REGISTRY = "ghcr.io"
DEFAULT_REPOSITORY = "tf-distributed/trainer"
VERSION_LABEL = "org.opencontainers.image.version"
REVISION_LABEL = "org.opencontainers.image.revision"


# Docker's reference grammar (distribution/reference), as far as tfchart needs it.
TAG_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_PATTERN = re.compile(rf"{PATH_COMPONENT}(?:/{PATH_COMPONENT})*")
REGISTRY_PATTERN = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
)


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
        """The command as one copy-pasteable shell line."""
        return shlex.join(self.argv)


# ---------------------------------------------------------------------------------------------
# engines


# ---------------------------------------------------------------------------------------------
# the plan


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
    version = _toml_project_version(text)
    if not version:
        raise TfchartError(f"no [project] version in {pyproject}", "set `version = \"X.Y.Z\"` under [project]")
    return version


def _toml_project_version(text: str) -> str | None:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            project = tomllib.loads(text).get("project", {})
        except tomllib.TOMLDecodeError:
            return None
        version = project.get("version") if isinstance(project, dict) else None
        return version if isinstance(version, str) else None
    return _scan_project_version(text)


def _scan_project_version(text: str) -> str | None:
    """Python 3.10 has no tomllib: the `version = "..."` line of the [project] table."""
    section = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    found = section and re.search(r"""^version\s*=\s*["']([^"']+)["']""", section.group(1), re.M)
    return found.group(1) if found else None


def build_context(explicit: Path | None, start: Path, installed_from: Path) -> Path:
    """The checkout to build from: --context, else the nearest directory at or above `start` (the
    working directory) holding pyproject.toml and Dockerfile.cpu, else the checkout tfchart runs from
    (an editable install). A plain `pip install` puts tfchart in site-packages, far from any
    Dockerfile: that case is an error naming --context, not a failed build."""
    def is_checkout(directory: Path) -> bool:
        return (directory / "pyproject.toml").is_file() and (directory / "Dockerfile.cpu").is_file()

    if explicit is not None:
        if not is_checkout(explicit):
            raise UsageError(
                f"--context {explicit} holds no tf-distributed checkout (pyproject.toml and Dockerfile.cpu)",
                "point --context at the repository root",
            )
        return explicit.resolve()
    for directory in (start.resolve(), *start.resolve().parents):
        if is_checkout(directory):
            return directory
    if is_checkout(installed_from):
        return installed_from
    raise UsageError(
        f"no tf-distributed checkout at or above {start} (the images are built from its Dockerfiles)",
        "run tfchart build inside a clone of the repository, or pass --context <repository root>",
    )


def git_revision(repo_root: Path) -> str | None:
    """HEAD's commit when repo_root is the top of a git checkout; None otherwise (no git, not a checkout)."""
    answer = answers(["git", "-C", str(repo_root), "rev-parse", "--show-toplevel", "HEAD"])
    if answer is None or answer.returncode != 0:
        return None
    lines = answer.stdout.split()
    if len(lines) != 2 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", lines[1]):
        return None
    try:
        if Path(lines[0]).resolve() != repo_root.resolve():
            return None  # repo_root is a plain directory inside some other checkout
    except OSError:
        return None
    return lines[1]


def image_reference(registry: str, repository: str, tag: str) -> str:
    """`registry/repository:tag`, or `repository:tag` with no registry (as the chart renders it)."""
    registry = registry.strip().rstrip("/")
    return f"{registry}/{repository}:{tag}" if registry else f"{repository}:{tag}"


def _variants(variants: Sequence[str]) -> list[str]:
    chosen: list[str] = []
    for variant in variants:
        for name in VARIANTS if variant == "all" else (variant,):
            if name not in VARIANTS:
                raise UsageError(f"unknown image variant: {name}", "use --cpu, --gpu or --all")
            if name not in chosen:
                chosen.append(name)
    if not chosen:
        raise UsageError("no image to build", "use --cpu, --gpu or --all")
    return sorted(chosen, key=VARIANTS.index)


def _check_reference(registry: str, repository: str, tag: str) -> None:
    registry = registry.strip().rstrip("/")
    if registry and not REGISTRY_PATTERN.fullmatch(registry):
        raise UsageError(
            f"invalid registry: {registry!r}", "a host name with an optional port, e.g. ghcr.io or localhost:5000"
        )
    if not REPOSITORY_PATTERN.fullmatch(repository):
        raise UsageError(
            f"invalid repository: {repository!r}",
            "lowercase path components separated by '/', e.g. tf-distributed/trainer (no registry, no tag)",
        )
    # the GPU tag adds "-gpu": keep room for it within docker's 128 characters
    if not TAG_PATTERN.fullmatch(tag) or len(tag) > 124:
        raise UsageError(
            f"invalid tag: {tag!r}",
            "letters, digits, '_', '.' and '-', not starting with '.' or '-', at most 124 characters",
        )


def plan(
    variants: list[str],
    tag: str | None,
    registry: str,
    repository: str,
    push: bool,
    platform: str | None,
    engine: str | None,
    repo_root: Path,
    *,
    base_image: str | None = None,
    tls_verify: bool = True,
) -> list[BuildStep]:
    """The commands that build (and with push, publish) the trainer images, in the order to run them.

    variants: "cpu", "gpu" (or "all"); tag: replaces the project version in the tags; registry may
    be "" for `repository:tag` images; engine: docker, buildx or podman, or None for the one
    `detect_engine` finds (docker when none is installed, so a dry run works anywhere).
    base_image: `--build-arg BASE_IMAGE=...` for every variant (the Dockerfiles default to the
    official TensorFlow images; a GPU build on another base needs CUDA libraries in it to use GPUs).
    tls_verify=False: push over plain HTTP (podman and buildah `--tls-verify=false`; docker reads
    insecure registries from its daemon configuration only, so it is refused there).
    Needs no container engine; raises UsageError for bad names, TfchartError without pyproject.toml
    or a Dockerfile.
    """
    chosen = _variants(variants)
    root = repo_root.resolve()
    version = project_version(root)
    version_part = version if tag is None else tag
    _check_reference(registry, repository, version_part)
    if engine is not None:
        builder = Engine(engine_name(engine))
    else:
        try:
            builder = detect_engine(None)
        except EngineNotFound:
            builder = Engine("docker")
    if not tls_verify and push and not builder.daemonless:
        raise UsageError(
            f"{builder.name} cannot be told per push to use plain HTTP",
            'add the registry to "insecure-registries" in the Docker daemon configuration, or use --engine podman',
        )
    if base_image is not None and not base_image.strip():
        raise UsageError("--base-image is empty", "name an image, e.g. tensorflow/tensorflow:2.21.0")
    revision = git_revision(root)

    builds: list[BuildStep] = []
    pushes: list[BuildStep] = []
    for variant in chosen:
        dockerfile = root / f"Dockerfile.{variant}"
        if not dockerfile.is_file():
            raise TfchartError(f"{dockerfile} not found", "run tfchart build from a tf-distributed checkout")
        image = image_reference(registry, repository, version_part if variant == "cpu" else f"{version_part}-gpu")
        argv = [*builder.build_command, "-f", str(dockerfile), "-t", image, "--label", f"{VERSION_LABEL}={version}"]
        if revision:
            argv += ["--label", f"{REVISION_LABEL}={revision}"]
        if base_image:
            argv += ["--build-arg", f"BASE_IMAGE={base_image.strip()}"]
        if platform:
            argv += ["--platform", platform]
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
            pushes.append(
                BuildStep([builder.executable, "push", *tls, image], f"push {image}", image, builder, action="push")
            )
    return builds + pushes


# ---------------------------------------------------------------------------------------------
# running it


def _failure_hint(step: BuildStep) -> str:
    if step.action == "push":
        registry = step.image.split("/", 1)[0] if "/" in step.image else "the registry"
        return f"log in first (`{step.engine.executable} login {registry}`) and check that you may push to {step.image}"
    return "the build output above shows the failing Dockerfile step; --dry-run prints the commands to rerun by hand"


def run(
    steps: Sequence[BuildStep],
    dry_run: bool,
    echo: Callable[[str], None],
    progress: Callable[[str], None] = lambda line: None,
) -> None:
    """Print every command (a shell line), and unless dry_run, run them in order.

    Before running anything the engines are checked (installed, answering), so a machine without a
    working engine fails with EngineNotFound and nothing half-done. A failing command raises
    TfchartError naming the image and the exit code; later steps are not run.
    """
    if not dry_run:
        checked: list[Engine] = []
        for step in steps:
            if step.engine not in checked:
                check_engine_reachable(detect_engine(step.engine.name))
                checked.append(step.engine)
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
            command = step.argv[: 3 if step.engine.name == "buildx" and step.action == "build" else 2]
            message = f"{verb} {step.image} failed: `{shlex.join(command)}` exited with code {code}"
            raise TfchartError(message, _failure_hint(step))
        progress(f"[{number}/{len(steps)}] done in {time.monotonic() - started:.0f} s: {step.image}")
