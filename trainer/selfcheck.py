"""``python -m trainer.selfcheck``: does this environment run everything the chart's pods run?

The image builds run it as their last step, so a missing dependency fails the build instead of the
first training run. It checks, in this order and with one line each:

* TensorFlow imports and is the pinned version;
* ``tf.summary`` writes an event file (it needs the ``tensorboard`` package since TF 2.21's wheel
  no longer depends on it) and TensorBoard's own reader loads the scalar back;
* the offline ``digits`` data set loads (trainer/datasets/digits.csv.gz);
* prometheus_client renders the trainer's metrics (TFD_METRICS_PORT, trainer.monitoring);
* every trainer module imports;
* the GPU boundary: CUDA support compiled in and the GPUs TensorFlow sees (``--require-gpu`` fails
  when it sees none; without it the count is only reported, so a GPU image can be checked on CPU).

Exit code 0 when every check passes, 1 otherwise (each failure named on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

TENSORFLOW_VERSION = "2.21.0"


def _tensorflow() -> str:
    import tensorflow as tf

    if tf.__version__ != TENSORFLOW_VERSION:
        raise RuntimeError(f"tensorflow {tf.__version__} is installed, the trainer is pinned to {TENSORFLOW_VERSION}")
    return f"tensorflow {tf.__version__}"


def _summaries() -> str:
    import tensorflow as tf
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.version import VERSION

    with tempfile.TemporaryDirectory(prefix="tfd-selfcheck-") as logdir:
        writer = tf.summary.create_file_writer(logdir)
        with writer.as_default():
            tf.summary.scalar("loss", 0.5, step=1)
        writer.close()
        events = EventAccumulator(logdir)
        events.Reload()
        tags = events.Tags().get("tensors", []) + events.Tags().get("scalars", [])
        if "loss" not in tags:
            raise RuntimeError(f"TensorBoard read no 'loss' scalar back from {logdir} (tags: {tags})")
    return f"tf.summary + tensorboard {VERSION}"


def _digits() -> str:
    from trainer.data import digits_arrays

    images, _ = digits_arrays()
    if images.shape != (1797, 8, 8):
        raise RuntimeError(f"digits has shape {images.shape}, expected (1797, 8, 8)")
    return "digits data set (1797 images)"


def _metrics() -> str:
    from importlib.metadata import version

    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    Gauge("tfd_selfcheck", "selfcheck", registry=registry).set(1)
    if b"tfd_selfcheck 1.0" not in generate_latest(registry):
        raise RuntimeError("prometheus_client did not render a gauge")
    return f"prometheus_client {version('prometheus_client')}"


def _trainer_modules() -> str:
    import trainer

    names = sorted(
        module.name for module in pkgutil.iter_modules(trainer.__path__, "trainer.") if module.name != __name__
    )
    for name in names:
        importlib.import_module(name)
    return f"{len(names)} trainer modules"


def _gpu(require: bool) -> Callable[[], str]:
    def check() -> str:
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        built = tf.test.is_built_with_cuda()
        if require and not gpus:
            raise RuntimeError(f"TensorFlow sees no GPU (built with CUDA: {built}); is the NVIDIA runtime on?")
        return f"built with CUDA: {built}, GPUs visible: {len(gpus)}"

    return check


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.selfcheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--require-gpu", action="store_true", help="fail when TensorFlow sees no GPU")
    args = parser.parse_args(argv)
    checks: list[tuple[str, Callable[[], str]]] = [
        ("tensorflow", _tensorflow),
        ("summaries", _summaries),
        ("data", _digits),
        ("metrics", _metrics),
        ("trainer", _trainer_modules),
        ("gpu", _gpu(args.require_gpu)),
    ]
    failed = 0
    for name, check in checks:
        try:
            print(f"selfcheck: ok   {name}: {check()}", flush=True)
        except Exception as error:  # every failure is reported, then the exit code says it
            failed += 1
            print(f"selfcheck: FAIL {name}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    print(f"selfcheck: {len(checks) - failed} passed, {failed} failed ({Path(sys.executable)})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
