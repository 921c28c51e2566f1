"""`tfchart local --clean`: NAME's old run directories under runs/ go, the newest --keep-runs and anything
tfchart did not make stay."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.chartlib import REPO


def make_run(root: Path, name: str, logs: bool = True) -> Path:
    run = root / "runs" / name
    (run / "pod-logs" if logs else run).mkdir(parents=True)
    (run / "status.json").write_text("{}" + " " * 998)  # 1 kB
    return run


def clean(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / ".venv" / "bin" / "tfchart"), "local", "--clean", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_clean_keeps_the_newest_runs_of_the_name_and_what_it_did_not_make(tmp_path: Path) -> None:
    old = [make_run(tmp_path, f"local-2026110{day}-120000") for day in (1, 2, 3)]
    newest = [make_run(tmp_path, "local-20261104-090000"), make_run(tmp_path, "local-20261104-100000")]
    others = [make_run(tmp_path, "mnist-20261101-120000"), make_run(tmp_path, "local-mine"),
              make_run(tmp_path, "local-20261031-120000", logs=False)]  # fmt: skip
    result = clean(tmp_path, "--keep-runs", "2")
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == sorted(p.name for p in [*newest, *others])
    assert result.stdout.splitlines()[-1] == ("3 of 5 run directories runs/local-<time> removed (0.0 MB), "
                                              "2 kept (the newest 2)")  # fmt: skip
    assert [line.split()[1] for line in result.stdout.splitlines()[:-1]] == [f"runs/{p.name}" for p in old]

    assert clean(tmp_path, "mnist", "--keep-runs", "0").returncode == 0  # NAME picks the runs
    assert not others[0].exists() and all(path.exists() for path in newest)
    assert clean(tmp_path).returncode == 0  # by default the newest run stays
    assert [path.exists() for path in newest] == [False, True]


def test_clean_refuses_a_negative_count(tmp_path: Path) -> None:
    result = clean(tmp_path, "--keep-runs", "-1")
    assert result.returncode == 2 and "--keep-runs" in result.stderr
