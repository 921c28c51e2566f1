#!/usr/bin/env python3
"""B3: `tfchart validate values/gpu.yaml` against `helm lint charts/tf-distributed -f values/gpu.yaml`.

Both commands run as fresh processes, interleaved, in one run (the machine's noise hits both alike);
prints min and median wall time of each and the ratio of medians (goal: <= 0.5).
Bytecode caching is on for the tfchart process, as on any user's machine (a first warm-up run
writes the .pyc files and the compiled schema cache).

Usage: python bench/validate_vs_lint.py [--repeat N] [--values FILE] [--helm PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from common import HELM, Result, print_rows  # noqa: E402


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout.decode()}{result.stderr.decode()}")
    return elapsed


def measure(repeat: int, values: str, helm: str) -> dict[str, tuple[float, float]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    tfchart = [str(REPO / ".venv" / "bin" / "tfchart"), "validate", "-f", values]
    lint = [helm, "lint", str(REPO / "charts" / "tf-distributed"), "-f", values]
    for command in (tfchart, lint):
        timed(command, env)  # warm-up: .pyc files, schema cache, page cache
    # The floor of any Python CLI built on click and PyYAML: the interpreter and those imports alone.
    floor = [sys.executable, "-c", "import click, yaml"]
    samples: dict[str, list[float]] = {"tfchart validate": [], "helm lint": [], "python + click + yaml": []}
    for _ in range(repeat):
        samples["tfchart validate"].append(timed(tfchart, env))
        samples["helm lint"].append(timed(lint, env))
        samples["python + click + yaml"].append(timed(floor, env))
    return {name: (min(times), statistics.median(times)) for name, times in samples.items()}


def result(repeat: int = 15, values: str = "values/gpu.yaml", helm: str = HELM) -> Result:
    """B3 as a row of bench/run.py's table."""
    measured = measure(repeat, values, helm)
    (tf_min, tf_median), (lint_min, lint_median) = measured["tfchart validate"], measured["helm lint"]
    floor = measured["python + click + yaml"][1]
    ratio = tf_median / lint_median
    return Result(
        "B3",
        "tfchart validate / helm lint",
        f"{tf_median * 1000:.0f} vs {lint_median * 1000:.0f} ms",
        ratio,
        "<= 0.5",
        ratio <= 0.5,
        [
            f"{values}, {repeat} interleaved runs; min {tf_min * 1000:.0f} vs {lint_min * 1000:.0f} ms; "
            f"floor: python + click + PyYAML imports alone {floor * 1000:.0f} ms = {floor / lint_median:.2f} of lint"
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--values", default="values/gpu.yaml")
    parser.add_argument("--helm", default=HELM)
    options = parser.parse_args()
    print_rows([result(options.repeat, options.values, options.helm)])
    return 0

if __name__ == "__main__":
    sys.exit(main())
