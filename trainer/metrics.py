"""What the chief reports: the step log line, TensorBoard scalars, status.json and the Prometheus
metrics (trainer.monitoring; a no-op unless TFD_METRICS_PORT serves them).

Only the chief (or the single process) creates a :class:`ChiefReporter`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import tensorflow as tf

from tfdcontract import format_step_line
from trainer.config import TrainConfig
from trainer.data import DataSource
from trainer.export import export_model, versions, write_predict_request
from trainer.model import evaluate, local_copy
from trainer.monitoring import current as current_monitor
from trainer.status import (
    FAILED,
    INTERRUPTED,
    RUNNING,
    SUCCEEDED,
    Status,
    read_status,
    utc_now,
    with_updates,
    write_status,
)

log = logging.getLogger("trainer.metrics")


def step_line(step: int, loss: float, examples_per_sec: float, sec_per_batch: float) -> str:
    """The chief's progress line (tfdcontract.format_step_line)."""
    return format_step_line(step, loss, examples_per_sec, sec_per_batch)


class ThroughputMeter:
    """Examples/sec and sec/batch between two log points."""

    def __init__(self, batch_size: int, step: int) -> None:
        self.batch_size = batch_size
        self._step = step
        self._t = time.monotonic()
        self._start = (step, self._t)

    def tick(self, step: int) -> tuple[float, float]:
        """(examples/sec, sec/batch) since the last tick."""
        now = time.monotonic()
        steps = max(1, step - self._step)
        dt = max(now - self._t, 1e-9)
        self._step, self._t = step, now
        return steps * self.batch_size / dt, dt / steps


    def average(self, step: int) -> float:
        """Examples/sec since the meter started (training's start or a restarted chief's)."""
        start_step, start_t = self._start
        return (step - start_step) * self.batch_size / max(time.monotonic() - start_t, 1e-9)


class ChiefReporter:
    """Step lines, scalars (loss, accuracy, learning_rate, examples_per_sec), status.json, Prometheus metrics."""

    def __init__(self, cfg: TrainConfig, data: DataSource) -> None:
        self.cfg = cfg
        self.data = data
        self.layout = cfg.layout
        self.monitor = current_monitor()
        self._writer: Any = None
        prev = read_status(self.layout.status)
        started, step, saved = utc_now(), 0, None
        if prev is not None and prev.run_id == cfg.run_id and prev.state != SUCCEEDED:
            # a restarted chief continues the run
            started, step, saved = prev.started_at, prev.step, prev.checkpoint_step
        self.status = Status(
            state=RUNNING, strategy=cfg.strategy, step=step, train_steps=cfg.train_steps,
            loss=None, accuracy=None, examples_per_sec=None, export_path=None,
            started_at=started, updated_at=utc_now(), message="starting",
            run_id=cfg.run_id, model_name=cfg.model_name, dataset=cfg.dataset,
            exported_versions=versions(self.layout.export_base), checkpoint_step=saved,
        )
        self._last_eval: tuple[int, Any, float] | None = None
        # One writer at a time, and an ending (Succeeded, Interrupted) is the last word: the shutdown
        # watchdog records Interrupted from its own thread while the main thread may be mid-write.
        self._write_lock = threading.Lock()
        self._ended = False
        self._write()

    @property
    def writer(self) -> Any:
        """The TensorBoard writer, created on first use: under parameter_server the
        chief's device names change when it connects to the cluster, so it must not be
        created before the strategy."""
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.layout.logs))
        return self._writer

    def _write(self, ending: bool = False) -> None:
        with self._write_lock:
            if self._ended:
                return
            self.monitor.state(self.status.state)
            write_status(self.layout.status, self.status)
            self._ended = ending

    def _checkpoint_time(self, step: int) -> float | None:
        """When the checkpoint training resumes from was written (its state file's mtime)."""
        if not step:
            return None
        try:
            return (self.layout.checkpoints / "checkpoint").stat().st_mtime
        except OSError:
            return None

    def started(self, step: int) -> None:
        """Training (re)starts at ``step``."""
        msg = f"resumed at step {step}" if step else "training"
        saved = step if step else self.status.checkpoint_step  # resumed from the checkpoint at `step`
        self.status = with_updates(self.status, step=step, message=msg, checkpoint_step=saved)
        self.monitor.training_started(step, self.cfg.train_steps, self._checkpoint_time(step))
        self.monitor.server_up(True)
        self._write()

    def log_step(self, step: int, loss: float, examples_per_sec: float, sec_per_batch: float,
                 average_examples_per_sec: float | None = None) -> None:
        """Print the step line, write scalars, refresh status.json."""
        print(step_line(step, loss, examples_per_sec, sec_per_batch), flush=True)
        with self.writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("learning_rate", self.cfg.learning_rate)
            tf.summary.scalar("examples_per_sec", examples_per_sec)
        self.status = with_updates(self.status,
            step=step, loss=round(loss, 6), examples_per_sec=round(examples_per_sec, 1),
            average_examples_per_sec=None if average_examples_per_sec is None else round(average_examples_per_sec, 1),
            message="training",
        )
        self.monitor.training_step(step, loss, examples_per_sec)
        self._write()

    def held_out(self, step: int, weights: list[Any]) -> tuple[Any, float, float]:
        """Evaluate ``weights`` on the held-out split; write ``accuracy``; return the model."""
        model = local_copy(self.data.image_shape, weights)
        loss, acc = evaluate(model, self.data.eval_x, self.data.eval_y)
        with self.writer.as_default(step=step):
            tf.summary.scalar("accuracy", acc)
        self.writer.flush()
        self.status = with_updates(self.status, step=step, accuracy=round(acc, 6))
        self.monitor.training_step(step)
        self.monitor.heldout_accuracy(acc)
        self._write()
        log.info("held-out accuracy at step %d: %.4f (loss %.4f, %d examples)",
                 step, acc, loss, len(self.data.eval_y))
        self._last_eval = (step, model, acc)
        return model, loss, acc

    def checkpointed(self, step: int, path: str, weights: list[Any]) -> None:
        """A checkpoint was saved: log it and evaluate it."""
        log.info("saved checkpoint for step %d: %s", step, path)
        self.monitor.checkpointed()
        self.status = with_updates(self.status, checkpoint_step=step)  # written with the accuracy below
        self.held_out(step, weights)

    def finish(self, step: int, weights: list[Any]) -> None:
        """Final evaluation, export, status Succeeded."""
        if self._last_eval is not None and self._last_eval[0] == step:
            _, model, acc = self._last_eval  # the final checkpoint was just evaluated
        else:
            model, _, acc = self.held_out(step, weights)
        gate = self.cfg.export_min_accuracy
        if acc < gate:
            log.warning("held-out accuracy %.4f is below --export-min-accuracy %.4f: no SavedModel exported "
                        "(Serving keeps the versions it has)", acc, gate)
            exported, message = None, (f"training completed: {step} steps, held-out accuracy {acc:.4f} below the "
                                       f"export threshold {gate:.4f}: not exported")
        else:
            path = export_model(model, self.data.image_shape, self.layout.export_base)
            write_predict_request(self.layout.predict_request, self.data.eval_x[:1])
            log.info("exported SavedModel version %s (held-out accuracy %.4f)", path, acc)
            exported, message = str(path), f"training completed: {step} steps, held-out accuracy {acc:.4f}"
        self.writer.flush()
        self.writer.close()
        self.status = with_updates(self.status, state=SUCCEEDED, step=step, export_path=exported, message=message,
                                   exported_versions=versions(self.layout.export_base))
        self.monitor.training_step(step)
        self._write(ending=True)
        self.monitor.server_up(False)

    def interrupted(self, step: int | None, message: str) -> None:
        """Record a stop on SIGTERM/SIGINT (``step``: the checkpoint saved, if any)."""
        changes: dict[str, Any] = {"state": INTERRUPTED, "message": message}
        if step is not None:
            changes["step"] = changes["checkpoint_step"] = step
            self.monitor.checkpointed()
        self.status = with_updates(self.status, **changes)
        self.monitor.server_up(False)
        try:
            self._write(ending=True)
        except OSError as e:
            log.warning("cannot write status.json: %s", e)

    def failed(self, message: str) -> None:
        """Record a failure in status.json (the Job may retry)."""
        self.status = with_updates(self.status, state=FAILED, message=message)
        self.monitor.server_up(False)
        try:
            self._write()
        except OSError as e:
            log.warning("cannot write status.json: %s", e)
