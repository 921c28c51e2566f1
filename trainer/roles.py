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
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from types import FrameType

from trainer.cleanup import scale_down
from trainer.cluster import Task
from trainer.config import TrainConfig
from trainer.errors import DataError, TrainerError
from trainer.runtime import import_tensorflow
from trainer.status import SUCCEEDED, is_completed, read_status

log = logging.getLogger("trainer.roles")

_stop = threading.Event()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _stop.set()


def wait_for_sigterm() -> None:
    """Block until SIGTERM or SIGINT (StatefulSet pods must not exit on their own)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, _on_sigterm)
    while not _stop.wait(1.0):
        pass
    log.info("received termination signal, exiting")


@contextlib.contextmanager
def idle_listener(address: str) -> Iterator[None]:
    """Keeps the task's port answering while idle, so the pod's TCP probes see a live task
    (the chart probes the TensorFlow port); connections are accepted and closed at once."""
    port = int(address.rsplit(":", 1)[1])
    server = socket.create_server(("", port), reuse_port=False)
    server.settimeout(0.5)

    def accept() -> None:
        while not _stop.is_set():
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
        _stop.set()
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


def run_server(cfg: TrainConfig, task: Task) -> int:
    """A ps or worker server of the parameter_server strategy."""
    if is_completed(cfg.layout.status, cfg.run_id):
        log.info("training run %s already Succeeded (status.json): not starting the %s "
                 "server; idling until SIGTERM", cfg.run_id, task.name)
        with idle_listener(task.cluster[task.task_type][task.task_index]):
            wait_for_sigterm()
        return 0
    import_tensorflow(cfg)
    from trainer.strategy import start_server

    start_server(task)
    log.info("%s server listening on %s", task.name,
             task.cluster[task.task_type][task.task_index])
    wait_for_sigterm()
    return 0


def _cleanup(cfg: TrainConfig, env: Mapping[str, str]) -> None:
    if cfg.cleanup == "keep":
        log.info("cleanup: --cleanup=keep, leaving the ps/worker StatefulSets running")
        return
    scale_down(env)


def run_chief(cfg: TrainConfig, task: Task, env: Mapping[str, str]) -> int:
    """The chief (or single process): train, save, report, export, clean up."""
    layout = cfg.layout
    st = read_status(layout.status)
    if st is not None and st.state == SUCCEEDED and st.run_id == cfg.run_id:
        log.info("already completed: run %s Succeeded at step %d (export %s); nothing to do",
                 cfg.run_id, st.step, st.export_path)
        _cleanup(cfg, env)
        return 0
    check_data(cfg, may_download=True)
    import_tensorflow(cfg)
    from trainer.data import load_data
    from trainer.metrics import ChiefReporter

    data = load_data(cfg, may_download=True)
    reporter = ChiefReporter(cfg, data)
    try:
        if cfg.strategy == "parameter_server":
            from trainer.loop_ps import run_ps_chief

            step = run_ps_chief(cfg, task, data, reporter)
        else:
            from trainer.loop_sync import run_sync

            step = run_sync(cfg, task, data, reporter)
    except TrainerError as e:
        reporter.failed(str(e))
        raise
    except Exception as e:
        reporter.failed(f"{type(e).__name__}: {e}")
        raise
    log.info("training Succeeded at step %d", step)
    _cleanup(cfg, env)
    return 0


def run_sync_worker(cfg: TrainConfig, task: Task) -> int:
    """A non-chief multi_worker_mirrored worker: train in lockstep, then idle."""
    if is_completed(cfg.layout.status, cfg.run_id):
        log.info("training run %s already Succeeded (status.json): %s does not train; idling "
                 "until SIGTERM", cfg.run_id, task.name)
        wait_for_sigterm()
        return 0
    check_data(cfg, may_download=False)
    import_tensorflow(cfg)
    from trainer.data import load_data
    from trainer.loop_sync import run_sync

    data = load_data(cfg, may_download=False)
    run_sync(cfg, task, data, None)
    log.info("%s finished its steps; waiting for the chief to report success, then idling "
             "until SIGTERM (a StatefulSet pod must not exit)", task.name)
    signal.signal(signal.SIGTERM, _on_sigterm)
    while not _stop.is_set() and not is_completed(cfg.layout.status, cfg.run_id):
        time.sleep(2)
    wait_for_sigterm()
    return 0


def run_evaluator_role(cfg: TrainConfig) -> int:
    """The evaluator side task."""
    check_data(cfg, may_download=False)
    import_tensorflow(cfg)
    from trainer.data import load_data
    from trainer.evaluator import run_evaluator

    data = load_data(cfg, may_download=False)
    run_evaluator(cfg, data)
    return 0


def dispatch(cfg: TrainConfig, task: Task, env: Mapping[str, str] | None = None) -> int:
    """Run this process's role; returns the exit code."""
    env = os.environ if env is None else env
    log.info("role %s, strategy %s, run %s, storage %s (cluster from %s)", task.name,
             cfg.strategy, cfg.run_id, cfg.storage_root, task.source)
    if task.task_type == "evaluator":
        return run_evaluator_role(cfg)
    if cfg.strategy == "parameter_server" and task.task_type in ("ps", "worker"):
        return run_server(cfg, task)
    if task.is_chief:
        return run_chief(cfg, task, env)
    return run_sync_worker(cfg, task)
