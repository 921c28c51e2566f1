#!/usr/bin/env python3
"""B7c: time to the first training step, `tfchart local --engine podman` against the process engine.

Runs the real CLI twice per repeat, interleaved, on the same parameter-server release (1 ps, 2
workers, the chief; digits; TensorBoard and Serving off) and measures from the command's start to
the first `step N, loss = ...` line of the chief, then stops the run with Ctrl-C (SIGINT) as a user
would and waits for tfchart to clean up. The container figure includes what only containers cost:
the image checks, the network, one sandbox per pod and the volume's ownership container.
Ratio = container / process (medians). Needs podman and the built CPU image (`tfchart build`).
Usage: python bench/container_startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import Result, print_rows  # noqa: E402
from image_builds import ENGINE, engine_missing, size_mb  # noqa: E402

FIRST_STEP = re.compile(r"\| step \d+, loss")
IMAGE = "ghcr.io/tf-distributed/trainer:0.1.0"
SETS = [
    "training.strategy=parameter_server",
    "training.dataset=digits",
    "training.download=false",
    "training.trainSteps=2000",
    "training.logEverySteps=1",
    "tensorboard.enabled=false",
    "serving.enabled=false",
]


def time_to_first_step(engine: str, timeout: float = 300) -> float:
    with tempfile.TemporaryDirectory(prefix=f"tfd-bench-{engine}-") as workdir:
        argv = [sys.executable, "-m", "tfchart", "local", "--engine", engine, "--workdir", f"{workdir}/run",
                "--follow-logs"]
        for item in SETS:
            argv += ["--set", item]
        started = time.perf_counter()
        process = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert process.stdout is not None
        elapsed: float | None = None
        tail: list[str] = []
        try:
            for line in process.stdout:
                tail = [*tail[-20:], line.rstrip()]
                if FIRST_STEP.search(line):
                    elapsed = time.perf_counter() - started
                    break
                if time.perf_counter() - started > timeout:
                    break
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
        if elapsed is None:
            raise SystemExit(f"B7c: no training step from the {engine} engine:\n" + "\n".join(tail))
        return elapsed


def result(repeat: int = 2) -> Result:
    missing = engine_missing() or (None if size_mb(IMAGE) else f"{IMAGE} is not built (tfchart build --cpu)")
    if missing:
        return Result("B7c", "container engine time to first step", missing, None, "-", None)
    samples: dict[str, list[float]] = {"process": [], ENGINE: []}
    for _ in range(repeat):
        for engine in samples:
            samples[engine].append(time_to_first_step(engine))
    process, container = statistics.median(samples["process"]), statistics.median(samples[ENGINE])
    return Result(
        "B7c", "tfchart local time to first step: podman vs processes",
        f"podman {container:.1f} s, processes {process:.1f} s (PS 1 ps + 2 workers + chief, medians of {repeat})",
        container / process, "-", None,
        details=[f"samples: {', '.join(f'{k} ' + ' '.join(f'{v:.1f}' for v in vs) for k, vs in samples.items())}"],
    )  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    print_rows([result(parser.parse_args().repeat)])
