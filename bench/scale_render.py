#!/usr/bin/env python3
"""B4: a render of the largest cluster the chart allows: 499 workers and 100 parameter servers.

The worker maximum of the chart's values.schema.json (the one place it is stated) is the most tasks
whose TF_CONFIG still fits one environment variable with the longest names the chart allows; with
this benchmark's short release name 100 parameter servers fit beside them. Prints `helm template`
wall time, the largest rendered object in bytes (goal <= 256 KiB: far below the API server's
~1.5 MiB request limit and etcd's object limit) and, as B4v, `tfchart validate` wall time for the
same values (goal <= 1 s: validate renders the chart with helm and reads helm's answer back, so
this is helm's render of the largest cluster plus tfchart's start).
Usage: python bench/scale_render.py [--workers N] [--ps N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from common import CHART, HELM, Result, bench_env, print_rows  # noqa: E402

from tfdcontract import WORKER  # noqa: E402


def schema_maximum(role: str) -> int:
    """The most replicas of `role` (worker, ps) that the chart's values.schema.json allows."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    maximum: int = schema["properties"][role]["properties"]["replicas"]["maximum"]
    return maximum


MAX_WORKERS = schema_maximum(WORKER)


def run(command: list[str], repeat: int) -> tuple[float, str]:
    env = bench_env()
    times, output = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
        times.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr}")
        output = result.stdout
    return statistics.median(times), output


def measure(workers: int, ps: int, repeat: int, helm: str) -> tuple[float, int, str, float, float]:
    """(helm template s, largest object bytes, its kind/name, rendered KiB, tfchart validate s)."""
    sets = ["--set", f"worker.replicas={workers}", "--set", f"ps.replicas={ps}"]
    render_time, manifests = run([helm, "template", "scale", str(REPO / "charts" / "tf-distributed"), *sets], repeat)
    sizes = sorted(
        (
            (len(yaml.safe_dump(doc).encode()), f"{doc['kind']}/{doc['metadata']['name']}")
            for doc in yaml.safe_load_all(manifests)
            if doc
        ),
        reverse=True,
    )
    validate_time, _ = run([str(REPO / ".venv" / "bin" / "tfchart"), "--helm", helm, "validate", *sets], repeat)
    largest, name = sizes[0]
    return render_time, largest, name, len(manifests) / 1024, validate_time


def results(workers: int = MAX_WORKERS, ps: int = 100, repeat: int = 3, helm: str = HELM) -> list[Result]:
    """B4 as rows of bench/run.py's table: the largest object and tfchart validate time."""
    render_time, largest, name, rendered_kib, validate_time = measure(workers, ps, repeat, helm)
    scale = f"{workers} workers + {ps} ps"
    size_ratio = largest / (256 * 1024)
    return [
        Result(
            "B4",
            f"largest object / 256 KiB ({scale})",
            f"{name} {largest / 1024:.1f} KiB",
            size_ratio,
            "<= 1.0",
            size_ratio <= 1.0,
            [f"helm template {render_time:.2f} s median of {repeat}, {rendered_kib:.0f} KiB rendered"],
        ),
        Result(
            "B4v",
            f"tfchart validate / 1 s ({scale})",
            f"{validate_time:.2f} s",
            validate_time,
            "<= 1.0",
            validate_time <= 1.0,
            [f"of which helm template {render_time:.2f} s: validate renders with helm and reads the render back"],
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=MAX_WORKERS)
    parser.add_argument("--ps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--helm", default=HELM)
    options = parser.parse_args()
    print_rows(results(options.workers, options.ps, options.repeat, options.helm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
