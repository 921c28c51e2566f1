"""A `tfchart local` run's record in its run directory, `local-run.json`, written only by the tfchart that runs
it: the inputs the release was rendered from (the -f files and --set-file files copied beside it, so `tfchart
resume NAME --local` renders the same release again), that tfchart's pid and start time and the run's state.
`tfchart suspend NAME --local` asks a running one with SUSPEND_SIGNAL to suspend: it stops the chief first
(SIGTERM: the trainer saves a checkpoint at its next step boundary), then every other pod, records `suspended`
and exits with SUSPENDED_EXIT. The state lives in the run directory, so either command run again finishes it.

Who the run is: its tfchart holds the run directory (hold) from before its record says Running until it
exits; only then is its pid signalled, and where there is /proc (Linux; macOS: the lock alone) only if it started
when recorded. A record tfchart did not write so (a field missing or mistyped, pid <= 1) is refused in one line.
Run directories live under runs/ (`--clean` removes the old ones) beside one dataset cache per user, so MNIST is
downloaded once, not into every run directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tfchart.errors import TfchartError
from tfdcontract.runstate import FAILED, RUNNING, SUCCEEDED, SUSPENDED, now_text

STATE_FILE = "local-run.json"
INPUTS_DIR = "local-inputs"  # the copies of the -f and --set-file files
SUSPEND_SIGNAL = signal.SIGUSR1
SUSPENDED_EXIT = 75  # sysexits.h EX_TEMPFAIL: the run did not finish and can be continued
INTERRUPTED = "Interrupted"  # Ctrl-C, SIGTERM, --timeout (the others are a run's states: tfdcontract.runstate)
SUSPEND_TIMEOUT_SECONDS = 180.0  # the chief's grace (60 s by default), then the other pods' 10 s, and a margin
RUNS = Path("runs")  # runs/NAME-<time>, relative to the working directory
TYPES = {"str": str, "int": int, "bool": bool, "None": type(None), "dict": dict, "list": list}


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
    started: int | None = None  # the pid's start time (started()): with it, who the process is
    state: str = RUNNING
    since: str = ""
    step: int | None = None  # Suspended: the step of the checkpoint it continues from

    def save(self, run_dir: Path) -> None:
        temporary = run_dir / f".{STATE_FILE}.{os.getpid()}"
        temporary.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        temporary.replace(run_dir / STATE_FILE)  # atomic: a reader sees the old record or the new one

    def moved(self, state: str, step: int | None = None) -> LocalRun:
        """The record of this process's run, now in `state`."""
        return LocalRun(**{**asdict(self), "state": state, "step": step, "pid": os.getpid(), "started": started(
            os.getpid()), "since": now_text()})  # fmt: skip

    @classmethod
    def load(cls, run_dir: Path) -> LocalRun | None:
        """The record in run_dir, None where there is none; one tfchart did not write is refused, naming why."""
        path = run_dir / STATE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            data = f"unreadable ({error})"
        if problem := malformed(data):
            raise TfchartError(f"the run record {path} is malformed: {problem}", "tfchart local writes it: name "
                               "another run directory with --workdir, or remove this one by hand")  # fmt: skip
        return cls(**{**{f.name: data.get(f.name) for f in fields(cls)}, "sets": [tuple(s) for s in data["sets"]]})


def malformed(data: Any) -> str:
    """What makes a record's JSON one tfchart did not write (a field missing or of another type, pid <= 1), or ""."""
    if not isinstance(data, dict):
        return data if isinstance(data, str) else "not a JSON object"
    for item in fields(LocalRun):
        value = data.get(item.name, None if item.name == "started" else ...)  # started: new in issue 36
        kinds = tuple(TYPES[part.partition("[")[0]] for part in str(item.type).split(" | "))
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return f"{item.name} is {'missing' if value is ... else json.dumps(value)}, not {item.type}"
    wrong = {"pid": data["pid"] <= 1, "files": not all(isinstance(path, str) for path in data["files"]),
             "state": data["state"] not in (RUNNING, SUSPENDED, SUCCEEDED, FAILED, INTERRUPTED), "sets": not all(
                 isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s) for s in data["sets"])}
    return next((f"{key} is {json.dumps(data[key])}" for key, bad in wrong.items() if bad), "")


def dataset_cache() -> Path:
    """The per-user dataset directory local runs share: $XDG_CACHE_HOME/tf-distributed/datasets (or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).resolve() / "tf-distributed" / "datasets"


def hold(run_dir: Path) -> int | None:
    """Locks run_dir (flock: Linux, macOS) while the descriptor returned is open; None while another process does."""
    handle = os.open(run_dir, os.O_RDONLY)
    with contextlib.suppress(BlockingIOError):
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return handle
    os.close(handle)
    return None


def held(run_dir: Path) -> bool:
    """Whether a live process holds run_dir (hold): a `tfchart local` runs in it."""
    if (handle := hold(run_dir)) is not None:
        os.close(handle)
    return handle is None


def made_runs(name: str) -> list[Path]:
    """NAME's run directories under runs/ that tfchart made (runs/NAME-YYYYmmdd-HHMMSS with pod-logs/), oldest
    first; anything else there (another name, a --workdir of one's own) is left."""
    pattern = re.compile(rf"{re.escape(name)}-\d{{8}}-\d{{6}}")
    made = [path for path in RUNS.glob(f"{name}-*") if pattern.fullmatch(path.name) and not path.is_symlink()]
    return sorted(path for path in made if (path / "pod-logs").is_dir())


def started(pid: int) -> int | None:
    """When process `pid` started (/proc/PID/stat's 22nd field, ticks since boot), -1 once gone; None without /proc."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except OSError:
        return -1 if Path("/proc/self/stat").exists() else None


def keep_inputs(run_dir: Path, files: list[str],
                sets: list[tuple[str, str]]) -> tuple[list[str], list[tuple[str, str]]]:  # fmt: skip
    """Copies the -f and --set-file files into the run directory: the copies' names, the --set family naming them."""
    folder = run_dir / INPUTS_DIR
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copies = [f"{INPUTS_DIR}/values-{index}.yaml" for index in range(len(files))]
    for path, copy in zip(files, copies, strict=True):
        shutil.copyfile(path, run_dir / copy)
    kept = []
    for index, (flag, argument) in enumerate(sets):
        key, _, path = argument.partition("=")
        if flag == "--set-file" and path and Path(path).is_file():
            shutil.copyfile(path, folder / f"file-{index}")
            argument = f"{key}={(folder / f'file-{index}').resolve()}"
        kept.append((flag, argument))
    return copies, kept


def begin(name: str, run_dir: Path) -> threading.Event:
    """Makes this process run_dir's: SUSPEND_SIGNAL answered (the event) from before the directory exists, held."""
    requested = threading.Event()
    signal.signal(SUSPEND_SIGNAL, lambda signum, frame: requested.set())
    run_dir.mkdir(parents=True, exist_ok=True)
    if hold(run_dir) is None:
        raise TfchartError(f"a tfchart local runs in {run_dir} already", "wait for it to end, or suspend it with "
                           f"`tfchart suspend {name} --local --workdir {run_dir}`")  # fmt: skip
    return requested


def find(name: str, workdir: Path | None, verb: str) -> tuple[Path, LocalRun]:
    """The run directory (`workdir`, else NAME's newest in runs/) and its record, refused once the run has ended."""
    candidates = [workdir] if workdir else sorted((p for p in RUNS.glob(f"{name}-*") if p.is_dir()), reverse=True)
    for run_dir in candidates:
        if (run := LocalRun.load(run_dir)) is not None and (workdir or run.name == name):
            if run.state in (SUCCEEDED, FAILED):
                raise TfchartError(f"the local run of {run.name} in {run_dir.resolve()} has ended ({run.state}): "
                                   f"there is nothing to {verb}", f"train again with `tfchart local {run.name}`")
            return run_dir.resolve(), run
    where = f"in {workdir}" if workdir else f"under {RUNS}/{name}-<time> (here: {Path.cwd()})"
    raise TfchartError(f"no local run of {name} {where}: no {STATE_FILE}",
                       "start one with `tfchart local` (run directories are relative to where it ran), or name the "
                       "run directory with --workdir")


def request_suspend(name: str, run_dir: Path, run: LocalRun, timeout: float | None) -> LocalOutcome:
    """`tfchart suspend NAME --local`: asks the tfchart running `run` to suspend and waits until it has exited."""
    if run.state == SUSPENDED or (run.state == INTERRUPTED and not held(run_dir)):
        return LocalOutcome(name, str(run_dir), run.state, run.since, run.step, [], [f"the local run in {run_dir} is "
                            f"already {run.state.lower()} (since {run.since})"])  # fmt: skip
    if not (held(run_dir) and run.started == started(run.pid)):  # its tfchart is gone, the pid another process's
        raise TfchartError(f"the local run of {run.name} in {run_dir} is not running: no tfchart pid {run.pid} holds "
                           "it", f"continue it from its last checkpoint: `tfchart resume {run.name} --local "
                           f"--workdir {run_dir}`")  # fmt: skip
    with contextlib.suppress(ProcessLookupError):  # ended meanwhile: its record says how
        os.kill(run.pid, SUSPEND_SIGNAL)
    deadline = time.monotonic() + (SUSPEND_TIMEOUT_SECONDS if timeout is None else timeout)
    while held(run_dir):
        if time.monotonic() >= deadline:
            raise TfchartError(f"the local run of {run.name} is still stopping (tfchart pid {run.pid})",
                               f"run `tfchart suspend {run.name} --local --workdir {run_dir}` again to keep waiting")
        time.sleep(0.2)
    after = LocalRun.load(run_dir) or run
    if after.state != SUSPENDED:
        raise TfchartError(f"the local run of {run.name} ended ({after.state}) before it could be suspended",
                           f"see its summary in {run_dir}/status.json and {run_dir}/pod-logs/")
    return LocalOutcome(name, str(run_dir), after.state, after.since, after.step, [
        f"asked tfchart local (pid {run.pid}) to suspend the run in {run_dir}", "the chief stopped at a step boundary: "
        f"checkpoint saved at step {after.step}", "every other pod of the run stopped: no process of it is left"])


def clean(name: str, keep: int) -> list[str]:
    """`tfchart local --clean`: NAME's old run directories removed (held meanwhile) but a live run's or bad record's."""
    removed, kept, total, runs = [], [], 0, made_runs(name)
    for path in runs[: max(0, len(runs) - keep)]:
        if (handle := hold(path)) is None:
            kept.append(f"kept {path}: a tfchart local runs in it (a live run's directory is never removed)")
            continue
        try:
            LocalRun.load(path)
            size = sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())
            shutil.rmtree(path)
            removed.append(f"removed {path} ({size / 1e6:.1f} MB)")
            total += size
        except TfchartError as error:
            kept.append(f"kept {path}: {error.message}")
        except OSError as error:  # e.g. a file a container's user still owns
            raise TfchartError(f"cannot remove {path}: {error.strerror} ({error.filename})",
                               "remove it by hand (podman unshare rm -rf for a container's files)") from None
        finally:
            os.close(handle)
    newest = min(keep, len(runs))
    why = [f"the newest {newest}"] * bool(newest) + [f"{len(kept)} named above"] * bool(kept)
    return [*removed, *kept, f"{len(removed)} of {len(runs)} run directories {RUNS}/{name}-<time> removed "
            f"({total / 1e6:.1f} MB), {len(runs) - len(removed)} kept" + (f" ({' and '.join(why)})" if why else "")]


@dataclass
class LocalOutcome:
    """What `tfchart suspend NAME --local` did; `-o json` prints it as a dict."""

    release: str
    run_directory: str
    state: str
    since: str
    step: int | None
    actions: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
