"""Synchronous training: multi_worker_mirrored, mirrored and single_device.

Every replica computes gradients on its share of the global batch; they are all-reduced
(averaged) before every update. Fault behaviour is BackupAndRestore-like: all tasks save
at the same steps (the chief into <storage-root>/checkpoints, other workers into a
private temporary directory that nobody reads), and every task (re)starts from the
chief's latest checkpoint, so a restarted cluster resumes where the last save left off.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import tensorflow as tf

from trainer.checkpoint import make_manager, restore_latest
from trainer.cluster import Task
from trainer.config import TrainConfig
from trainer.data import DataSource
from trainer.errors import ClusterFailure
from trainer.metrics import ChiefReporter, ThroughputMeter
from trainer.steps import checkpoint_due, chunk_size, create_state, make_multi_step, make_replica_step
from trainer.strategy import make_strategy

log = logging.getLogger("trainer.sync")


def _make_agree(strategy: Any) -> Any:
    """``agree(flag) -> bool``: True on every worker when any worker says True.

    One small all-reduce, so that a time-based checkpoint decision (clocks differ per
    worker) is taken by all workers together.
    """

    @tf.function  # type: ignore[untyped-decorator]
    def votes(flag: tf.Tensor) -> tf.Tensor:
        value = strategy.run(lambda: tf.identity(flag))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    def agree(flag: bool) -> bool:
        return int(votes(tf.constant(1.0 if flag else 0.0))) > 0

    return agree


def run_sync(cfg: TrainConfig, task: Task, data: DataSource,
             reporter: ChiefReporter | None) -> int:
    """Train to ``cfg.train_steps``; returns the final global step.

    ``reporter`` is None on non-chief workers (they write nothing to shared storage).
    """
    multi_worker = cfg.strategy == "multi_worker_mirrored" and (
        sum(len(v) for v in task.cluster.values()) > 1
    )
    strategy = make_strategy(cfg.strategy, task)
    log.info("%s: %d replica(s) in sync", cfg.strategy, strategy.num_replicas_in_sync)
    state = create_state(strategy, cfg, data.image_shape)
    if reporter is not None:
        save_dir = cfg.layout.checkpoints
    else:
        save_dir = Path(tempfile.mkdtemp(prefix=f"tfd-{task.task_type}{task.task_index}-ckpt-"))
    manager = make_manager(state.checkpoint, save_dir, cfg.keep_checkpoints)
    step = restore_latest(state.checkpoint, cfg.layout.checkpoints, state.global_step)
    if reporter is not None:
        reporter.started(step)
    replica_step = make_replica_step(state)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return data.train_dataset(
            ctx.get_per_replica_batch_size(cfg.batch_size),
            num_shards=ctx.num_input_pipelines, shard_index=ctx.input_pipeline_id,
            shuffle_seed=cfg.seed + ctx.input_pipeline_id,
        )

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    train_steps = make_multi_step(strategy, replica_step)

    agree = _make_agree(strategy) if multi_worker and cfg.checkpoint_every_secs > 0 else None
    meter = ThroughputMeter(cfg.batch_size, step)
    saved_step, saved_time = step, time.monotonic()
    try:
        while step < cfg.train_steps:
            n = chunk_size(step, cfg)
            loss_t = train_steps(iterator, tf.constant(n))
            step += n
            last = step == cfg.train_steps
            if step % cfg.log_every_steps == 0 or last:
                loss = float(loss_t)
                ex_s, s_b = meter.tick(step)
                if reporter is not None:
                    reporter.log_step(step, loss, ex_s, s_b)
                due = checkpoint_due(step, saved_step, saved_time, time.monotonic(), cfg)
                if agree is not None:
                    due = agree(due)  # time differs per worker; save together
            else:
                due = cfg.checkpoint_every_steps > 0 and step % cfg.checkpoint_every_steps == 0
            if due or last:
                path = manager.save(checkpoint_number=step)
                saved_step, saved_time = step, time.monotonic()
                if reporter is not None:
                    reporter.checkpointed(step, path, state.weights())
        if step != saved_step:
            manager.save(checkpoint_number=step)
            saved_step = step
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
            tf.errors.DeadlineExceededError, tf.errors.InternalError) as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise ClusterFailure(
            f"synchronous training lost a peer ({type(e).__name__}: {first.strip()[:300]}); "
            f"restarted tasks resume from the checkpoint at step {saved_step}"
        ) from None
    if reporter is not None:
        reporter.finish(step, state.weights())
    return step
