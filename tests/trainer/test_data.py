"""Data sets: the mnist.npz and TFRecord readers, synthetic data, a deterministic split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.trainer.conftest import Procs, read_status


def _digits_uint8() -> tuple[np.ndarray, np.ndarray]:
    from trainer.data import digits_arrays

    images, labels = digits_arrays()
    return (images * 255.0 / 16.0).round().astype(np.uint8), labels


def test_the_vendored_digits_are_scikit_learns() -> None:
    """trainer/datasets/digits.csv.gz (the trainer image carries no scikit-learn) loads exactly as
    sklearn.datasets.load_digits() of the pinned scikit-learn (a dev dependency for this comparison)."""
    from sklearn.datasets import load_digits

    from trainer.data import digits_arrays

    images, labels = digits_arrays()
    reference = load_digits()
    assert images.shape == (1797, 8, 8) and np.array_equal(images, reference.images)
    assert np.array_equal(labels, reference.target)


def _write_npz(directory: Path) -> None:
    x, y = _digits_uint8()
    directory.mkdir(parents=True, exist_ok=True)
    np.savez(directory / "mnist.npz", x_train=x[:1500], y_train=y[:1500], x_test=x[1500:],
             y_test=y[1500:])


def _write_tfrecords(directory: Path) -> None:
    import tensorflow as tf

    x, y = _digits_uint8()
    directory.mkdir(parents=True, exist_ok=True)
    parts = {"train-00000-of-00002.tfrecord": range(0, 800),
             "train-00001-of-00002.tfrecord": range(800, 1500),
             "test.tfrecord": range(1500, len(x))}
    for name, idx in parts.items():
        with tf.io.TFRecordWriter(str(directory / name)) as w:
            for i in idx:
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[x[i].tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y[i])])),
                }))
                w.write(ex.SerializeToString())


def test_held_out_split_is_deterministic(tmp_path: Path) -> None:
    from trainer.config import parse_config
    from trainer.data import load_data

    _write_tfrecords(tmp_path / "tfr")
    for args in (["--dataset=digits"], ["--dataset=mnist_tfrecord", f"--data-dir={tmp_path}/tfr"]):
        a = load_data(parse_config(args))
        b = load_data(parse_config(args))
        assert np.array_equal(a.eval_x, b.eval_x) and np.array_equal(a.eval_y, b.eval_y)
        assert 0.15 < len(a.eval_y) / 1797 < 0.25
        assert a.eval_x.dtype == np.float32 and 0.0 <= a.eval_x.min() <= a.eval_x.max() <= 1.0
        assert a.image_shape == (8, 8, 1)
        other = load_data(parse_config([*args, "--seed=7"]))
        assert not np.array_equal(a.eval_y, other.eval_y)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["mnist", "mnist_tfrecord", "synthetic"])
def test_training_reads_each_dataset(dataset: str, procs: Procs, tmp_path: Path) -> None:
    data_dir = tmp_path / "datasets"
    if dataset == "mnist":
        _write_npz(data_dir)
    elif dataset == "mnist_tfrecord":
        _write_tfrecords(data_dir)
    root = tmp_path / "data"
    chief = procs.trainer(dataset, [
        "--strategy=single_device", f"--dataset={dataset}", f"--data-dir={data_dir}",
        f"--storage-root={root}", "--train-steps=60", "--log-every-steps=20",
        "--checkpoint-every-steps=0", "--cleanup=keep"])
    assert chief.wait(180) == 0, chief.tail()
    st = read_status(root)
    assert st["state"] == "Succeeded" and st["dataset"] == dataset and st["step"] == 60
    if dataset != "synthetic":
        assert st["accuracy"] > 0.6, st
    assert [p.name for p in (root / "checkpoints").glob("ckpt-*.index")] == ["ckpt-60.index"]
