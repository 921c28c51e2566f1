"""Preemption: SIGTERM stops training at a step boundary with a checkpoint of that exact
step, exit code 143 and status Interrupted; the restart resumes there (0 steps lost).
Also --checkpoint-every-seconds and --shutdown-grace-seconds running out.

Real trainer processes on 127.0.0.1 (digits, offline), signalled as Kubernetes stops a
container: SIGTERM to the process group. Every signal is sent on an event the test waits for
(a log line, a stopped peer); no test depends on how fast this machine trains.
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
#: --shutdown-grace-seconds (the default): a stopping task must be gone before it ends, or Kubernetes
#: kills it; the watchdog's "ran out" message says when it was not.
GRACE = 25.0
STOPPED = re.compile(r"SIGTERM at step (\d+): checkpoint saved, exiting$", re.M)
RAN_OUT = "ran out while"
#: A save of the --checkpoint-every-seconds rule: at a step that is no multiple of the step rule's 100.
TIME_BASED_SAVE = r"saved checkpoint for step (?!\d*00:)\d+:"
PEER = "stop requested by a peer task"


def _step_lines(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"^step (\d+),", text, re.M)]


def _latest_checkpoint_step(root: Path) -> int:
    text = (root / "checkpoints" / "checkpoint").read_text()
    m = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M)
    assert m, text
    return int(m.group(1))


def _sigterm_and_wait(proc: Proc, timeout: float = GRACE + 60) -> tuple[int, float]:
    """SIGTERM the process group; returns (exit code, seconds from just before the signal to the exit)."""
    before = time.monotonic()
    proc.signal(signal.SIGTERM)
    rc = proc.wait(timeout)
    return rc, time.monotonic() - before


def _assert_within_grace(proc: Proc, took: float) -> None:
    """Stopped on its own, before the grace period ran out (not ended by the watchdog)."""
    assert RAN_OUT not in proc.output(), proc.tail()
    assert took < GRACE, (took, proc.tail())


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
    assert st["state"] == "Interrupted" and st["step"] == step and st["checkpoint_step"] == step, st
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
    assert step >= 120  # the boundary after the signal: 120 itself when it came before step 120's vote
    _assert_within_grace(chief, took)
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
    _assert_within_grace(chief, took)


def test_parameter_server_chief_sigterm_while_waiting_for_the_cluster(procs: Procs,
                                                                      tmp_path: Path) -> None:
    """Nothing listens on the ps/worker addresses: the chief waits for them (start-up)."""
    root = tmp_path / "data"
    args = ["--strategy=parameter_server", *COMMON, f"--storage-root={root}",
            "--train-steps=400", "--cleanup=keep"]
    chief = procs.trainer("chief", args, tf_config(ps_cluster(2), "chief", 0))
    chief.wait_for(r"waiting for ps:0 \(127\.0\.0\.1:\d+\)", 120)
    rc, took = _sigterm_and_wait(chief)
    out = chief.output()
    assert rc == EXIT_SIGTERM, out
    assert re.search(r"SIGTERM while starting: nothing new to save, exiting$", out, re.M), out
    _assert_within_grace(chief, took)
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


def test_parameter_server_sigterm_to_the_whole_workload(procs: Procs, tmp_path: Path) -> None:
    """SIGTERM every task at once (a node drain, a Kueue preemption): the servers keep serving until the
    chief has saved, then exit 0; everything restarts and resumes at the exact step, then completes.
    Finally the idle servers exit 0 at once. (The chief's SIGTERM alone, the Job retrying it: the rendered
    pods' test, tests/e2e/test_netns.py::test_chief_sigterm_loses_no_steps.)"""
    root = tmp_path / "data"
    cluster = ps_cluster(2)
    steps = 400
    args = _ps_args(root, steps)
    servers = _start_ps_servers(procs, cluster, args)
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0))
    chief.wait_for(r"^step 120,", 180)

    sent = time.monotonic()
    for p in [chief, *servers]:
        p.signal(signal.SIGTERM)
    rc = chief.wait(GRACE + 10)
    # "checkpoint saved" (not "NOT saved", not "abandoned"): the ps and the workers served
    # the in-flight steps and the save although they had been signalled too
    stopped = _assert_stopped(chief, rc, root)
    assert stopped >= 120
    for p in servers:
        assert p.wait(GRACE + 60) == 0, p.tail()
    assert time.monotonic() - sent < GRACE + 5  # once the chief had saved, not at the grace's end

    servers = _start_ps_servers(procs, cluster, args, "-restarted")
    chief = procs.trainer("chief-restarted", args, tf_config(cluster, "chief", 0))
    _assert_resumed(chief, stopped)
    assert chief.wait(240) == 0, chief.tail()
    _assert_succeeded(root, steps)
    # the run Succeeded: the idle servers have no chief to wait for and exit 0 at once
    assert [_sigterm_and_wait(p)[0] for p in servers] == [0] * len(servers)
    assert not [p.name for p in servers if "serving until the chief has saved" in p.output()]
    print(f"\nparameter_server: whole workload SIGTERM at step {stopped}: resumed exactly, 0 steps lost")


def test_jobset_suspension_stops_every_task_at_once_and_no_server_completes(procs: Procs,
                                                                           tmp_path: Path) -> None:
    """Under a JobSet (workload.kind=jobset) the ps and workers are pods of Indexed Jobs (JOB_COMPLETION_INDEX,
    which the Job controller adds; the chart's TFD_TASK_INDEX beside it, as a StatefulSet pod has it too), and a
    suspension SIGTERMs every pod at once: the servers serve the chief's in-flight steps and save, so its
    checkpoint is the step it reached, then exit 143, never 0 (a Job counts a pod that exits 0 as a completion:
    a completed ps Job would start no server on resume)."""
    root = tmp_path / "data"
    cluster = ps_cluster(1)
    args = _ps_args(root, 2000)
    indexed = {"TFD_TASK_INDEX": "0", "JOB_COMPLETION_INDEX": "0"}
    servers = [procs.trainer("ps0", args, tf_config(cluster, "ps", 0), **indexed),
               procs.trainer("worker0", args, tf_config(cluster, "worker", 0), **indexed)]
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0), **indexed)
    chief.wait_for(r"^step 60,", 180)
    for p in [chief, *servers]:
        p.signal(signal.SIGTERM)
    _assert_stopped(chief, chief.wait(GRACE + 10), root)
    assert [p.wait(GRACE + 60) for p in servers] == [EXIT_SIGTERM] * 2, [p.tail() for p in servers]
    assert all("a Job's server stops, it never completes" in p.output() for p in servers)


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
            "--train-steps=400", "--checkpoint-every-steps=100", "--checkpoint-every-seconds=0.5",
            "--keep-checkpoints=100"]

    def start(suffix: str = "") -> tuple[Proc, Proc]:
        worker = procs.trainer(f"worker0{suffix}", args, tf_config(cluster, "worker", 0))
        chief = procs.trainer(f"chief{suffix}", args, tf_config(cluster, "chief", 0))
        return chief, worker

    chief, worker = start()
    chief.wait_for(r"^step 120,", 180)
    chief.wait_for(TIME_BASED_SAVE, 180)
    rc, took = _sigterm_and_wait(chief)
    step = _assert_stopped(chief, rc, root)
    _assert_within_grace(chief, took)
    assert worker.wait(GRACE + 60) == EXIT_SIGTERM, worker.tail()
    assert f"{PEER} at step {step}: checkpoint saved, exiting" in worker.output(), worker.tail()
    saves = [int(s) for s in re.findall(r"saved checkpoint for step (\d+)", chief.output())]
    assert any(s % 100 for s in saves[:-1]), saves  # time-based saves between the step ones

    chief, worker = start("-restarted")
    _assert_resumed(chief, step)
    chief.wait_for(rf"^step {step // 20 * 20 + 40},", 120)
    rc, _ = _sigterm_and_wait(worker)  # a preempted worker: the chief saves and stops too
    assert rc == EXIT_SIGTERM, worker.tail()
    peer_stop = _assert_stopped(chief, chief.wait(GRACE + 60), root, cause=PEER)
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
    """Time-based saves between the step-based ones, each --checkpoint-every-seconds after the save
    before it, at chunk boundaries. The run is stopped (SIGTERM) once it made two of them and the
    step-200 save, however fast this machine trains."""
    root = tmp_path / "data"
    every = 0.5
    chief = procs.trainer("single", _single_args(
        root, "--train-steps=1000000", "--checkpoint-every-steps=200", f"--checkpoint-every-seconds={every}",
        "--keep-checkpoints=1000", "--steps-per-execution=5"))

    def enough(out: str) -> bool:
        steps = [step for _, step in _save_times(out)]
        return 200 in steps and len([step for step in steps if step % 200]) >= 2

    chief.wait_until("the step-200 save and two time-based saves", enough, 180)
    rc, _ = _sigterm_and_wait(chief)
    stopped = _assert_stopped(chief, rc, root)
    saves = _save_times(chief.output())
    assert saves[-1][1] == stopped  # the stop's own save comes last: no rule made it
    saves = saves[:-1]
    steps = [s for _, s in saves]
    on_disk = sorted(int(p.name[5:-6]) for p in (root / "checkpoints").glob("ckpt-*.index"))
    assert on_disk == sorted({*steps, stopped})  # every logged save is a checkpoint file of that step
    assert all(s % 5 == 0 for s in steps), steps  # at chunk boundaries
    # a time-based save comes --checkpoint-every-seconds after the save before it (the log times lag the
    # saves by however long the logging thread waited for a core: half the interval is left for that)
    gaps = [t2 - t1 for (t1, _), (t2, s2) in itertools.pairwise(saves) if s2 % 200]
    assert gaps and min(gaps) >= every / 2, (gaps, steps)


def test_a_stop_that_cannot_reach_a_step_boundary_ends_when_the_grace_runs_out(procs: Procs,
                                                                               tmp_path: Path) -> None:
    """The chief's collectives wait for a worker that no longer answers (stopped, as a frozen node
    leaves a pod): after SIGTERM the chief cannot reach a step boundary, so the watchdog ends it when
    --shutdown-grace-seconds runs out: exit 143, one message, status.json Interrupted, and no
    checkpoint of the stop (the latest one on disk is the last save of the step rule)."""
    root = tmp_path / "data"
    ports = free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    grace = 3.0
    args = ["--strategy=multi_worker_mirrored", *COMMON, f"--storage-root={root}", "--train-steps=1000000",
            "--checkpoint-every-steps=100", f"--shutdown-grace-seconds={grace:g}"]
    worker = procs.trainer("worker0", args, tf_config(cluster, "worker", 0))
    chief = procs.trainer("chief", args, tf_config(cluster, "chief", 0))
    chief.wait_for(r"saved checkpoint for step 100:", 180)
    worker.freeze()
    rc, took = _sigterm_and_wait(chief, grace + 60)
    out = chief.output()
    assert rc == EXIT_SIGTERM, out[-2000:]
    expired = re.findall(rf"^\S+ \S+ ERROR trainer \S+ SIGTERM: --shutdown-grace-seconds={grace:g} ran out "
                         rf"while (\w+): exiting now", out, re.M)
    assert expired == ["training"], out[-2000:]  # one message
    assert not STOPPED.search(out) and "Traceback" not in out, out[-2000:]
    assert grace <= took < grace + 60  # the watchdog's doing: it waits the whole grace, then exits
    saved = [int(n) for n in re.findall(r"saved checkpoint for step (\d+)", out)]
    assert saved and all(step % 100 == 0 for step in saved), saved
    assert _latest_checkpoint_step(root) == saved[-1]
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
