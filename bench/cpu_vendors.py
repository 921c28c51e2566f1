#!/usr/bin/env python3
"""B1a: B1 as an x86 CPU without bfloat16 or VNNI instructions sees it (AMD EPYC before Zen 4, Intel before
Cascade Lake), emulated on this machine, with the profile of the one-process cost against a PS worker.

On such a CPU TensorFlow leaves its oneDNN kernels off by itself (tensorflow/core/util/util.cc,
DefaultOneDnnPolicy: on by default only with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX) and runs Eigen's;
oneDNN, when asked for, can use AVX2 at most there. Both are TensorFlow's and oneDNN's own switches, so the
emulation runs the same kernels such a CPU would (not its clock, caches or memory):
- Keras `fit` as a user runs it there: TF_ENABLE_ONEDNN_OPTS=0 (TensorFlow's choice on that CPU);
- the trainer as it was (TensorFlow's choice too): TF_ENABLE_ONEDNN_OPTS=0, float32;
- the trainer now: oneDNN on (trainer/runtime.py asks for it on every CPU) limited to AVX2
  (ONEDNN_MAX_CPU_ISA=AVX2), float32 (what --precision=auto picks without bfloat16 instructions);
- each trainer also as 1 ps + 1 worker, so the one-process CPU per step can be set against the worker's.

Usage: python bench/cpu_vendors.py [--repeat 1] [--steps 600]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Result, local_training, median, print_rows
from throughput import cpu_by_role, plain_keras

NO_ONEDNN = {"TF_ENABLE_ONEDNN_OPTS": "0"}
AVX2_ONEDNN = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
FLOAT32 = ["training.precision=float32"]


def results(repeat: int = 1, steps: int = 600, batch_size: int = 100, warmup: int = 100) -> list[Result]:
    keras, before, now, before_ps, now_ps = [], [], [], [], []
    for _ in range(repeat):
        keras.append(plain_keras(batch_size, (steps - warmup) * batch_size, env=NO_ONEDNN))
        before.append(local_training("single_device", 1, steps, batch_size, FLOAT32, env=NO_ONEDNN))
        now.append(local_training("single_device", 1, steps, batch_size, FLOAT32, env=AVX2_ONEDNN))
        before_ps.append(local_training("parameter_server", 1, steps, batch_size, FLOAT32, env=NO_ONEDNN))
        now_ps.append(local_training("parameter_server", 1, steps, batch_size, FLOAT32, env=AVX2_ONEDNN))
    keras_speed = median([k["examples_per_sec"] for k in keras])
    speed = {name: median([run.examples_per_sec(warmup) for run in runs])
             for name, runs in (("before", before), ("now", now), ("before_ps", before_ps), ("now_ps", now_ps))}
    ratio = speed["now"] / keras_speed
    return [Result(
        "B1a", "B1 on an AVX2-only x86 CPU (emulated): trainer / Keras fit",
        f"{speed['now']:.0f} vs {keras_speed:.0f} examples/s", ratio, ">= 2.0", ratio >= 2.0,
        [f"digits, batch {batch_size}, steps {warmup}..{steps}, {repeat} runs each; emulated with TensorFlow's "
         f"switches (Keras fit and the trainer before: TF_ENABLE_ONEDNN_OPTS=0, TensorFlow's default there; "
         f"the trainer now: oneDNN limited to AVX2, float32)",
         f"the trainer before: {speed['before']:.0f} examples/s ({speed['before'] / keras_speed:.2f} x Keras fit); "
         f"CPU-ms per step: 1 process {cpu_by_role(before, warmup)}, 1 ps + 1 worker "
         f"{cpu_by_role(before_ps, warmup)} ({speed['before_ps'] / speed['before']:.2f} x the 1 process)",
         f"the trainer now: CPU-ms per step: 1 process {cpu_by_role(now, warmup)}, 1 ps + 1 worker "
         f"{cpu_by_role(now_ps, warmup)} ({speed['now_ps'] / speed['now']:.2f} x the 1 process); Keras fit "
         f"{median([k['cpu_ms_per_step'] for k in keras]):.1f}"],
    )]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--steps", type=int, default=600)
    options = parser.parse_args()
    print_rows(results(options.repeat, options.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
