"""Asynchronous parameter-server training, run by the chief (the coordinator).

Variables live on the ps tasks; the chief schedules step functions onto the workers
with ``tf.distribute.coordinator.ClusterCoordinator``. A lost worker is absorbed by the
coordinator (its steps are re-scheduled; a worker restarted under the same address
rejoins). A lost ps cannot be absorbed: the chief stops with ClusterFailure, and a
restarted chief (with the ps back) resumes from the latest checkpoint.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf

from trainer.checkpoint import make_manager, restore_latest
from trainer.cluster import Task
from trainer.config import TrainConfig
from trainer.data import DataSource
from trainer.errors import ClusterFailure
from trainer.metrics import ChiefReporter, ThroughputMeter
from trainer.steps import checkpoint_due, create_state, make_multi_step, make_replica_step
from trainer.strategy import make_strategy, wait_for_cluster

log = logging.getLogger("trainer.ps")

#: How long the chief waits for ps/worker servers to accept connections at start-up.
CLUSTER_WAIT_SECS = 600.0


def _failure(e: Exception, task: Task, step: int) -> ClusterFailure:
    text = str(e)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    lost = [f"ps:{i} ({a})" for i, a in enumerate(task.cluster.get("ps", []))
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


def run_ps_chief(cfg: TrainConfig, task: Task, data: DataSource, reporter: ChiefReporter) -> int:
    """Train to ``cfg.train_steps``; returns the final global step."""
    wait_for_cluster(task, CLUSTER_WAIT_SECS)
    saved_step = 0
    try:
        strategy = make_strategy("parameter_server", task)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
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

        meter = ThroughputMeter(cfg.batch_size, step)
        saved_time = time.monotonic()
        scheduled = step
        pending: tuple[Any, int] | None = None  # (last remote loss of a chunk, its step)

        def report(chunk: tuple[Any, int]) -> None:
            loss = float(chunk[0].fetch())
            ex_s, s_b = meter.tick(chunk[1])
            reporter.log_step(chunk[1], loss, ex_s, s_b)

        while scheduled < cfg.train_steps:
            # Schedule up to the next multiple of --log-every-steps, in closures of up to
            # --steps-per-execution steps ...
            end = scheduled + min(cfg.log_every_steps - scheduled % cfg.log_every_steps,
                                  cfg.train_steps - scheduled)
            rv: Any = None
            while scheduled < end:
                n = min(cfg.steps_per_execution, end - scheduled)
                rv = coordinator.schedule(worker_fn, args=(iterator, tf.constant(n)))
                scheduled += n
            # ... and report the previous chunk while this one runs on the workers.
            if pending is not None:
                report(pending)
            pending = (rv, scheduled)
            last = scheduled >= cfg.train_steps
            if last or checkpoint_due(scheduled, saved_step, saved_time, time.monotonic(), cfg):
                coordinator.join()  # every scheduled step is applied: a consistent state
                report(pending)
                pending = None
                gstep = int(state.global_step.numpy())
                path = manager.save(checkpoint_number=gstep)
                saved_step, saved_time = gstep, time.monotonic()
                reporter.checkpointed(gstep, path, state.weights())
        coordinator.join()
        weights = state.weights()
    except (tf.errors.OpError, ConnectionError) as e:
        raise _failure(e, task, saved_step) from None
    reporter.finish(saved_step, weights)
    return saved_step
