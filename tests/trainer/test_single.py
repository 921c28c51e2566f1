"""Single-process training (single_device), the --cleanup=keep policy and --log-device-placement."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.trainer.conftest import COMMON, FakeKubeApi, Procs, read_status, service_account_dir

pytestmark = pytest.mark.slow


def test_single_device_training_with_cleanup_keep(procs: Procs, tmp_path: Path,
                                                  kube_api: FakeKubeApi) -> None:
    root = tmp_path / "data"
    sa = service_account_dir(tmp_path / "sa")
    t0 = time.monotonic()
    chief = procs.trainer(
        "single", ["--strategy=single_device", *COMMON, f"--storage-root={root}",
                   "--train-steps=300", "--checkpoint-every-steps=100", "--cleanup=keep"],
        TFD_KUBE_API=kube_api.url, TFD_SERVICEACCOUNT_DIR=str(sa), POD_NAMESPACE="ml-team",
        TFD_CLEANUP_STATEFULSETS="mnist-tf-distributed-ps,mnist-tf-distributed-worker",
    )
    assert chief.wait(180) == 0, chief.tail()
    assert time.monotonic() - t0 < 180
    st = read_status(root)
    assert st["state"] == "Succeeded" and st["strategy"] == "single_device"
    assert st["step"] == 300 and st["accuracy"] >= 0.95, st
    out = chief.output()
    lines = re.findall(r"^step (\d+), loss = \d+\.\d{4} \(\d+\.\d examples/sec; "
                       r"\d+\.\d{3} sec/batch\)$", out, re.M)
    assert [int(n) for n in lines] == list(range(20, 301, 20))
    assert sorted(p.name for p in (root / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-100.index", "ckpt-200.index", "ckpt-300.index"]
    assert "--cleanup=keep" in out
    assert kube_api.requests == []


def test_mirrored_with_device_placement_logging(procs: Procs, tmp_path: Path) -> None:
    root = tmp_path / "data"
    chief = procs.trainer(
        "mirrored", ["--strategy=mirrored", *COMMON, f"--storage-root={root}",
                     "--train-steps=40", "--log-device-placement", "--cleanup=keep"],
    )
    assert chief.wait(180) == 0, chief.tail()
    out = chief.output()
    assert "mirrored: 1 replica(s) in sync" in out
    assert re.search(r"^\w+: \(\w+\): /job:localhost/replica:0/task:0/device:CPU:0$",
                     out, re.M), out[-2000:]
    assert read_status(root)["state"] == "Succeeded"
