#!/usr/bin/env python3
"""B5: local-cluster time to the first training step, four processes against one.

Runs the chart's rendered pods through tfchart.local (the code path of `tfchart local`):
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

from common import Result  # noqa: E402

from tfchart import render  # noqa: E402
from tfchart.local import LocalCluster, LocalPod, localise_cluster, pods_from_manifests, python_bin_dir  # noqa: E402

STEP = re.compile(r"^step \d+, loss")
COMMON = [
    "training.dataset=digits",
    "training.download=false",
    "training.logEverySteps=1",
    "training.trainSteps=20",
    "training.checkpointEverySteps=20",
    "tensorboard.enabled=false",
    "serving.enabled=false",
    "training.cleanupPolicy=keep",
]


def pods(strategy: str, root: Path, helm: str) -> list[LocalPod]:
    sets = [
        ("--set", f"training.strategy={strategy}"),
        *[("--set", s) for s in COMMON],
        ("--set-string", f"storage.mountPath={root}"),
    ]
    text = render.template(
        helm, REPO / "charts" / "tf-distributed", "bench", [REPO / "values" / "cpu.yaml"], sets, "default"
    )
    result = pods_from_manifests(render.manifests(text), "default")
    localise_cluster(result)
    return result


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its waited-for children) from /proc, in seconds."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def time_to_first_step(strategy: str, helm: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as directory:
        plan = pods(strategy, Path(directory), helm)
        first = threading.Event()

        def on_line(pod: LocalPod, line: str) -> None:
            if pod.is_chief and STEP.search(line):
                first.set()

        cluster = LocalCluster(on_line, extra_path=[python_bin_dir()])
        start = time.perf_counter()
        try:
            cluster.start(plan)
            if not first.wait(timeout=300):
                raise SystemExit(f"{strategy}: no training step within 300 s")
            elapsed = time.perf_counter() - start
            cpu = sum(cpu_seconds(pid) for pid in cluster.pids())
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


def result(repeat: int = 2, helm: str = str(REPO / ".tools" / "bin" / "helm")) -> Result:
    """B5 as a row of bench/run.py's table, with the CPU-bound lower bound as evidence."""
    import os

    samples, cpu = measure(repeat, helm)
    cores = len(os.sched_getaffinity(0))
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
            f"{used / cores:.1f} s on {cores} cores is the lower bound (wall / bound = {four / (used / cores):.2f})"
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--helm", default=str(REPO / ".tools" / "bin" / "helm"))
    options = parser.parse_args()
    import os

    samples, cpu = measure(options.repeat, options.helm)
    cores = len(os.sched_getaffinity(0))
    for name, times in samples.items():
        used = statistics.median(cpu[name])
        print(
            f"{name:18} min {min(times):6.2f} s   median {statistics.median(times):6.2f} s   "
            f"CPU used by its processes {used:6.2f} s (/{cores} cores = {used / cores:5.2f} s lower bound)"
        )
    bound = statistics.median(cpu["parameter_server"]) / cores
    print(
        f"parallel start-up: 4-process wall time / its CPU-bound lower bound = "
        f"{statistics.median(samples['parameter_server']) / bound:.2f} "
        "(1.0 = perfectly parallel; serial waits show as more)"
    )
    ratio = statistics.median(samples["parameter_server"]) / statistics.median(samples["single_device"])
    print(f"B5 4-process / 1-process time to first step (median, goal <= 1.5): ratio {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
