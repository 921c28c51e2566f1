#!/usr/bin/env python3
"""B5: local-cluster time to the first training step, four processes against one.

Runs the chart's rendered pods through tfchart.local.processes (the code path of `tfchart local`):
(a) parameter_server with 1 ps, 2 workers and the chief (4 processes) and (b) single_device
(the chief alone), interleaved, and measures from process start to the chief's first
`step N, loss = ...` line. Goal: ratio of medians (a)/(b) <= 1.5 (parallel start-up, no serial
waits). Usage: python bench/local_startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import HELM, Result, cores, cpu_seconds, print_rows, render_pods  # noqa: E402

from tfchart.local.pods import LocalPod  # noqa: E402
from tfchart.local.processes import LocalCluster  # noqa: E402

STEP = re.compile(r"^step \d+, loss")
COMMON = [
    "training.dataset=digits",
    "training.download=false",
    "training.logEverySteps=1",
    "training.trainSteps=20",
    "training.checkpointEverySteps=20",
    "tensorboard.enabled=false",
    "serving.enabled=false",
]


def time_to_first_step(strategy: str, helm: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as directory:
        plan = render_pods([f"training.strategy={strategy}", *COMMON], Path(directory), helm)
        first = threading.Event()

        def on_line(pod: LocalPod, line: str) -> None:
            if pod.is_chief and STEP.search(line):
                first.set()

        cluster = LocalCluster(on_line)
        start = time.perf_counter()
        try:
            cluster.start(plan)
            if not first.wait(timeout=300):
                raise SystemExit(f"{strategy}: no training step within 300 s")
            elapsed = time.perf_counter() - start
            cpu = sum(cpu_seconds(process.popen.pid) for process in cluster.processes.values())
            return elapsed, cpu
        finally:
            cluster.stop(grace=5)


def measure(repeat: int, helm: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    samples: dict[str, list[float]] = {"parameter_server": [], "single_device": []}
    cpu: dict[str, list[float]] = {"parameter_server": [], "single_device": []}
    for _ in range(repeat):
        for strategy in samples:
            elapsed, used = time_to_first_step(strategy, helm)
            samples[strategy].append(elapsed)
            cpu[strategy].append(used)
    return samples, cpu


def result(repeat: int = 2, helm: str = HELM) -> Result:
    """B5 as a row of bench/run.py's table, with the CPU-bound lower bound as evidence."""
    samples, cpu = measure(repeat, helm)
    usable = cores()
    four, one = statistics.median(samples["parameter_server"]), statistics.median(samples["single_device"])
    used = statistics.median(cpu["parameter_server"])
    ratio = four / one
    return Result(
        "B5",
        "local cluster start: 4 processes / 1",
        f"{four:.1f} vs {one:.1f} s to the first step",
        ratio,
        "<= 1.5",
        ratio <= 1.5,
        [
            f"{repeat} interleaved runs; the 4 processes used {used:.1f} CPU-s before the first step: "
            f"{used / usable:.1f} s on {usable} cores is the lower bound (wall / bound = {four / (used / usable):.2f})"
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--helm", default=HELM)
    options = parser.parse_args()
    print_rows([result(options.repeat, options.helm)])
    return 0

if __name__ == "__main__":
    sys.exit(main())
