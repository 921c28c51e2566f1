#!/usr/bin/env python3
"""B6: the MNIST CNN on NVIDIA GPUs, where they exist.

(a) examples/sec of the trainer (single_device, one GPU) on MNIST-shaped data (the `synthetic`
    28x28 set: the real MNIST needs a download these machines cannot make) against the reference
    figure of the classic distributed TensorFlow MNIST example: 15,000 examples/sec on four GRID
    K520 GPUs. Goal: >= 20x.
(b) mirrored scaling: `--strategy=mirrored` over every GPU present at N times the batch, against
    N times the one-GPU figure (1.0 = linear). Needs two or more GPUs.

Without an NVIDIA GPU, or with a TensorFlow build that sees none (the project installs
tensorflow-cpu), it reports why it was skipped and what to install.

Usage: python bench/gpu.py [--batch-size 1024] [--steps 1500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, Result, TrainingRun, bench_env, print_rows, train_locally

from tfchart.local.pods import LocalPod
from tfdcontract import CHIEF

REFERENCE = 15_000.0  # examples/sec, four GRID K520 GPUs (the classic distributed MNIST example)
GPU_ENV = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "XLA_FLAGS", "TF_GPU_ALLOCATOR")
INSTALL_HINT = (
    "install a GPU build into the environment: .venv/bin/pip install 'tensorflow[and-cuda]==2.21.0' "
    "(it replaces tensorflow-cpu), then run bench/run.py again"
)


def gpu_names() -> list[str]:
    """The NVIDIA GPUs nvidia-smi lists (empty without a driver)."""
    if not shutil.which("nvidia-smi"):
        return []
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, check=False
    )
    return [line.strip() for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else []


def tensorflow_gpus() -> int:
    """How many GPUs TensorFlow in this environment sees (0 for tensorflow-cpu)."""
    code = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**bench_env(), "TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    lines = result.stdout.split()
    return int(lines[-1]) if result.returncode == 0 and lines else 0


def skip_reason(names: list[str]) -> str | None:
    if not names:
        return "no NVIDIA GPU on this machine (nvidia-smi lists none)"
    if tensorflow_gpus() == 0:
        return f"{len(names)} x {names[0]} present, but this TensorFlow sees no GPU: {INSTALL_HINT}"
    return None


def train_on_gpus(strategy: str, batch_size: int, steps: int) -> TrainingRun:
    with tempfile.TemporaryDirectory(prefix="tfd-bench-gpu-") as root:
        argv = [
            sys.executable, "-m", "trainer", f"--strategy={strategy}", "--dataset=synthetic",
            f"--storage-root={root}", f"--batch-size={batch_size}", f"--train-steps={steps}",
            "--log-every-steps=50", f"--checkpoint-every-steps={steps}", "--steps-per-execution=50",
            "--cleanup=keep",
        ]  # fmt: skip
        env = {key: os.environ[key] for key in GPU_ENV if key in os.environ}
        env["PYTHONPATH"] = str(REPO)
        return train_locally([LocalPod("gpu-bench", CHIEF, 0, argv, env)], batch_size)


def results(batch_size: int = 1024, steps: int = 1500, warmup: int = 300) -> list[Result]:
    names = gpu_names()
    reason = skip_reason(names)
    if reason is not None:
        return [Result("B6", "MNIST CNN on 1 GPU / 15,000 ex/s (4 x K520)", f"skipped: {reason}", None, ">= 20", None)]
    one = train_on_gpus("single_device", batch_size, steps).examples_per_sec(warmup)
    rows = [
        Result(
            "B6",
            "MNIST CNN on 1 GPU / 15,000 ex/s (4 x K520)",
            f"{one:.0f} examples/s on 1 x {names[0]}",
            one / REFERENCE,
            ">= 20",
            one / REFERENCE >= 20,
            [f"28x28 synthetic set, batch {batch_size}, 50 steps per execution, steps {warmup}..{steps}"],
        )
    ]
    if len(names) < 2:
        rows.append(Result("B6m", "mirrored N GPUs / (N x 1 GPU)", "skipped: one GPU present", None, "(none)", None))
        return rows
    many = train_on_gpus("mirrored", batch_size * len(names), steps).examples_per_sec(warmup)
    rows.append(
        Result(
            "B6m",
            f"mirrored {len(names)} GPUs / ({len(names)} x 1 GPU)",
            f"{many:.0f} vs {len(names)} x {one:.0f} examples/s",
            many / (len(names) * one),
            "(none)",
            None,
            [f"global batch {batch_size * len(names)} ({batch_size} per GPU)"],
        )
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1500)
    options = parser.parse_args()
    print_rows(results(options.batch_size, options.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
