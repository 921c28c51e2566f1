"""A `tfchart local` run's record in its run directory, `local-run.json`, written only by the tfchart that runs
it: the inputs the release was rendered from (the -f files and --set-file files copied beside it, so `tfchart
resume NAME --local` renders the same release again), that tfchart's pid and the run's state. `tfchart suspend
NAME --local` finds a running one and asks it with SUSPEND_SIGNAL to suspend: it stops the chief first (SIGTERM:
the trainer saves a checkpoint at its next step boundary), then every other pod, records `suspended` and exits
with SUSPENDED_EXIT. The state lives in the run directory, so either command run again finishes the job.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tfchart.errors import TfchartError
from tfchart.local.rundirs import RUNS

STATE_FILE = "local-run.json"
INPUTS_DIR = "local-inputs"  # the copies of the -f and --set-file files
SUSPEND_SIGNAL = signal.SIGUSR1
SUSPENDED_EXIT = 75  # sysexits.h EX_TEMPFAIL: the run did not finish and can be continued
RUNNING, SUSPENDED, SUCCEEDED, FAILED, INTERRUPTED = "Running", "Suspended", "Succeeded", "Failed", "Interrupted"
SUSPEND_TIMEOUT_SECONDS = 180.0  # the chief's grace (60 s by default), then the other pods' 10 s, and a margin


@dataclass
class LocalRun:
    """What local-run.json holds."""

    name: str
    namespace: str
    options: dict[str, Any]  # the `tfchart local` flags to run with again: engine, follow_logs, ...
    chart: str | None  # --chart as given (None: $TFCHART_CHART or the chart tfchart ships)
    chart_version: str | None
    plain_http: bool
    files: list[str]  # the -f files' copies, relative to the run directory
    sets: list[tuple[str, str]]  # the --set family, --set-file paths pointing at copies
    run_spec: str = ""  # tf-distributed.io/run-spec of the render: a resume must render the same run
    pid: int = 0
    state: str = RUNNING
    since: str = ""
    step: int | None = None  # Suspended: the step of the checkpoint it continues from

    def save(self, run_dir: Path) -> None:
        temporary = run_dir / f".{STATE_FILE}.{os.getpid()}"
        temporary.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        temporary.replace(run_dir / STATE_FILE)  # atomic: a reader sees the old record or the new one

    def moved(self, state: str, step: int | None = None) -> LocalRun:
        return LocalRun(**{**asdict(self), "state": state, "since": now(), "step": step})

    @classmethod
    def load(cls, run_dir: Path) -> LocalRun | None:
        try:
            data = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
            known = {f.name for f in fields(cls)}
            run = cls(**{key: value for key, value in data.items() if key in known})
        except (OSError, ValueError, TypeError):
            return None
        run.sets = [(str(flag), str(argument)) for flag, argument in run.sets]
        return run

    @property
    def alive(self) -> bool:
        """Whether the tfchart that runs it still does (its pid answers and, where /proc tells, is a tfchart)."""
        try:
            os.kill(self.pid, 0)
        except (ProcessLookupError, PermissionError, ValueError, OverflowError):
            return False
        cmdline = Path(f"/proc/{self.pid}/cmdline")
        return not cmdline.parent.exists() or b"tfchart" in cmdline.read_bytes()


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def keep_inputs(run_dir: Path, files: list[str],
                sets: list[tuple[str, str]]) -> tuple[list[str], list[tuple[str, str]]]:  # fmt: skip
    """Copies the -f files and --set-file files into the run directory; their names there, and the --set family
    pointing at the copies."""
    folder = run_dir / INPUTS_DIR
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copies = []
    for index, path in enumerate(files):
        shutil.copyfile(path, folder / f"values-{index}.yaml")
        copies.append(f"{INPUTS_DIR}/values-{index}.yaml")
    kept = []
    for index, (flag, argument) in enumerate(sets):
        key, _, path = argument.partition("=")
        if flag == "--set-file" and path and Path(path).is_file():
            shutil.copyfile(path, folder / f"file-{index}")
            argument = f"{key}={(folder / f'file-{index}').resolve()}"
        kept.append((flag, argument))
    return copies, kept


def find(name: str, workdir: Path | None) -> tuple[Path, LocalRun]:
    """The run directory (`workdir`, else NAME's newest under runs/ with a record) and its record."""
    candidates = [workdir] if workdir else sorted((p for p in RUNS.glob(f"{name}-*") if p.is_dir()), reverse=True)
    for run_dir in candidates:
        run = LocalRun.load(run_dir)
        if run is not None and (workdir or run.name == name):
            return run_dir.resolve(), run
    where = f"in {workdir}" if workdir else f"under {RUNS}/{name}-<time> (here: {Path.cwd()})"
    raise TfchartError(f"no local run of {name} {where}: no {STATE_FILE}",
                       "start one with `tfchart local` (run directories are relative to where it ran), or name the "
                       "run directory with --workdir")


def resumable(run_dir: Path, run: LocalRun) -> LocalRun:
    """The record of a run `tfchart resume --local` may start again: suspended, or stopped without an ending."""
    if run.state == RUNNING and run.alive:
        raise TfchartError(f"the local run of {run.name} in {run_dir} is running (tfchart pid {run.pid}): it is not "
                           "suspended", f"suspend it with `tfchart suspend {run.name} --local --workdir {run_dir}`")
    if run.state in (SUCCEEDED, FAILED):
        raise TfchartError(f"the local run of {run.name} in {run_dir} has ended ({run.state}): there is nothing to "
                           "resume", f"train again with `tfchart local {run.name}` (a new run directory)")
    return run


def request_suspend(run_dir: Path, run: LocalRun, timeout: float | None,
                    sleep: Callable[[float], None] = time.sleep) -> tuple[LocalRun, list[str]]:  # fmt: skip
    """Asks the tfchart running `run` to suspend and waits until it has exited; the new record and what was done."""
    if run.state == SUSPENDED or (run.state == INTERRUPTED and not run.alive):
        return run, []
    if run.state in (SUCCEEDED, FAILED):
        raise TfchartError(f"the local run of {run.name} in {run_dir} has ended ({run.state}): there is nothing to "
                           "suspend", f"train again with `tfchart local {run.name}`")
    if not run.alive:
        raise TfchartError(f"the local run of {run.name} in {run_dir} is not running: its tfchart (pid {run.pid}) is "
                           "gone", f"continue it from its last checkpoint: `tfchart resume {run.name} --local "
                           f"--workdir {run_dir}`")  # fmt: skip
    os.kill(run.pid, SUSPEND_SIGNAL)
    done = [f"asked tfchart local (pid {run.pid}) to suspend the run in {run_dir}"]
    deadline = time.monotonic() + (SUSPEND_TIMEOUT_SECONDS if timeout is None else timeout)
    while run.alive:
        if time.monotonic() >= deadline:
            raise TfchartError(f"the local run of {run.name} is still stopping (tfchart pid {run.pid})",
                               f"run `tfchart suspend {run.name} --local --workdir {run_dir}` again to keep waiting")
        sleep(0.2)
    after = LocalRun.load(run_dir) or run
    if after.state != SUSPENDED:
        raise TfchartError(f"the local run of {run.name} ended ({after.state}) before it could be suspended",
                           f"see its summary in {run_dir}/status.json and {run_dir}/pod-logs/")
    return after, [*done, f"the chief stopped at a step boundary: checkpoint saved at step {after.step}",
                   "every other pod of the run stopped: no process of it is left"]


@dataclass
class LocalOutcome:
    """What `tfchart suspend NAME --local` did; `-o json` prints as_dict()."""

    release: str
    run_directory: str
    state: str
    since: str
    step: int | None
    actions: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
