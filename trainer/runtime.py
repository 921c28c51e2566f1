"""Process set-up that must happen before TensorFlow is imported, and logging.

``import_tensorflow`` sets the environment variables TensorFlow reads at import time
(``GRPC_FAIL_FAST``, ``TF_CPP_MIN_LOG_LEVEL``, ``TF_ENABLE_ONEDNN_OPTS``, thread counts), only then
imports it, and sets the Keras precision policy (``--precision``).
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
    # TensorFlow turns its oneDNN kernels on by default only on x86 CPUs with AVX512-VNNI, AVX512-BF16,
    # AVX-VNNI or AMX; elsewhere (AMD EPYC before Zen 4, older Xeons) it runs Eigen's, which cost this
    # model 2 to 3 times the CPU per step (bench/RESULTS.md, "B1 across CPU vendors"). oneDNN runs on
    # every x86-64 CPU, so the trainer asks for it everywhere; TF_ENABLE_ONEDNN_OPTS=0 still turns it off.
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
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
    precision = resolve_precision(cfg.precision, cpu_flags(), bool(tf.config.list_physical_devices("GPU")))
    if precision != "float32":
        tf.keras.mixed_precision.set_global_policy(precision)
    logging.getLogger(LOGGER_NAME).info("precision: %s%s", precision,
                                        " (--precision=auto)" if cfg.precision == "auto" else "")


#: CPU flags (as /proc/cpuinfo names them) of bfloat16 arithmetic that oneDNN uses for matmuls and convolutions
BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags on Linux; empty elsewhere (then auto means float32)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def resolve_precision(asked: str, flags: frozenset[str], has_gpu: bool) -> str:
    """``--precision``'s Keras policy: auto is mixed_bfloat16 on a CPU-only machine whose CPU has bfloat16
    instructions (there it halves the time of this model's convolutions and matmuls), else float32."""
    if asked != "auto":
        return asked
    return "mixed_bfloat16" if not has_gpu and any(flag in flags for flag in BF16_FLAGS) else "float32"
