"""Training state (model, optimizer, global step) and the per-replica step, shared by
the asynchronous (parameter server) and synchronous loops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from trainer.checkpoint import make_checkpoint
from trainer.config import TrainConfig
from trainer.model import build_model, build_optimizer


@dataclass
class TrainState:
    """Variables created under a strategy scope."""

    model: Any
    optimizer: Any
    global_step: Any
    checkpoint: Any

    def weights(self) -> list[Any]:
        """Current model weights as numpy arrays (read from ps or the local replica)."""
        return list(self.model.get_weights())


def create_state(strategy: Any, cfg: TrainConfig, image_shape: tuple[int, int, int]) -> TrainState:
    """Create model, optimizer slots and the global step under ``strategy.scope()``."""
    tf.random.set_seed(cfg.seed)
    with strategy.scope():
        model = build_model(image_shape)
        optimizer = build_optimizer(cfg.learning_rate, cfg.momentum)
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    return TrainState(model, optimizer, global_step, make_checkpoint(model, optimizer, global_step))


def make_replica_step(state: TrainState) -> Any:
    """``(images, labels) -> mean loss of this replica's share of the global batch``.

    Losses are scaled by the global batch (``tf.nn.compute_average_loss``) so that summed
    over replicas they give the mean over the global batch.
    """
    model, optimizer, global_step = state.model, state.optimizer, state.global_step

    def replica_step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)  # bfloat16 under mixed precision
            per_example = tf.keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
            loss = tf.nn.compute_average_loss(per_example)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        global_step.assign_add(1)
        return loss

    return replica_step


def make_multi_step(strategy: Any, replica_step: Any) -> Any:
    """``(iterator, n) -> summed replica loss of the last of n steps``, as one tf.function.

    Running several steps per call (Keras' ``steps_per_execution``) keeps the Python loop,
    the function dispatch and, under parameter_server, the closure round trip through the
    coordinator out of the per-step cost. ``n`` is a tensor: one trace serves every size.
    """

    @tf.function  # type: ignore[untyped-decorator]
    def multi_step(iterator: Any, n: tf.Tensor) -> tf.Tensor:
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            images, labels = next(iterator)
            losses = strategy.run(replica_step, args=(images, labels))
            loss = strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
        return loss

    return multi_step


def chunk_size(step: int, cfg: TrainConfig) -> int:
    """Steps to run in the next call: at most ``--steps-per-execution``, ending exactly on the
    next log step, step-based checkpoint and the last step, so these happen where they would
    one step at a time."""
    n = min(cfg.steps_per_execution, cfg.train_steps - step,
            cfg.log_every_steps - step % cfg.log_every_steps)
    every = cfg.checkpoint_every_steps
    if every > 0:
        n = min(n, every - step % every)
    return max(1, n)


def steps_due(step: int, last_saved_step: int, cfg: TrainConfig) -> bool:
    """Whether ``--checkpoint-every-steps`` asks for a checkpoint at ``step`` (the same
    answer on every task: it depends on steps only)."""
    every = cfg.checkpoint_every_steps
    return every > 0 and step > last_saved_step and step // every > last_saved_step // every


def time_due(now: float, last_saved_time: float, cfg: TrainConfig) -> bool:
    """Whether ``--checkpoint-every-seconds`` passed since the last save (clocks differ
    per task: under multi-worker sync only the chief's answer counts)."""
    every = cfg.checkpoint_every_seconds
    return every > 0 and now - last_saved_time >= every


def checkpoint_due(step: int, last_saved_step: int, last_saved_time: float, now: float,
                   cfg: TrainConfig) -> bool:
    """Whether the step or time rule asks for a checkpoint at ``step``."""
    if step <= last_saved_step:
        return False
    return steps_due(step, last_saved_step, cfg) or time_due(now, last_saved_time, cfg)
