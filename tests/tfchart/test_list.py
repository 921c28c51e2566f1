"""`tfchart list` against the fake API server on the loopback: the real CLI (in this process), releases found by
the chart's part-of label in one namespace or all, each with the run state `tfchart status` derives, the step,
the GPUs its unfinished pods request and its age; pods and Services read a page at a time."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from subprocess import CompletedProcess

import pytest
import yaml

from tests import kubeapi as kf
from tests.kubeapi import Call, KubeServer, kube_server
from tfdcontract import PROGRESS_ANNOTATION, JobProgress, Status, format_job_progress, format_status_line

SELECTOR = "app.kubernetes.io/part-of=tf-distributed"
Tfchart = Callable[..., CompletedProcess[str]]


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server(read_only=True) as running:
        yield running


@pytest.fixture
def tfchart(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> Tfchart:
    """`tfchart list ARGS` in this process (no interpreter to start), its kubeconfig context's namespace team-a."""

    def run(*args: str) -> CompletedProcess[str]:
        code, out, err = kf.tfchart_in_process(server, capsys, "team-a", "list", *args)
        return CompletedProcess(["tfchart", "list", *args], code, out, err)

    return run


def training(server: KubeServer) -> None:
    """mnist in team-a: 4 GPU workers (one Pending, unscheduled: it holds none) and a chief at step 1200 of 5000."""
    docs = kf.rendered(("values/gpu.yaml",), namespace="team-a")
    for doc in docs:
        if doc["kind"] == "Service":
            server.add(kf.service(doc))
    chief, worker = kf.manifest(docs, "Job", "chief"), kf.manifest(docs, "StatefulSet", "worker")
    server.add(kf.job(chief), kf.pod(chief), kf.pod(kf.manifest(docs, "StatefulSet", "ps"), index=0))
    server.add(*(kf.pod(worker, index=i) for i in range(3)))
    server.add(kf.pod(worker, index=3, phase="Pending", ready=False, unschedulable="0/3 nodes are available"))
    status = Status("Running", "parameter_server", 1200, 5000, 0.2, None, 2117.0, None, kf.ago(hours=1), kf.ago(),
                    "training")  # fmt: skip
    server.set_log("team-a", "mnist-tf-distributed-chief-x7k2p", ["INFO trainer " + format_status_line(status)])


def finished(server: KubeServer) -> None:
    """vision in team-b: a multi_worker_mirrored run (worker 0 is the chief) that succeeded; its pods ended."""
    docs = kf.rendered(sets=("training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=2"),
                       release="vision", namespace="team-b")  # fmt: skip
    workers = kf.manifest(docs, "Job", "worker")
    server.add(kf.job(workers, "complete"))
    pod = kf.pod(workers, "vision-tf-distributed-worker-0-abcde", phase="Succeeded", ready=False,
                 terminated=("Completed", 0))  # fmt: skip
    pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = "0"
    server.add(pod)
    server.set_log("team-b", "vision-tf-distributed-worker-0-abcde", ["step 900, loss = 0.1 (10.0 examples/sec; "
                                                                       "1.0 sec/batch)"])  # fmt: skip


def test_all_namespaces_table(server: KubeServer, tfchart: Tfchart) -> None:
    training(server)
    finished(server)
    server.add(kf.daemon_set("nvidia-device-plugin"))  # another chart's objects are not listed
    result = tfchart("-A")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "NAMESPACE", "STATE", "STEP", "GPUS", "AGE"]
    assert [line.split()[:5] for line in lines[1:]] == [
        ["mnist", "team-a", "Running", "1200/5000", "3"],
        ["vision", "team-b", "Succeeded", "900", "0"],
    ]
    assert "3 nvidia.com/gpu" in lines[1]
    listed = [call for call in server.calls if call.verb == "list"]
    assert {(call.resource, call.namespace, call.label_selector) for call in listed} == {
        ("jobs", None, SELECTOR), ("services", None, SELECTOR), ("pods", None, SELECTOR)}
    paged = [call for call in listed if call.resource in ("pods", "services")]
    assert all(("limit", "500") in call.params for call in paged)


def test_one_namespace_as_json_and_yaml(server: KubeServer, tfchart: Tfchart) -> None:
    training(server)
    finished(server)
    as_json = tfchart("-o", "json")  # the kubeconfig context's namespace: team-a
    assert as_json.returncode == 0, as_json.stderr
    [mnist] = json.loads(as_json.stdout)
    assert {key: mnist[key] for key in ("release", "namespace", "state", "step", "train_steps", "gpus")} == {
        "release": "mnist", "namespace": "team-a", "state": "Running", "step": 1200, "train_steps": 5000,
        "gpus": {"nvidia.com/gpu": 3}}  # fmt: skip
    assert mnist["age_seconds"] >= 0
    as_yaml = tfchart("-n", "team-b", "-o", "yaml")
    assert as_yaml.returncode == 0, as_yaml.stderr
    [vision] = yaml.safe_load(as_yaml.stdout)
    assert (vision["release"], vision["state"], vision["step"], vision["gpus"]) == ("vision", "Succeeded", 900, {})


def test_the_step_comes_from_the_job_s_progress_record_when_the_chief_s_log_is_gone(
    server: KubeServer, tfchart: Tfchart
) -> None:
    """No chief pod to read (suspended, evicted, the run ended): the step is the one the supervisor recorded on the
    chief's Job, as `tfchart status` shows it."""
    chief = kf.job(kf.manifest(kf.rendered(namespace="team-a"), "Job", "chief"))
    chief["metadata"].setdefault("annotations", {})[PROGRESS_ANNOTATION] = format_job_progress(
        JobProgress("Running", step=150, target=5000))
    server.add(chief)
    result = tfchart("-o", "json")
    assert result.returncode == 0, result.stderr
    [mnist] = json.loads(result.stdout)
    assert (mnist["step"], mnist["train_steps"]) == (150, 5000)
    assert tfchart().stdout.splitlines()[1].split()[3] == "150/5000"


def test_pages_of_a_large_namespace(server: KubeServer, tfchart: Tfchart) -> None:
    training(server)
    for index in range(600):  # more pods than a page, of a release whose Job was removed (ttlSecondsAfterFinished)
        server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"big-{index}", "namespace": "team-a",
            "labels": {"app.kubernetes.io/part-of": "tf-distributed", "app.kubernetes.io/instance": "big"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "x", "image": "x",
                                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}})  # fmt: skip
    result = tfchart("-o", "json")
    assert result.returncode == 0, result.stderr
    big = next(run for run in json.loads(result.stdout) if run["release"] == "big")
    assert (big["state"], big["gpus"]) == ("Unknown", {"nvidia.com/gpu": 600})
    pods = [call for call in server.calls if call.resource == "pods" and call.verb == "list"]
    assert ["continue" in dict(call.params) for call in pods] == [False, True]  # the server's opaque token


def test_no_release_says_so_on_stderr(server: KubeServer, tfchart: Tfchart) -> None:
    result = tfchart("-n", "empty")
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == "no tf-distributed releases in namespace empty\n"
    assert server.calls == [Call("list", "jobs", "empty", label_selector=SELECTOR),
                            *(Call("list", kind, "empty", label_selector=SELECTOR, params=(("limit", "500"),))
                              for kind in ("services", "pods"))]  # fmt: skip


def test_an_answer_that_is_not_kubernetes_is_one_line(server: KubeServer, tfchart: Tfchart) -> None:
    server.proxy_answer = (200, "text/html; charset=utf-8", b"<html><head><title>Sign in</title></head></html>")
    result = tfchart("-A")
    assert result.returncode == 69 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and "text/html" in result.stderr
