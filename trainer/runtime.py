"""Process set-up that must happen before TensorFlow is imported, and logging.

``configure_process`` sets the environment variables TensorFlow reads at import time
(``GRPC_FAIL_FAST``, ``TF_CPP_MIN_LOG_LEVEL``, thread counts) and only then imports it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping

from trainer.config import TrainConfig

LOGGER_NAME = "trainer"


def setup_logging(task_name: str = "") -> logging.Logger:
    """A ``trainer`` logger on stderr that TensorFlow's absl logging does not hijack."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    prefix = f" {task_name}" if task_name else ""
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s trainer{prefix}: %(message)s")
    )
    logger.addHandler(handler)
    return logger


def prepare_environment(cfg: TrainConfig, env: MutableMapping[str, str]) -> None:
    """Environment TensorFlow reads when it is imported. Never overrides what is set."""
    # Fail RPCs to a dead task fast so the coordinator can handle worker/ps loss.
    env.setdefault("GRPC_FAIL_FAST", "use_caller")
    # Hide TensorFlow's INFO chatter unless the user asked to see device placement.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if cfg.log_device_placement else "1")
    # Keras 3 is used everywhere (custom loops); never the legacy tf-keras.
    env.setdefault("KERAS_BACKEND", "tensorflow")
    if cfg.intra_op_threads:
        env["TF_NUM_INTRAOP_THREADS"] = str(cfg.intra_op_threads)
    if cfg.inter_op_threads:
        env["TF_NUM_INTEROP_THREADS"] = str(cfg.inter_op_threads)


def import_tensorflow(cfg: TrainConfig) -> None:
    """Import TensorFlow after :func:`prepare_environment` and apply runtime options."""
    prepare_environment(cfg, os.environ)
    import tensorflow as tf

    if cfg.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.intra_op_threads)
    if cfg.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(cfg.inter_op_threads)
    if cfg.log_device_placement:
        tf.debugging.set_log_device_placement(True)
