"""Checkpoints: what is saved, where, and resuming from the latest one.

A checkpoint holds the model, the optimizer (including momentum slots) and the global
step. Files are ``<storage-root>/checkpoints/ckpt-<step>``: the checkpoint number is the
global step, so the latest checkpoint names the step training resumes from.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import tensorflow as tf

from tfdcontract.phases import fresh_start_line, resumed_line

log = logging.getLogger("trainer.checkpoint")

_STEP = re.compile(r"ckpt-(\d+)$")


def step_of(path: str) -> int:
    """The global step a checkpoint path was saved at (``.../ckpt-<step>``)."""
    m = _STEP.search(path)
    return int(m.group(1)) if m else -1


def make_manager(ckpt: Any, directory: Path, keep: int) -> Any:
    """A CheckpointManager writing ``ckpt-<step>`` files into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return tf.train.CheckpointManager(ckpt, str(directory), max_to_keep=keep,
                                      checkpoint_name="ckpt")


def latest(directory: Path) -> str | None:
    """Path prefix of the newest complete checkpoint in ``directory``, if any."""
    if not directory.is_dir():
        return None
    path: str | None = tf.train.latest_checkpoint(str(directory))
    return path


def all_checkpoints(directory: Path) -> list[str]:
    """All checkpoints still listed in the directory's state file, oldest first."""
    if not directory.is_dir():
        return []
    state = tf.train.get_checkpoint_state(str(directory))
    if state is None:
        return []
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    return sorted({p for p in paths if p}, key=step_of)


def restore_latest(ckpt: Any, directory: Path, global_step: Any) -> int:
    """Restore the newest checkpoint of ``directory`` into ``ckpt``; return the step.

    Logs ``resumed from checkpoint at step N`` (or ``no checkpoint ...``): the fault
    tests read that line.
    """
    path = latest(directory)
    if path is None:
        log.info("%s", fresh_start_line(directory))
        return 0
    ckpt.restore(path).assert_existing_objects_matched()
    step = int(global_step.numpy())
    log.info("%s", resumed_line(step, path))
    return step


def restore_model(model: Any, path: str) -> int:
    """Load only the model weights (and step) of a checkpoint into a local model."""
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(model=model, step=step).restore(path).expect_partial()
    return int(step.numpy())


def make_checkpoint(model: Any, optimizer: Any, global_step: Any) -> Any:
    """The tf.train.Checkpoint object graph every role agrees on (model, optimizer, step)."""
    return tf.train.Checkpoint(model=model, optimizer=optimizer, step=global_step)
