"""The evaluator side task: evaluate every new checkpoint on the held-out split.

It polls ``<storage-root>/checkpoints``, restores each new checkpoint into a local
model, writes ``loss`` and ``accuracy`` scalars to ``<storage-root>/logs/eval`` and logs
``evaluated checkpoint at step N: ...``. It exits 0 once status.json says this run
Succeeded and the newest checkpoint has been evaluated. It never writes status.json.
"""

from __future__ import annotations

import logging
import time

import tensorflow as tf

from trainer.checkpoint import all_checkpoints, restore_model, step_of
from trainer.config import TrainConfig
from trainer.data import DataSource
from trainer.errors import TrainingFailure
from trainer.model import evaluate, float32_model
from trainer.status import SUCCEEDED, read_status

log = logging.getLogger("trainer.evaluator")


def run_evaluator(cfg: TrainConfig, data: DataSource) -> int:
    """Evaluate checkpoints until training Succeeded; returns the last evaluated step."""
    layout = cfg.layout
    model = float32_model(data.image_shape)
    writer = tf.summary.create_file_writer(str(layout.eval_logs))
    evaluated = -1
    started = time.monotonic()
    log.info("evaluator watching %s", layout.checkpoints)
    while True:
        # Read the status before listing checkpoints: the chief saves the final
        # checkpoint before it writes Succeeded, so the listing below includes it.
        st = read_status(layout.status)
        done = st is not None and st.state == SUCCEEDED and st.run_id == cfg.run_id
        for path in all_checkpoints(layout.checkpoints):
            if step_of(path) <= evaluated:
                continue
            try:
                step = restore_model(model, path)
            except (tf.errors.OpError, ValueError) as e:  # pruned or being written
                log.warning("cannot read checkpoint %s yet: %s", path, str(e).splitlines()[0])
                continue
            loss, acc = evaluate(model, data.eval_x, data.eval_y)
            with writer.as_default(step=step):
                tf.summary.scalar("loss", loss)
                tf.summary.scalar("accuracy", acc)
            writer.flush()
            log.info("evaluated checkpoint at step %d: loss = %.4f, accuracy = %.4f",
                     step, loss, acc)
            evaluated = step_of(path)
        if done and evaluated >= 0:
            log.info("training Succeeded and the final checkpoint (step %d) is evaluated; "
                     "evaluator done", evaluated)
            writer.close()
            return evaluated
        if cfg.eval_timeout_secs and time.monotonic() - started > cfg.eval_timeout_secs:
            raise TrainingFailure(
                f"evaluator: training did not succeed within --eval-timeout-secs="
                f"{cfg.eval_timeout_secs:.0f}"
            )
        time.sleep(cfg.eval_poll_secs)
