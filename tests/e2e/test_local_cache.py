"""Local runs share one dataset cache per user: MNIST lies in $XDG_CACHE_HOME/tf-distributed/datasets once, not
in every run directory. No machine here reaches the internet, so the cache holds an mnist.npz as a first run's
download would have left it (a small one of the same keys and shapes): a run finds it, downloads nothing and
leaves the cache as it found it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.chartlib import REPO

pytestmark = pytest.mark.slow

RUN = ["--set", "training.dataset=mnist", "--set", "training.download=true", "--set",
       "training.strategy=single_device", "--set", "training.trainSteps=100", "--set", "tensorboard.enabled=false"]


def test_runs_read_mnist_from_the_users_cache_and_download_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "tf-distributed" / "datasets"
    cache.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(cache / "mnist.npz", x_train=rng.integers(0, 256, (200, 28, 28), np.uint8),
             y_train=rng.integers(0, 10, 200), x_test=rng.integers(0, 256, (50, 28, 28), np.uint8),
             y_test=rng.integers(0, 10, 50))  # fmt: skip
    written = (cache / "mnist.npz").stat().st_mtime_ns
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # one run: it reads the cache it did not write and leaves no copy in its run directory, as every later run does
    workdir = tmp_path / "run"
    argv = [str(REPO / ".venv" / "bin" / "tfchart"), "local", *RUN, "--workdir", str(workdir)]
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    chief_log = (workdir / "pod-logs" / "local-tf-distributed-chief.log").read_text()
    assert "downloading" not in chief_log and not (workdir / "datasets").exists(), chief_log[-3000:]
    assert '"dataset":"mnist"' in chief_log.replace(" ", "")
    assert sorted(path.name for path in cache.iterdir()) == ["mnist.npz"]
    assert (cache / "mnist.npz").stat().st_mtime_ns == written

