#!/usr/bin/env python3
"""B1's baseline: the plain Keras training loop a user would write first, in one process.

The same model (trainer.model.build_model), the same training examples (the trainer's own
digits split) and the same batch size and optimizer as the trainer, trained with
`model.compile(...)` + `model.fit(x, y, batch_size=...)` on NumPy arrays: Keras' defaults
(steps_per_execution=1, no XLA on CPU), accuracy tracked as in the Keras examples.
One warm-up epoch (at most 50 batches) traces and compiles the train function; the timed `fit` then runs at least
`--examples` examples. Prints one JSON line: examples_per_sec and CPU-ms per step.

Usage: python bench/plain_keras.py [--batch-size 100] [--examples 50000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--examples", type=int, default=50_000)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--dataset", default="digits", help="the trainer's --dataset (mnist needs --data-dir)")
    parser.add_argument("--data-dir", default="", help="the trainer's --data-dir")
    options = parser.parse_args()

    import tensorflow as tf

    from trainer.config import parse_config
    from trainer.data import load_data
    from trainer.model import build_model

    given = [f"--dataset={options.dataset}", f"--batch-size={options.batch_size}"]
    cfg = parse_config(given + ([f"--data-dir={options.data_dir}"] if options.data_dir else []))
    data = load_data(cfg)
    assert data.train_x is not None and data.train_y is not None
    x = data.train_x.astype("float32") * data.scale
    y = data.train_y
    tf.random.set_seed(cfg.seed)
    model = build_model(data.image_shape)
    model.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=options.learning_rate, momentum=cfg.momentum),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    warm = min(len(x), 50 * options.batch_size)
    model.fit(x[:warm], y[:warm], batch_size=options.batch_size, epochs=1, verbose=0)  # warm-up: trace and compile
    if options.examples < len(x):  # a large set: one epoch of the first `examples`, whole batches
        keep = max(options.batch_size, options.examples - options.examples % options.batch_size)
        x, y = x[:keep], y[:keep]
    epochs = math.ceil(options.examples / len(x))
    steps = epochs * math.ceil(len(x) / options.batch_size)
    cpu, wall = time.process_time(), time.perf_counter()
    model.fit(x, y, batch_size=options.batch_size, epochs=epochs, verbose=0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        json.dumps(
            {
                "examples_per_sec": epochs * len(x) / wall,
                "cpu_ms_per_step": cpu * 1000 / steps,
                "examples": epochs * len(x),
                "steps": steps,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
