#!/usr/bin/env python3
"""B1 and B2: training throughput, side by side, on CPU, on the offline digits set.

B1: the trainer in one process (the chart's single_device chief, run from the rendered manifest)
    against bench/plain_keras.py (model.compile + model.fit on the same model, examples, batch
    size and optimizer). Goal: ratio >= 1.0.
B2: the chart's async parameter-server topology as local processes, 1 ps + 1 worker + chief,
    against the single process; and 2 workers against 1. Goal: >= 0.8 for the first.

Every run trains `--steps` steps of `--batch-size` examples; throughput is measured from the step
after `--warmup` (tracing, compilation and connection done) to the last step, from the arrival
times of the chief's step lines; every pod's CPU time is read from /proc at the same instants, so
the figures come with CPU-ms per step per role (where the time goes). The configurations run
interleaved, `--repeat` times; ratios are of medians.

Usage: python bench/throughput.py [--repeat 2] [--steps 600] [--batch-size 100]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, Result, TrainingRun, bench_env, local_training, median, print_rows

CONFIGS = {
    "single process": ("single_device", 1),
    "ps 1 + 1 worker": ("parameter_server", 1),
    "ps 1 + 2 workers": ("parameter_server", 2),
}


def plain_keras(batch_size: int, examples: int, extra: Sequence[str] = (),
                env: Mapping[str, str] | None = None) -> dict[str, float]:
    script = str(REPO / "bench" / "plain_keras.py")
    command = [sys.executable, script, f"--batch-size={batch_size}", f"--examples={examples}", *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=bench_env() | dict(env or {}), cwd=REPO)
    if result.returncode != 0:
        raise RuntimeError(f"plain_keras.py failed:\n{result.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def cpu_by_role(runs: list[TrainingRun], warmup: int) -> str:
    roles: dict[str, list[float]] = {}
    for run in runs:
        for role, used in run.cpu_per_step(warmup).items():
            roles.setdefault(role, []).append(used)
    return ", ".join(f"{role} {median(values):.1f}" for role, values in sorted(roles.items()))


def measure(repeat: int, steps: int, batch_size: int, warmup: int, large_batch: int = 0) -> list[Result]:
    """B1, B2 (and, with `large_batch`, B2 again at that batch: how the per-step cost amortises)."""
    keras: list[dict[str, float]] = []
    runs: dict[str, list[TrainingRun]] = {name: [] for name in CONFIGS}
    for _ in range(repeat):
        keras.append(plain_keras(batch_size, (steps - warmup) * batch_size))
        for name, (strategy, workers) in CONFIGS.items():
            runs[name].append(local_training(strategy, workers, steps, batch_size))
    speed = {name: median([run.examples_per_sec(warmup) for run in done]) for name, done in runs.items()}
    keras_speed = median([k["examples_per_sec"] for k in keras])
    keras_cpu = median([k["cpu_ms_per_step"] for k in keras])
    cpu = {name: cpu_by_role(done, warmup) for name, done in runs.items()}
    setting = f"digits, batch {batch_size}, steps {warmup}..{steps}, {repeat} runs each"
    b1 = speed["single process"] / keras_speed
    b2 = speed["ps 1 + 1 worker"] / speed["single process"]
    b2w = speed["ps 1 + 2 workers"] / speed["ps 1 + 1 worker"]
    return [
        Result(
            "B1",
            "trainer (1 process) / plain Keras fit",
            f"{speed['single process']:.0f} vs {keras_speed:.0f} examples/s",
            b1,
            ">= 1.0",
            b1 >= 1.0,
            [
                f"{setting}; CPU-ms per step: trainer {cpu['single process']}, Keras fit {keras_cpu:.1f}",
            ],
        ),
        Result(
            "B2",
            "ps 1 + 1 worker / 1 process",
            f"{speed['ps 1 + 1 worker']:.0f} vs {speed['single process']:.0f} examples/s",
            b2,
            ">= 0.8",
            b2 >= 0.8,
            [f"{setting}; CPU-ms per step by role: {cpu['ps 1 + 1 worker']} (1 process: {cpu['single process']})"],
        ),
        Result(
            "B2w",
            "ps 1 + 2 workers / ps 1 + 1 worker",
            f"{speed['ps 1 + 2 workers']:.0f} vs {speed['ps 1 + 1 worker']:.0f} examples/s",
            b2w,
            "(none)",
            None,
            [f"CPU-ms per step by role: {cpu['ps 1 + 2 workers']}"],
        ),
        *([_large_batch(large_batch, steps, warmup)] if large_batch else []),
    ]


def _large_batch(batch_size: int, steps: int, warmup: int) -> Result:
    single = local_training("single_device", 1, steps, batch_size)
    ps = local_training("parameter_server", 1, steps, batch_size)
    ratio = ps.examples_per_sec(warmup) / single.examples_per_sec(warmup)
    return Result(
        "B2L",
        f"ps 1 + 1 worker / 1 process, batch {batch_size}",
        f"{ps.examples_per_sec(warmup):.0f} vs {single.examples_per_sec(warmup):.0f} examples/s",
        ratio,
        "(evidence)",
        None,
        [f"1 run each; CPU-ms per step by role: {cpu_by_role([ps], warmup)} "
         f"(1 process: {cpu_by_role([single], warmup)})"],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--large-batch", type=int, default=0, help="also measure B2 once at this batch size")
    options = parser.parse_args()
    print_rows(measure(options.repeat, options.steps, options.batch_size, options.warmup, options.large_batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
