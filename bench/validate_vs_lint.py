#!/usr/bin/env python3
"""B3: `tfchart validate -f values/gpu.yaml` against `helm lint charts/tf-distributed -f values/gpu.yaml`.

tfchart validate has no validator of its own: it runs `helm template` with the user's inputs (helm
checks the schema and the chart's rules) and reads helm's answer back, so it costs one helm render
plus a Python start. Both commands use the same helm binary, run as fresh processes, interleaved, in
one run (the machine's noise hits both alike); prints min and median wall time of each and the ratio
of medians (goal: <= 1.2). `helm template` alone is timed beside them: the part of validate that is
helm's, so what remains is tfchart's own cost. Bytecode caching is on for the tfchart process, as
on any user's machine (PYTHONDONTWRITEBYTECODE is dropped from its environment; a first warm-up run
writes the .pyc files and tfchart's cache of the helm version).

Usage: python bench/validate_vs_lint.py [--repeat N] [--values FILE] [--helm PATH]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from common import CHART, HELM, Result, bench_env, print_rows  # noqa: E402

GOAL = 1.2
VALIDATE, LINT, TEMPLATE = "tfchart validate", "helm lint", "helm template"


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout.decode()}{result.stderr.decode()}")
    return elapsed


def commands(values: str, helm: str) -> dict[str, list[str]]:
    """The three commands on the same values file and helm binary."""
    return {
        VALIDATE: [str(REPO / ".venv" / "bin" / "tfchart"), "--helm", helm, "validate", "-f", values],
        LINT: [helm, "lint", str(CHART), "-f", values],
        TEMPLATE: [helm, "template", "release-name", str(CHART), "-f", values],
    }


def measure(repeat: int, values: str, helm: str) -> dict[str, tuple[float, float]]:
    """(min, median) seconds of each command over `repeat` interleaved rounds, after one warm-up each."""
    env = bench_env()
    argvs = commands(values, helm)
    for argv in argvs.values():
        timed(argv, env)  # warm-up: .pyc files, the helm version cache, the page cache
    samples: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(repeat):
        for name, argv in argvs.items():
            samples[name].append(timed(argv, env))
    return {name: (min(times), statistics.median(times)) for name, times in samples.items()}


def result(repeat: int = 15, values: str = "values/gpu.yaml", helm: str = HELM) -> Result:
    """B3 as a row of bench/run.py's table."""
    measured = measure(repeat, values, helm)
    (validate_min, validate_median), (lint_min, lint_median) = measured[VALIDATE], measured[LINT]
    template_median = measured[TEMPLATE][1]
    ratio = validate_median / lint_median
    return Result(
        "B3",
        "tfchart validate / helm lint",
        f"{validate_median * 1000:.0f} vs {lint_median * 1000:.0f} ms",
        ratio,
        f"<= {GOAL}",
        ratio <= GOAL,
        [
            f"{values}, {repeat} interleaved runs; min {validate_min * 1000:.0f} vs {lint_min * 1000:.0f} ms; "
            f"helm template alone {template_median * 1000:.0f} ms, so tfchart's own cost "
            f"{(validate_median - template_median) * 1000:.0f} ms"
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
