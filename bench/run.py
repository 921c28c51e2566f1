#!/usr/bin/env python3
"""Every benchmark this machine can run, side by side in one run: B1-B8 (see bench/RESULTS.md).

Prints one table (each row's ratio last) and rewrites the "Latest run" section of
bench/RESULTS.md (date, machine facts, this command, the table) and adds a line to its history.
Each benchmark measures against a baseline in the same run; medians over repeats. B6 runs only
where an NVIDIA GPU and a GPU build of TensorFlow exist; elsewhere its row says why not.
About 7 minutes on 2 cores.

Usage: python bench/run.py [--only B1,B3,...] [--quick] [--no-write]
    (`make bench` runs it with the project's environment)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import container_startup
import cpu_vendors
import ending_latency
import gpu
import image_builds
import large_input
import local_startup
import scale_render
import throughput
import validate_vs_lint
from common import HELM, REPO, Result, cores

RESULTS = REPO / "bench" / "RESULTS.md"
BEGIN, END = "<!-- bench/run.py: latest run -->", "<!-- /bench/run.py: latest run -->"
HISTORY = "<!-- bench/run.py: history -->"
BY_VENDOR, BY_VENDOR_END = "<!-- bench/run.py: B1 by CPU vendor -->", "<!-- /bench/run.py: B1 by CPU vendor -->"
#: Rows that another benchmark measures: asking for one runs that benchmark.
MEASURED_BY = {"B2": "B1", "B2L": "B1", "B2w": "B1", "B4v": "B4", "B7s": "B7", "B7b": "B7", "B7c": "B7",
               "B1Lm": "B1L"}


def benchmarks(quick: bool) -> dict[str, Callable[[], list[Result]]]:
    repeat = 1 if quick else 2
    return {
        "B3": lambda: [validate_vs_lint.result(repeat=5 if quick else 15)],
        "B4": lambda: scale_render.results(repeat=1 if quick else 3),
        "B1": lambda: throughput.measure(repeat, 600, 100, 100, large_batch=0 if quick else 400),
        "B1L": lambda: large_input.results(repeat=repeat),
        "B1a": lambda: cpu_vendors.results(repeat=1),
        "B5": lambda: [local_startup.result(repeat=repeat)],
        "B6": lambda: gpu.results(),
        "B7": lambda: [*image_builds.results(), container_startup.result(repeat=1 if quick else 2)],
        "B8": lambda: ending_latency.results(repeat=3 if quick else 10),
    }


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id (GenuineIntel, AuthenticAMD, ...), else the platform's machine name."""
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    return platform.machine() or "unknown"


def vendor_table(text: str, rows: list[Result], facts: dict[str, str], date: str, command: str) -> str:
    """The "B1 by CPU vendor" table with this run's B1 rows in its vendor's line (other vendors' lines kept)."""
    b1 = [r for r in rows if r.key in ("B1", "B1L", "B1a") and r.ratio is not None]
    if not b1 or BY_VENDOR not in text or BY_VENDOR_END not in text:
        return text
    vendor = cpu_vendor()
    begin, end = text.index(BY_VENDOR) + len(BY_VENDOR), text.index(BY_VENDOR_END)
    lines = [line for line in text[begin:end].strip("\n").splitlines() if line.strip()]
    header, kept = lines[:2], [line for line in lines[2:] if not line.startswith(f"| {vendor} |")]
    ratios = ", ".join(f"{r.key} {r.ratio:.2f}" for r in b1)
    kept.append(f"| {vendor} | {facts['CPU']} | {date} | {ratios} | `{command}` |")
    return text[:begin] + "\n" + "\n".join(header + sorted(kept)) + "\n" + text[end:]


def machine() -> dict[str, str]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )  # fmt: skip
    memory = next(
        (int(line.split()[1]) // (1024 * 1024) for line in Path("/proc/meminfo").read_text().splitlines()
         if line.startswith("MemTotal")),
        0,
    )  # fmt: skip
    tensorflow = next((f"{name} {metadata.version(name)}" for name in ("tensorflow", "tensorflow-cpu")
                       if _installed(name)), "not installed")  # fmt: skip
    helm = subprocess.run([HELM, "version", "--short"], capture_output=True, text=True).stdout.strip()
    gpus = gpu.gpu_names()
    return {
        "CPU": f"{cpu}, {cores()} cores usable ({os.cpu_count()} online)",
        "memory": f"{memory} GiB",
        "GPU": ", ".join(gpus) if gpus else "none",
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "TensorFlow": tensorflow,
        "helm": helm or HELM,
    }


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def table(rows: list[Result]) -> str:
    header = ("", "what", "figures", "goal", "verdict", "ratio")
    cells = [
        (r.key, r.title, r.figures, r.goal, r.verdict, "-" if r.ratio is None else f"{r.ratio:.2f}") for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *cells]) for i in range(len(header))]
    lines = [
        "  ".join(str(value).ljust(width) for value, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *cells]
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def markdown(rows: list[Result], facts: dict[str, str], command: str, seconds: float, date: str) -> str:
    out = [
        BEGIN,
        f"## Latest run: {date}",
        "",
        f"Command: `{command}` ({seconds / 60:.1f} min)",
        "",
        *[f"- {key}: {value}" for key, value in facts.items()],
        "",
        "| | what | figures | goal | verdict | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        figures = "; ".join([r.figures, *r.details]).replace("|", "/")
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        out.append(f"| {r.key} | {r.title} | {figures} | {r.goal} | {r.verdict} | {ratio} |")
    out.append(END)
    return "\n".join(out)


def history_line(rows: list[Result], facts: dict[str, str], date: str) -> str:
    ratios = ", ".join(f"{r.key} {'-' if r.ratio is None else f'{r.ratio:.2f}'}" for r in rows)
    return f"- {date}, {facts['CPU']}, GPU {facts['GPU']}: {ratios}"


def write_results(section: str, history: str, by_vendor: Callable[[str], str] = lambda text: text) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    text = by_vendor(text)
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: section, text, flags=re.S)
    else:
        heading_end = text.index("\n") + 1
        text = text[:heading_end] + "\n" + section + "\n" + text[heading_end:]
    if HISTORY not in text:
        text = text.rstrip("\n") + f"\n\n## History of bench/run.py\n\n{HISTORY}\n"
    text = text.replace(HISTORY, f"{HISTORY}\n{history}", 1)
    RESULTS.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated subset, e.g. B3,B4 (B1 also gives B2, B4 B4v)")
    parser.add_argument("--quick", action="store_true", help="one repeat each (a smoke run, noisier figures)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    options = parser.parse_args()
    if not Path(HELM).exists():
        print(f"bench: {HELM} is missing: run `make setup` first", file=sys.stderr)
        return 1
    plan = benchmarks(options.quick)
    aliases = {row.upper(): benchmark for row, benchmark in MEASURED_BY.items()}
    asked = {name.strip().upper() for name in options.only.split(",") if name.strip()}
    unknown = asked - set(plan) - set(aliases)
    if unknown:
        print(f"bench: unknown benchmark(s) {', '.join(sorted(unknown))}: choose from B1-B8", file=sys.stderr)
        return 2
    chosen = {aliases.get(name, name) for name in asked}
    started = time.perf_counter()
    rows: list[Result] = []
    for name, run in plan.items():
        if chosen and name not in chosen:
            continue
        also = sorted(row for row, benchmark in MEASURED_BY.items() if benchmark == name)
        print(f"running {name}{' (and ' + ', '.join(also) + ')' if also else ''} ...", flush=True)
        rows.extend(run())
    rows.sort(key=lambda r: r.key)
    seconds = time.perf_counter() - started
    print()
    print(table(rows))
    for r in rows:
        for line in r.details:
            print(f"  {r.key}: {line}")
    print(f"\n{len(rows)} rows in {seconds / 60:.1f} min")
    if not options.no_write:
        facts = machine()
        date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        command = shlex.join([".venv/bin/python", "bench/run.py", *sys.argv[1:]])
        write_results(markdown(rows, facts, command, seconds, date), history_line(rows, facts, date),
                      lambda text: vendor_table(text, rows, facts, date, command))
        print(f"updated {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
