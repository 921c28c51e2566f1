"""A real `tfchart local` run is who holds its run directory (issue 36): `tfchart local --clean --keep-runs 0`
beside it keeps its directory and the run finishes with its checkpoints; a suspension asked for the moment its
directory exists (before its record says Running) suspends it, never kills it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chartlib import REPO
from tests.e2e.conftest import E2E_VALUES
from tests.e2e.test_local import pod_process
from tfdcontract import parse_step_line

pytestmark = pytest.mark.slow

TFCHART = str(REPO / ".venv" / "bin" / "tfchart")
STEPS = 120
RUN = ["-f", str(E2E_VALUES), "--set", "training.strategy=single_device", "--set", f"training.trainSteps={STEPS}",
       "--set", "training.checkpointEverySteps=40", "--set", "tensorboard.enabled=false"]  # fmt: skip


class Run:
    """`tfchart local NAME` started in `cwd`, its output collected as it comes."""

    def __init__(self, name: str, cwd: Path) -> None:
        self.name, self.cwd = name, cwd
        self.printed: list[str] = []
        self.process = subprocess.Popen([TFCHART, "local", name, *RUN], cwd=cwd, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)  # fmt: skip
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.printed.append(line)

    def wait_until(self, what: str, found: Callable[[Path], bool], timeout: float = 300) -> Path:
        """The run directory once `found(run_dir)` holds (it is polled: the run's files are the events)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None and time.monotonic() < deadline, what + "".join(self.printed[-40:])
            for run_dir in self.cwd.glob(f"runs/{self.name}-*"):
                if found(run_dir):
                    return run_dir
            time.sleep(0.05)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        if run.process.poll() is None:
            run.process.send_signal(signal.SIGINT)
            run.process.wait(60)


def record(run_dir: Path) -> dict[str, object]:
    try:
        return json.loads((run_dir / "local-run.json").read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return {}


def training(run_dir: Path) -> bool:
    chief_log = run_dir / "pod-logs" / f"{run_dir.name.rsplit('-', 2)[0]}-tf-distributed-chief.log"
    lines = chief_log.read_text().splitlines() if chief_log.is_file() else []
    return record(run_dir).get("state") == "Running" and any(parse_step_line(line) for line in lines)


def test_clean_beside_a_live_run_keeps_it_and_it_finishes_with_its_checkpoints(tmp_path: Path, runs: list[Run]) -> None:
    old = tmp_path / "runs" / "idt-20200101-000000"  # a run that is over: --clean removes it
    (old / "pod-logs").mkdir(parents=True)
    run = Run("idt", tmp_path)
    runs.append(run)
    live = run.wait_until("training", training)
    chief = pod_process(live, "idt-tf-distributed-chief")
    os.kill(chief, signal.SIGSTOP)  # mid-run for as long as --clean takes, however fast this machine trains
    try:
        result = subprocess.run([TFCHART, "local", "idt", "--clean", "--keep-runs", "0"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    finally:
        os.kill(chief, signal.SIGCONT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "removed runs/idt-20200101-000000 (0.0 MB)",
        f"kept runs/{live.name}: a tfchart local runs in it (a live run's directory is never removed)",
        "1 of 2 run directories runs/idt-<time> removed (0.0 MB), 1 kept (1 named above)",
    ]
    assert run.process.wait(600) == 0, "".join(run.printed[-40:])
    assert record(live)["state"] == "Succeeded"
    checkpoints = {path.name for path in (live / "checkpoints").iterdir()}
    assert "checkpoint" in checkpoints and f"ckpt-{STEPS}.index" in checkpoints, sorted(checkpoints)
    assert not old.exists()


def test_a_suspension_asked_before_the_record_says_running_suspends_the_run(tmp_path: Path, runs: list[Run]) -> None:
    """SIGUSR1 the moment the run directory exists: tfchart local answers it from before it makes the directory,
    so the run is suspended (exit 75, its record Suspended) where it would have been killed by the signal, and
    `tfchart resume --local` runs it to its end."""
    run = Run("early", tmp_path)
    runs.append(run)
    run_dir = run.wait_until("the run directory", Path.is_dir)
    os.kill(run.process.pid, signal.SIGUSR1)
    assert run.process.wait(300) == 75, "".join(run.printed[-40:])
    assert record(run_dir)["state"] == "Suspended"
    assert "Continue with: tfchart resume early --local" in "".join(run.printed)
    resumed = subprocess.run([TFCHART, "resume", "early", "--local"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600, check=False)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr
    assert f"resuming the local run of early in {run_dir.resolve()} from its last checkpoint" in resumed.stdout
    assert record(run_dir)["state"] == "Succeeded"
