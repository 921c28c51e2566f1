"""Preemption: SIGTERM stops training at a step boundary with a checkpoint of that exact
step, exit code 143 and status Interrupted; the restart resumes there (0 steps lost).
Also --checkpoint-every-seconds and --shutdown-grace-seconds running out.

Real trainer processes on 127.0.0.1 (digits, offline), signalled as Kubernetes stops a
container: SIGTERM to the process group.
"""

from __future__ import annotations

import itertools
import re
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.trainer.conftest import (
    COMMON,
    Proc,
    Procs,
    free_ports,
    ps_cluster,
    read_status,
    tf_config,
)

pytestmark = pytest.mark.slow

EXIT_SIGTERM = 143
GRACE = 25.0
#: A stop takes one chunk and one save (well under a second here); 10 s catches a teardown
#: that waits for peers (TensorFlow objects torn down after a peer has exited took ~14 s).
STOP_SECS = 10.0
STOPPED = re.compile(r"SIGTERM at step (\d+): checkpoint saved, exiting$", re.M)
PEER = "stop requested by a peer task"


def _step_lines(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"^step (\d+),", text, re.M)]


def _latest_checkpoint_step(root: Path) -> int:
    text = (root / "checkpoints" / "checkpoint").read_text()
    m = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M)
    assert m, text
    return int(m.group(1))


def _sigterm_and_wait(proc: Proc, timeout: float = GRACE + 10) -> tuple[int, float]:
    """SIGTERM the process group; returns (exit code, seconds until it exited)."""
    sent = proc.signal(signal.SIGTERM)
    rc = proc.wait(timeout)
    return rc, time.monotonic() - sent


def _assert_stopped(proc: Proc, rc: int, root: Path, cause: str = "SIGTERM") -> int:
    """Exit 143, one stop line, the checkpoint and status.json of the exact step reached;
    returns that step."""
    out = proc.output()
    assert rc == EXIT_SIGTERM, proc.tail()
    stops = re.findall(rf"{cause} at step (\d+): checkpoint saved, exiting$", out, re.M)
    assert len(stops) == 1, proc.tail()
    step = int(stops[0])
    assert _step_lines(out)[-1] == step  # the step line of the exact step reached
    assert _latest_checkpoint_step(root) == step
    assert (root / "checkpoints" / f"ckpt-{step}.index").is_file()
    st = read_status(root)
    assert st["state"] == "Interrupted" and st["step"] == step, st
    assert f"{cause} at step {step}: checkpoint saved" in st["message"], st
    assert "Traceback" not in out and "trainer: error:" not in out
    return step


def _assert_resumed(proc: Proc, step: int, log_every: int = 20) -> None:
    """Resumed at exactly ``step`` (0 steps lost) and logged the next step line after it."""
    m = proc.wait_for(r"resumed from checkpoint at step (\d+)", 150)
    assert int(m.group(1)) == step
    first = proc.wait_for(r"^step (\d+),", 150)
    assert step < int(first.group(1)) <= step + log_every


def _assert_succeeded(root: Path, steps: int) -> None:
    st = read_status(root)
    assert st["state"] == "Succeeded" and st["step"] >= steps, st
    assert st["accuracy"] >= 0.95, st


def _single_args(root: Path, *extra: str) -> list[str]:
    return ["--strategy=single_device", *COMMON, f"--storage-root={root}", "--cleanup=keep",
            *extra]


def test_single_device_sigterm_saves_the_exact_step_and_resumes(procs: Procs,
                                                                 tmp_path: Path) -> None:
    root = tmp_path / "data"
    args = _single_args(root, "--train-steps=400", "--checkpoint-every-steps=100",
                        "--steps-per-execution=7")
    chief = procs.trainer("single", args)
    chief.wait_for(r"saved checkpoint for step 100", 150)
    chief.wait_for(r"^step 120,", 60)
    rc, took = _sigterm_and_wait(chief)
    step = _assert_stopped(chief, rc, root)
    assert step > 120
    assert took < STOP_SECS
    restarted = procs.trainer("single-restarted", args)
    _assert_resumed(restarted, step)
    assert restarted.wait(180) == 0, restarted.tail()
    _assert_succeeded(root, 400)
    print(f"\nsingle_device: SIGTERM at step {step}, exited in {took:.2f}s, resumed at {step}: "
          f"0 steps lost")


def test_sigterm_while_importing_tensorflow_exits_at_once(procs: Procs, tmp_path: Path) -> None:
    root = tmp_path / "data"
    chief = procs.trainer("single", _single_args(root, "--train-steps=400"))
    chief.wait_for(r"role chief:0", 60)  # logged before TensorFlow is imported
    rc, took = _sigterm_and_wait(chief)
    out = chief.output()
    assert rc == EXIT_SIGTERM, out
    assert re.search(r"SIGTERM while starting: nothing new to save, exiting$", out, re.M), out
    assert "Traceback" not in out and not _step_lines(out)
    assert took < STOP_SECS, took


def test_parameter_server_chief_sigterm_while_waiting_for_the_cluster(procs: Procs,
                                                                      tmp_path: Path) -> None:
    """Nothing listens on the ps/worker addresses: the chief waits for them (start-up)."""
    root = tmp_path / "data"
    args = ["--strategy=parameter_server", *COMMON, f"--storage-root={root}",
            "--train-steps=400", "--cleanup=keep"]
    chief = procs.trainer("chief", args, tf_config(ps_cluster(2), "chief", 0))
    deadline = time.monotonic() + 120
    while not (root / "status.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    rc, took = _sigterm_and_wait(chief)
    out = chief.output()
    assert rc == EXIT_SIGTERM, out
    assert re.search(r"SIGTERM while starting: nothing new to save, exiting$", out, re.M), out
    assert took < STOP_SECS, took
    st = read_status(root)
    assert st["state"] == "Interrupted" and st["step"] == 0, st
    assert "Traceback" not in out


def _ps_args(root: Path, steps: int) -> list[str]:
    return ["--strategy=parameter_server", *COMMON, f"--storage-root={root}",
            f"--train-steps={steps}", "--checkpoint-every-steps=100", "--cleanup=keep"]


def _start_ps_servers(procs: Procs, cluster: dict[str, list[str]], args: list[str],
                      suffix: str = "") -> list[Proc]:
    started = [procs.trainer(f"ps0{suffix}", args, tf_config(cluster, "ps", 0))]
    started += [procs.trainer(f"worker{i}{suffix}", args, tf_config(cluster, "worker", i))
                for i in range(len(cluster["worker"]))]
    return started


def test_parameter_server_sigterm_chief_then_whole_workload(procs: Procs, tmp_path: Path) -> None:
    """1. SIGTERM the chief alone; the Job restarts it: resumes at the exact step.
    2. SIGTERM every task at once (a node drain, a Kueue preemption): the servers keep
       serving until the chief has saved, then exit 0; everything restarts and resumes at
       the exact step, then completes. Finally the idle servers exit 0 at once."""
    root = tmp_path / "data"
    cluster = ps_cluster(2)
    steps = 800
    args = _ps_args(root, steps)
    servers = _start_ps_servers(procs, cluster, args)
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0))
    chief.wait_for(r"^step 120,", 180)
    rc, took = _sigterm_and_wait(chief)
    first = _assert_stopped(chief, rc, root)
    assert took < STOP_SECS
    assert all(p.alive() for p in servers)  # not signalled: still serving
    chief = procs.trainer("chief-restarted", args, tf_config(cluster, "chief", 0))
    _assert_resumed(chief, first)
    chief.wait_for(rf"^step {first // 20 * 20 + 100},", 150)

    sent = time.monotonic()
    for p in [chief, *servers]:
        p.signal(signal.SIGTERM)
    rc = chief.wait(GRACE + 10)
    # "checkpoint saved" (not "NOT saved", not "abandoned"): the ps and the workers served
    # the in-flight steps and the save although they had been signalled too
    second = _assert_stopped(chief, rc, root)
    assert second > first
    for p in servers:
        assert p.wait(GRACE + 10) == 0, p.tail()
    assert time.monotonic() - sent < GRACE + 5

    servers = _start_ps_servers(procs, cluster, args, "-restarted")
    chief = procs.trainer("chief-restarted-2", args, tf_config(cluster, "chief", 0))
    _assert_resumed(chief, second)
    assert chief.wait(240) == 0, chief.tail()
    _assert_succeeded(root, steps)
    rcs = [_sigterm_and_wait(p, 15) for p in servers]
    assert all(rc == 0 and took < 5 for rc, took in rcs), rcs
    print(f"\nparameter_server: chief SIGTERM at step {first} (exit in {took:.2f}s), whole "
          f"workload SIGTERM at step {second}: both resumed exactly, 0 steps lost")


def test_multi_worker_mirrored_sigterm_stops_every_task_at_one_step(procs: Procs,
                                                                    tmp_path: Path) -> None:
    """SIGTERM to the chief, later to the worker: the stop travels to the other task
    through the per-chunk vote; both save the same step (collectively) and exit 143.
    --checkpoint-every-seconds is the chief's decision, taken by both (a one-sided save
    would hang the collective)."""
    root = tmp_path / "data"
    ports = free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    args = ["--strategy=multi_worker_mirrored", *COMMON, f"--storage-root={root}",
            "--train-steps=400", "--checkpoint-every-steps=100", "--checkpoint-every-seconds=1",
            "--keep-checkpoints=100"]

    def start(suffix: str = "") -> tuple[Proc, Proc]:
        worker = procs.trainer(f"worker0{suffix}", args, tf_config(cluster, "worker", 0))
        chief = procs.trainer(f"chief{suffix}", args, tf_config(cluster, "chief", 0))
        return chief, worker

    chief, worker = start()
    chief.wait_for(r"^step 120,", 180)
    rc, took = _sigterm_and_wait(chief)
    step = _assert_stopped(chief, rc, root)
    assert took < STOP_SECS
    assert worker.wait(GRACE) == EXIT_SIGTERM, worker.tail()
    assert f"{PEER} at step {step}: checkpoint saved, exiting" in worker.output(), worker.tail()
    saves = [int(s) for s in re.findall(r"saved checkpoint for step (\d+)", chief.output())]
    assert any(s % 100 for s in saves[:-1]), saves  # time-based saves between the step ones

    chief, worker = start("-restarted")
    _assert_resumed(chief, step)
    chief.wait_for(rf"^step {step // 20 * 20 + 40},", 120)
    rc, _ = _sigterm_and_wait(worker)  # a preempted worker: the chief saves and stops too
    assert rc == EXIT_SIGTERM, worker.tail()
    peer_stop = _assert_stopped(chief, chief.wait(GRACE), root, cause=PEER)
    assert re.search(rf"SIGTERM at step {peer_stop}: checkpoint saved, exiting$", worker.output(),
                     re.M), worker.tail()
    chief, worker = start("-restarted-2")
    _assert_resumed(chief, peer_stop)
    assert chief.wait(180) == 0, chief.tail()
    _assert_succeeded(root, 400)
    print(f"\nmulti_worker_mirrored: chief SIGTERM at step {step} (exit in {took:.2f}s), worker "
          f"SIGTERM at step {peer_stop}: both tasks stopped at one step, resumed there: 0 steps "
          f"lost; saves {saves}")


def _save_times(out: str) -> list[tuple[float, int]]:
    found = re.findall(r"^(\S+ \S+) INFO trainer \S+ saved checkpoint for step (\d+)", out, re.M)
    return [(datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(s)) for t, s in found]


def test_checkpoint_every_seconds_saves_at_time_boundaries(procs: Procs, tmp_path: Path) -> None:
    root = tmp_path / "data"
    every = 0.5  # several time-based saves even where 400 steps take only a few seconds
    chief = procs.trainer("single", _single_args(
        root, "--train-steps=400", "--checkpoint-every-steps=200", f"--checkpoint-every-seconds={every}",
        "--keep-checkpoints=1000", "--steps-per-execution=5"))
    assert chief.wait(180) == 0, chief.tail()
    saves = _save_times(chief.output())
    steps = [s for _, s in saves]
    on_disk = sorted(int(p.name[5:-6]) for p in (root / "checkpoints").glob("ckpt-*.index"))
    assert on_disk == steps  # every logged save is a checkpoint file of that step
    assert {200, 400} <= set(steps) and len(steps) > 2, steps  # the step rule alone: 2
    assert all(s % 5 == 0 for s in steps), steps  # at chunk boundaries
    # a time-based save comes --checkpoint-every-seconds after the save before it
    gaps = [t2 - t1 for (t1, _), (t2, s2) in itertools.pairwise(saves) if s2 % 200]
    assert gaps and min(gaps) >= every - 0.05, (gaps, steps)


def test_save_that_cannot_finish_within_the_grace_exits_anyway(procs: Procs,
                                                              tmp_path: Path) -> None:
    """With a 10 ms grace the chunk in progress (50 steps) cannot end in time: the
    watchdog exits 143 with one message, status.json says so, no new checkpoint."""
    root = tmp_path / "data"
    chief = procs.trainer("single", _single_args(
        root, "--train-steps=2000", "--checkpoint-every-steps=100", "--steps-per-execution=50",
        "--log-every-steps=50", "--shutdown-grace-seconds=0.01"))
    chief.wait_for(r"saved checkpoint for step 100", 150)
    chief.wait_for(r"^step 150,", 60)
    rc, took = _sigterm_and_wait(chief, 15)
    out = chief.output()
    assert rc == EXIT_SIGTERM, out[-2000:]
    assert re.search(r"SIGTERM: --shutdown-grace-seconds=0.01 ran out while training: "
                     r"exiting now", out), out[-2000:]
    assert not STOPPED.search(out)
    assert took < 5
    # No checkpoint of the stop itself: the last one saved is a scheduled one (every 100 steps) of a
    # step the chief had reached before the signal - step 100, or 200 when the next chunk finished
    # while the test was still reading "step 150". That save may have begun just before the signal
    # and log just after it; a save at the step where SIGTERM stopped the chief would not be scheduled.
    before, _, after = out.partition("SIGTERM received")
    assert after, out[-2000:]
    reached = max(int(n) for n in re.findall(r"^step (\d+),", before, re.M))
    saved = [int(n) for n in re.findall(r"saved checkpoint for step (\d+)", out)]
    late = [int(n) for n in re.findall(r"saved checkpoint for step (\d+)", after)]
    assert all(step % 100 == 0 and step <= reached for step in late), out[-2000:]
    assert saved[-1] in (100, 200) and _latest_checkpoint_step(root) == saved[-1]
    st = read_status(root)
    assert st["state"] == "Interrupted" and "ran out while training" in st["message"], st


def test_an_ending_in_status_json_is_never_overwritten(tmp_path: Path) -> None:
    """The watchdog records Interrupted from its own thread while the main thread may be writing a
    Running update (a held-out evaluation after a checkpoint): the ending must be the last word."""
    import threading

    from trainer.config import parse_config
    from trainer.metrics import ChiefReporter

    root = tmp_path / "data"
    reporter = ChiefReporter(parse_config([f"--storage-root={root}", "--train-steps=10"]), data=None)  # type: ignore[arg-type]
    reporter.started(5)
    assert read_status(root)["state"] == "Running"
    watchdog = threading.Thread(target=reporter.interrupted, args=(None, "SIGTERM: the grace ran out"))
    watchdog.start()
    watchdog.join()
    reporter.started(6)  # what the main thread had in flight
    st = read_status(root)
    assert (st["state"], st["step"], st["message"]) == ("Interrupted", 5, "SIGTERM: the grace ran out"), st
