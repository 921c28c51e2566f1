"""Fault behaviour under the parameter-server strategy: kill -9 a worker (absorbed by the coordinator).

kill -9 of the chief (resumes from the last checkpoint) and of the ps (the chief fails with one line, the
restart resumes) are tested once, on the rendered pods in network namespaces: tests/e2e/test_netns.py."""

from __future__ import annotations

import re
import signal
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


def _step_lines(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"^step (\d+),", text, re.M)]


def test_worker_killed_and_restarted_is_absorbed(procs: Procs, tmp_path: Path) -> None:
    """kill -9 worker1 and restart it under the same address; once the chief says it rejoined,
    kill -9 worker0 too: step lines logged while worker0 is down can only come from the
    restarted worker1. worker0 is then restarted (as its StatefulSet would). The chief is
    frozen (SIGSTOP) while worker1 restarts, so that it does not train on without it meanwhile;
    the losses the killed workers had computed are lost with them (their step lines skipped)."""
    root = tmp_path / "data"
    cluster = ps_cluster(2)
    steps = 2000  # far more than the chief trains while the coordinator takes worker1 back
    args = _args(root, steps)
    servers = _start_servers(procs, cluster, args)
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0))
    chief.wait_for(r"^step 40,", 150)
    chief.freeze()
    servers["worker1"].kill9()
    w1 = procs.trainer("worker1-restarted", args, tf_config(cluster, "worker", 1))
    w1.wait_for(r"worker:1 server listening", 120)
    chief.signal(signal.SIGCONT)
    chief.wait_for(r"worker:1 rejoined", 240)
    servers["worker0"].kill9()
    # Besides the chunk each worker had in flight (re-run on worker1), only worker1 runs steps now.
    wanted = len(_step_lines(chief.output())) + 4
    chief.wait_until(f"{wanted} step lines while worker0 is down",
                     lambda out: len(_step_lines(out)) >= wanted, 240)
    procs.trainer("worker0-restarted", args, tf_config(cluster, "worker", 0))
    # Both losses absorbed, the chief trains on: stopped as a preempted one is (SIGTERM), it still reaches a step
    # boundary and saves it. (A run trained to Succeeded after a killed worker: tests/e2e/test_containers.py.)
    chief.signal(signal.SIGTERM)
    rc = chief.wait(120)
    out = chief.output()
    assert rc == 143, chief.tail()
    assert "resumed from checkpoint" not in out  # the coordinator absorbed both losses
    assert "Worker /job:worker/replica:0/task:1 failed" in out
    assert "Traceback" not in out and "trainer: error" not in out
    stopped = re.findall(r"SIGTERM at step (\d+): checkpoint saved, exiting$", out, re.M)
    assert len(stopped) == 1, chief.tail()
    st = read_status(root)
    assert (st["state"], st["step"]) == ("Interrupted", int(stopped[0])), st


def test_a_loss_lost_with_its_worker_skips_its_step_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The chief prints a chunk's step line when it reads the chunk's loss back from the worker that ran it;
    a worker killed in between took the loss with it. That chunk's line is skipped and training goes on
    (it ended the chief with exit 3 before); a lost ps still ends it."""
    import tensorflow as tf

    from trainer.config import parse_config
    from trainer.loop_ps import _PsRun
    from trainer.metrics import ThroughputMeter
    from trainer.shutdown import Shutdown

    gone = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:50909: Failed to connect to "
            "remote host: Connection refused\nAdditional GRPC error information from remote target "
            "/job:worker/replica:0/task:0/device:CPU:0 while calling /tensorflow.eager.EagerService/Enqueue")

    class Lost:
        def __init__(self, message: str) -> None:
            self.message = message

        def fetch(self) -> float:
            raise tf.errors.UnavailableError(None, None, self.message)

    cfg = parse_config([f"--storage-root={tmp_path}", "--strategy=parameter_server"])
    run = _PsRun(cfg, None, None, None, None, Shutdown(25.0), ThroughputMeter(64, 0), 60, 0, 0.0)
    run.pending = (Lost(gone), 60)
    with caplog.at_level("WARNING", logger="trainer.ps"):
        run.report_pending()
    assert run.pending is None
    assert "step 60: no step line, its loss was computed on a worker lost since" in caplog.text
    ps_gone = gone.replace("/job:worker/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:0/device:CPU:0")
    run.pending = (Lost(ps_gone), 80)
    with pytest.raises(tf.errors.UnavailableError):
        run.report_pending()
