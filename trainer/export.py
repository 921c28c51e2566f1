"""Versioned SavedModel export for TF Serving.

``<storage-root>/export/<model>/<N>/`` with N = 1 + the largest existing version, written
into a hidden temporary directory and renamed into place, so TF Serving (which watches
the base directory for integer-named versions) never loads a half-written model.

Signature ``serving_default``: input ``images`` float32 ``[None, H, W, 1]`` in ``[0, 1]``;
outputs ``probabilities`` float32 ``[None, 10]`` and ``classes`` int64 ``[None]``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import tensorflow as tf

from tfdcontract import SERVING

INPUT_NAME = "images"  # the serving signature's one input

class ServingModule(tf.Module):  # type: ignore[misc]
    """Wraps a Keras model with the serving signature."""

    def __init__(self, model: Any, image_shape: tuple[int, int, int]) -> None:
        super().__init__(name=SERVING)
        self.model = model
        self.serve = tf.function(
            self._serve,
            input_signature=[tf.TensorSpec([None, *image_shape], tf.float32, name=INPUT_NAME)],
        )

    def _serve(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        probabilities = tf.nn.softmax(self.model(images, training=False), axis=-1)
        return {
            "probabilities": tf.identity(probabilities, name="probabilities"),
            "classes": tf.argmax(probabilities, axis=-1, output_type=tf.int64, name="classes"),
        }


def versions(base: Path) -> list[int]:
    """Existing integer versions under ``base``, ascending."""
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def export_model(model: Any, image_shape: tuple[int, int, int], base: Path) -> Path:
    """Export ``model`` as the next version under ``base``; returns the version directory."""
    base.mkdir(parents=True, exist_ok=True)
    existing = versions(base)
    version = (existing[-1] + 1) if existing else 1
    tmp = base / f".tmp-{version}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    module = ServingModule(model, image_shape)
    concrete = module.serve.get_concrete_function()
    tf.saved_model.save(module, str(tmp), signatures={"serving_default": concrete})
    final = base / str(version)
    os.replace(tmp, final)
    return final


def write_predict_request(path: Path, images: Any) -> None:
    """A TensorFlow Serving REST predict request for ``images`` (held-out examples, ``[N, H, W, 1]``), in
    the row format with the input named; written whole (temporary file, rename) as status.json is."""
    instances = [{INPUT_NAME: [[[round(float(v), 4) for v in pixel] for pixel in row] for row in image]}
                 for image in images]  # fmt: skip
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"signature_name": "serving_default", "instances": instances}) + "\n", encoding="utf-8")
    os.replace(tmp, path)
