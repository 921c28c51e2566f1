"""Multi-process training over real TensorFlow gRPC on 127.0.0.1 (digits, offline)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.trainer.conftest import COMMON, PS_STEPS, Procs, PsRun, free_ports, read_status

pytestmark = pytest.mark.slow

STEP_LINE = re.compile(
    r"^step (\d+), loss = (\d+\.\d{4}) \((\d+\.\d) examples/sec; (\d+\.\d{3}) sec/batch\)$", re.M
)
TIME_LIMIT = 180.0  # catches a hang: no guess of how long a run takes
MIN_ACCURACY = 0.95


def _assert_success(root: Path, strategy: str, steps: int) -> dict[str, object]:
    st = read_status(root)
    assert st["state"] == "Succeeded", st
    assert st["strategy"] == strategy
    assert st["step"] >= steps and st["train_steps"] == steps
    assert st["accuracy"] >= MIN_ACCURACY, st
    assert st["export_path"] and Path(str(st["export_path"])).is_dir()
    return st


def test_parameter_server_async_training(ps_run: PsRun) -> None:
    out = ps_run.chief.output()
    assert ps_run.chief.popen.returncode == 0, ps_run.chief.tail()
    st = _assert_success(ps_run.root, "parameter_server", PS_STEPS)
    assert st["step"] == PS_STEPS  # every scheduled step applied exactly once
    steps = [int(m.group(1)) for m in STEP_LINE.finditer(out)]
    assert steps and steps[-1] == PS_STEPS, out[-2000:]
    assert "no checkpoint in" in out
    for i in range(1, PS_STEPS // 100 + 1):
        assert (ps_run.root / "checkpoints" / f"ckpt-{i * 100}.index").exists() or i < 2
    # ps and workers are long-running servers: still up after the chief finished
    assert all(p.alive() for p in ps_run.servers)
    # variables lived on the ps: the workers never wrote to shared storage
    assert "Traceback" not in out


def test_evaluator_follows_checkpoints_and_exits_after_success(ps_run: PsRun) -> None:
    out = ps_run.evaluator.output()
    assert ps_run.evaluator.popen.returncode == 0, ps_run.evaluator.tail()
    evaluated = [int(s) for s in re.findall(r"evaluated checkpoint at step (\d+)", out)]
    assert evaluated and evaluated[-1] == PS_STEPS, out[-2000:]
    assert evaluated == sorted(evaluated)
    assert list((ps_run.root / "logs" / "eval").glob("events.out.tfevents.*"))


def test_multi_worker_mirrored_sync_training(procs: Procs, tmp_path: Path) -> None:
    """Chief + 1 worker (the chart's {chief:[1], worker:[W]} topology with W=1)."""
    root = tmp_path / "data"
    ports = free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    args = ["--strategy=multi_worker_mirrored", *COMMON, f"--storage-root={root}",
            "--train-steps=300", "--checkpoint-every-steps=100", "--checkpoint-every-secs=5"]
    worker = procs.trainer("worker0", args, {"cluster": cluster,
                                             "task": {"type": "worker", "index": 0}})
    chief = procs.trainer("chief", args, {"cluster": cluster,
                                          "task": {"type": "chief", "index": 0}})
    rc = chief.wait(TIME_LIMIT)
    assert rc == 0, chief.tail()
    _assert_success(root, "multi_worker_mirrored", 300)
    out = chief.output()
    assert re.search(r"multi_worker_mirrored: 2 replica\(s\) in sync", out), out[-2000:]
    assert [int(m.group(1)) for m in STEP_LINE.finditer(out)][-1] == 300
    # the worker trained in lockstep and then idles (a StatefulSet pod must not exit)
    worker.wait_for(r"finished its steps", TIME_LIMIT)
    # it never wrote to the shared checkpoint directory (only the chief does)
    assert not STEP_LINE.search(worker.output())


def test_sync_batch_not_divisible_by_the_replicas_is_a_configuration_error(procs: Procs, tmp_path: Path) -> None:
    """The global batch is split evenly over the replicas in sync: 64 over chief + 2 workers used to
    end in `internal error: ValueError` from Keras; now every task exits 2 naming the fix."""
    root = tmp_path / "data"
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]}
    args = ["--strategy=multi_worker_mirrored", *[a for a in COMMON if not a.startswith("--batch-size")],
            "--batch-size=64", f"--storage-root={root}", "--train-steps=100"]
    tasks = [procs.trainer(f"worker{i}", args, {"cluster": cluster, "task": {"type": "worker", "index": i}})
             for i in (0, 1)]
    tasks.append(procs.trainer("chief", args, {"cluster": cluster, "task": {"type": "chief", "index": 0}}))
    for task in tasks:
        assert task.wait(TIME_LIMIT) == 2, task.tail()
        out = task.output()
        assert "not divisible by 3" in out and "--set training.batchSize=66" in out, out[-2000:]
        assert "internal error" not in out and "Traceback" not in out, out[-2000:]
