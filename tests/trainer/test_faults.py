"""Fault behaviour under the parameter-server strategy: kill -9 a worker, the chief, a ps."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.trainer.conftest import (
    COMMON,
    Proc,
    Procs,
    ps_cluster,
    read_status,
    tf_config,
)

pytestmark = pytest.mark.slow

STEPS = 400


def _args(root: Path, steps: int = STEPS) -> list[str]:
    return ["--strategy=parameter_server", *COMMON, f"--storage-root={root}",
            f"--train-steps={steps}", "--checkpoint-every-steps=100", "--cleanup=keep"]


def _start_servers(
    procs: Procs, cluster: dict[str, list[str]], args: list[str]
) -> dict[str, Proc]:
    started = {"ps0": procs.trainer("ps0", args, tf_config(cluster, "ps", 0))}
    for i in range(len(cluster["worker"])):
        started[f"worker{i}"] = procs.trainer(f"worker{i}", args, tf_config(cluster, "worker", i))
    return started


def _latest_checkpoint_step(root: Path) -> int:
    text = (root / "checkpoints" / "checkpoint").read_text()
    m = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M)
    assert m, text
    return int(m.group(1))


def _assert_completed(root: Path) -> None:
    st = read_status(root)
    assert st["state"] == "Succeeded", st
    assert st["step"] >= STEPS
    assert st["accuracy"] >= 0.95, st


def _step_lines(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"^step (\d+),", text, re.M)]


def test_worker_killed_and_restarted_is_absorbed(procs: Procs, tmp_path: Path) -> None:
    """kill -9 worker1 and restart it under the same address; later kill -9 worker0 too:
    step lines logged while worker0 is down can only come from the restarted worker1,
    which proves it rejoined. worker0 is then restarted (as its StatefulSet would)."""
    root = tmp_path / "data"
    cluster = ps_cluster(2)
    steps = 2000  # long enough for restarted processes to import TensorFlow and rejoin
    args = _args(root, steps)
    servers = _start_servers(procs, cluster, args)
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0))
    chief.wait_for(r"^step 40,", 150)
    servers["worker1"].kill9()
    time.sleep(1)
    w1 = procs.trainer("worker1-restarted", args, tf_config(cluster, "worker", 1))
    w1.wait_for(r"worker:1 server listening", 120)
    time.sleep(8)  # let the coordinator re-add worker1 while worker0 is still up
    assert chief.alive(), "training finished before the restarted worker was up"
    servers["worker0"].kill9()
    seen = len(_step_lines(chief.output()))
    deadline = time.monotonic() + 60
    while len(_step_lines(chief.output())) < seen + 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(_step_lines(chief.output())) >= seen + 3, (
        "no progress with worker0 down: the restarted worker1 did not rejoin\n" + chief.tail()
    )
    procs.trainer("worker0-restarted", args, tf_config(cluster, "worker", 0))
    rc = chief.wait(240)
    assert rc == 0, chief.tail()
    out = chief.output()
    assert "resumed from checkpoint" not in out  # the coordinator absorbed both losses
    assert "Worker /job:worker/replica:0/task:1 failed" in out
    st = read_status(root)
    assert st["state"] == "Succeeded" and st["step"] >= steps, st
    assert st["accuracy"] >= 0.95, st


def test_chief_killed_resumes_from_checkpoint(procs: Procs, tmp_path: Path) -> None:
    root = tmp_path / "data"
    cluster = ps_cluster(2)
    args = _args(root)
    _start_servers(procs, cluster, args)
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0))
    chief.wait_for(r"saved checkpoint for step 200", 150)
    chief.kill9()
    assert read_status(root)["state"] == "Running"
    last = _latest_checkpoint_step(root)
    assert last >= 200
    chief2 = procs.trainer("chief-restarted", args, tf_config(cluster, "chief", 0))
    m = chief2.wait_for(r"resumed from checkpoint at step (\d+)", 120)
    assert int(m.group(1)) == last > 0
    rc = chief2.wait(180)
    assert rc == 0, chief2.tail()
    steps = [int(s) for s in re.findall(r"^step (\d+),", chief2.output(), re.M)]
    assert steps[0] > last  # never restarted from step 0
    _assert_completed(root)


def test_ps_killed_fails_chief_cleanly_then_restart_resumes(procs: Procs, tmp_path: Path) -> None:
    root = tmp_path / "data"
    cluster = ps_cluster(2)
    args = _args(root)
    servers = _start_servers(procs, cluster, args)
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0))
    chief.wait_for(r"saved checkpoint for step 100", 150)
    ps = procs.all[0]
    assert servers["ps0"] is ps
    ps.kill9()
    rc = chief.wait(120)
    assert rc != 0
    out = chief.output()
    errors = [ln for ln in out.splitlines() if ln.startswith("trainer: error:")]
    assert len(errors) == 1, out[-3000:]
    assert "lost ps:0" in errors[0] and "resume from the checkpoint" in errors[0], errors[0]
    assert "Traceback" not in out
    st = read_status(root)
    assert st["state"] == "Failed" and "lost ps:0" in st["message"]
    last = _latest_checkpoint_step(root)
    # the Job restarts the chief; the StatefulSet restarts the ps under the same address
    procs.trainer("ps0-restarted", args, tf_config(cluster, "ps", 0))
    chief2 = procs.trainer("chief-restarted", args, tf_config(cluster, "chief", 0))
    m = chief2.wait_for(r"resumed from checkpoint at step (\d+)", 150)
    assert int(m.group(1)) == last > 0
    rc = chief2.wait(180)
    assert rc == 0, chief2.tail()
    _assert_completed(root)
