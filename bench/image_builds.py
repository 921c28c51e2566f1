#!/usr/bin/env python3
"""B7: the trainer images: size, cold and warm build time (podman, the engine CI has).

Builds Dockerfile.cpu three times in one run on the same base (BASE_IMAGE, default the local
stand-in that `make base-image` assembles, else the official image), and reports:
  B7s  image sizes: CPU and GPU trainer images against their base (ratio = trainer / base; what
       the project adds on top of TensorFlow: TensorBoard, scikit-learn, the trainer);
  B7b  cold build (`--no-cache`) against a warm rebuild after a change to the trainer code only
       (ratio = warm / cold: what a developer waits for in the edit-build loop).
Usage: python bench/image_builds.py   (needs podman; `make bench` runs it with the others)
"""

from __future__ import annotations

import json
import os
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
DEFAULT_BASE = "localhost/tf-distributed/tensorflow-base:2.21.0"
BENCH_TAG = "localhost/tfd-bench/trainer"


def engine_missing() -> str | None:
    if shutil.which(ENGINE) is None:
        return "podman is not installed (make setup installs it)"
    if subprocess.run([ENGINE, "info"], capture_output=True, check=False).returncode != 0:
        return "podman does not work here (podman info fails)"
    return None


def base_image() -> str:
    return os.environ.get("TFD_TEST_BASE_IMAGE") or DEFAULT_BASE


def size_mb(image: str) -> float | None:
    answer = subprocess.run([ENGINE, "image", "inspect", image], capture_output=True, text=True, check=False)
    if answer.returncode != 0:
        return None
    return float(json.loads(answer.stdout)[0]["Size"]) / 1e6


def _context(tmp: Path) -> Path:
    """A copy of what the Dockerfile sees, so the warm build can change the trainer code only."""
    context = tmp / "context"
    shutil.copytree(REPO / "trainer", context / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    (context / "images").mkdir()
    shutil.copy(REPO / "images" / "requirements.txt", context / "images" / "requirements.txt")
    shutil.copy(REPO / ".dockerignore", context / ".dockerignore")
    return context


def timed_build(context: Path, tag: str, *extra: str) -> float:
    argv = [ENGINE, "build", "-q", "-f", str(REPO / "Dockerfile.cpu"), "--build-arg", f"BASE_IMAGE={base_image()}"]
    started = time.perf_counter()
    answer = subprocess.run([*argv, *extra, "-t", tag, str(context)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if answer.returncode != 0:
        raise SystemExit(f"B7: podman build failed:\n{answer.stderr[-3000:]}")
    return elapsed


def results(cpu_image: str = "ghcr.io/tf-distributed/trainer:0.1.0") -> list[Result]:
    missing_base = None if size_mb(base_image()) else f"base image {base_image()} is missing (make base-image)"
    reason = engine_missing() or missing_base
    if reason:
        return [Result("B7", "trainer images", reason, None, "-", None)]
    with tempfile.TemporaryDirectory(prefix="tfd-bench-images-") as tmp:
        context = _context(Path(tmp))
        cold = timed_build(context, f"{BENCH_TAG}:cold", "--no-cache")
        with (context / "trainer" / "__init__.py").open("a") as init:
            init.write("\n# bench: a one-line change to the trainer code\n")
        warm = timed_build(context, f"{BENCH_TAG}:warm")
        sizes = {name: size_mb(ref) for name, ref in (("base", base_image()), ("trainer", f"{BENCH_TAG}:cold"))}
        cleanup = [ENGINE, "rmi", "-f", f"{BENCH_TAG}:cold", f"{BENCH_TAG}:warm"]
        subprocess.run(cleanup, capture_output=True, check=False)
    gpu = size_mb(cpu_image + "-gpu")
    base, trainer = sizes["base"] or 0.0, sizes["trainer"] or 0.0
    size_row = Result(
        "B7s", "image size vs its TensorFlow base",
        f"CPU trainer {trainer:.0f} MB"
        + (f", GPU trainer {gpu:.0f} MB" if gpu else "")
        + f" on a {base:.0f} MB base (+{trainer - base:.0f} MB: TensorBoard, scikit-learn/SciPy, the trainer)",
        trainer / base, "-", None,
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
