"""`tfchart resume NAME --local` renders the release again from the inputs its record keeps, and refuses a run the
release no longer renders (its run-spec changed) before anything is started or recorded."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

from tests.chartlib import REPO
from tfchart.local.runstate import LocalRun

OPTIONS = {"engine": "process", "host_network": True, "allow_privileged": False, "keep_tensorboard": False,
           "follow_logs": False}  # fmt: skip


def test_resume_refuses_a_run_whose_release_no_longer_renders_the_same_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "pod-logs").mkdir(parents=True)
    record = LocalRun("x", "default", OPTIONS, None, None, False, [], [("--set", "training.trainSteps=100")],
                      "another-run-spec", 4242, None, "Suspended", "2026-11-28T09:00:00Z", 40)  # fmt: skip
    (run_dir / "local-run.json").write_text(json.dumps(asdict(record)), encoding="utf-8")
    result = subprocess.run([str(REPO / ".venv" / "bin" / "tfchart"), "resume", "x", "--local", "--workdir",
                             str(run_dir)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1 and result.stderr.splitlines() == [
        f"error: the release no longer renders the run suspended in {run_dir} (its run-spec changed: the chart, or a "
        "file it was rendered from)",
        "  hint: restore the chart it ran with, or start a new run: `tfchart local x ...`"]
    assert json.loads((run_dir / "local-run.json").read_text())["state"] == "Suspended"  # nothing recorded
    assert sorted(path.name for path in (run_dir / "pod-logs").iterdir()) == []  # nothing started
