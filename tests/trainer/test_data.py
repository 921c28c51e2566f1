"""Data sets: the mnist.npz and TFRecord readers, synthetic data, a deterministic split."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.conftest import REPO, Procs, read_status
from trainer.datasets import fetch_digits


def _digits_uint8() -> tuple[np.ndarray, np.ndarray]:
    from trainer.data import digits_arrays

    images, labels = digits_arrays()
    return (images * 255.0 / 16.0).round().astype(np.uint8), labels


def test_the_digits_set_is_scikit_learns() -> None:
    """trainer/datasets/digits.csv.gz, which the set-up took from the scikit-learn wheel (the trainer image carries no
    scikit-learn), loads exactly as sklearn.datasets.load_digits() of the pinned scikit-learn (a dev dependency)."""
    from sklearn.datasets import load_digits

    from trainer.data import digits_arrays

    images, labels = digits_arrays()
    reference = load_digits()
    assert images.shape == (1797, 8, 8) and np.array_equal(images, reference.images)
    assert np.array_equal(labels, reference.target)


def test_the_digits_file_is_not_committed() -> None:
    """scikit-learn's file is extracted at set-up and image build, never part of the repository."""
    tracked = subprocess.run(["git", "ls-files", "trainer/datasets"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    assert tracked == ["trainer/datasets/fetch_digits.py"]
    ignored = subprocess.run(["git", "check-ignore", "-q", "trainer/datasets/digits.csv.gz"], cwd=REPO, check=False)
    assert ignored.returncode == 0


def _wheel(path: Path, data: bytes) -> Path:
    """A zip laid out as scikit-learn's wheel, holding the given bytes as the digits file."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sklearn/__init__.py", "")
        archive.writestr(fetch_digits.MEMBER, data)
    return path


def _sklearn_digits() -> bytes:
    import sklearn.datasets

    return (Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz").read_bytes()


def test_fetch_takes_the_file_out_of_the_wheel_and_checks_its_sha256(tmp_path: Path) -> None:
    good = _sklearn_digits()
    assert fetch_digits.extract(_wheel(tmp_path / "scikit_learn-1.9.1-a.whl", good)) == good
    bad = _wheel(tmp_path / "scikit_learn-1.9.1-b.whl", good[:-1] + b"x")
    with pytest.raises(fetch_digits.FetchError, match=r"^scikit_learn-1\.9\.1-b\.whl: sklearn/datasets/data/digits"
                       r"\.csv\.gz has sha256 [0-9a-f]{64}, not 09f66e6d[0-9a-f]{56}: refused$"):  # fmt: skip
        fetch_digits.extract(bad)
    empty = tmp_path / "scikit_learn-1.9.1-c.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("sklearn/__init__.py", "")
    with pytest.raises(fetch_digits.FetchError, match=r"c\.whl: cannot read sklearn/datasets/data/digits\.csv\.gz"):
        fetch_digits.extract(empty)


def test_fetch_keeps_a_file_that_is_there_and_fails_in_one_line_without_an_index(tmp_path: Path) -> None:
    there = tmp_path / "there" / "digits.csv.gz"
    there.parent.mkdir()
    there.write_bytes(_sklearn_digits())
    assert fetch_digits.fetch(there) == f"{there} is there already"  # no download
    with socket.socket() as sock:  # a port nothing listens on: pip's index refuses every connection
        sock.bind(("127.0.0.1", 0))
        index = f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": index, "PIP_RETRIES": "0", "PIP_TIMEOUT": "5"})
    missing = tmp_path / "missing" / "digits.csv.gz"
    run = subprocess.run([sys.executable, str(REPO / "trainer" / "datasets" / "fetch_digits.py"), str(missing)],
                         env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 1 and run.stdout == "", run
    assert run.stderr.startswith("digits: FAILED: pip could not download scikit-learn==1.9.1 ("), run.stderr
    assert run.stderr.endswith("): the digits set needs the package index once\n"), run.stderr
    assert run.stderr.count("\n") == 1 and not missing.exists()


def test_a_missing_digits_file_is_one_line_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer import data
    from trainer.errors import DataError

    monkeypatch.setattr(data, "DIGITS_FILE", tmp_path / "digits.csv.gz")
    with pytest.raises(DataError, match=r"^data set digits: .*digits\.csv\.gz does not exist: run `python3 "
                       r"trainer/datasets/fetch_digits\.py`"):  # fmt: skip
        data.digits_arrays()


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
