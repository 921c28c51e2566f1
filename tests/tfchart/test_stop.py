"""`tfchart stop` and the status warning it answers, against an API server on the loopback.

The real CLI runs as a subprocess with a kubeconfig whose context namespace is `team-a` (no -n),
so the kubernetes client's URL building, merge patches and the /scale subresource all run. The
server (tests/trainer/kubeserver.py) keeps the release's rendered objects, applies each PATCH as the
API server does and records every request, so the tests assert exactly what was changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.chartlib import REPO
from tests.tfchart import kubefake as kf
from tests.trainer.kubeserver import KubeServer, kube_server
from tfchart import status, status_view

NS = "team-a"
PREFIX = "mnist-tf-distributed"
GPU_VALUES = ("values/gpu.yaml",)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as running:
        yield running


def kubeconfig(tmp_path: Path, url: str) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "someone", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "team", "context": {"cluster": "fake", "user": "someone", "namespace": NS}}],
        "current-context": "team",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(document))
    return path


def tfchart(tmp_path: Path, server: KubeServer, *args: str) -> subprocess.CompletedProcess[str]:
    config = kubeconfig(tmp_path, server.url)
    return subprocess.run(
        [sys.executable, "-m", "tfchart", *args, "--kubeconfig", str(config)],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip


def condition(kind: str, reason: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": reason, "message": "", "lastTransitionTime": kf.ago(minutes=1)}


def deploy(server: KubeServer, chief: str, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The release's StatefulSets, chief (and evaluator) Job and supervisor as the API server keeps them."""
    docs = kf.rendered(GPU_VALUES, sets, namespace=NS)
    for doc in docs:
        if doc["kind"] not in ("StatefulSet", "Deployment", "Job"):
            continue
        doc = kf.served(doc)
        component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
        if doc["kind"] == "Job":
            conditions = {"complete": [condition("Complete")], "failed": [condition("Failed", "BackoffLimitExceeded")]}
            doc["status"] = {"conditions": conditions.get(chief, []), "active": 1 if chief == "running" else 0}
            if component == "evaluator":
                doc["status"] = {"active": 1}
        server.put(doc)
    return docs


def writes(server: KubeServer) -> list[tuple[str, str, Any]]:
    return server.writes()


def replicas(server: KubeServer, kind: str, name: str) -> int:
    found = server.get(kind, NS, name)
    assert found is not None
    return int(found["spec"].get("replicas", 1))


def test_stop_after_success_frees_ps_and_workers_in_the_context_namespace(tmp_path: Path, server: KubeServer) -> None:
    deploy(server, "complete")
    result = tfchart(tmp_path, server, "stop", "mnist")
    assert result.returncode == 0, result.stderr
    assert [(method, path) for method, path, _ in writes(server)] == [
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/{PREFIX}-ps"),
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/{PREFIX}-ps/scale"),
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/{PREFIX}-worker"),
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/{PREFIX}-worker/scale"),
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/{PREFIX}-supervisor/scale"),
    ]
    for name in (f"{PREFIX}-ps", f"{PREFIX}-worker"):
        assert replicas(server, "StatefulSet", name) == 0
        annotations = server.get("StatefulSet", NS, name)["metadata"]["annotations"]  # type: ignore[index]
        assert annotations["tf-distributed.io/ending"] == "stopped"
        assert annotations["tf-distributed.io/end-reason"] == "stopped by tfchart stop (chief Job Succeeded)"
        # the same run-spec: `helm upgrade` of this run keeps them at 0 (the chart's lookup)
        assert annotations["tf-distributed.io/finished-run-spec"] == annotations["tf-distributed.io/run-spec"] != ""
    assert replicas(server, "Deployment", f"{PREFIX}-supervisor") == 0
    assert f"scaled StatefulSet {PREFIX}-worker from 4 to 0 replicas" in result.stdout
    assert server.get("Job", NS, f"{PREFIX}-chief")["spec"].get("suspend") is not True  # type: ignore[index]


def test_stop_twice_changes_nothing_the_second_time(tmp_path: Path, server: KubeServer) -> None:
    deploy(server, "failed")
    assert tfchart(tmp_path, server, "stop", "mnist").returncode == 0
    before = len(writes(server))
    again = tfchart(tmp_path, server, "stop", "mnist")
    assert again.returncode == 0, again.stderr
    assert len(writes(server)) == before
    assert "nothing to stop" in again.stdout and f"StatefulSet {PREFIX}-ps is already at 0 replicas" in again.stdout


def test_a_chief_still_training_is_only_ended_with_end_run(tmp_path: Path, server: KubeServer) -> None:
    deploy(server, "running", ("evaluator.enabled=true",))
    refused = tfchart(tmp_path, server, "stop", "mnist")
    assert refused.returncode == 1
    assert f"the chief Job {PREFIX}-chief of release mnist has not ended" in refused.stderr
    assert "tfchart stop mnist -n team-a --end-run" in refused.stderr
    assert "Traceback" not in refused.stderr and writes(server) == []

    ended = tfchart(tmp_path, server, "stop", "mnist", "--end-run")
    assert ended.returncode == 0, ended.stderr
    changed = [(path.rsplit("/", 2)[-2:], body) for _, path, body in writes(server)]
    assert changed[0] == (["jobs", f"{PREFIX}-chief"], {"spec": {"suspend": True}})
    assert (["jobs", f"{PREFIX}-evaluator"], {"spec": {"suspend": True}}) in changed
    assert replicas(server, "StatefulSet", f"{PREFIX}-ps") == replicas(server, "StatefulSet", f"{PREFIX}-worker") == 0
    annotations = server.get("StatefulSet", NS, f"{PREFIX}-ps")["metadata"]["annotations"]  # type: ignore[index]
    assert annotations["tf-distributed.io/end-reason"] == "stopped by tfchart stop (training ended early)"


def test_an_unknown_release_is_one_line_with_the_fix(tmp_path: Path, server: KubeServer) -> None:
    result = tfchart(tmp_path, server, "stop", "nosuch")
    assert result.returncode == 1
    assert "no release nosuch in namespace team-a" in result.stderr and "helm list -n team-a" in result.stderr
    assert "Traceback" not in result.stderr and writes(server) == []


# -- the status warning ---------------------------------------------------------------------------


def held_release(cluster: kf.FakeCluster, chief: str, ending: str = "") -> None:
    docs = kf.rendered(GPU_VALUES)
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            obj = kf.stateful_set(doc)
            if ending:
                obj["metadata"].setdefault("annotations", {})["tf-distributed.io/ending"] = ending
            cluster.add(obj)
            for index in range(obj["spec"]["replicas"]):
                cluster.add(kf.pod(doc, index=index))
    cluster.add(kf.job(kf.manifest(docs, "Job", "chief"), chief))


def warnings_of(cluster: kf.FakeCluster) -> list[str]:
    return status.collect(cluster.api(), "mnist", "ml-training", now=kf.NOW).warnings


def test_status_warns_when_gpus_are_held_after_the_chief_ended() -> None:
    cluster = kf.FakeCluster()
    held_release(cluster, "failed")
    [warning] = warnings_of(cluster)
    assert warning.startswith("the chief Job ended (Failed) but 6 pod(s) still run and hold 4 nvidia.com/gpu (")
    assert "nothing freed them (supervisor.enabled=false, or the supervisor is not running)" in warning
    assert warning.endswith("free them with `tfchart stop mnist -n ml-training`")
    console = Console(record=True, width=400)
    status_view.render(status.collect(cluster.api(), "mnist", "ml-training", now=kf.NOW), console)
    assert "warning: the chief Job ended (Failed)" in console.export_text()


def test_status_names_the_keep_policy_and_is_quiet_while_training() -> None:
    kept = kf.FakeCluster()
    held_release(kept, "complete", ending="succeeded")
    [warning] = warnings_of(kept)
    assert "kept by the cleanup policy (training.cleanup.onSuccess=keep)" in warning
    running = kf.FakeCluster()
    held_release(running, "running")
    assert warnings_of(running) == []
