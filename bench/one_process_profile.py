#!/usr/bin/env python3
"""The profile behind B1 and B1a: what one training step of the one-process trainer costs, by input path and kernels.

Each variant runs in a fresh process (TensorFlow reads its switches at import): the trainer's own state and step
function (trainer.steps: model, optimizer, `--steps-per-execution` steps per call) on the digits set, after a
warm-up, timed over `--steps` steps by the process's CPU time and the wall clock. The variants cross
- the input path: the strategy's distributed iterator (OneDeviceStrategy's, which prefetches onto the device
  through a multi-device iterator; the trainer's single_device path before) or the dataset's own iterator
  (the trainer's path on a CPU now);
- the kernels: oneDNN on (the trainer's choice everywhere), off (TensorFlow's own choice on x86 CPUs without
  AVX512-VNNI/BF16, AVX-VNNI or AMX: AMD EPYC before Zen 4), oneDNN limited to AVX2 (what such CPUs have);
- the precision: float32, or mixed_bfloat16 where this CPU has bfloat16 instructions.

With `--large`, the same on B1L's 28x28 MNIST-shaped set (bench/large_input.py), crossing the batch (100, 400),
the threads (TensorFlow's default, or one intra-op and one inter-op thread) and the precision: where B1L's
share of the matmul limit goes (`--steps 100` is enough there).

Usage: python bench/one_process_profile.py [--steps 600] [--repeat 2] [--large]
       python bench/one_process_profile.py --variant 'iterator=own onednn=avx2 precision=float32'  (one, as JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
ONEDNN = {"on": {"TF_ENABLE_ONEDNN_OPTS": "1"}, "off": {"TF_ENABLE_ONEDNN_OPTS": "0"},
          "avx2": {"TF_ENABLE_ONEDNN_OPTS": "1", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
VARIANTS = [
    "iterator=strategy onednn=off precision=float32",
    "iterator=own onednn=off precision=float32",
    "iterator=strategy onednn=avx2 precision=float32",
    "iterator=own onednn=avx2 precision=float32",
    "iterator=strategy onednn=on precision=float32",
    "iterator=own onednn=on precision=float32",
    "iterator=own onednn=on precision=mixed_bfloat16",
]
LARGE = [f"iterator=own onednn=on precision={precision} batch={batch} threads={threads} dataset=mnist"
         for precision in ("float32", "mixed_bfloat16") for batch in (100, 400) for threads in ("default", "1")]


def measure(variant: dict[str, str], steps: int, batch_size: int, per_call: int) -> dict[str, float]:
    """One variant in this process (TensorFlow imported here, after the caller set its environment)."""
    sys.path.insert(0, str(REPO))
    import tensorflow as tf

    from trainer.config import parse_config
    from trainer.data import load_data
    from trainer.steps import create_state, make_multi_step, make_replica_step

    if variant.get("threads") == "1":
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    if variant["precision"] != "float32":
        tf.keras.mixed_precision.set_global_policy(variant["precision"])
    batch_size = int(variant.get("batch", batch_size))
    given = [f"--dataset={variant.get('dataset', 'digits')}", f"--batch-size={batch_size}"]
    cfg = parse_config(given + ([f"--data-dir={variant['data_dir']}"] if "data_dir" in variant else []))
    data = load_data(cfg)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    state = create_state(strategy, cfg, data.image_shape)
    dataset = data.train_dataset(batch_size, shuffle_seed=cfg.seed)
    own = variant["iterator"] == "own"
    iterator = iter(dataset) if own else iter(strategy.experimental_distribute_dataset(dataset))
    train = make_multi_step(strategy, make_replica_step(state))
    for _ in range(5):
        train(iterator, tf.constant(per_call)).numpy()
    cpu, wall, done = time.process_time(), time.perf_counter(), 0
    while done < steps:
        train(iterator, tf.constant(per_call)).numpy()
        done += per_call
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"cpu_ms_per_step": cpu * 1000 / done, "wall_ms_per_step": wall * 1000 / done,
            "examples_per_sec": done * batch_size / wall}


def run_variant(text: str, steps: int) -> dict[str, float]:
    variant = dict(part.split("=", 1) for part in text.split())
    env = {k: v for k, v in os.environ.items() if k not in ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")}
    env |= ONEDNN[variant["onednn"]] | {"TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, __file__, "--variant", text, f"--steps={steps}"], capture_output=True,
                          text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{text}: failed\n{done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variant", help="measure one variant in this process and print it as JSON")
    parser.add_argument("--large", action="store_true", help="B1L's profile: 28x28 input, batch, threads, precision")
    options = parser.parse_args()
    if options.variant:
        variant = dict(part.split("=", 1) for part in options.variant.split())
        print(json.dumps(measure(variant, options.steps, 100, 10)))
        return 0
    variants = VARIANTS
    with tempfile.TemporaryDirectory(prefix="tfd-profile-") as data_dir:
        if options.large:
            from large_input import generate_mnist_shaped

            generate_mnist_shaped(Path(data_dir) / "mnist.npz")
            variants = [f"{text} data_dir={data_dir}" for text in LARGE]
        runs: dict[str, list[dict[str, float]]] = {text: [] for text in variants}
        for _ in range(options.repeat):  # interleaved: the machine's noise falls on every variant alike
            for text in variants:
                runs[text].append(run_variant(text, options.steps))
    print(f"{'28x28 MNIST-shaped' if options.large else 'digits, batch 100'}, 10 steps per call, {options.steps} "
          f"steps timed, median of {options.repeat} interleaved runs")
    print(f"{'variant':52s} {'CPU-ms/step':>12s} {'wall-ms/step':>13s} {'examples/s':>11s}")
    for text, figures in runs.items():
        cpu = statistics.median(f["cpu_ms_per_step"] for f in figures)
        wall = statistics.median(f["wall_ms_per_step"] for f in figures)
        speed = statistics.median(f["examples_per_sec"] for f in figures)
        print(f"{text.split(' data_dir=')[0]:52s} {cpu:12.1f} {wall:13.1f} {speed:11.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
