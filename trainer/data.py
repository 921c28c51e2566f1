"""Data sets as tf.data pipelines, with a deterministic held-out split.

Every data set yields images as float32 ``[H, W, 1]`` in ``[0, 1]`` and int64 labels.
The held-out split is a pure function of (data set, ``--eval-split``, ``--seed``), so
the chief, the workers and the evaluator agree on it without talking to each other.

* ``digits``: scikit-learn's 1,797 8x8 handwritten digits (``datasets/digits.csv.gz``, taken from the
  scikit-learn wheel at set-up and image build: ``datasets/fetch_digits.py``).
* ``mnist``: ``mnist.npz`` (keys x_train/y_train/x_test/y_test) in ``--data-dir``; the
  train and test parts are pooled and split by ``--eval-split``.
* ``mnist_tfrecord``: ``train*.tfrecord`` and ``test*.tfrecord`` in ``--data-dir`` with
  features ``image_raw`` (bytes, H*W uint8) and ``label`` (int64); streamed with
  tf.data; a record is held out by a seeded hash of its position.
* ``synthetic``: random 28x28 images and labels, for throughput benchmarks only.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from trainer.config import TrainConfig
from trainer.errors import DataError

log = logging.getLogger("trainer.data")

MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
_HASH_BUCKETS = 1_000_000
SHUFFLE_BUFFER = 10_000


@dataclass(frozen=True)
class DataSource:
    """A data set: in-memory uint8 training arrays or TFRecord files, plus the held-out set."""

    name: str
    image_shape: tuple[int, int, int]
    eval_x: np.ndarray  # float32 [N, H, W, 1] in [0, 1]
    eval_y: np.ndarray  # int64 [N]
    train_x: np.ndarray | None = None  # uint8 [N, H, W, 1] (None for TFRecords)
    train_y: np.ndarray | None = None
    scale: float = 1.0 / 255.0
    tfrecord_files: tuple[str, ...] = ()
    eval_split: float = 0.2
    seed: int = 0

    @property
    def num_train(self) -> int | None:
        """Training examples (None when streamed from TFRecords)."""
        return None if self.train_x is None else len(self.train_x)

    def train_dataset(
        self, batch_size: int, num_shards: int = 1, shard_index: int = 0,
        shuffle_seed: int | None = None,
    ) -> tf.data.Dataset:
        """An infinite, shuffled, batched training stream for one input pipeline.

        ``num_shards``/``shard_index`` shard the examples between input pipelines
        (multi-worker sync). ``shuffle_seed=None`` gives every worker its own order
        (parameter_server, where per-worker pipelines cannot know their worker index).
        """
        if self.train_x is not None and self.train_y is not None:
            ds = tf.data.Dataset.from_tensor_slices((self.train_x, self.train_y))
            if num_shards > 1:
                ds = ds.shard(num_shards, shard_index)
            scale = self.scale
            ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) * scale, y),
                        num_parallel_calls=tf.data.AUTOTUNE)
        else:
            ds = _tfrecord_examples(self.tfrecord_files, self.image_shape)
            ds = ds.filter(lambda i, x, y: tf.logical_not(
                _held_out(i, self.eval_split, self.seed)))
            if num_shards > 1:
                ds = ds.shard(num_shards, shard_index)
            ds = ds.map(lambda i, x, y: (x, y))
        ds = ds.cache()
        ds = ds.shuffle(SHUFFLE_BUFFER, seed=shuffle_seed, reshuffle_each_iteration=True)
        return ds.repeat().batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _split_indices(n: int, eval_split: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_eval = max(1, round(n * eval_split))
    return perm[n_eval:], perm[:n_eval]


def _from_arrays(name: str, x: np.ndarray, y: np.ndarray, max_value: float,
                 cfg: TrainConfig) -> DataSource:
    if x.ndim != 3 or len(x) != len(y):
        raise DataError(f"{name}: expected images [N, H, W] and N labels, got {x.shape}, {y.shape}")
    x = x.astype(np.uint8)[..., None]
    y = y.astype(np.int64)
    train, held = _split_indices(len(x), cfg.eval_split, cfg.seed)
    scale = 1.0 / max_value
    h, w = int(x.shape[1]), int(x.shape[2])
    return DataSource(
        name=name, image_shape=(h, w, 1),
        eval_x=(x[held].astype(np.float32) * np.float32(scale)), eval_y=y[held],
        train_x=x[train], train_y=y[train], scale=scale,
        eval_split=cfg.eval_split, seed=cfg.seed,
    )


# scikit-learn's file, not committed: put there from the pinned scikit-learn wheel by the set-up scripts and the
# Dockerfiles (trainer/datasets/fetch_digits.py).
DIGITS_FILE = Path(__file__).with_name("datasets") / "digits.csv.gz"


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 8x8 digits (pixel values 0-16, float64) and their labels, as scikit-learn's load_digits()."""
    if not DIGITS_FILE.is_file():
        raise DataError(
            f"data set digits: {DIGITS_FILE} does not exist: run `python3 trainer/datasets/fetch_digits.py` "
            f"(or `make setup-run`; it takes the file from the scikit-learn wheel on PyPI)"
        )
    data = np.loadtxt(DIGITS_FILE, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)


def _load_digits(cfg: TrainConfig) -> DataSource:
    images, labels = digits_arrays()
    return _from_arrays("digits", images, labels, 16.0, cfg)


def _download_mnist(path: Path) -> None:
    log.info("downloading %s to %s", MNIST_URL, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with urllib.request.urlopen(MNIST_URL, timeout=60) as resp, open(tmp, "wb") as f:
            while chunk := resp.read(1 << 20):
                f.write(chunk)
        digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
        if digest != MNIST_SHA256:
            raise DataError(f"downloaded mnist.npz has sha256 {digest}, expected {MNIST_SHA256}")
        os.replace(tmp, path)
    except OSError as e:
        raise DataError(
            f"--download: cannot fetch {MNIST_URL} ({e}); copy mnist.npz into {path.parent}"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def _load_mnist(cfg: TrainConfig, may_download: bool, wait_secs: float) -> DataSource:
    path = cfg.data_dir / "mnist.npz"
    if not path.is_file() and cfg.download:
        if may_download:
            _download_mnist(path)
        else:  # another task (the chief) downloads it; wait for it to appear
            deadline = time.monotonic() + wait_secs
            while not path.is_file() and time.monotonic() < deadline:
                time.sleep(2)
    if not path.is_file():
        raise DataError(
            f"data set mnist: {path} does not exist: copy mnist.npz into --data-dir "
            f"or pass --download (needs internet), or use --dataset=digits offline"
        )
    try:
        with np.load(path) as f:
            x = np.concatenate([f["x_train"], f["x_test"]])
            y = np.concatenate([f["y_train"], f["y_test"]])
    except (OSError, KeyError, ValueError) as e:
        raise DataError(f"data set mnist: {path} is not a valid mnist.npz ({e})") from None
    return _from_arrays("mnist", x, y, 255.0, cfg)


def _held_out(index: tf.Tensor, eval_split: float, seed: int) -> tf.Tensor:
    key = tf.strings.join([tf.strings.as_string(index), tf.constant(f"/{seed}")])
    bucket = tf.strings.to_hash_bucket_fast(key, _HASH_BUCKETS)
    return bucket < int(eval_split * _HASH_BUCKETS)


def _tfrecord_examples(files: tuple[str, ...], shape: tuple[int, int, int]) -> tf.data.Dataset:
    spec = {
        "image_raw": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(index: tf.Tensor, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        ex = tf.io.parse_single_example(record, spec)
        img = tf.reshape(tf.io.decode_raw(ex["image_raw"], tf.uint8), shape)
        return index, tf.cast(img, tf.float32) / 255.0, ex["label"]

    return tf.data.TFRecordDataset(list(files)).enumerate().map(
        parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )


def _load_tfrecord(cfg: TrainConfig) -> DataSource:
    train = sorted(str(p) for p in cfg.data_dir.glob("train*.tfrecord"))
    test = sorted(str(p) for p in cfg.data_dir.glob("test*.tfrecord"))
    files = tuple(train + test)
    if not train:
        raise DataError(
            f"data set mnist_tfrecord: no train*.tfrecord files in {cfg.data_dir}: write them "
            f"there (features image_raw bytes, label int64) or set --data-dir"
        )
    try:
        first = next(iter(tf.data.TFRecordDataset(files[:1]).take(1)))
        ex = tf.io.parse_single_example(first, {"image_raw": tf.io.FixedLenFeature([], tf.string)})
        n = len(ex["image_raw"].numpy())
    except (tf.errors.OpError, StopIteration) as e:
        raise DataError(f"data set mnist_tfrecord: cannot read {files[0]}: {e}") from None
    side = math.isqrt(n)
    if side * side != n:
        raise DataError(f"mnist_tfrecord: image_raw has {n} bytes, not a square H*W image")
    shape = (side, side, 1)
    held = _tfrecord_examples(files, shape).filter(
        lambda i, x, y: _held_out(i, cfg.eval_split, cfg.seed)
    ).map(lambda i, x, y: (x, y)).batch(4096)
    xs, ys = [], []
    try:
        for bx, by in held:
            xs.append(bx.numpy())
            ys.append(by.numpy())
    except tf.errors.OpError as e:
        raise DataError(f"mnist_tfrecord: cannot parse records in {cfg.data_dir}: "
                        f"{str(e).splitlines()[0]}") from None
    if not xs:
        raise DataError("mnist_tfrecord: the held-out split is empty; raise --eval-split")
    return DataSource(
        name="mnist_tfrecord", image_shape=shape,
        eval_x=np.concatenate(xs).astype(np.float32), eval_y=np.concatenate(ys).astype(np.int64),
        tfrecord_files=files, eval_split=cfg.eval_split, seed=cfg.seed,
    )


def _load_synthetic(cfg: TrainConfig) -> DataSource:
    rng = np.random.default_rng(cfg.seed)
    x = rng.integers(0, 256, size=(2048, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=(2048,), dtype=np.int64)
    return _from_arrays("synthetic", x, y, 255.0, cfg)


def load_data(cfg: TrainConfig, may_download: bool = True, wait_secs: float = 600.0) -> DataSource:
    """Load ``cfg.dataset``. Raises DataError with a one-line fix when it is missing.

    ``may_download``: this task may download (the chief); others wait up to ``wait_secs``.
    """
    if cfg.dataset == "digits":
        return _load_digits(cfg)
    if cfg.dataset == "synthetic":
        return _load_synthetic(cfg)
    if cfg.dataset == "mnist":
        return _load_mnist(cfg, may_download, wait_secs)
    if cfg.dataset == "mnist_tfrecord":
        if not cfg.data_dir.is_dir():
            raise DataError(
                f"data set mnist_tfrecord: --data-dir {cfg.data_dir} does not exist"
            )
        return _load_tfrecord(cfg)
    raise DataError(f"unknown data set {cfg.dataset!r}")
