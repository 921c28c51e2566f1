"""A local run is who holds its run directory (issue 36): `tfchart suspend/resume --local` and `tfchart local
--clean` act on a run only when its tfchart is alive and is the process its record names; a record tfchart did not
write so is refused in one line. Nothing else is signalled or removed.

A live run is stood in for by a process that holds the directory as `tfchart local` does (runstate.hold); the real
one, beside `--clean` and signalled the moment its directory exists, is in tests/e2e/test_local_identity.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO
from tfchart.local.runstate import LocalRun, started

TFCHART = str(REPO / ".venv" / "bin" / "tfchart")
DROP = object()  # a key left out of the record
HOLDER = ("import sys; from pathlib import Path; from tfchart.local.runstate import hold; "
          "print('held' if hold(Path(sys.argv[1])) is not None else 'busy', flush=True); sys.stdin.read()")  # fmt: skip


def write_record(run_dir: Path, **changes: Any) -> Path:
    """A run directory as `tfchart local` leaves it (pod-logs/, local-run.json), the record changed as given."""
    (run_dir / "pod-logs").mkdir(parents=True, exist_ok=True)
    sets = [("--set", "training.trainSteps=100")]  # valid values: a resume renders them before it looks further
    record = LocalRun("x", "default", {"engine": "process"}, None, None, False, [], sets, "spec", os.getpid(),
                      started(os.getpid()), "Running", "2026-11-28T09:00:00Z")  # fmt: skip
    data = {key: value for key, value in {**asdict(record), **changes}.items() if value is not DROP}
    (run_dir / "local-run.json").write_text(json.dumps(data), encoding="utf-8")
    return run_dir


def tfchart(*args: str, cwd: Path, contained: bool = False) -> subprocess.CompletedProcess[str]:
    """The CLI in its own session (a signal to its process group reaches it alone); `contained`: in a pid
    namespace of its own too, where even a signal to every process (pid -1) reaches nothing else."""
    prefix = ["unshare", "-Urpfm", "--mount-proc", "sh", "-c", '"$@"; exit $?', "sh"] if contained else []
    return subprocess.run([*prefix, TFCHART, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False, start_new_session=True)  # fmt: skip


@pytest.fixture
def spawn() -> Iterator[Any]:
    """Starts a process that prints one line once it is up and lives until its stdin closes; ended at the end."""
    started_here: list[subprocess.Popen[str]] = []

    def start(*argv: str) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, *argv], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)  # fmt: skip
        started_here.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() in ("up", "held"), argv
        return process

    yield start
    for process in started_here:
        if process.poll() is None:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(30)


def a_tfchart(spawn: Any) -> subprocess.Popen[str]:
    """An unrelated process with "tfchart" in its command line (an editor, `tfchart wait`): SIGUSR1 would end it."""
    return spawn("-c", "import sys; print('up', flush=True); sys.stdin.read()", "tfchart")  # type: ignore[no-any-return]


def pid_namespaces() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-Urpfm", "--mount-proc", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.parametrize("change, said", [
    ({"pid": 0}, "pid is 0"),
    ({"pid": -1}, "pid is -1"),
    ({"pid": 1}, "pid is 1"),
    ({"pid": "1234"}, 'pid is "1234", not int'),
    ({"pid": None}, "pid is null, not int"),
    ({"pid": True}, "pid is true, not int"),
    ({"pid": DROP}, "pid is missing, not int"),
    ({"sets": 5}, "sets is 5, not list[tuple[str, str]]"),
    ({"sets": ["--set"]}, 'sets is ["--set"]'),
    ({"files": [3]}, "files is [3]"),
    ({"state": "Paused"}, 'state is "Paused"'),
    ({"started": "yesterday"}, 'started is "yesterday", not int | None'),
], ids=["pid-0", "pid-minus-1", "pid-1", "pid-string", "pid-null", "pid-true", "no-pid", "sets-5", "sets-flat",
        "files-number", "state-unknown", "started-string"])  # fmt: skip
def test_a_malformed_record_is_refused_in_one_line_and_nothing_is_signalled(tmp_path: Path, change: dict[str, Any],
                                                                           said: str) -> None:  # fmt: skip
    if change.get("pid") in (0, -1) and not pid_namespaces():
        # never signalled outside a pid namespace of their own: a laptop without one skips, CI (root) must run them
        (pytest.fail if os.environ.get("CI") else pytest.skip)("signal 0 and -1 are tried only in a pid namespace of "
                                                                "their own (unshare -Urpfm)")  # fmt: skip
    run_dir = write_record(tmp_path / "run", **change)
    for command in ("suspend", "resume"):
        result = tfchart(command, "x", "--local", "--workdir", str(run_dir), cwd=tmp_path, contained=pid_namespaces())
        lines = result.stderr.splitlines()
        assert result.returncode == 1 and len(lines) == 2, (result.returncode, result.stderr)
        assert lines[0] == f"error: the run record {run_dir}/local-run.json is malformed: {said}"
        assert lines[1].startswith("  hint: tfchart local writes it")
    assert json.loads((run_dir / "local-run.json").read_text()).get("pid", DROP) == change.get("pid", os.getpid())


def test_a_record_that_is_not_json_is_refused_too(tmp_path: Path) -> None:
    run_dir = write_record(tmp_path / "run")
    (run_dir / "local-run.json").write_text('{"pid": 12')
    result = tfchart("suspend", "x", "--local", "--workdir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.startswith(f"error: the run record {run_dir}/local-run.json is "
                                                               "malformed: unreadable (")  # fmt: skip
    assert len(result.stderr.splitlines()) == 2


@pytest.mark.parametrize("its_start", ["its own", "another"])
def test_suspend_never_signals_a_process_that_took_a_dead_runs_pid(tmp_path: Path, spawn: Any, its_start: str) -> None:
    """The run's tfchart is gone (nothing holds its directory) and its pid now names another process with
    "tfchart" in its command line: whatever start time the record says, nothing is signalled."""
    victim = a_tfchart(spawn)
    begun = started(victim.pid) if its_start == "its own" else 12345
    run_dir = write_record(tmp_path / "run", pid=victim.pid, started=begun)
    result = tfchart("suspend", "x", "--local", "--workdir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[0] == (f"error: the local run of x in {run_dir} is not running: no tfchart pid "
                                             f"{victim.pid} holds it")  # fmt: skip
    assert victim.poll() is None  # SIGUSR1 would have ended it


def test_suspend_never_signals_a_pid_that_is_not_the_holders(tmp_path: Path, spawn: Any) -> None:
    """A live tfchart holds the directory, but the record names another process (a start time that is not its):
    that process is not signalled."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spawn("-c", HOLDER, str(run_dir))
    victim = a_tfchart(spawn)
    write_record(run_dir, pid=victim.pid, started=(started(victim.pid) or 0) - 1)
    result = tfchart("suspend", "x", "--local", "--workdir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1 and "is not running: no tfchart pid" in result.stderr, result.stderr
    assert victim.poll() is None


def test_resume_and_a_second_local_refuse_a_held_run_directory(tmp_path: Path, spawn: Any) -> None:
    run_dir = write_record(tmp_path / "run", state="Suspended", step=40)
    spawn("-c", HOLDER, str(run_dir))
    result = tfchart("resume", "x", "--local", "--workdir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.splitlines() == [
        f"error: a tfchart local runs in {run_dir} already",
        f"  hint: wait for it to end, or suspend it with `tfchart suspend x --local --workdir {run_dir}`"]
    assert "resuming" not in result.stdout
    result = tfchart("local", "x", "--workdir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr
    assert result.stderr.splitlines()[0] == f"error: a tfchart local runs in {run_dir} already"
    assert sorted(path.name for path in run_dir.iterdir()) == ["local-run.json", "pod-logs"]  # nothing written


def test_clean_keeps_a_live_run_and_a_malformed_record_and_says_why(tmp_path: Path, spawn: Any) -> None:
    runs = tmp_path / "runs"
    live = write_record(runs / "x-20261101-120000")  # the oldest: --keep-runs 0 would remove it first
    holder = spawn("-c", HOLDER, str(live))
    broken = write_record(runs / "x-20261102-120000", pid=0)
    victim = a_tfchart(spawn)
    dead = write_record(runs / "x-20261103-120000", pid=victim.pid)  # Running, its pid another's: over
    plain = runs / "x-20261104-120000"  # no record (a run that failed before it wrote one)
    (plain / "pod-logs").mkdir(parents=True)
    result = tfchart("local", "x", "--clean", "--keep-runs", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "removed runs/x-20261103-120000 (0.0 MB)",
        "removed runs/x-20261104-120000 (0.0 MB)",
        "kept runs/x-20261101-120000: a tfchart local runs in it (a live run's directory is never removed)",
        "kept runs/x-20261102-120000: the run record runs/x-20261102-120000/local-run.json is malformed: pid is 0",
        "2 of 4 run directories runs/x-<time> removed (0.0 MB), 2 kept (2 named above)",
    ]
    assert live.is_dir() and broken.is_dir() and not dead.exists() and not plain.exists()
    assert holder.poll() is None and victim.poll() is None
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(30)  # the run is over: the next --clean removes its directory
    assert tfchart("local", "x", "--clean", "--keep-runs", "0", cwd=tmp_path).returncode == 0
    assert not live.exists() and broken.is_dir()


def test_suspend_signals_the_tfchart_that_holds_the_run_and_is_the_pid_recorded(tmp_path: Path, spawn: Any) -> None:
    """The stand-in answers SUSPEND_SIGNAL as `tfchart local` does: it records Suspended and exits."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    answer = ("import signal, sys; from pathlib import Path; from tfchart.local.runstate import hold; "
              "from tfchart.local.runstate import LocalRun; run_dir = Path(sys.argv[1]); hold(run_dir); "
              "signal.signal(signal.SIGUSR1, lambda *_: (LocalRun.load(run_dir).moved('Suspended', 40).save(run_dir), "
              "sys.exit(75))); print('up', flush=True); sys.stdin.read()")  # fmt: skip
    run = spawn("-c", answer, str(run_dir))
    write_record(run_dir, pid=run.pid, started=started(run.pid))
    result = tfchart("suspend", "x", "--local", "--workdir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"✓ asked tfchart local (pid {run.pid}) to suspend the run in {run_dir}" in result.stdout
    assert "checkpoint saved at step 40" in result.stdout and run.wait(30) == 75


@pytest.mark.parametrize("state", ["Suspended", "Interrupted"])
def test_suspend_of_a_run_already_stopped_changes_nothing(tmp_path: Path, spawn: Any, state: str) -> None:
    victim = a_tfchart(spawn)  # its pid, the record's: a stopped run's tfchart is not asked again
    run_dir = write_record(tmp_path / "run", pid=victim.pid, state=state, step=40)
    result = tfchart("suspend", "x", "--local", "--workdir", str(run_dir), "-o", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    since = "2026-11-28T09:00:00Z"
    assert json.loads(result.stdout) == {
        "release": "x", "run_directory": str(run_dir), "state": state, "since": since, "step": 40, "actions": [],
        "unchanged": [f"the local run in {run_dir} is already {state.lower()} (since {since})"],
    }
    assert victim.poll() is None


@pytest.mark.parametrize("state", ["Succeeded", "Failed"])
def test_a_run_that_has_ended_is_neither_suspended_nor_resumed(tmp_path: Path, state: str) -> None:
    run_dir = write_record(tmp_path / "run", state=state)
    for verb in ("suspend", "resume"):
        result = tfchart(verb, "x", "--local", "--workdir", str(run_dir), cwd=tmp_path)
        assert result.returncode == 1 and result.stderr.splitlines()[0] == (
            f"error: the local run of x in {run_dir} has ended ({state}): there is nothing to {verb}")
