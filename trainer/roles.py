"""Role dispatch: what this process does, given the strategy and its task.

=================  ==========================  =========================================
strategy           task                        role
=================  ==========================  =========================================
parameter_server   ps, worker                  tf.distribute.Server until SIGTERM
parameter_server   chief                       coordinator: trains, saves, exports
multi_worker_mir.  chief (or worker 0)         trains + saves + reports + exports
multi_worker_mir.  other workers               train; then idle until SIGTERM
mirrored/single    chief / no cluster          trains + saves + reports + exports
any                evaluator                   evaluates each new checkpoint
=================  ==========================  =========================================

After Succeeded (status.json, same run id) no role trains again: the chief exits 0
("already completed"), servers and workers idle until SIGTERM without starting a server.

SIGTERM/SIGINT (trainer.shutdown): a training task stops at the next step boundary, saves
that step and exits 128 + the signal number (143 for SIGTERM), the chief writing
Interrupted to status.json; ps/worker servers and idle tasks exit 0 (a server first keeps
serving while status.json says Running, so a chief stopped at the same moment can finish
its in-flight steps and save: a JobSet's suspension stops every pod at once); a server in a
Job's pod (JobSet) exits 143 instead, so that its Job does not count it as a completion;
anything else (start-up, evaluator) exits 143 at once.

With TFD_METRICS_PORT set, every role serves Prometheus metrics (trainer.monitoring) from the start
of :func:`dispatch`; a chief that Succeeded keeps serving them for TFD_METRICS_LINGER_SECONDS (a
stop request ends that wait) before it exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping

from tfdcontract import EVALUATOR, PS, SERVING, WORKER
from tfdcontract.phases import listening_line, role_line, succeeded_line, waiting_for_chief_line
from trainer.cluster import Task
from trainer.config import TrainConfig
from trainer.errors import DataError, TrainerError
from trainer.monitoring import current as current_monitor
from trainer.monitoring import install as install_monitor
from trainer.runtime import import_tensorflow
from trainer.shutdown import Interrupted, Shutdown, install
from trainer.status import RUNNING, SUCCEEDED, is_completed, read_status

log = logging.getLogger("trainer.roles")

#: Set only in an Indexed Job's pod, by the Job controller: the chart's JobSet (workload.kind=jobset) runs ps and
#: worker servers so; natively they are StatefulSet pods. (Not the chart's TFD_TASK_INDEX: a StatefulSet pod has
#: that too, from its pod-index label.)
JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"
#: How often a stopping server looks at status.json, and how long before its grace ends it exits.
LINGER_POLL_SECS = 0.25
LINGER_MARGIN_SECS = 1.0


def wait_for_sigterm(shutdown: Shutdown) -> None:
    """Block until SIGTERM or SIGINT (StatefulSet pods must not exit on their own)."""
    with shutdown.deferred():
        shutdown.phase = "idle"
        shutdown.wait()
    log.info("received %s, exiting", shutdown.signal_name)


def _chief_running(cfg: TrainConfig) -> bool:
    st = read_status(cfg.layout.status)
    return st is not None and st.state == RUNNING and st.run_id == cfg.run_id


def serve_until_chief_stops(cfg: TrainConfig, shutdown: Shutdown) -> None:
    """After SIGTERM, keep a ps/worker server serving while status.json says this run is
    Running, at most until shortly before the grace period ends: when the whole workload
    is stopped at once (node drain, Kueue preemption) the chief still needs the ps
    variables and the workers' in-flight steps to save the step it reached."""
    until = time.monotonic() + shutdown.time_left() - LINGER_MARGIN_SECS
    if _chief_running(cfg) and time.monotonic() < until:
        log.info("%s: serving until the chief has saved (status.json Running), at most %.0fs",
                 shutdown.signal_name, until - time.monotonic())
    while time.monotonic() < until and _chief_running(cfg):
        time.sleep(LINGER_POLL_SECS)


@contextlib.contextmanager
def idle_listener(address: str) -> Iterator[None]:
    """Keeps the task's port answering while idle, so the pod's TCP probes see a live task
    (the chart probes the TensorFlow port); connections are accepted and closed at once."""
    port = int(address.rsplit(":", 1)[1])
    server = socket.create_server(("", port), reuse_port=False)
    server.settimeout(0.5)
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                connection, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            connection.close()

    thread = threading.Thread(target=accept, name="idle-listener", daemon=True)
    thread.start()
    log.info("idle: port %d answers TCP probes only", port)
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2)
        server.close()


def check_data(cfg: TrainConfig, may_download: bool) -> None:
    """Fail fast (before importing TensorFlow) when the data set's files are missing."""
    if cfg.dataset == "mnist":
        path = cfg.data_dir / "mnist.npz"
        if not path.is_file() and not cfg.download:
            raise DataError(
                f"data set mnist: {path} does not exist: copy mnist.npz into --data-dir, "
                f"pass --download (needs internet), or use --dataset=digits offline"
            )
    elif cfg.dataset == "mnist_tfrecord" and (
        not cfg.data_dir.is_dir() or not any(cfg.data_dir.glob("train*.tfrecord"))
    ):
        raise DataError(
            f"data set mnist_tfrecord: no train*.tfrecord files in {cfg.data_dir}: write "
            f"them there (features image_raw bytes, label int64) or set --data-dir"
        )


def run_server(cfg: TrainConfig, task: Task, shutdown: Shutdown, in_job: bool = False) -> int:
    """A ps or worker server of the parameter_server strategy: exit 0 on SIGTERM, or 128 + the signal
    number (143) in a Job's pod (`in_job`): a Job counts a pod that exits 0 as a completion, and a
    server's Job completed while its JobSet is suspended (or its node drained) starts no server again."""
    address = task.cluster[task.task_type][task.task_index]
    with shutdown.deferred():
        if is_completed(cfg.layout.status, cfg.run_id):
            log.info("training run %s already Succeeded (status.json): not starting the %s "
                     "server; idling until SIGTERM", cfg.run_id, task.name)
            with idle_listener(address):
                wait_for_sigterm(shutdown)
            return 0
        import_tensorflow(cfg)
        from trainer.strategy import start_server

        if shutdown.requested:  # stopped while importing: nobody was served yet
            log.info("received %s before the server started, exiting", shutdown.signal_name)
            return 0
        start_server(task)
        shutdown.reclaim()
        log.info("%s", listening_line(task.name, address))
        current_monitor().server_up(True)
        shutdown.phase = SERVING
        shutdown.wait()
        serve_until_chief_stops(cfg, shutdown)
        current_monitor().server_up(False)
    if in_job:
        log.info("received %s, exiting %d: a Job's server stops, it never completes", shutdown.signal_name,
                 shutdown.exit_code)
        return shutdown.exit_code
    log.info("received %s, exiting", shutdown.signal_name)
    return 0


def _cleanup(cfg: TrainConfig, env: Mapping[str, str]) -> None:
    if cfg.cleanup == "keep":
        log.info("cleanup: --cleanup=keep, leaving the ps/worker StatefulSets running")
        return
    from trainer.cleanup import scale_down  # here: only the chief needs the Kubernetes client (0.4 s, 37 MB)

    scale_down(env)


def run_chief(cfg: TrainConfig, task: Task, env: Mapping[str, str], shutdown: Shutdown) -> int:
    """The chief (or single process): train, save, report, export, clean up."""
    layout = cfg.layout
    st = read_status(layout.status)
    if st is not None and st.state == SUCCEEDED and st.run_id == cfg.run_id:
        log.info("already completed: run %s Succeeded at step %d (export %s); nothing to do",
                 cfg.run_id, st.step, st.export_path)
        current_monitor().training_step(st.step)
        current_monitor().state(SUCCEEDED)
        _cleanup(cfg, env)
        return 0
    check_data(cfg, may_download=True)
    import_tensorflow(cfg)
    from trainer.data import load_data
    from trainer.metrics import ChiefReporter

    data = load_data(cfg, may_download=True)
    reporter = ChiefReporter(cfg, data)
    shutdown.on_expire(lambda message: reporter.interrupted(None, message))
    try:
        if cfg.strategy == "parameter_server":
            from trainer.loop_ps import run_ps_chief

            step = run_ps_chief(cfg, task, data, reporter, shutdown)
        else:
            from trainer.loop_sync import run_sync

            step = run_sync(cfg, task, data, reporter, shutdown)
    except Interrupted as stop:
        reporter.interrupted(stop.step, f"{stop.line}; the restarted chief resumes from "
                                        f"the latest checkpoint")
        raise
    except TrainerError as e:
        reporter.failed(str(e))
        raise
    except Exception as e:
        reporter.failed(f"{type(e).__name__}: {e}")
        raise
    log.info("%s", succeeded_line(step))
    _cleanup(cfg, env)
    linger_with_final_metrics(shutdown)
    return 0


def linger_with_final_metrics(shutdown: Shutdown) -> None:
    """Keep serving the final metrics (state Succeeded) for TFD_METRICS_LINGER_SECONDS so that a
    scrape records the last step; SIGTERM/SIGINT ends the wait at once (the run has succeeded:
    the exit code stays 0). Nothing to do without a metrics server."""
    with shutdown.deferred():
        shutdown.phase = "serving the final metrics"
        current_monitor().linger(shutdown.wait)


def run_sync_worker(cfg: TrainConfig, task: Task, shutdown: Shutdown) -> int:
    """A non-chief multi_worker_mirrored worker: train in lockstep, then idle (a StatefulSet pod)
    or exit 0 (a Job pod, --exit-when-done) once the chief reported success."""
    if is_completed(cfg.layout.status, cfg.run_id):
        if cfg.exit_when_done:
            log.info("training run %s already Succeeded (status.json): %s does not train; exiting",
                     cfg.run_id, task.name)
            return 0
        log.info("training run %s already Succeeded (status.json): %s does not train; idling "
                 "until SIGTERM", cfg.run_id, task.name)
        wait_for_sigterm(shutdown)
        return 0
    check_data(cfg, may_download=False)
    import_tensorflow(cfg)
    from trainer.data import load_data
    from trainer.loop_sync import run_sync

    data = load_data(cfg, may_download=False)
    run_sync(cfg, task, data, None, shutdown)
    current_monitor().server_up(False)
    then = "exiting" if cfg.exit_when_done else "idling until SIGTERM (a StatefulSet pod must not exit)"
    log.info("%s", waiting_for_chief_line(task.name, then))
    with shutdown.deferred():
        shutdown.phase = "idle"
        while not shutdown.wait(2) and not is_completed(cfg.layout.status, cfg.run_id):
            pass
    if cfg.exit_when_done and is_completed(cfg.layout.status, cfg.run_id):
        log.info("%s: training run %s Succeeded; exiting", task.name, cfg.run_id)
        return 0
    wait_for_sigterm(shutdown)
    return 0


def run_evaluator_role(cfg: TrainConfig, shutdown: Shutdown) -> int:
    """The evaluator side task (SIGTERM: exit 143 at once, it has nothing to save)."""
    shutdown.phase = "evaluating checkpoints"
    check_data(cfg, may_download=False)
    import_tensorflow(cfg)
    from trainer.data import load_data
    from trainer.evaluator import run_evaluator

    data = load_data(cfg, may_download=False)
    current_monitor().server_up(True)
    run_evaluator(cfg, data)
    current_monitor().server_up(False)
    return 0


def _run_role(cfg: TrainConfig, task: Task, env: Mapping[str, str], shutdown: Shutdown) -> int:
    if task.task_type == EVALUATOR:
        return run_evaluator_role(cfg, shutdown)
    if cfg.strategy == "parameter_server" and task.task_type in (PS, WORKER):
        return run_server(cfg, task, shutdown, in_job=bool(env.get(JOB_INDEX_ENV)))
    if task.is_chief:
        return run_chief(cfg, task, env, shutdown)
    return run_sync_worker(cfg, task, shutdown)


def dispatch(cfg: TrainConfig, task: Task, env: Mapping[str, str] | None = None) -> int:
    """Run this process's role; returns the exit code. A stop on SIGTERM/SIGINT logs its
    one line and propagates Interrupted (exit code 128 + the signal number)."""
    env = os.environ if env is None else env
    shutdown = install(cfg.shutdown_grace_seconds)
    install_monitor(cfg, task, env)
    log.info("%s", role_line(task.name, cfg.strategy, cfg.run_id, str(cfg.storage_root), task.source))
    try:
        return _run_role(cfg, task, env, shutdown)
    except Interrupted as stop:
        log.warning("%s", stop.line)
        raise
