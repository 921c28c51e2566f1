"""The LeNet-style CNN of the classic TensorFlow MNIST reference program.

conv(5x5, 32) - maxpool(2) - conv(5x5, 64) - maxpool(2) - dense(1024) - dropout(0.5) -
dense(10 logits). ``same`` padding everywhere, so any input size works (8x8 digits,
28x28 MNIST). Keras 3 layers; training loops are custom (see loop_ps / loop_sync).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

NUM_CLASSES = 10


def build_model(image_shape: tuple[int, int, int], dtype: str | None = None) -> Any:
    """A new, unbuilt-optimizer Keras model producing logits ``[None, 10]``. ``dtype``: the layers' precision
    policy (None: Keras' global policy, which --precision sets)."""
    keras = tf.keras
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=image_shape, name="images"),
            layers.Conv2D(32, 5, padding="same", activation="relu", name="conv1", dtype=dtype),
            layers.MaxPooling2D(2, padding="same", name="pool1", dtype=dtype),
            layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2", dtype=dtype),
            layers.MaxPooling2D(2, padding="same", name="pool2", dtype=dtype),
            layers.Flatten(name="flatten", dtype=dtype),
            layers.Dense(1024, activation="relu", name="fc1", dtype=dtype),
            layers.Dropout(0.5, name="dropout", dtype=dtype),
            # float32 logits under any precision policy: the loss, evaluation and serving read them
            layers.Dense(NUM_CLASSES, name="logits", dtype="float32"),
        ],
        name="lenet",
    )


def build_optimizer(learning_rate: float, momentum: float) -> Any:
    """SGD (with momentum when > 0)."""
    return tf.keras.optimizers.SGD(learning_rate=learning_rate, momentum=momentum)


def evaluate(
    model: Any, x: np.ndarray, y: np.ndarray, batch_size: int = 1024
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of a (local) model on held-out arrays."""
    total_loss = 0.0
    correct = 0
    for start in range(0, len(x), batch_size):
        xb = tf.constant(x[start:start + batch_size])
        yb = y[start:start + batch_size]
        logits = model(xb, training=False)
        losses = tf.keras.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True)
        total_loss += float(tf.reduce_sum(losses))
        correct += int(np.sum(np.argmax(logits.numpy(), axis=1) == yb))
    n = max(1, len(x))
    return total_loss / n, correct / n


def float32_model(image_shape: tuple[int, int, int]) -> Any:
    """:func:`build_model` computing in float32 whatever the global policy (--precision): evaluation and
    the exported SavedModel compute in float32 however the weights (float32 under every policy) were
    trained."""
    return build_model(image_shape, dtype="float32")


def local_copy(image_shape: tuple[int, int, int], weights: list[np.ndarray]) -> Any:
    """A float32 model outside any distribution strategy holding ``weights``."""
    m = float32_model(image_shape)
    m.set_weights(weights)
    return m
