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
    samples: dict[str, list[float]] = {"tfchart validate": [], "helm lint": []}
    for _ in range(repeat):
        samples["tfchart validate"].append(timed(tfchart, env))
        samples["helm lint"].append(timed(lint, env))
    return {name: (min(times), statistics.median(times)) for name, times in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--values", default="values/gpu.yaml")
    parser.add_argument("--helm", default=str(REPO / ".tools" / "bin" / "helm"))
    options = parser.parse_args()
    results = measure(options.repeat, options.values, options.helm)
    for name, (low, middle) in results.items():
        print(f"{name:18} min {low * 1000:7.1f} ms   median {middle * 1000:7.1f} ms")
    ratio = results["tfchart validate"][1] / results["helm lint"][1]
    print(f"B3 tfchart validate / helm lint (median, goal <= 0.5): ratio {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
