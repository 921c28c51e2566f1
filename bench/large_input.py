#!/usr/bin/env python3
"""B1L: the one-process trainer on 28x28 MNIST-shaped input, against Keras `fit` and the machine's limit.

Measured side by side in one run:
- the trainer as the chart runs it (the single_device chief from the rendered manifest, a local
  process), `--dataset=mnist`, examples/s from step `--warmup` to the last step;
- bench/plain_keras.py (`model.compile` + `model.fit`) on the same model, examples, batch and optimizer;
- the machine's matmul limit: a 2048x2048 `tf.matmul` repeated in one TensorFlow process with its default
  threads, in GFLOP/s, in the trainer's arithmetic on this CPU (bfloat16 where --precision=auto picks
  mixed_bfloat16, else float32; the float32 limit is reported too).
The trainer's FLOP/s are its examples/s times the model's training FLOPs per example, counted from
the model's layers (multiply-adds x 2 of every convolution and dense layer; a training step is
counted as 3 forward passes: the forward pass, and the backward pass's input and weight gradients,
each as costly as the forward; pooling, activations and the optimizer are left out, so the figure
is a lower bound).

The data: the real MNIST (mnist.npz, checked against the trainer's sha256) where it is present
(`--mnist PATH`, `$TFD_MNIST_NPZ` or ~/.keras/datasets/mnist.npz); otherwise a generated set of the same
shape and size, offline: 70,000 28x28 uint8 images (the 8x8 scikit-learn digits scaled to 20x20 and
placed at random in the 28x28 frame, with random contrast and noise, as MNIST centres its digits in a
20x20 box). The row says which it was.

Usage: python bench/large_input.py [--repeat 2] [--steps 400] [--warmup 100] [--batch-size 100]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, Result, bench_env, local_training, median, print_rows
from throughput import cpu_by_role, plain_keras

from trainer.runtime import cpu_flags, resolve_precision

MATMUL_SIZE = 2048
MNIST_TRAIN, MNIST_TEST = 60_000, 10_000


def real_mnist(given: str | None) -> Path | None:
    """The real mnist.npz, if one is present and its sha256 is MNIST's."""
    from trainer.data import MNIST_SHA256  # imports TensorFlow: only when B1L runs

    candidates = [given, os.environ.get("TFD_MNIST_NPZ"), str(Path.home() / ".keras" / "datasets" / "mnist.npz")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and \
                hashlib.sha256(Path(candidate).read_bytes()).hexdigest() == MNIST_SHA256:
            return Path(candidate)
    return None


def generate_mnist_shaped(path: Path, seed: int = 0) -> None:
    """An mnist.npz of MNIST's shape and size from the offline digits (see the module docstring)."""
    import numpy as np
    from scipy.ndimage import zoom

    from trainer.data import digits_arrays

    images_8x8, digit_labels = digits_arrays()
    small = images_8x8.astype(np.float32) / 16.0
    glyphs = np.clip(zoom(small, (1, 20 / 8, 20 / 8), order=1), 0.0, 1.0)
    rng = np.random.default_rng(seed)
    total = MNIST_TRAIN + MNIST_TEST
    pick = rng.integers(0, len(glyphs), size=total)
    offsets = rng.integers(0, 9, size=(total, 2))
    contrast = rng.uniform(0.7, 1.0, size=total).astype(np.float32)
    images = np.zeros((total, 28, 28), dtype=np.float32)
    for i in range(total):
        top, left = offsets[i]
        images[i, top:top + 20, left:left + 20] = glyphs[pick[i]] * contrast[i]
    images += rng.normal(0.0, 0.05, size=images.shape).astype(np.float32)
    pixels = np.clip(images * 255.0, 0, 255).astype(np.uint8)
    labels = digit_labels.astype(np.uint8)[pick]
    np.savez(path, x_train=pixels[:MNIST_TRAIN], y_train=labels[:MNIST_TRAIN],
             x_test=pixels[MNIST_TRAIN:], y_test=labels[MNIST_TRAIN:])


def matmul_limit(dtype: str = "float32", seconds: float = 3.0) -> float:
    """GFLOP/s of a repeated 2048x2048 matmul of `dtype` in a fresh TensorFlow process (default threads; oneDNN
    on, as the trainer runs)."""
    script = f"""
import json, time
import tensorflow as tf
n = {MATMUL_SIZE}
a = tf.cast(tf.random.normal([n, n]), tf.{dtype}); b = tf.cast(tf.random.normal([n, n]), tf.{dtype})
mm = tf.function(lambda a, b: tf.matmul(a, b))
for _ in range(3):
    mm(a, b).numpy()
runs, began = 0, time.perf_counter()
while time.perf_counter() - began < {seconds}:
    c = mm(a, b)
    runs += 1
c.numpy()
print(json.dumps({{"gflops": 2 * n ** 3 * runs / (time.perf_counter() - began) / 1e9}}))
"""
    env = bench_env() | {"TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"the matmul measurement failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["gflops"])


def training_flops_per_example(image_shape: tuple[int, int, int]) -> float:
    """3 x the forward pass's FLOPs (2 per multiply-add) of the model's convolutions and dense layers."""
    import tensorflow as tf

    from trainer.model import build_model

    model = build_model(image_shape)
    forward = 0
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Conv2D):
            _, height, width, channels_out = layer.output.shape
            kernel_h, kernel_w, channels_in, _ = layer.kernel.shape
            forward += 2 * height * width * channels_out * kernel_h * kernel_w * channels_in
        elif isinstance(layer, tf.keras.layers.Dense):
            inputs, outputs = layer.kernel.shape
            forward += 2 * inputs * outputs
    return 3.0 * forward


def results(repeat: int = 2, steps: int = 400, warmup: int = 100, batch_size: int = 100,
            mnist: str | None = None) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="tfd-bench-mnist-") as data_dir:
        real = real_mnist(mnist)
        target = Path(data_dir) / "mnist.npz"
        if real is not None:
            target.symlink_to(real)
            source = "real MNIST"
        else:
            generate_mnist_shaped(target)
            source = "generated MNIST-shaped set (no mnist.npz here: digits scaled to 28x28)"
        sets = ["training.dataset=mnist", f"training.dataDir={data_dir}"]
        precision = resolve_precision("auto", cpu_flags(), has_gpu=False)  # what the trainer picks on this CPU
        dtype = "bfloat16" if precision == "mixed_bfloat16" else "float32"
        keras, runs, limits, fp32_limits = [], [], [], []
        for _ in range(repeat):
            fp32_limits.append(matmul_limit("float32"))
            limits.append(matmul_limit(dtype) if dtype != "float32" else fp32_limits[-1])
            keras.append(plain_keras(batch_size, (steps - warmup) * batch_size,
                                     ["--dataset=mnist", f"--data-dir={data_dir}"]))
            runs.append(local_training("single_device", 1, steps, batch_size, sets))
    speed = median([run.examples_per_sec(warmup) for run in runs])
    keras_speed = median([k["examples_per_sec"] for k in keras])
    limit, fp32_limit = median(limits), median(fp32_limits)
    flops = training_flops_per_example((28, 28, 1))
    achieved = speed * flops / 1e9
    vs_keras, vs_limit = speed / keras_speed, achieved / limit
    setting = (f"{source}, batch {batch_size}, steps {warmup}..{steps}, {repeat} runs each; the trainer's "
               f"precision here {precision} (--precision=auto), Keras fit float32")
    cpu = cpu_by_role(runs, warmup)
    return [
        Result("B1L", "trainer (1 process) / plain Keras fit, 28x28",
               f"{speed:.0f} vs {keras_speed:.0f} examples/s", vs_keras, ">= 1.5", vs_keras >= 1.5,
               [f"{setting}; CPU-ms per step: trainer {cpu}, "
                f"Keras fit {median([k['cpu_ms_per_step'] for k in keras]):.1f}"]),
        Result("B1Lm", "trainer FLOP/s / matmul limit, 28x28",
               f"{achieved:.0f} vs {limit:.0f} GFLOP/s", vs_limit, ">= 0.5", vs_limit >= 0.5,
               [f"{flops / 1e6:.1f} MFLOP per training example (3 x forward); the limit: matmul "
                f"{MATMUL_SIZE}x{MATMUL_SIZE} in the trainer's arithmetic ({dtype}), default threads, median of "
                f"{repeat}; float32 matmul {fp32_limit:.0f} GFLOP/s "
                f"(the trainer at {achieved / fp32_limit:.2f} of it)"]),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--mnist", help="the real mnist.npz (default: $TFD_MNIST_NPZ or ~/.keras/datasets/mnist.npz)")
    options = parser.parse_args()
    print_rows(results(options.repeat, options.steps, options.warmup, options.batch_size, options.mnist))
    return 0


if __name__ == "__main__":
    sys.exit(main())
