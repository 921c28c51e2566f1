"""tfchart status (and the KubeApi boundary it is the first user of), against the fake API server.

Objects come from the chart's rendered manifests with the status their controllers write; the real
kubernetes client, configured by a kubeconfig, builds the requests, sends them over HTTP to the
loopback server (tests/kubeapi.py) and deserialises the answers.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests import kubeapi as kf
from tests.kubeapi import Call, KubeServer, kube_server
from tfchart.cluster import kube, status
from tfchart.cluster.kubeconfig import configured_namespace
from tfchart.errors import KubernetesError

NS = "ml-training"
SELECTOR = "app.kubernetes.io/instance=mnist,app.kubernetes.io/part-of=tf-distributed"
CHIEF_POD = "mnist-tf-distributed-chief-x7k2p"
LISTS = [
    Call("list", "pods", NS, label_selector=SELECTOR),
    Call("list", "statefulsets", NS, label_selector=SELECTOR),
    Call("list", "jobs", NS, label_selector=SELECTOR),
    Call("list", "services", NS, label_selector=SELECTOR),
]
CHIEF_LOG_CALL = Call("log", "pods", NS, CHIEF_POD, params=(("container", "chief"), ("tailLines", "2000")))
# Serving is on by default: its model config says which of the exported versions (the chief's log says) it loads
CONFIG_MAPS = Call("list", "configmaps", NS, label_selector=SELECTOR + ",app.kubernetes.io/component=serving")


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    with kube_server(read_only=True) as server:
        yield server


def tfd_status(**fields: Any) -> str:
    document = {"state": "Running", "strategy": "parameter_server", "step": 1200, "train_steps": 2000, "loss": 0.2345,
                "accuracy": None, "examples_per_sec": 2117.3, "export_path": None, "started_at": "2026-11-22T11:00:00Z",
                "updated_at": "2026-11-22T11:58:00Z", "message": "training", **fields}  # fmt: skip
    return "INFO trainer.metrics tfd-status: " + json.dumps(document)


def render_text(report: dict[str, Any]) -> str:
    console = Console(width=320, record=True, color_system=None)
    status.render(report, console)
    return console.export_text()


def base_release(
    cluster: KubeServer,
    values: tuple[str, ...] = (),
    chief: str = "running",
    stateful_replicas: int | None = None,
    sets: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The release's controllers, Services, ConfigMaps and TensorBoard/Serving pods; TF pods are added per test."""
    docs = kf.rendered(values, sets)
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            cluster.add(kf.stateful_set(doc, replicas=stateful_replicas))
        elif doc["kind"] == "Service":
            cluster.add(kf.service(doc))
        elif doc["kind"] == "ConfigMap":
            cluster.add(doc)
        elif doc["kind"] == "Deployment" and doc["metadata"]["labels"]["app.kubernetes.io/component"] == "supervisor":
            if chief == "running":  # once the run ended, the supervisor scaled itself to 0
                cluster.add(kf.deployment(doc), kf.pod(doc, node="cpu-node-1"))
            else:
                doc = copy.deepcopy(doc)
                doc["spec"]["replicas"] = 0
                cluster.add(kf.deployment(doc))
        elif doc["kind"] == "Deployment":
            cluster.add(kf.deployment(doc), kf.pod(doc, node="cpu-node-1"))
    cluster.add(kf.job(kf.manifest(docs, "Job", "chief"), chief))
    return docs


def collect(cluster: KubeServer) -> dict[str, Any]:
    return status.collect(cluster.api(), "mnist", NS, now=kf.NOW)


def test_running_parameter_server_training_shows_progress_pods_and_endpoints(cluster: KubeServer) -> None:
    docs = base_release(cluster)
    ps, worker = kf.manifest(docs, "StatefulSet", "ps"), kf.manifest(docs, "StatefulSet", "worker")
    cluster.add(kf.pod(ps, index=0), kf.pod(worker, index=0), kf.pod(worker, index=1, restarts=1))
    cluster.add(kf.pod(kf.manifest(docs, "Job", "chief")))
    cluster.set_log(NS, CHIEF_POD, [tfd_status(step=1100, loss=0.3),
                                    "step 1150, loss = 0.2500 (2000.0 examples/sec; 0.128 sec/batch)", tfd_status(),
                                    "step 1250, loss = 0.2200 (2100.0 examples/sec; 0.122 sec/batch)"])  # fmt: skip

    report = collect(cluster)

    assert cluster.calls == [*LISTS, CHIEF_LOG_CALL, CONFIG_MAPS]
    assert report["training"]["state"] == "Running"
    assert report["training"]["progress"] is not None
    assert (report["training"]["progress"]["source"], report["training"]["progress"]["step"]) == ("tfd-status", 1200)
    assert report["chief"]["state"] == "Running"
    assert [(s["role"], s["ready"], s["desired"]) for s in report["stateful_sets"]] == [("ps", 1, 1), ("worker", 2, 2)]
    assert [(p["role"], p["name"]) for p in report["pods"]] == [
        ("chief", CHIEF_POD),
        ("ps", "mnist-tf-distributed-ps-0"),
        ("worker", "mnist-tf-distributed-worker-0"),
        ("worker", "mnist-tf-distributed-worker-1"),
        ("tensorboard", "mnist-tf-distributed-tensorboard-5f7d8c6b9-abcde"),
        ("serving", "mnist-tf-distributed-serving-5f7d8c6b9-abcde"),
        ("supervisor", "mnist-tf-distributed-supervisor-5f7d8c6b9-abcde"),
    ]
    assert [e["port_forward"] for e in report["endpoints"]] == [
        "kubectl -n ml-training port-forward svc/mnist-tf-distributed-tensorboard 6006:6006",
        "kubectl -n ml-training port-forward svc/mnist-tf-distributed-serving 8501:8501 8500:8500",
    ]
    assert report["endpoints"][0]["dns"] == "mnist-tf-distributed-tensorboard.ml-training.svc"
    assert report["endpoints"][0]["ready_pods"] == 1
    text = render_text(report)
    assert "Running  training" in text
    assert "step 1200/2000 (60%), loss 0.2345, 2117.3 examples/sec" in text
    assert "ps 1/1 ready, worker 2/2 ready" in text
    assert "mnist-tf-distributed-worker-1" in text
    data = report
    json.dumps(data)  # JSON-able for --output json
    assert data["training"]["progress"]["step"] == 1200
    assert data["endpoints"][1]["ports"] == [{"name": "http", "port": 8501}, {"name": "grpc", "port": 8500}]


def test_succeeded_and_scaled_down_shows_accuracy_and_export(cluster: KubeServer) -> None:
    docs = base_release(cluster, chief="complete", stateful_replicas=0)
    chief = kf.manifest(docs, "Job", "chief")
    cluster.add(kf.pod(chief, phase="Succeeded", ready=False, terminated=("Completed", 0)))
    cluster.set_log(NS, CHIEF_POD, [
        "step 2000, loss = 0.0470 (2117.3 examples/sec; 0.121 sec/batch)",
        tfd_status(state="Succeeded", step=2000, loss=0.047, accuracy=0.9861, export_path="/data/export/mnist/1",
                   message="training completed: 2000 steps, held-out accuracy 0.9861"),
        "INFO scaled StatefulSets mnist-tf-distributed-ps, mnist-tf-distributed-worker to 0",
    ])  # fmt: skip

    report = collect(cluster)

    assert cluster.calls == [*LISTS, CHIEF_LOG_CALL, CONFIG_MAPS]
    assert report["training"]["state"] == "Succeeded"
    assert report["chief"]["state"] == "Succeeded"
    assert report["chief"]["reason"] == "CompletionsReached"
    assert [(s["role"], s["ready"], s["desired"]) for s in report["stateful_sets"]] == [("ps", 0, 0), ("worker", 0, 0)]
    assert {p["role"] for p in report["pods"]} == {"chief", "tensorboard", "serving"}
    text = render_text(report)
    assert "Succeeded  training completed: 2000 steps, held-out accuracy 0.9861" in text
    assert "step 2000/2000 (100%), loss 0.0470, accuracy 0.9861" in text
    assert "/data/export/mnist/1" in text
    assert "ps 0/0 ready, worker 0/0 ready" in text


def test_failed_chief_reports_backoff_limit_and_trainer_message(cluster: KubeServer) -> None:
    docs = base_release(cluster, chief="failed")
    chief = kf.manifest(docs, "Job", "chief")
    cluster.add(kf.pod(chief, phase="Failed", ready=False, restarts=6, terminated=("Error", 1)))
    cluster.set_log(NS, CHIEF_POD, [tfd_status(state="Failed", message="dataset not found: /data/datasets/mnist.npz"),
                                    "Traceback (most recent call last): ..."])  # fmt: skip

    report = collect(cluster)

    assert report["training"]["state"] == "Failed"
    assert report["chief"]["reason"] == "BackoffLimitExceeded"
    assert report["pods"][0]["status"] == "Failed: Error"
    assert report["pods"][0]["restarts"] == 6
    text = render_text(report)
    assert "Failed  chief Job failed: BackoffLimitExceeded (Job has reached the specified backoff limit)" in text
    assert "trainer: dataset not found: /data/datasets/mnist.npz" in text


def test_worker_in_crash_loop_shows_restarts_and_reason(cluster: KubeServer) -> None:
    docs = base_release(cluster)
    ps, worker = kf.manifest(docs, "StatefulSet", "ps"), kf.manifest(docs, "StatefulSet", "worker")
    cluster.add(kf.stateful_set(worker, ready=1))
    cluster.add(kf.pod(ps, index=0), kf.pod(worker, index=0))
    cluster.add(kf.pod(worker, index=1, ready=False, restarts=7, last_terminated=("OOMKilled", 137),
                       waiting=("CrashLoopBackOff", "back-off 5m0s restarting failed container=worker")))
    cluster.add(kf.pod(kf.manifest(docs, "Job", "chief")))
    cluster.set_log(NS, CHIEF_POD, ["waiting for 2 workers"])

    report = collect(cluster)

    crashing = next(p for p in report["pods"] if p["name"] == "mnist-tf-distributed-worker-1")
    assert (crashing["reason"], crashing["restarts"], crashing["ready"]) == ("CrashLoopBackOff", 7, False)
    assert crashing["message"].startswith("last exit: OOMKilled, code 137")
    assert report["training"]["detail"] == status.NO_PROGRESS
    text = render_text(report)
    assert "Running: CrashLoopBackOff" in text
    assert "worker 1/2 ready" in text
    assert "last exit: OOMKilled, code 137" in text
    assert "no progress reported yet" in text


def test_pending_gpu_pod_shows_the_scheduler_reason(cluster: KubeServer) -> None:
    docs = base_release(cluster, values=("values/gpu.yaml",), chief="pending")
    worker = kf.manifest(docs, "StatefulSet", "worker")
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."
    ps = kf.manifest(docs, "StatefulSet", "ps")
    cluster.add(kf.stateful_set(worker, ready=3), *(kf.pod(ps, index=i, node="cpu-node-1") for i in (0, 1)))
    cluster.add(*(kf.pod(worker, index=i) for i in range(3)))
    cluster.add(kf.pod(worker, index=3, phase="Pending", ready=False, unschedulable=message))
    chief = kf.manifest(docs, "Job", "chief")
    cluster.add(kf.pod(chief, phase="Pending", ready=False, waiting=("ContainerCreating", "")))

    report = collect(cluster)

    assert cluster.calls == [*LISTS, CONFIG_MAPS]  # no log read: the chief never started
    pending = next(p for p in report["pods"] if p["name"] == "mnist-tf-distributed-worker-3")
    assert (pending["phase"], pending["reason"], pending["node"]) == ("Pending", "Unschedulable", None)
    assert pending["gpus"] == [{"resource": "nvidia.com/gpu", "count": 1}]
    assert report["training"]["state"] == "Pending"
    assert report["chief"]["reason"] == "ContainerCreating"
    text = render_text(report)
    assert "Pending: Unschedulable" in text
    assert "3 Insufficient nvidia.com/gpu" in text
    assert "1 nvidia.com/gpu" in text


def test_release_not_found_says_so_and_hints_helm_list(cluster: KubeServer) -> None:
    base_release(cluster)  # another release's objects must not count
    with pytest.raises(KubernetesError) as error:
        status.collect(cluster.api(), "other", NS)
    assert error.value.message.startswith("no release other in namespace ml-training")
    assert error.value.hint.startswith("check the release name and namespace: `helm list -n ml-training`")
    other = SELECTOR.replace("instance=mnist", "instance=other")
    assert [c.label_selector for c in cluster.calls] == [other] * 4


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ([tfd_status(step=5), "tfd-status: {broken", "noise"], ("tfd-status", 5)),
        (
            [
                "step 10, loss = 2.3026 (512.5 examples/sec; 0.195 sec/batch)",
                "step 20, loss = nan (1.0 examples/sec; 1.0 sec/batch)",
            ],
            ("step-line", 20),
        ),
        (["nothing yet"], None),
    ],
)
def test_progress_prefers_the_last_status_line_then_step_lines(
    log: list[str], expected: tuple[str, int] | None
) -> None:
    progress = status.parse_progress("\n".join(log))
    assert (progress["source"], progress["step"]) == expected if progress else expected is None


def test_forbidden_log_still_shows_the_release(cluster: KubeServer) -> None:
    docs = base_release(cluster)
    cluster.add(kf.pod(kf.manifest(docs, "Job", "chief")))
    cluster.fail("log", "pods", 403, 'pods "x" is forbidden: cannot get resource "pods/log"')
    report = collect(cluster)
    assert report["training"]["state"] == "Running"
    assert report["training"]["progress"] is None
    forbidden = f"cannot read the chief's log: forbidden: you may not get pods/log/{CHIEF_POD}"
    assert report["notes"][0].startswith(forbidden)
    assert "note: cannot read the chief's log" in render_text(report)


# -- the KubeApi boundary: errors become KubernetesError with a hint --------------------------------


def test_forbidden_names_the_missing_rbac_verb_and_resource(cluster: KubeServer) -> None:
    cluster.fail(
        "list",
        "statefulsets",
        403,
        'statefulsets.apps is forbidden: User "dev" cannot list resource '
        '"statefulsets" in API group "apps" in the namespace "ml-training"',
    )
    with pytest.raises(KubernetesError) as error:
        collect(cluster)
    assert error.value.message.startswith("forbidden: you may not list statefulsets.apps in namespace ml-training: ")
    assert 'User "dev" cannot list' in error.value.message
    assert "RBAC verb `list` on resource `statefulsets.apps` is missing" in error.value.hint
    assert "`kubectl auth can-i list statefulsets.apps -n ml-training`" in error.value.hint


def test_unauthorized_and_server_errors_have_hints(cluster: KubeServer) -> None:
    cluster.fail("list", "pods", 401, "Unauthorized")
    with pytest.raises(KubernetesError) as error:
        collect(cluster)
    assert "401 Unauthorized" in error.value.message
    assert "refresh your login" in error.value.hint
    cluster.reset()
    cluster.fail("list", "pods", 500, "etcdserver: request timed out")
    with pytest.raises(KubernetesError) as error:
        collect(cluster)
    assert (
        error.value.message
        == "the API server failed to list pods in namespace ml-training (HTTP 500): etcdserver: request timed out"
    )
    assert "retry" in error.value.hint


def test_missing_object_is_a_404_with_a_kubectl_hint(cluster: KubeServer) -> None:
    api = cluster.api()
    with pytest.raises(KubernetesError) as error:
        list(api.stream_pod_log(NS, "gone-0", None, 10, False))
    assert error.value.message.startswith("pods/log gone-0 not found in namespace ml-training")
    assert "kubectl get pods -n ml-training" in error.value.hint
    assert api.read_object("PersistentVolumeClaim", "absent", NS) is None


def test_every_kind_has_its_api_path_and_resource_name() -> None:
    """KubeApi calls each kind on its path (the core group under /api, others under /apis/GROUP), cluster-scoped or
    across namespaces without a namespace; JobSet, a custom resource, alike."""
    assert [kube.resource_path(*args) for args in (("Pod", None), ("Pod", "ns", "x", "log"), ("Node", None, "x"),
                                                   ("StatefulSet", "ns", "x", "scale"), ("JobSet", "ns"))] == [
        "/api/v1/pods", "/api/v1/namespaces/ns/pods/x/log", "/api/v1/nodes/x",
        "/apis/apps/v1/namespaces/ns/statefulsets/x/scale", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets"]
    assert kube.resource_path("ValidatingWebhookConfiguration", None) == \
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"  # fmt: skip
    assert [kube.resource_name(kind) for kind in ("Pod", "Job", "JobSet")] == ["pods", "jobs.batch",
                                                                               "jobsets.jobset.x-k8s.io"]
    # every kind's group, version and plural is one the API server (the fake's tables of it) serves
    served = {(gv, plural) for gv, kinds in kf.BUILT_IN.items() for plural in kinds} | {
        (f"{kf.JOBSET_GROUP}/v1alpha2", "jobsets")}
    assert {(f"{c.group}/{c.version}".lstrip("/"), c.plural) for c in map(kube.split_resource, kube.KINDS)} <= served


def test_unreachable_server_hints_cluster_info() -> None:
    def unreachable() -> Any:
        from kubernetes import client

        configuration = client.Configuration(host="https://127.0.0.1:1")
        configuration.retries = 0
        return client.ApiClient(configuration)

    api = kube.KubeApi(unreachable, source="KUBECONFIG=/tmp/kind")
    with pytest.raises(KubernetesError) as error:
        api.items("Node")
    assert error.value.message.startswith("cannot reach the Kubernetes API server at https://127.0.0.1:1 (list nodes")
    assert "KUBECONFIG=/tmp/kind" in error.value.hint
    assert "kubectl cluster-info" in error.value.hint


def test_no_configuration_says_how_to_set_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    api = kube.KubeApi.from_config(None, None)  # lazy: nothing is read yet
    with pytest.raises(KubernetesError) as error:
        api.items("Pod", NS, SELECTOR)
    assert "KUBECONFIG is not set, ~/.kube/config does not exist" in error.value.message
    assert "export KUBECONFIG=" in error.value.hint


def test_bad_kubeconfig_and_unknown_context(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_text("just a string\n")
    with pytest.raises(KubernetesError) as error:
        kube.KubeApi.from_config(garbage, None).items("Node")
    assert error.value.message.startswith(f"cannot load the kubeconfig {garbage}")
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: kind\n"
        "clusters: [{name: kind, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: kind, user: {token: abc}}]\n"
        "contexts: [{name: kind, context: {cluster: kind, user: kind}}]\n"
    )
    with pytest.raises(KubernetesError) as error:
        kube.KubeApi.from_config(config, "prod").items("Node")
    assert "context 'prod' not found" in error.value.message
    assert "kubectl config get-contexts" in error.value.hint
    with pytest.raises(KubernetesError, match="context 'prod' not found"):
        configured_namespace(config, "prod")  # the namespace of a command (test_namespace.py: the contexts')


# -- a live cluster ----------------------------------------------------------------------------------

needs_cluster = pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"),
    reason="no live cluster: set KUBECONFIG to a kubeconfig of a reachable cluster (e.g. after `kind create cluster`)",
)


@pytest.mark.cluster
@needs_cluster
def test_live_cluster_missing_release_is_a_clear_error() -> None:
    api = kube.KubeApi.from_config(None, None)
    with pytest.raises(KubernetesError) as error:
        status.collect(api, "tfchart-no-such-release", "default")
    assert error.value.message.startswith("no release tfchart-no-such-release in namespace default")


@pytest.mark.cluster
@needs_cluster
def test_live_cluster_release_status() -> None:
    release = os.environ.get("TFCHART_TEST_RELEASE")
    if not release:
        pytest.skip("set TFCHART_TEST_RELEASE (and TFCHART_TEST_NAMESPACE) to an installed tf-distributed release")
    report = status.collect(
        kube.KubeApi.from_config(None, None), release, os.environ.get("TFCHART_TEST_NAMESPACE", "default")
    )
    assert report["training"]["state"] in {"Running", "Succeeded", "Failed", "Pending", "Unknown"}
    json.dumps(report)
    render_text(report)


WORKERS_ONLY = ("training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=2",
                "training.batchSize=64")


def workers_only_release(cluster: KubeServer, state: str) -> None:
    """The workers' Indexed Job (worker 0 is the chief) and its pods, named <job>-<index>-<suffix>."""
    docs = kf.rendered(sets=WORKERS_ONLY)
    job = kf.manifest(docs, "Job", "worker")
    cluster.add(kf.job(job, state))
    phase = "Running" if state == "running" else "Succeeded"
    for index in (0, 1):
        pod = kf.pod(job, f"{job['metadata']['name']}-{index}-q{index}z9x", phase=phase, ready=phase == "Running",
                     terminated=None if phase == "Running" else ("Completed", 0))
        pod["metadata"].setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(index)
        cluster.add(pod)


def test_without_a_chief_the_workers_job_owns_completion_and_worker_0_reports_progress(cluster: KubeServer) -> None:
    workers_only_release(cluster, "running")
    cluster.set_log(NS, "mnist-tf-distributed-worker-0-q0z9x", [tfd_status(step=700, loss=0.25)])
    report = collect(cluster)
    chief = report["chief"]
    assert (chief["role"], chief["name"], chief["state"]) == ("worker", "mnist-tf-distributed-worker", "Running")
    assert report["training"]["state"] == "Running" and report["training"]["progress"] is not None
    assert report["training"]["progress"]["step"] == 700
    assert Call("log", "pods", NS, "mnist-tf-distributed-worker-0-q0z9x",
                params=(("container", "worker"), ("tailLines", "2000"))) in cluster.calls
    console = Console(record=True, width=200)
    status.render(report, console)
    assert "Workers' Job  Running" in console.export_text()

    cluster.reset()
    workers_only_release(cluster, "complete")
    finished = collect(cluster)
    assert finished["training"]["state"] == "Succeeded" and finished["warnings"] == []


def finished_release_with_versions(
    cluster: KubeServer, sets: tuple[str, ...], exported: list[int] | None
) -> KubeServer:
    cluster.reset()
    docs = base_release(cluster, sets=sets, chief="complete", stateful_replicas=0)
    cluster.add(kf.pod(kf.manifest(docs, "Job", "chief"), phase="Succeeded", ready=False, terminated=("Completed", 0)))
    fields: dict[str, Any] = {"state": "Succeeded", "step": 2000, "model_name": "mnist",
                              "export_path": "/data/export/mnist/3", "message": "training completed"}
    if exported is not None:
        fields["exported_versions"] = exported
    cluster.set_log(NS, CHIEF_POD, [tfd_status(**fields)])
    return cluster


@pytest.mark.parametrize(
    ("sets", "loaded", "policy"),
    [
        ((), [3], "latest 1"),  # the chart's default
        (("serving.modelVersionPolicy.latest=2",), [2, 3], "latest 2"),
        (("serving.modelVersionPolicy.type=specific", "serving.modelVersionPolicy.versions={1}"), [1], "specific: 1"),
        (("serving.modelVersionPolicy.type=all",), [1, 2, 3], "all versions"),
    ],
)
def test_status_lists_exported_versions_and_those_serving_loads(
    sets: tuple[str, ...], loaded: list[int], policy: str, cluster: KubeServer
) -> None:
    finished_release_with_versions(cluster, tuple(sets), [1, 2, 3])

    report = collect(cluster)

    assert cluster.calls == [*LISTS, CHIEF_LOG_CALL, CONFIG_MAPS]
    assert report["serving"] is not None
    assert [report["serving"][key] for key in ("exported", "loaded", "policy")] == [[1, 2, 3], loaded, policy]
    assert report["serving"]["config_map"] == "mnist-tf-distributed-serving"
    assert report["warnings"] == []
    text = render_text(report)
    assert re.search(r"Exported +v1, v2, v3 +│", text)
    shown = ", ".join(f"v{v}" for v in loaded)
    assert re.search(rf"Serving loads +{shown} of mnist \({policy}, mnist-tf-distributed-serving\) +│", text)
    assert json.loads(json.dumps(report))["serving"]["loaded"] == loaded


def test_a_pinned_version_never_exported_is_a_warning_with_the_fix(cluster: KubeServer) -> None:
    sets = ("serving.modelVersionPolicy.type=specific", "serving.modelVersionPolicy.versions={2,7}")
    report = collect(finished_release_with_versions(cluster, sets, [1, 2, 3]))

    assert report["serving"] is not None
    assert (report["serving"]["loaded"], report["serving"]["missing"]) == ([2], [7])
    assert report["warnings"] == [
        "Serving is configured to load version(s) 7 of mnist, which were never exported (exported: 1, 2, 3): it "
        "answers nothing for them; pin exported versions only, e.g. `tfchart upgrade mnist ... "
        "--set serving.modelVersionPolicy.versions={2}`"
    ]
    assert "not exported: v7" in render_text(report)


def test_versions_unknown_without_the_chiefs_report_and_no_configmap_read_without_serving(
    cluster: KubeServer,
) -> None:
    older = collect(finished_release_with_versions(cluster, (), None))  # a trainer that did not report them: unknown
    assert older["serving"] is not None and older["serving"]["exported"] is None and older["serving"]["loaded"] is None
    assert older["warnings"] == [] and "Exported" not in render_text(older)
    assert re.search(r"Serving loads +mnist \(latest 1, mnist-tf-distributed-serving\); the exported versions are "
                     r"unknown", render_text(older))
    none_yet = collect(finished_release_with_versions(cluster, (), []))
    assert none_yet["serving"] is not None and none_yet["serving"]["loaded"] == []
    assert re.search(r"Exported +no version yet", render_text(none_yet))

    cluster.reset()
    docs = base_release(cluster, chief="complete", stateful_replicas=0)
    cluster.add(kf.pod(kf.manifest(docs, "Job", "chief"), phase="Succeeded", ready=False, terminated=("Completed", 0)))
    cluster.set_log(NS, CHIEF_POD, ["step 2000, loss = 0.0470 (2117.3 examples/sec; 0.121 sec/batch)"])
    report = collect(cluster)
    assert report["serving"] is not None and report["serving"]["exported"] is report["serving"]["loaded"] is None
    assert "Serving loads  mnist-tf-distributed-serving" not in render_text(report)
    assert "the exported versions are unknown" in render_text(report)

    cluster.reset()
    base_release(cluster, sets=("serving.enabled=false",))
    collect(cluster)
    assert [c.resource for c in cluster.calls].count("configmaps") == 0


def test_forbidden_configmaps_still_show_the_release(cluster: KubeServer) -> None:
    finished_release_with_versions(cluster, (), [1])
    cluster.fail("list", "configmaps", 403, 'configmaps is forbidden: cannot list resource "configmaps"')

    report = collect(cluster)

    assert report["training"]["state"] == "Succeeded" and report["serving"] is None
    assert any(note.startswith("cannot read Serving's model config") for note in report["notes"])
    assert re.search(r"Exported +v1 +│", render_text(report))


# the version policy the chart records from the release's values on Serving's ConfigMap, applied as TF Serving does
@pytest.mark.parametrize(("policy", "exported", "loaded"), [
    ('"latest", "latest": 1', [1, 2, 3], [3]),
    ('"latest", "latest": 5', [3, 1, 2], [1, 2, 3]),
    ('"latest", "latest": 2', [], []),
    ('"latest", "latest": 0', [1, 2], [2]),  # num_versions 0: the server serves one
    ('"specific", "versions": [1, 9]', [1, 2, 3], [1]),
    ('"all"', [2, 1], [1, 2]),
])  # fmt: skip
def test_the_policy_selects_as_tf_serving_does(policy: str, exported: list[int], loaded: list[int]) -> None:
    assert status.serving_versions("cm", f'{{"type": {policy}}}', exported)["loaded"] == loaded


def test_versions_of_a_missing_or_unreadable_record_say_why() -> None:
    absent = status.serving_versions("cm", None, [1])
    assert absent["loaded"] is None and "has no tf-distributed.io/model-version-policy annotation" in absent["note"]
    for text in ("{", '{"type": "newest"}', '{"type": "specific", "versions": ["1"]}', "[]"):
        broken = status.serving_versions("cm", text, [1])
        assert broken["loaded"] is None and "annotation cannot be read" in broken["note"], text
    pinned = status.serving_versions("cm", json.dumps({"model": "m", "type": "specific", "versions": [2, 7]}), [1, 2])
    assert [pinned[key] for key in ("model", "loaded", "missing", "policy")] == ["m", [2], [7], "specific: 2, 7"]
    unknown = status.serving_versions("cm", json.dumps({"model": "m", "type": "all"}), None)
    assert unknown["loaded"] is None and "exported versions are unknown" in unknown["note"]
    latest = status.read_policy('{"type": "latest", "latest": 3, "versions": []}')
    assert latest == {"model": "", "type": "latest", "latest": 3, "versions": []}


def test_the_progress_record_on_the_job_gives_the_eta_and_last_checkpoint(cluster: KubeServer) -> None:
    """The run supervisor's record (tf-distributed.io/progress): its ETA and last checkpoint are shown; when
    the chief's log is gone it is the progress; a run it ended as stalled is Failed before its Job is."""
    docs = base_release(cluster)
    chief = kf.manifest(docs, "Job", "chief")
    record = ('{"state":"Running","step":1200,"target":2000,"eta":"2026-11-22T12:40:00Z","loss":0.2345,'
              '"checkpointStep":1100,"updatedAt":"2026-11-22T11:59:50Z","stepChangedAt":"2026-11-22T11:59:50Z"}')
    cluster.update("Job", NS, "mnist-tf-distributed-chief", {"metadata": {"annotations": {
        "tf-distributed.io/progress": record}}})
    cluster.add(kf.pod(chief))
    cluster.set_log(NS, CHIEF_POD, [tfd_status()])
    text = render_text(collect(cluster))
    assert re.search(r"ETA\s+2026-11-22T12:40:00Z", text) and re.search(r"Checkpoint\s+step 1100", text), text
    # the pod gone (evicted, or the log unreadable): the record is the progress
    cluster.delete("Pod", NS, CHIEF_POD)
    report = collect(cluster)
    assert report["training"]["progress"] is not None and report["training"]["progress"]["source"] == "job-record"
    assert "step 1200/2000 (60%), loss 0.2345, updated 2026-11-22T11:59:50Z" in render_text(report)
    assert report["job_progress"]["checkpoint_step"] == 1100
    # stalled: the supervisor recorded the ending while the Job controller has not failed the Job yet
    reason = "Stalled: step 1200 has not risen for 1800 s"
    cluster.update("Job", NS, "mnist-tf-distributed-chief", {"metadata": {"annotations": {
        "tf-distributed.io/ending": "stalled", "tf-distributed.io/end-reason": reason}}})
    report = collect(cluster)
    assert report["training"]["state"] == "Failed"
    assert report["training"]["detail"] == f"the run ended (stalled): {reason}"
    assert re.search(rf"Run ended\s+stalled: {reason}", render_text(report))
