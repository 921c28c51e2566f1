"""The trainer images, built for real from the repository's Dockerfiles, for the tests that run them.

`built_images()` builds both images once per test session with `tfchart build --engine podman`
(the command users run), the CPU one on `TFD_TEST_BASE_IMAGE` and the GPU one on
`TFD_TEST_TENSORFLOW_BASE_IMAGE` when set (CI reaches no container registry, so `make base-image`
assembles stand-ins for python:3.11-slim-bookworm with debootstrap and for tensorflow/tensorflow:2.21.0
with pip on top, and the Makefile names them here), else on the Dockerfiles' defaults, the official
images.
The images are tagged exactly as the chart references them by default
(`ghcr.io/tf-distributed/trainer:<appVersion>` and `...-gpu`), so the rendered release runs them
without any image override. Nothing is skipped: without a working podman the tests fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import pytest

from tests.chartlib import REPO
from tfchart.images.build import DEFAULT_REGISTRY, DEFAULT_REPOSITORY, project_version

ENGINE = "podman"


@dataclass(frozen=True)
class BuiltImages:
    cpu: str
    gpu: str
    base: str | None  # the CPU image's
    gpu_base: str | None
    seconds: float  # wall time of the build that made them (0 when both were already built)

    def all(self) -> list[str]:
        return [self.cpu, self.gpu]


def engine_works() -> str | None:
    """None when podman runs containers here; else why not."""
    if shutil.which(ENGINE) is None:
        return "podman is not installed (make setup installs it: scripts/install_containers.sh)"
    answer = subprocess.run([ENGINE, "info"], capture_output=True, text=True, check=False)
    if answer.returncode != 0:
        return f"podman does not work: {answer.stderr.strip().splitlines()[-1:]}"
    return None


def require_engine() -> None:
    """Fails (never skips) the calling test when podman cannot run containers."""
    reason = engine_works()
    if reason:
        pytest.fail(f"the image tests need a working container engine: {reason}")


def image_exists(reference: str) -> bool:
    return subprocess.run([ENGINE, "image", "exists", reference], check=False).returncode == 0


def stand_in_base(tensorflow: bool = False) -> str | None:
    """The stand-in base the Makefile names (python:3.11-slim-bookworm's, or with tensorflow
    tensorflow/tensorflow:2.21.0's), None when unset; fails the test when it is set but not built."""
    variable = "TFD_TEST_TENSORFLOW_BASE_IMAGE" if tensorflow else "TFD_TEST_BASE_IMAGE"
    base = os.environ.get(variable) or None
    if base and not image_exists(base):
        pytest.fail(f"{variable}={base} is not in podman's store: run `make base-image` first")
    return base


@cache
def built_images() -> BuiltImages:
    """Both trainer images, built by `tfchart build` once per session."""
    require_engine()
    version = project_version(REPO)
    cpu = f"{DEFAULT_REGISTRY}/{DEFAULT_REPOSITORY}:{version}"
    gpu = f"{cpu}-gpu"
    base, gpu_base = stand_in_base(), stand_in_base(tensorflow=True)
    argv = [sys.executable, "-m", "tfchart", "build", "--all", "--engine", ENGINE]
    argv += ["--base-image", base] if base else []
    argv += ["--gpu-base-image", gpu_base] if gpu_base else []
    started = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"tfchart build failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return BuiltImages(cpu, gpu, base, gpu_base, time.monotonic() - started)


def run_in_image(
    image: str, *argv: str, options: Sequence[str] = (), entrypoint: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`podman run` the way the chart runs pods: uid 10001, read-only root, /tmp an emptyDir (tmpfs).

    options go before the image (e.g. `-v dir:/data`); --no-healthcheck because podman schedules
    HEALTHCHECKs through systemd, which containers such as CI's machine do not run.
    """
    override = [*options, "--entrypoint", entrypoint] if entrypoint is not None else list(options)
    command = [
        ENGINE, "run", "--rm", "--no-healthcheck", "--user", "10001:10001", *override, "--read-only",
        "--tmpfs", "/tmp:rw,mode=1777", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", image, *argv,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
