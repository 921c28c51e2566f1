"""`tfchart local` end to end: the README's first command, and a Ctrl-C that leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.chartlib import REPO

pytestmark = pytest.mark.slow


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline or text in environ:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def test_readme_first_command_completes(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    result = subprocess.run(
        ["make", "--no-print-directory", "run", f"ARGS=--workdir {workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "✓ training Succeeded" in result.stdout
    status = json.loads((workdir / "status.json").read_text())
    assert status["state"] == "Succeeded" and status["accuracy"] >= 0.95
    assert (workdir / "export" / "mnist" / "1" / "saved_model.pb").is_file()
    for pod in (
        "local-tf-distributed-ps-0",
        "local-tf-distributed-worker-1",
        "local-tf-distributed-chief",
        "local-tf-distributed-tensorboard-0",
    ):
        assert re.search(rf"^{pod}\s+\|", result.stdout, re.MULTILINE), pod
    assert "TensorFlow Serving cannot run on this machine" in result.stdout
    assert processes_mentioning(str(workdir)) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupting_tfchart_local_leaves_no_process(tmp_path: Path, sig: signal.Signals) -> None:
    workdir = tmp_path / "run"
    command = [
        str(REPO / ".venv" / "bin" / "tfchart"),
        "local",
        "-f",
        "values/cpu.yaml",
        "-f",
        "tests/fixtures/e2e-values.yaml",
        "--set",
        "training.trainSteps=5000",
        "--workdir",
        str(workdir),
    ]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 240
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if re.search(r"chief\s+\| step \d+, loss", line):
                break
            assert time.monotonic() < deadline, "".join(seen[-50:])
        assert len(processes_mentioning(str(workdir))) >= 5  # tfchart + ps + 2 workers + chief + tensorboard
        proc.send_signal(sig)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (130, 1), proc.returncode
    time.sleep(0.5)
    assert processes_mentioning(str(workdir)) == []
