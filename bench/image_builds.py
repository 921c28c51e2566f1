#!/usr/bin/env python3
"""B7: the trainer images: size, cold and warm build time (podman, the engine CI has).

Builds, side by side in one run, on the local stand-ins `make base-image` assembles (or the bases
TFD_TEST_BASE_IMAGE / TFD_TEST_TENSORFLOW_BASE_IMAGE name):
  * Dockerfile.cpu on the python:3.11-slim-bookworm stand-in, cold (`--no-cache`), then warm after a
    one-line change to the trainer code;
  * the recipe before issue 26 (bench/baseline: Dockerfile.cpu and its requirements from commit
    1a4457c) on the tensorflow/tensorflow:2.21.0 stand-in, with the same trainer code;
  * Dockerfile.gpu on the tensorflow/tensorflow:2.21.0 stand-in (what CI builds: the official GPU base
    adds CUDA libraries, which no machine here can have).
and reports:
  B7s  CPU image size, slim recipe / the recipe before (goal <= 0.5), with the GPU image's size;
  B7b  warm rebuild after a trainer change / cold build (what a developer waits for in the edit-build loop).
Usage: python bench/image_builds.py   (needs podman and both stand-ins; `make bench` runs it with the others)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import Result, print_rows  # noqa: E402

ENGINE = "podman"
DEFAULT_BASE = "localhost/tf-distributed/python-base:3.11-slim-bookworm"
DEFAULT_TENSORFLOW_BASE = "localhost/tf-distributed/tensorflow-base:2.21.0"
BASELINE = REPO / "bench" / "baseline"
BENCH_TAG = "localhost/tfd-bench/trainer"
SIZE_GOAL = 0.5


def engine_missing() -> str | None:
    if shutil.which(ENGINE) is None:
        return "podman is not installed (make setup installs it)"
    if subprocess.run([ENGINE, "info"], capture_output=True, check=False).returncode != 0:
        return "podman does not work here (podman info fails)"
    return None


def base_image() -> str:
    return os.environ.get("TFD_TEST_BASE_IMAGE") or DEFAULT_BASE


def tensorflow_base_image() -> str:
    return os.environ.get("TFD_TEST_TENSORFLOW_BASE_IMAGE") or DEFAULT_TENSORFLOW_BASE


def size_mb(image: str) -> float | None:
    answer = subprocess.run([ENGINE, "image", "inspect", image], capture_output=True, text=True, check=False)
    if answer.returncode != 0:
        return None
    return float(json.loads(answer.stdout)[0]["Size"]) / 1e6


def _context(tmp: Path, name: str, requirements: Path, dockerignore: Path) -> Path:
    """A copy of what a Dockerfile sees (the same trainer code for every recipe), so the warm build can
    change the trainer code only."""
    context = tmp / name
    for package in ("trainer", "tfdcontract"):
        shutil.copytree(REPO / package, context / package, ignore=shutil.ignore_patterns("__pycache__"))
    (context / "images").mkdir()
    shutil.copy(requirements, context / "images" / requirements.name)
    shutil.copy(dockerignore, context / ".dockerignore")
    return context


def _baseline_requirements(tmp: Path) -> Path:
    """The recipe before, with the packages today's trainer code needs that it did not (the kubernetes client and
    its closure since issue 33): the same trainer code must import in both images. TensorFlow stays the base's."""

    def name(line: str) -> str:
        return re.sub(r"[-_.]+", "-", line.split("==")[0].strip().lower())

    lines = (BASELINE / "images" / "requirements.txt").read_text().splitlines()
    known = {name(line) for line in lines if "==" in line}
    today = (REPO / "images" / "requirements-cpu.txt").read_text().splitlines()
    added = [line for line in today if "==" in line and name(line) not in known and name(line) != "tensorflow-cpu"]
    (tmp / "requirements.txt").write_text("\n".join([*lines, *added]) + "\n")
    return tmp / "requirements.txt"


def timed_build(dockerfile: Path, base: str, context: Path, tag: str, *extra: str) -> float:
    argv = [ENGINE, "build", "-q", "--format", "docker", "-f", str(dockerfile), "--build-arg", f"BASE_IMAGE={base}"]
    started = time.perf_counter()
    answer = subprocess.run([*argv, *extra, "-t", tag, str(context)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if answer.returncode != 0:
        raise SystemExit(f"B7: podman build -f {dockerfile} failed:\n{answer.stderr[-3000:]}")
    return elapsed


def results() -> list[Result]:
    missing = [f"{base} is missing (make base-image)" for base in (base_image(), tensorflow_base_image())
               if size_mb(base) is None]  # fmt: skip
    reason = engine_missing() or "; ".join(missing)
    if reason:
        return [Result("B7", "trainer images", reason, None, "-", None)]
    tags = [f"{BENCH_TAG}:{name}" for name in ("cold", "warm", "before", "gpu")]
    try:
        with tempfile.TemporaryDirectory(prefix="tfd-bench-images-") as tmp:
            slim = _context(Path(tmp), "slim", REPO / "images" / "requirements-cpu.txt", REPO / ".dockerignore")
            gpu = _context(Path(tmp), "gpu", REPO / "images" / "requirements.txt", REPO / ".dockerignore")
            before = _context(Path(tmp), "before", _baseline_requirements(Path(tmp)), BASELINE / ".dockerignore")
            before_s = timed_build(BASELINE / "Dockerfile.cpu", tensorflow_base_image(), before, tags[2], "--no-cache")
            cold = timed_build(REPO / "Dockerfile.cpu", base_image(), slim, tags[0], "--no-cache")
            with (slim / "trainer" / "__init__.py").open("a") as init:
                init.write("\n# bench: a one-line change to the trainer code\n")
            warm = timed_build(REPO / "Dockerfile.cpu", base_image(), slim, tags[1])
            gpu_s = timed_build(REPO / "Dockerfile.gpu", tensorflow_base_image(), gpu, tags[3], "--no-cache")
        size = {tag.rsplit(":", 1)[1]: size_mb(tag) or 0.0 for tag in tags}
        bases = {name: size_mb(image) or 0.0 for name, image in (("slim", base_image()),
                                                                 ("tensorflow", tensorflow_base_image()))}  # fmt: skip
    finally:
        subprocess.run([ENGINE, "rmi", "-f", *tags], capture_output=True, check=False)
    ratio = size["cold"] / size["before"]
    size_row = Result(
        "B7s", "CPU image size: slim Python + tensorflow-cpu vs the TensorFlow-image recipe",
        f"CPU trainer {size['cold']:.0f} MB on the {bases['slim']:.0f} MB python:3.11-slim-bookworm stand-in, "
        f"before {size['before']:.0f} MB on the {bases['tensorflow']:.0f} MB tensorflow/tensorflow:2.21.0 stand-in; "
        f"GPU trainer {size['gpu']:.0f} MB on that stand-in (the official GPU base adds CUDA)",
        ratio, f"<= {SIZE_GOAL}", ratio <= SIZE_GOAL,
        details=[f"cold builds: before {before_s:.1f} s, slim {cold:.1f} s (tensorflow-cpu now installs in the "
                 f"build, not in the base), GPU {gpu_s:.1f} s",
                 "before = bench/baseline (Dockerfile.cpu and requirements of commit 1a4457c, plus the kubernetes "
                 "client's closure the trainer needs since issue 33), same trainer code"],
    )  # fmt: skip
    build_row = Result(
        "B7b", "warm rebuild after a trainer change vs cold build",
        f"cold (--no-cache) {cold:.1f} s, warm {warm:.1f} s (only the trainer layer and the self-check rerun)",
        warm / cold, "-", None,
        details=["both builds rerun the self-check (imports TensorFlow, writes and reads a summary, loads digits, "
                 "tensorboard --version, python -m trainer --help): a change to the trainer is re-verified"],
    )  # fmt: skip
    return [size_row, build_row]


if __name__ == "__main__":
    print_rows(results())
