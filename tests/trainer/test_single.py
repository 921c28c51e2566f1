"""Single-process training (single_device), the --cleanup=keep policy and --log-device-placement."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.kubeapi import KubeServer
from tests.trainer.conftest import COMMON, RELEASE_STATEFUL_SETS, Procs, read_status, replicas, service_account_dir

pytestmark = pytest.mark.slow


def test_single_device_training_with_cleanup_keep(procs: Procs, tmp_path: Path,
                                                  kube_api: KubeServer) -> None:
    root = tmp_path / "data"
    sa = service_account_dir(tmp_path / "sa")
    chief = procs.trainer(
        "single", ["--strategy=single_device", *COMMON, f"--storage-root={root}",
                   "--train-steps=300", "--checkpoint-every-steps=100", "--cleanup=keep"],
        TFD_KUBE_API=kube_api.url, TFD_SERVICEACCOUNT_DIR=str(sa), POD_NAMESPACE="ml-team",
        TFD_CLEANUP_STATEFULSETS=",".join(RELEASE_STATEFUL_SETS),
    )
    assert chief.wait(180) == 0, chief.tail()
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
    assert replicas(kube_api) == dict(zip(RELEASE_STATEFUL_SETS, (1, 2), strict=True))


def test_mirrored_with_device_placement_logging(procs: Procs, tmp_path: Path) -> None:
    root = tmp_path / "data"
    chief = procs.trainer(
        "mirrored", ["--strategy=mirrored", *COMMON, f"--storage-root={root}",
                     "--train-steps=40", "--log-device-placement", "--cleanup=keep",
                     "--steps-per-execution=7", "--log-every-steps=6", "--checkpoint-every-steps=15"],
    )
    assert chief.wait(180) == 0, chief.tail()
    out = chief.output()
    # Chunks of up to 7 steps end on every log step, step-based checkpoint and the last step.
    steps = [int(n) for n in re.findall(r"^step (\d+), loss", out, re.M)]
    assert steps == [6, 12, 18, 24, 30, 36, 40]
    assert sorted(int(p.name[5:-6]) for p in (root / "checkpoints").glob("ckpt-*.index")) == [15, 30, 40]
    assert "mirrored: 1 replica(s) in sync" in out
    assert re.search(r"^\w+: \(\w+\): /job:localhost/replica:0/task:0/device:CPU:0$",
                     out, re.M), out[-2000:]
    assert read_status(root)["state"] == "Succeeded"


def test_chunks_end_on_log_checkpoint_and_last_steps() -> None:
    from trainer.config import parse_config
    from trainer.steps import chunk_size

    cfg = parse_config(["--train-steps=23", "--log-every-steps=5", "--checkpoint-every-steps=7",
                        "--steps-per-execution=10"])
    step, chunks = 0, []
    while step < cfg.train_steps:
        chunks.append(chunk_size(step, cfg))
        step += chunks[-1]
    assert chunks == [5, 2, 3, 4, 1, 5, 1, 2]  # ends: 5 7 10 14 15 20 21 23
    one = parse_config(["--train-steps=3", "--steps-per-execution=1"])
    assert [chunk_size(s, one) for s in range(3)] == [1, 1, 1]
    no_ckpt = parse_config(["--train-steps=100", "--log-every-steps=50", "--checkpoint-every-steps=0",
                            "--steps-per-execution=30"])
    assert [chunk_size(s, no_ckpt) for s in (0, 30, 50, 80)] == [30, 20, 30, 20]


@pytest.mark.parametrize("gate", ["0.5", "0.999"], ids=["below-the-reached-accuracy", "above-it"])
def test_the_export_gate(procs: Procs, tmp_path: Path, gate: str) -> None:
    """--export-min-accuracy: a run whose held-out accuracy reaches the gate exports a version; one
    that does not still Succeeds, exports nothing, and status.json says why."""
    root = tmp_path / "data"
    (root / "export" / "mnist" / "4").mkdir(parents=True)  # an earlier run's version: status lists it too
    chief = procs.trainer("gate", ["--strategy=single_device", *COMMON, f"--storage-root={root}",
                                   "--train-steps=60", "--checkpoint-every-steps=60", "--cleanup=keep",
                                   f"--export-min-accuracy={gate}"])  # fmt: skip
    assert chief.wait(180) == 0, chief.tail()
    st = read_status(root)
    assert st["state"] == "Succeeded" and st["step"] == 60, st
    reached = float(st["accuracy"])
    exported = sorted((root / "export" / "mnist").glob("*/saved_model.pb"))
    if reached >= float(gate):
        assert gate == "0.5" and len(exported) == 1 and st["export_path"] == str(exported[0].parent), st
        assert exported[0].parent.name == "5" and st["exported_versions"] == [4, 5], st
    else:
        assert gate == "0.999" and exported == [] and st["export_path"] is None, st
        assert st["exported_versions"] == [4], st
        assert f"held-out accuracy {reached:.4f} below the export threshold 0.9990: not exported" in st["message"]
        assert "no SavedModel exported" in chief.output()
