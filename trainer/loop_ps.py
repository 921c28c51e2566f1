"""Asynchronous parameter-server training, run by the chief (the coordinator).

Variables live on the ps tasks; the chief schedules step functions onto the workers
with ``tf.distribute.coordinator.ClusterCoordinator``. A lost worker is absorbed by the
coordinator (its steps are re-scheduled; a worker restarted under the same address
rejoins, and the chief logs ``worker:N rejoined``). A loss a lost worker had computed
cannot be read back any more: that chunk's step line is skipped with a warning. A lost
ps cannot be absorbed: the chief stops with ClusterFailure, and a restarted chief (with
the ps back) resumes from the latest checkpoint.

On SIGTERM/SIGINT (trainer.shutdown) the chief stops scheduling, waits for the closures
in flight (bounded by the grace period, keeping time for the save), saves the global step
reached and raises Interrupted; a restarted chief resumes at exactly that step.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import tensorflow as tf

from tfdcontract import PS
from trainer.checkpoint import make_manager, restore_latest
from trainer.cluster import Task
from trainer.config import TrainConfig
from trainer.data import DataSource
from trainer.errors import ClusterFailure
from trainer.metrics import ChiefReporter, ThroughputMeter
from trainer.shutdown import Shutdown, save_reserve
from trainer.steps import TrainState, checkpoint_due, create_state, make_multi_step, make_replica_step
from trainer.strategy import make_strategy, wait_for_cluster

log = logging.getLogger("trainer.ps")

#: How long the chief waits for ps/worker servers to accept connections at start-up.
CLUSTER_WAIT_SECS = 600.0
#: How often the chief polls ``ClusterCoordinator.done()`` while stopping.
DRAIN_POLL_SECS = 0.05
#: What the coordinator logs (at INFO, below what TensorFlow's logger shows) once a failed worker is back.
_RECOVERED = re.compile(r"^Worker /job:worker/replica:\d+/task:(\d+) has been recovered\.$")


class _WorkerRecovery(logging.Filter):
    """On TensorFlow's logger: says in the chief's log when the coordinator has taken a failed worker back
    (operators see TensorFlow's "Worker ... failed" errors, and nothing when it recovers). Records below
    the level the logger had stay hidden, so lowering it to INFO shows nothing else."""

    def __init__(self, shown_from: int) -> None:
        super().__init__()
        self.shown_from = shown_from

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.shown_from:
            return True
        found = _RECOVERED.match(record.getMessage())
        if found:
            log.info("worker:%s rejoined: the coordinator runs steps on it again", found.group(1))
        return False


def report_worker_recovery() -> None:
    """Log ``worker:N rejoined`` each time the coordinator takes a failed worker back (once per process)."""
    tf_logger = logging.getLogger("tensorflow")
    if any(isinstance(f, _WorkerRecovery) for f in tf_logger.filters):
        return
    shown_from = tf_logger.getEffectiveLevel()
    tf_logger.addFilter(_WorkerRecovery(shown_from))
    tf_logger.setLevel(min(shown_from, logging.INFO))


def lost_with_its_worker(error: Exception) -> bool:
    """Whether reading a closure's output failed because the worker holding it is gone (killed, restarted):
    the coordinator re-runs the closures a lost worker had not finished, but what it had computed is lost."""
    text = str(error)
    return "/job:worker/" in text and "/job:ps" not in text


def _failure(e: Exception, task: Task, step: int) -> ClusterFailure:
    text = str(e)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    lost = [f"ps:{i} ({a})" for i, a in enumerate(task.cluster.get(PS, []))
            if f"/job:ps/replica:0/task:{i}" in text or a in text]
    if lost or "/job:ps" in text:
        who = ", ".join(lost) or "a parameter server"
        return ClusterFailure(
            f"lost {who} ({type(e).__name__}): parameter-server state is gone; restart the "
            f"ps and the chief (the Job retries it) to resume from the checkpoint at step "
            f"{step}"
        )
    return ClusterFailure(
        f"parameter-server training failed ({type(e).__name__}: {first[:300]}); the chief "
        f"resumes from the checkpoint at step {step} when restarted"
    )


def _drain(coordinator: Any, seconds: float) -> bool:
    """Wait up to ``seconds`` for every scheduled closure; False when some are still in
    flight (e.g. waiting for a lost worker to come back) or one failed."""
    deadline = time.monotonic() + seconds
    try:
        while not coordinator.done():
            if time.monotonic() >= deadline:
                return False
            time.sleep(DRAIN_POLL_SECS)
    except (tf.errors.OpError, ConnectionError) as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
        log.warning("in-flight steps failed while stopping (%s: %s)", type(e).__name__, first[:300])
        return False
    return True


@dataclass
class _PsRun:
    """The coordinator's state during one attempt."""

    cfg: TrainConfig
    state: TrainState
    manager: Any
    reporter: ChiefReporter
    coordinator: Any
    shutdown: Shutdown
    meter: ThroughputMeter
    scheduled: int
    saved_step: int
    saved_time: float
    last_save_secs: float | None = None
    pending: tuple[Any, int] | None = None  # (last remote loss of a chunk, its step)

    def schedule_until(self, end: int, worker_fn: Any, iterator: Any) -> Any:
        """Schedule closures of up to --steps-per-execution steps up to ``end``, unless a
        stop is requested; returns the last closure's remote loss (None if none)."""
        rv: Any = None
        while self.scheduled < end and not self.shutdown.requested:
            n = min(self.cfg.steps_per_execution, end - self.scheduled)
            rv = self.coordinator.schedule(worker_fn, args=(iterator, tf.constant(n)))
            self.scheduled += n
        return rv

    def report_pending(self) -> None:
        """Print the step line of the pending chunk (waits for its closure)."""
        if self.pending is not None:
            rv, step = self.pending
            self.pending = None
            try:
                loss = float(rv.fetch())
            except (tf.errors.OpError, ConnectionError) as e:
                if not lost_with_its_worker(e):
                    raise
                log.warning("step %d: no step line, its loss was computed on a worker lost since", step)
                return
            ex_s, s_b = self.meter.tick(step)
            self.reporter.log_step(step, loss, ex_s, s_b, self.meter.average(step))

    def save(self) -> tuple[int, str | None]:
        """Save the global step read from the ps; returns (step, path), path None when
        that step is already the latest checkpoint."""
        started = time.monotonic()
        gstep = int(self.state.global_step.numpy())
        if gstep == self.saved_step:
            return gstep, None
        path: str = self.manager.save(checkpoint_number=gstep)
        self.saved_step, self.saved_time = gstep, time.monotonic()
        self.last_save_secs = self.saved_time - started
        return gstep, path

    def checkpoint(self) -> None:
        """Join (every scheduled step applied: a consistent state), save, evaluate (not
        when a stop is requested: the grace period is for saving)."""
        self.coordinator.join()
        self.report_pending()
        gstep, path = self.save()
        if path is None:
            return
        if self.shutdown.requested:
            log.info("saved checkpoint for step %d: %s", gstep, path)
        else:
            self.reporter.checkpointed(gstep, path, self.state.weights())

    def stop(self, rv: Any) -> NoReturn:
        """Wait (bounded) for the in-flight closures, save the step reached, raise Interrupted.

        The wait leaves :func:`save_reserve` of the grace period for the save. If closures
        are still in flight then (a lost worker), the checkpoint is saved anyway: the
        variables hold every step applied so far, and the global step counts exactly those.
        """
        shutdown = self.shutdown
        shutdown.phase = "waiting for the in-flight steps"
        reserve = save_reserve(shutdown.grace_seconds, self.last_save_secs)
        drained = _drain(self.coordinator, shutdown.time_left() - reserve)
        if drained:
            self.report_pending()
            self.pending = (rv, self.scheduled) if rv is not None else None
            self.report_pending()  # the step line of the exact step reached
        shutdown.phase = "saving the checkpoint"
        try:
            gstep, path = self.save()
        except (tf.errors.OpError, ConnectionError) as e:
            outcome = (f"checkpoint NOT saved ({type(e).__name__}); a restart resumes from "
                       f"step {self.saved_step}")
            raise shutdown.interrupted(f"at step {self.scheduled}", outcome) from None
        if path is not None:
            log.info("saved checkpoint for step %d: %s", gstep, path)
        outcome = "checkpoint saved" if drained else (
            "checkpoint saved (steps still in flight after the wait were abandoned)")
        raise shutdown.interrupted(f"at step {gstep}", outcome, gstep)


def run_ps_chief(cfg: TrainConfig, task: Task, data: DataSource, reporter: ChiefReporter,
                 shutdown: Shutdown) -> int:
    """Train to ``cfg.train_steps``; returns the final global step.

    A stop request (SIGTERM/SIGINT) stops the scheduling, waits (bounded) for the
    in-flight closures, saves the step reached and raises Interrupted.
    """
    wait_for_cluster(task, CLUSTER_WAIT_SECS)
    report_worker_recovery()
    saved_step = 0
    run: _PsRun | None = None
    try:
        strategy = make_strategy("parameter_server", task)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        shutdown.reclaim()
        state = create_state(strategy, cfg, data.image_shape)
        manager = make_manager(state.checkpoint, cfg.layout.checkpoints, cfg.keep_checkpoints)
        step = restore_latest(state.checkpoint, cfg.layout.checkpoints, state.global_step)
        saved_step = step
        reporter.started(step)
        replica_step = make_replica_step(state)

        def dataset_fn() -> tf.data.Dataset:
            # Per-worker pipelines cannot know their worker index: every worker shuffles
            # with its own random seed instead of reading a fixed shard.
            return data.train_dataset(cfg.batch_size, shuffle_seed=None)

        iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
        worker_fn = make_multi_step(strategy, replica_step)
        run = _PsRun(cfg, state, manager, reporter, coordinator, shutdown,
                     ThroughputMeter(cfg.batch_size, step), step, step, time.monotonic())
        with shutdown.deferred():
            shutdown.phase = "training"
            _train(run, worker_fn, iterator)
        saved_step = run.saved_step
        weights = state.weights()
    except (tf.errors.OpError, ConnectionError) as e:
        raise _failure(e, task, run.saved_step if run is not None else saved_step) from None
    shutdown.phase = "evaluating and exporting"
    reporter.finish(saved_step, weights)
    return saved_step


def _train(run: _PsRun, worker_fn: Any, iterator: Any) -> None:
    cfg = run.cfg
    while run.scheduled < cfg.train_steps:
        # Schedule up to the next multiple of --log-every-steps ...
        end = run.scheduled + min(cfg.log_every_steps - run.scheduled % cfg.log_every_steps,
                                  cfg.train_steps - run.scheduled)
        rv = run.schedule_until(end, worker_fn, iterator)
        if run.shutdown.requested:
            run.stop(rv)
        # ... and report the previous chunk while this one runs on the workers.
        run.report_pending()
        run.pending = (rv, run.scheduled)
        last = run.scheduled >= cfg.train_steps
        if last or checkpoint_due(run.scheduled, run.saved_step, run.saved_time,
                                  time.monotonic(), cfg):
            run.checkpoint()
    run.coordinator.join()
