"""`tfchart local` takes the values every other command takes: -f, the whole --set family and --policy; a
policy violation stops the run before any directory is made or any process started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.chartlib import REPO

POLICY = REPO / "tests" / "fixtures" / "policy" / "rules" / "downloads.allowed" / "policy.yaml"


def tfchart(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfchart", "local", *args, "--workdir", str(tmp_path / "run")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip


def test_local_takes_set_json_set_file_and_policy(tmp_path: Path) -> None:
    help_text = subprocess.run([sys.executable, "-m", "tfchart", "local", "--help"], cwd=REPO, capture_output=True,
                               text=True, timeout=60).stdout  # fmt: skip
    for flag in ("--set-json", "--set-file", "--policy"):
        assert flag in help_text, flag


def test_a_policy_violation_stops_a_local_run_before_it_starts(tmp_path: Path) -> None:
    result = tfchart(tmp_path, "-f", "values/cpu.yaml", "--set-json", 'training={"download": true}',
                     "--policy", str(POLICY))  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "downloads.allowed" in result.stdout + result.stderr
    assert not (tmp_path / "run").exists()


def test_set_json_and_set_file_reach_the_render(tmp_path: Path) -> None:
    """Values the --set family gives that helm refuses are refused as validate refuses them, named."""
    args_file = tmp_path / "args.txt"
    args_file.write_text("not a list")
    result = tfchart(tmp_path, "-f", "values/cpu.yaml", "--set-json", "worker.replicas=-3",
                     "--set-file", f"training.extraArgs={args_file}")  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    output = result.stdout + result.stderr
    assert "worker.replicas" in output and "training.extraArgs" in output
    assert not (tmp_path / "run").exists()
