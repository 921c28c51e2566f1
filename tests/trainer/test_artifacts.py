"""What a finished run leaves behind: SavedModel, TensorBoard logs, status.json, cleanup.

All tests share the session-scoped parameter-server run (``ps_run``)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.kubeapi import KubeServer
from tests.trainer.conftest import (
    PYTHON,
    RELEASE_STATEFUL_SETS,
    REPO,
    Procs,
    PsRun,
    free_ports,
    read_status,
    replicas,
    tf_config,
    trainer_env,
)

pytestmark = pytest.mark.slow

SERVING_CHECK = r"""
import json, sys
import numpy as np
import tensorflow as tf
from trainer.config import parse_config
from trainer.data import load_data

export_path, root = sys.argv[1], sys.argv[2]
loaded = tf.saved_model.load(export_path)
sig = loaded.signatures["serving_default"]
_, inputs = sig.structured_input_signature
outputs = sig.structured_outputs
cfg = parse_config(["--dataset=digits", "--eval-split=0.2", f"--storage-root={root}"])
data = load_data(cfg)
result = sig(images=tf.constant(data.eval_x))
classes = result["classes"].numpy()
probs = result["probabilities"].numpy()
print(json.dumps({
    "signatures": sorted(loaded.signatures.keys()),
    "inputs": {k: [v.dtype.name, v.shape.as_list()] for k, v in inputs.items()},
    "outputs": {k: [v.dtype.name, v.shape.as_list()] for k, v in outputs.items()},
    "accuracy": float(np.mean(classes == data.eval_y)),
    "prob_sums_ok": bool(np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)),
    "n": int(len(classes)),
}))
"""


def test_status_json_fields(ps_run: PsRun) -> None:
    st = read_status(ps_run.root)
    for key in ("state", "strategy", "step", "train_steps", "loss", "accuracy",
                "examples_per_sec", "export_path", "started_at", "updated_at", "message"):
        assert key in st, key
    assert st["state"] == "Succeeded"
    assert st["started_at"].endswith("Z") and st["updated_at"].endswith("Z")
    assert st["started_at"] <= st["updated_at"]
    assert st["examples_per_sec"] > 0 and st["loss"] >= 0
    assert st["checkpoint_step"] == st["step"]  # the last checkpoint is the final step's
    assert not list(ps_run.root.glob(".status-*"))  # no temporary file left behind


def test_exported_savedmodel_serves_held_out_accuracy(ps_run: PsRun) -> None:
    st = read_status(ps_run.root)
    export = Path(st["export_path"])
    assert export.parent == ps_run.root / "export" / "mnist" and export.name == "1"
    assert (export / "saved_model.pb").is_file()
    assert not [p for p in export.parent.iterdir() if p.name.startswith(".tmp")]
    env = trainer_env()
    proc = subprocess.run([PYTHON, "-c", SERVING_CHECK, str(export), str(ps_run.root)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["signatures"] == ["serving_default"]
    assert got["inputs"] == {"images": ["float32", [None, 8, 8, 1]]}
    assert got["outputs"] == {"probabilities": ["float32", [None, 10]],
                              "classes": ["int64", [None]]}
    assert got["prob_sums_ok"]
    assert got["n"] == 359  # 20% of 1,797
    assert abs(got["accuracy"] - st["accuracy"]) <= 0.005, (got, st["accuracy"])


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


TRAINING_TAGS = {"loss", "accuracy", "learning_rate", "examples_per_sec"}
EVAL_TAGS = {"loss", "accuracy"}


def test_tensorboard_serves_training_scalars(ps_run: PsRun, procs: Procs) -> None:
    tb = Path(sys.executable).with_name("tensorboard")
    if not tb.exists():
        pytest.fail("tensorboard is not installed next to the interpreter: run `make setup`")
    port = free_ports(1)[0]
    procs.start("tensorboard", [], trainer_env(), cmd=[
        str(tb), f"--logdir={ps_run.root / 'logs'}", "--host=127.0.0.1", f"--port={port}",
        "--load_fast=false", "--reload_interval=1",
    ])
    base = f"http://127.0.0.1:{port}"
    final = read_status(ps_run.root)["step"]

    def loaded() -> tuple[object, dict[str, object]]:
        """The tags and the loss and examples_per_sec series, once TensorBoard has read them to the
        final step (it loads the event files in the background: an early answer is a partial one)."""
        tags = _get_json(f"{base}/data/plugin/scalars/tags")
        series = {tag: _get_json(f"{base}/data/plugin/scalars/scalars?run=.&tag={tag}")
                  for tag in ("loss", "examples_per_sec")}
        return tags, series

    def complete(tags: object, series: dict[str, object]) -> bool:
        return (isinstance(tags, dict) and set(tags.get(".", {})) >= TRAINING_TAGS
                and set(tags.get("eval", {})) >= EVAL_TAGS
                and all(isinstance(points, list) and points and int(points[-1][1]) == final
                        for points in series.values()))

    deadline = time.monotonic() + 120
    tags: object = None
    series: dict[str, object] = {}
    while not complete(tags, series):
        assert time.monotonic() < deadline, (tags, series)
        try:
            tags, series = loaded()
        except (OSError, ValueError):  # not listening yet, or a tag not loaded yet (400)
            time.sleep(0.5)
    for points in series.values():
        assert isinstance(points, list) and len(points) >= 10, points
        steps = [int(point[1]) for point in points]
        assert steps == sorted(steps)
        assert all(point[2] >= 0 for point in points)


def test_scale_down_patches_each_statefulset(ps_run: PsRun) -> None:
    reqs = ps_run.kube_requests
    assert [(r.method, r.path, r.status) for r in reqs] == [
        ("PATCH", "/apis/apps/v1/namespaces/ml-team/statefulsets/mnist-tf-distributed-ps/scale", 200),
        ("PATCH", "/apis/apps/v1/namespaces/ml-team/statefulsets/mnist-tf-distributed-worker/scale", 200),
    ]
    for r in reqs:
        assert r.body == {"spec": {"replicas": 0}}
        assert r.headers["content-type"] == "application/merge-patch+json"
        assert r.headers["authorization"] == "Bearer test-token"
    assert ps_run.replicas_after == dict.fromkeys(RELEASE_STATEFUL_SETS, 0)


def test_restarted_chief_after_success_does_nothing(ps_run: PsRun, procs: Procs,
                                                    kube_api: KubeServer) -> None:
    """The Job (or a user) starts the chief again: "already completed", exit 0, no training;
    with --cleanup=keep it sends no request at all."""
    args = [a if not a.startswith("--cleanup") else "--cleanup=keep" for a in ps_run.args]
    before = sorted(p.name for p in (ps_run.root / "checkpoints").iterdir())
    chief = procs.trainer(
        "chief-again", args, tf_config(ps_run.cluster, "chief", 0),
        TFD_KUBE_API=kube_api.url, POD_NAMESPACE="ml-team",
        TFD_CLEANUP_STATEFULSETS=",".join(RELEASE_STATEFUL_SETS),
    )
    assert chief.wait(60) == 0, chief.tail()
    assert "already completed" in chief.output()
    assert not re.search(r"^step \d+,", chief.output(), re.M)
    assert sorted(p.name for p in (ps_run.root / "checkpoints").iterdir()) == before
    assert kube_api.requests == []
    assert replicas(kube_api) == dict(zip(RELEASE_STATEFUL_SETS, (1, 2), strict=True))


@pytest.mark.parametrize("role", ["ps", "worker"])
def test_server_started_after_success_idles_until_sigterm(ps_run: PsRun, procs: Procs,
                                                          role: str) -> None:
    # a fresh address, so that a started server would be visible as a listening port
    cluster = {**ps_run.cluster, role: [f"127.0.0.1:{free_ports(1)[0]}"]}
    proc = procs.trainer(f"{role}-after-success", ps_run.args, tf_config(cluster, role, 0))
    proc.wait_for(r"already Succeeded .*not starting the (ps|worker):0 server", 60)
    proc.wait_for(r"idle: port \d+ answers TCP probes only", 60)  # then it waits for SIGTERM
    assert proc.alive()  # a StatefulSet pod must not exit (it would be restarted)
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert "server listening" not in proc.output()
