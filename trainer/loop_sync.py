"""Synchronous training: multi_worker_mirrored, mirrored and single_device.

Every replica computes gradients on its share of the global batch; they are all-reduced
(averaged) before every update. Fault behaviour is BackupAndRestore-like: all tasks save
at the same steps (the chief into <storage-root>/checkpoints, other workers into a
private temporary directory that nobody reads), and every task (re)starts from the
chief's latest checkpoint, so a restarted cluster resumes where the last save left off.

Stopping (SIGTERM/SIGINT, trainer.shutdown): at every chunk boundary the tasks vote once
(one small all-reduce under multi-worker; nothing to agree on in one process) on "stop"
(any task's signal) and "save now" (the chief's --checkpoint-every-seconds clock). On
stop every task saves the exact step it reached, collectively, and raises Interrupted.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import tensorflow as tf

from tfdcontract.phases import in_sync_line
from trainer.checkpoint import make_manager, restore_latest
from trainer.cluster import Task
from trainer.config import TrainConfig
from trainer.data import DataSource
from trainer.errors import EXIT_INTERRUPTED, ClusterFailure, ConfigError
from trainer.metrics import ChiefReporter, ThroughputMeter
from trainer.monitoring import current as current_monitor
from trainer.shutdown import Interrupted, Shutdown
from trainer.steps import (
    TrainState,
    chunk_size,
    create_state,
    make_multi_step,
    make_replica_step,
    steps_due,
    time_due,
)
from trainer.strategy import make_strategy

log = logging.getLogger("trainer.sync")

#: ``vote(stop, save) -> (stop, save)`` at a chunk boundary, the same answer on every task.
Vote = Callable[[bool, bool], tuple[bool, bool]]

_PEER_STOP = "stop requested by a peer task"
_LOST_PEER = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
              tf.errors.DeadlineExceededError, tf.errors.InternalError)


def _make_vote(strategy: Any) -> Vote:
    """One small all-reduce per chunk boundary under multi-worker sync: a stop request of
    any task stops every task, and a save asked for by any task (only the chief asks:
    the time rule is its decision) is taken by every task. Saves are collective, so all
    tasks must decide the same at the same step."""

    @tf.function  # type: ignore[untyped-decorator]
    def totals(flags: tf.Tensor) -> tf.Tensor:
        value = strategy.run(lambda: tf.identity(flags))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    def vote(stop: bool, save: bool) -> tuple[bool, bool]:
        total = totals(tf.constant([1.0 if stop else 0.0, 1.0 if save else 0.0])).numpy()
        return bool(total[0] > 0), bool(total[1] > 0)

    return vote


def _local_vote(stop: bool, save: bool) -> tuple[bool, bool]:
    return stop, save


@dataclass
class _SyncRun:
    """The state of one attempt's training loop (on every task of the strategy)."""

    cfg: TrainConfig
    state: TrainState
    manager: Any
    reporter: ChiefReporter | None
    shutdown: Shutdown
    vote: Vote
    meter: ThroughputMeter
    saved_step: int
    saved_time: float

    def log_step(self, step: int, loss_t: tf.Tensor) -> None:
        ex_s, s_b = self.meter.tick(step)
        if self.reporter is not None:
            self.reporter.log_step(step, float(loss_t), ex_s, s_b, self.meter.average(step))

    def save(self, step: int) -> str:
        path: str = self.manager.save(checkpoint_number=step)
        self.saved_step, self.saved_time = step, time.monotonic()
        return path

    def boundary(self, step: int, loss_t: tf.Tensor) -> None:
        """After a chunk: log, then stop (raises Interrupted) or save as the rules say."""
        cfg = self.cfg
        last = step == cfg.train_steps
        logged = step % cfg.log_every_steps == 0 or last
        if logged:
            self.log_step(step, loss_t)
        chief_time = self.reporter is not None and time_due(time.monotonic(), self.saved_time, cfg)
        stop, save = self.vote(self.shutdown.requested, chief_time)
        if stop:
            if not logged:
                self.log_step(step, loss_t)  # the step line of the exact step reached
            self.stop(step)
        if save or last or steps_due(step, self.saved_step, cfg):
            path = self.save(step)
            if self.reporter is not None:
                self.reporter.checkpointed(step, path, self.state.weights())

    def stop(self, step: int) -> NoReturn:
        """Save the exact step (every task: the save is collective) and raise Interrupted."""
        self.shutdown.phase = f"saving the checkpoint at step {step}"
        outcome = "checkpoint saved"
        try:
            if step != self.saved_step:
                path = self.save(step)
                log.info("saved checkpoint for step %d: %s", step, path)
        except tf.errors.OpError as e:
            outcome = (f"checkpoint NOT saved ({type(e).__name__}); a restart resumes from "
                       f"step {self.saved_step}")
        if self.shutdown.requested:
            raise self.shutdown.interrupted(f"at step {step}", outcome, step)
        raise Interrupted(_PEER_STOP, f"at step {step}", outcome, EXIT_INTERRUPTED, step)


def _lost_peer(e: Exception, saved_step: int) -> ClusterFailure:
    first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    return ClusterFailure(
        f"synchronous training lost a peer ({type(e).__name__}: {first.strip()[:300]}); "
        f"restarted tasks resume from the checkpoint at step {saved_step}"
    )


def run_sync(cfg: TrainConfig, task: Task, data: DataSource,
             reporter: ChiefReporter | None, shutdown: Shutdown) -> int:
    """Train to ``cfg.train_steps``; returns the final global step.

    ``reporter`` is None on non-chief workers (they write nothing to shared storage).
    A stop request (SIGTERM/SIGINT here or, under multi-worker, on any task) ends the
    loop at the next chunk boundary with a checkpoint of that step: Interrupted.
    """
    multi_worker = cfg.strategy == "multi_worker_mirrored" and (
        sum(len(v) for v in task.cluster.values()) > 1
    )
    strategy = make_strategy(cfg.strategy, task)
    shutdown.reclaim()
    current_monitor().server_up(True)
    log.info("%s", in_sync_line(cfg.strategy, strategy.num_replicas_in_sync))
    replicas = strategy.num_replicas_in_sync
    if cfg.batch_size % replicas:
        fits = sorted({cfg.batch_size - cfg.batch_size % replicas or replicas,
                       cfg.batch_size + replicas - cfg.batch_size % replicas})
        raise ConfigError(
            f"--batch-size {cfg.batch_size} is the global batch, split evenly across the "
            f"{replicas} replicas in sync ({cfg.strategy}); it is not divisible by {replicas}. "
            f"Fix: a multiple of {replicas}, e.g. {' or '.join(str(n) for n in fits)} "
            f"(--set training.batchSize={fits[-1]})"
        )
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

    if cfg.strategy == "single_device" and "GPU" not in strategy.extended.worker_devices[0].upper():
        # One CPU: the dataset's own iterator. The strategy's distributed iterator prefetches onto the
        # device through a multi-device iterator, which on the CPU costs ~2 CPU-ms per step and buys nothing.
        iterator = iter(dataset_fn(tf.distribute.InputContext()))
    else:
        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    train_steps = make_multi_step(strategy, replica_step)
    run = _SyncRun(cfg, state, manager, reporter, shutdown,
                   _make_vote(strategy) if multi_worker else _local_vote,
                   ThroughputMeter(cfg.batch_size, step), step, time.monotonic())
    try:
        with shutdown.deferred():
            shutdown.phase = "training"
            while step < cfg.train_steps:
                n = chunk_size(step, cfg)
                loss_t = train_steps(iterator, tf.constant(n))
                step += n
                run.boundary(step, loss_t)
    except _LOST_PEER as e:
        raise _lost_peer(e, run.saved_step) from None
    if reporter is not None:
        shutdown.phase = "evaluating and exporting"
        reporter.finish(step, state.weights())
    return step
