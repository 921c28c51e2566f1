"""Render tests on parsed objects: the cluster contract (docs/architecture.md), selectors, GPUs, names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.chartlib import (
    CHART,
    CI_DIR,
    VALUES_DIR,
    all_containers,
    by_kind,
    env_of,
    named,
    pod_spec,
    pod_template,
    render,
    template,
    values_files,
    workloads,
)

NAMESPACE = "ml-training"
PREFIX = "mnist-tf-distributed"


def cluster_map(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    chief = pod_spec(named(docs, "Job", f"{PREFIX}-chief"))["containers"][0]
    cluster: dict[str, list[str]] = json.loads(env_of(chief)["TFD_CLUSTER"])
    return cluster


def expected_addresses(
    docs: list[dict[str, Any]], role: str, replicas: int, domain: str = "cluster.local"
) -> list[str]:
    """Addresses derived from the StatefulSet and its headless Service, not from the chart helpers."""
    sts = named(docs, "StatefulSet", f"{PREFIX}-{role}")
    service = named(docs, "Service", sts["spec"]["serviceName"])
    port = service["spec"]["ports"][0]["port"]
    return [
        f"{sts['metadata']['name']}-{ordinal}.{service['metadata']['name']}.{NAMESPACE}.svc.{domain}:{port}"
        for ordinal in range(replicas)
    ]


@pytest.mark.parametrize("ps", [1, 2, 5])
@pytest.mark.parametrize("workers", [1, 3, 16])
def test_cluster_map_lists_statefulset_pod_dns_names_in_ordinal_order(ps: int, workers: int) -> None:
    docs = render(sets=[f"ps.replicas={ps}", f"worker.replicas={workers}"], namespace=NAMESPACE)
    cluster = cluster_map(docs)
    assert set(cluster) == {"chief", "ps", "worker"}
    assert cluster["ps"] == expected_addresses(docs, "ps", ps)
    assert cluster["worker"] == expected_addresses(docs, "worker", workers)
    assert cluster["chief"] == [f"{PREFIX}-chief.{PREFIX}-chief.{NAMESPACE}.svc.cluster.local:2222"]

    for role, replicas in (("ps", ps), ("worker", workers)):
        sts = named(docs, "StatefulSet", f"{PREFIX}-{role}")
        service = named(docs, "Service", f"{PREFIX}-{role}")
        assert sts["spec"]["replicas"] == replicas
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["publishNotReadyAddresses"] is True
        container = pod_spec(sts)["containers"][0]
        container_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "tf-grpc")
        assert service["spec"]["ports"][0]["port"] == container_port
        assert service["spec"]["ports"][0]["targetPort"] == "tf-grpc"
        assert all(address.endswith(f":{container_port}") for address in cluster[role])
        # Every TF pod gets the same map.
        assert json.loads(env_of(container)["TFD_CLUSTER"]) == cluster
        assert env_of(container)["GRPC_FAIL_FAST"] == "use_caller"


def test_custom_ports_and_cluster_domain_flow_into_the_map() -> None:
    docs = render(
        sets=[
            "ps.service.port=3333",
            "worker.service.port=4444",
            "chief.service.port=5555",
            "clusterDomain=corp.internal",
        ]
    )
    cluster = cluster_map(docs)
    assert cluster["ps"] == expected_addresses(docs, "ps", 1, "corp.internal")
    assert cluster["worker"] == expected_addresses(docs, "worker", 2, "corp.internal")
    assert cluster["chief"][0].endswith(".svc.corp.internal:5555")
    chief_service = named(docs, "Service", f"{PREFIX}-chief")
    assert chief_service["spec"]["ports"][0]["port"] == 5555


def test_chief_job_has_stable_dns_through_its_headless_service() -> None:
    docs = render()
    job = named(docs, "Job", f"{PREFIX}-chief")
    spec = pod_spec(job)
    service = named(docs, "Service", f"{PREFIX}-chief")
    assert spec["hostname"] == spec["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert spec["restartPolicy"] == "Never"  # retries are the Job's, so the podFailurePolicy applies
    assert job["spec"]["podFailurePolicy"]["rules"][0] == {
        "action": "FailJob", "onExitCodes": {"containerName": "chief", "operator": "In", "values": [2]}}
    assert job["spec"]["backoffLimit"] == 6
    assert job["spec"]["podReplacementPolicy"] == "Failed"


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("values_file", values_files(), ids=lambda p: p.name)
def test_selectors_match_pod_labels_and_are_name_instance_component_only(values_file: Any) -> None:
    docs = render(values=[values_file])
    for doc in workloads(docs):
        if doc["kind"] == "Job":
            continue
        selector = doc["spec"]["selector"]["matchLabels"]
        assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}
        assert selector_matches(selector, pod_template(doc)["metadata"]["labels"]), doc["metadata"]["name"]
    pods_by_labels = [pod_template(doc)["metadata"]["labels"] for doc in workloads(docs)]
    for service in by_kind(docs, "Service"):
        selector = service["spec"]["selector"]
        assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}
        assert any(selector_matches(selector, labels) for labels in pods_by_labels), service["metadata"]["name"]


def gpu_limits(container: dict[str, Any]) -> dict[str, Any]:
    resources = container.get("resources", {})
    assert not any("gpu" in key for key in resources.get("requests", {})), "GPUs belong in limits only"
    return {key: value for key, value in resources.get("limits", {}).items() if "gpu" in key}


def test_gpu_limits_present_exactly_where_requested() -> None:
    docs = render(values=[VALUES_DIR / "gpu.yaml"])
    found = {doc["metadata"]["name"]: gpu_limits(pod_spec(doc)["containers"][0]) for doc in workloads(docs)}
    assert found.pop(f"{PREFIX}-worker") == {"nvidia.com/gpu": 1}
    assert all(limits == {} for limits in found.values()), found

    docs = render(
        sets=[
            "training.strategy=mirrored",
            "chief.gpu.count=4",
            "serving.gpu.count=1",
            "worker.gpu.count=2",
            "worker.gpu.resourceName=amd.com/gpu",
        ]
    )
    found = {doc["metadata"]["name"]: gpu_limits(pod_spec(doc)["containers"][0]) for doc in workloads(docs)}
    assert found.pop(f"{PREFIX}-chief") == {"nvidia.com/gpu": 4}
    assert found.pop(f"{PREFIX}-serving") == {"nvidia.com/gpu": 1}
    assert all(limits == {} for limits in found.values()), found  # no workers under mirrored
    serving = pod_spec(named(docs, "Deployment", f"{PREFIX}-serving"))["containers"][0]
    assert serving["image"].endswith("tensorflow/serving:2.21.0-gpu")


def test_all_workers_share_one_gpu_count_and_gpu_pods_get_shared_memory() -> None:
    docs = render(values=[VALUES_DIR / "sync-allreduce.yaml"])
    counts = {
        doc["metadata"]["name"]: gpu_limits(pod_spec(doc)["containers"][0])
        for doc in docs
        if doc["kind"] in {"StatefulSet", "Job"} and doc["metadata"]["name"] != f"{PREFIX}-test"
    }
    assert set(map(json.dumps, counts.values())) == {json.dumps({"nvidia.com/gpu": 1})}
    worker = pod_spec(named(docs, "StatefulSet", f"{PREFIX}-worker"))
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in worker["volumes"]


def run_prelude(container: dict[str, Any], hostname: str, pod_index: str | None) -> subprocess.CompletedProcess[str]:
    """Executes the rendered command with its rendered env; the program is replaced by a probe."""
    command = container["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    env = {"PATH": os.environ["PATH"], "HOSTNAME": hostname}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
    if pod_index is not None:
        env["TFD_TASK_INDEX"] = pod_index
    elif "valueFrom" in next(i for i in container["env"] if i["name"] == "TFD_TASK_INDEX"):
        env["TFD_TASK_INDEX"] = ""  # the downward API yields "" where the pod-index label is absent
    probe = [sys.executable, "-c", "import os; print(os.environ['TF_CONFIG'])"]
    return subprocess.run([*command, *probe], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("role", "ordinal"), [("ps", 0), ("ps", 4), ("worker", 0), ("worker", 1), ("worker", 15)])
@pytest.mark.parametrize("from_label", [True, False], ids=["pod-index-label", "hostname-suffix"])
def test_rendered_prelude_yields_tf_config_with_the_ordinal(role: str, ordinal: int, from_label: bool) -> None:
    docs = render(sets=["ps.replicas=5", "worker.replicas=16"])
    sts = named(docs, "StatefulSet", f"{PREFIX}-{role}")
    container = pod_spec(sts)["containers"][0]
    hostname = f"{sts['metadata']['name']}-{ordinal}"
    result = run_prelude(container, hostname, str(ordinal) if from_label else None)
    assert result.returncode == 0, result.stderr
    tf_config = json.loads(result.stdout)
    assert tf_config["task"] == {"type": role, "index": ordinal}
    assert tf_config["cluster"] == cluster_map(docs)
    assert hostname in tf_config["cluster"][role][ordinal]


def test_prelude_for_the_chief_job_uses_index_zero() -> None:
    docs = render()
    container = pod_spec(named(docs, "Job", f"{PREFIX}-chief"))["containers"][0]
    result = run_prelude(container, f"{PREFIX}-chief", None)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["task"] == {"type": "chief", "index": 0}


def test_prelude_rejects_a_hostname_without_ordinal() -> None:
    docs = render()
    container = pod_spec(named(docs, "StatefulSet", f"{PREFIX}-worker"))["containers"][0]
    result = run_prelude(container, "not-a-statefulset-pod", None)
    assert result.returncode == 64
    assert "cannot derive the worker task index" in result.stderr


def test_bring_your_own_command_keeps_tf_config() -> None:
    docs = render(sets=["worker.command={python,/app/train.py}", "worker.args={--epochs=3}"])
    container = pod_spec(named(docs, "StatefulSet", f"{PREFIX}-worker"))["containers"][0]
    assert container["args"] == ["python", "/app/train.py", "--epochs=3"]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert "TFD_CLUSTER" in env_of(container)


def test_trainer_args_follow_training_values() -> None:
    docs = render(
        sets=[
            "training.batchSize=64",
            "training.trainSteps=600",
            "training.learningRate=0.05",
            "training.checkpointEverySeconds=30",
            "chief.terminationGracePeriodSeconds=90",
            "training.extraArgs={--eval-split=0.2}",
        ]
    )
    args = pod_spec(named(docs, "Job", f"{PREFIX}-chief"))["containers"][0]["args"]
    assert args[:3] == ["python", "-m", "trainer"]
    for expected in (
        "--batch-size=64",
        "--train-steps=600",
        "--learning-rate=0.05",
        "--checkpoint-every-seconds=30",
        "--shutdown-grace-seconds=85",
        "--cleanup=keep",  # the supervisor frees the ps/worker pods, not the chief
        "--storage-root=/data",
        "--eval-split=0.2",
    ):
        assert expected in args


def test_longest_names_stay_within_dns_label_limits() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    max_workers = schema["properties"]["worker"]["properties"]["replicas"]["maximum"]
    release = "a" * 53  # the longest release name helm accepts
    docs = render(release=release, sets=[f"worker.replicas={max_workers}", "training.strategy=multi_worker_mirrored",
                                         f"training.batchSize={max_workers + 1}"])
    sts_names = [doc["metadata"]["name"] for doc in by_kind(docs, "StatefulSet")]
    for name in sts_names:
        replicas = named(docs, "StatefulSet", name)["spec"]["replicas"]
        assert len(f"{name}-{replicas - 1}") <= 63, name  # longest pod hostname
        assert len(f"{name}-{'x' * 10}") <= 63, name  # controller-revision-hash label value
    chief = pod_spec(
        named(
            docs,
            "Job",
            next(d["metadata"]["name"] for d in by_kind(docs, "Job") if d["metadata"]["name"].endswith("-chief")),
        )
    )
    assert len(chief["hostname"]) <= 63
    for doc in docs:
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
    for address in cluster_map_any(docs):
        assert all(len(label) <= 63 for label in address.split(":")[0].split("."))


def object_names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(doc["kind"], doc["metadata"]["name"]) for doc in docs}


def test_long_release_names_that_share_the_name_budget_get_different_names() -> None:
    """Truncated to 45 characters, two release names would collide; the hash of the whole name keeps them apart."""
    first, second = "team-a-mnist-experiment-with-a-long-name-run-1", "team-a-mnist-experiment-with-a-long-name-run-2"
    assert first[:45] == second[:45]
    names = [object_names(render(release=release)) for release in (first, second)]
    assert not names[0] & names[1]
    for kind, name in names[0] | names[1]:
        assert len(name) <= 63 and name.startswith("team-a-mnist-experiment-with-a-long-"), (kind, name)
    # Names within the budget are left alone.
    assert ("Service", "mnist-tf-distributed-worker") in object_names(render(release="mnist"))


def cluster_map_any(docs: list[dict[str, Any]]) -> list[str]:
    job = next(d for d in by_kind(docs, "Job") if d["metadata"]["name"].endswith("-chief"))
    cluster = json.loads(env_of(pod_spec(job)["containers"][0])["TFD_CLUSTER"])
    return [address for addresses in cluster.values() for address in addresses]


def test_everything_is_namespaced_and_labelled() -> None:
    docs = render(
        values=[VALUES_DIR / "gpu.yaml"],
        sets=["commonLabels.team=a", "evaluator.enabled=true", "tensorboard.ingress.enabled=true"],
    )
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "Namespace",
        "PersistentVolume",
        "StorageClass",
        "CustomResourceDefinition",
        "PriorityClass",
    }
    for doc in docs:
        assert doc["kind"] not in cluster_scoped
        assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "mnist"
        assert labels["team"] == "a"
        assert labels["helm.sh/chart"] == "tf-distributed-0.1.0"
    for doc in workloads(docs):
        assert pod_template(doc)["metadata"]["labels"]["team"] == "a"


def test_supervisor_role_names_exactly_the_objects_it_touches_and_only_their_scale() -> None:
    docs = render()
    role = named(docs, "Role", f"{PREFIX}-supervisor")
    assert role["rules"] == [
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": [f"{PREFIX}-chief"], "verbs": ["get", "patch"]},  # noqa: E501
        # the run's Job watched (its endings as they happen): by name, which RBAC allows with a metadata.name
        # field selector only, and the evaluator's Job is not watched
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": [f"{PREFIX}-chief"], "verbs": ["list", "watch"]},  # noqa: E501
        # read (a suspension records their replicas, a resume waits for them Ready, watched by name meanwhile)
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": [f"{PREFIX}-ps", f"{PREFIX}-worker"],
         "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets/scale"],  # the scale only: never a StatefulSet's pod template
            "resourceNames": [f"{PREFIX}-ps", f"{PREFIX}-worker"],
            "verbs": ["patch"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "resourceNames": [f"{PREFIX}-supervisor"],
            "verbs": ["get", "patch"],
        },
        # the TensorFlow pods: a suspension waits for them to stop (and the chief's progress finds its pod)
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        # the chief's progress (supervisor.progress.enabled): its log
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    binding = named(docs, "RoleBinding", f"{PREFIX}-supervisor")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{PREFIX}-supervisor", "namespace": NAMESPACE}]
    supervisor = pod_spec(named(docs, "Deployment", f"{PREFIX}-supervisor"))
    assert supervisor["serviceAccountName"] == f"{PREFIX}-supervisor"
    assert {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True} in supervisor["containers"][0]["volumeMounts"]
    env = env_of(supervisor["containers"][0])
    assert env["TFD_STATEFULSETS"] == f"{PREFIX}-ps,{PREFIX}-worker" and env["TFD_CHIEF_JOB"] == f"{PREFIX}-chief"
    # No TensorFlow pod holds an API token: the chief no longer scales anything itself.
    for doc in workloads(docs):
        if doc["metadata"]["name"] != f"{PREFIX}-supervisor":
            assert pod_spec(doc)["automountServiceAccountToken"] is False
            assert "kube-api-access" not in {v["name"] for v in pod_spec(doc)["volumes"]}
    assert pod_spec(named(docs, "Job", f"{PREFIX}-chief"))["serviceAccountName"] == PREFIX

    timed = render(sets=["scheduling.startTimeoutSeconds=600", "evaluator.enabled=true",
                         "supervisor.progress.enabled=false"])
    rules = named(timed, "Role", f"{PREFIX}-supervisor")["rules"]
    assert rules[0]["resourceNames"] == [f"{PREFIX}-chief", f"{PREFIX}-evaluator"]
    # and their events, to name a start timeout's cause
    assert rules[-1] == {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list", "watch"]}
    assert env_of(pod_spec(named(timed, "Deployment", f"{PREFIX}-supervisor"))["containers"][0])["TFD_PROGRESS"] == (
        "false")
    # without progress, no pod's log
    quiet = render(sets=["supervisor.progress.enabled=false"])
    assert named(quiet, "Role", f"{PREFIX}-supervisor")["rules"] == role["rules"][:6]
    # single_device: the supervisor only writes the chief's progress; without it, nothing for one to do
    alone = render(sets=["training.strategy=single_device"])
    assert [r["resources"] for r in named(alone, "Role", f"{PREFIX}-supervisor")["rules"]] == [
        ["jobs"], ["jobs"], ["deployments/scale"], ["pods"], ["pods/log"]]
    alone = render(sets=["training.strategy=single_device", "supervisor.progress.enabled=false"])
    assert not by_kind(alone, "Role") and not by_kind(alone, "RoleBinding")
    assert f"{PREFIX}-supervisor" not in {d["metadata"]["name"] for d in alone}
    off = render(sets=["supervisor.enabled=false"])
    assert not by_kind(off, "Role") and f"{PREFIX}-supervisor" not in {d["metadata"]["name"] for d in off}


def test_tensorboard_and_serving_read_shared_storage_read_only() -> None:
    docs = render()
    for name in ("tensorboard", "serving"):
        spec = pod_spec(named(docs, "Deployment", f"{PREFIX}-{name}"))
        container = spec["containers"][0]
        shared = next(m for m in container["volumeMounts"] if m["name"] == "shared")
        assert shared["readOnly"] is True
    serving = pod_spec(named(docs, "Deployment", f"{PREFIX}-serving"))["containers"][0]
    assert "--model_config_file=/etc/tf-serving/models.config" in serving["args"]
    assert {p["containerPort"] for p in serving["ports"]} == {8500, 8501}
    assert serving["readinessProbe"]["httpGet"]["path"] == "/v1/models/mnist"
    tensorboard = pod_spec(named(docs, "Deployment", f"{PREFIX}-tensorboard"))["containers"][0]
    assert "--logdir=/data/logs" in tensorboard["args"]


def test_every_container_mounts_a_writable_tmp_under_a_read_only_root() -> None:
    docs = render(values=[VALUES_DIR / "gpu.yaml"], sets=["evaluator.enabled=true"])
    for doc in workloads(docs):
        for container in pod_spec(doc)["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"]), doc["metadata"]["name"]


def test_all_containers_list_is_complete() -> None:
    docs = render()
    names = {(doc["metadata"]["name"], c["name"]) for doc in workloads(docs) for c in all_containers(pod_spec(doc))}
    assert (f"{PREFIX}-serving", "model-dir") in names


# -- shared storage: ReadWriteOnce co-locates every pod that mounts the claim ----------------------

HOSTNAME = "kubernetes.io/hostname"


def claim_mounting_pods(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(name, pod template) of every workload whose pods mount the release's claim."""
    claims = {doc["metadata"]["name"] for doc in by_kind(docs, "PersistentVolumeClaim")} or {"team-a-shared"}
    return [
        (doc["metadata"]["name"], pod_template(doc))
        for doc in workloads(docs)
        if any(v.get("persistentVolumeClaim", {}).get("claimName") in claims for v in pod_spec(doc).get("volumes", []))
    ]


def required_pod_affinity(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"].get("affinity", {})
    return list(affinity.get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", []))


def co_location_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Required podAffinity terms on the node's hostname that this pod itself matches (so it may go first)."""
    labels = pod["metadata"]["labels"]
    return [
        term
        for term in required_pod_affinity(pod)
        if term["topologyKey"] == HOSTNAME
        and set(term["labelSelector"]) == {"matchLabels"}
        and selector_matches(term["labelSelector"]["matchLabels"], labels)
        and term["labelSelector"]["matchLabels"].get("app.kubernetes.io/instance") == "mnist"
    ]


def test_cpu_values_claim_is_read_write_once_and_every_pod_that_mounts_it_is_co_located(helm_major: str) -> None:
    docs = render(helm_major, values=[VALUES_DIR / "cpu.yaml"])
    [claim] = by_kind(docs, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "storageClassName" not in claim["spec"]  # the cluster's default class: any of them offers ReadWriteOnce
    pods = claim_mounting_pods(docs)
    names = {name.removeprefix(f"{PREFIX}-") for name, _ in pods}
    assert names == {"ps", "worker", "chief", "tensorboard", "serving", "test"}
    for name, pod in pods:
        assert len(co_location_terms(pod)) == 1, name
        # Every other pod of the release matches the same term: they all end up on one node.
        [term] = co_location_terms(pod)
        for _, other in pods:
            assert selector_matches(term["labelSelector"]["matchLabels"], other["metadata"]["labels"])


def test_co_location_keeps_the_users_own_affinity(helm_major: str) -> None:
    own = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]
            }
        },
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "dataset-cache"}},
                    "topologyKey": "topology.kubernetes.io/zone",
                }
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": HOSTNAME},
                }
            ],
        },
    }
    docs = render(
        helm_major,
        values=[VALUES_DIR / "cpu.yaml"],
        extra=["--set-json", f"worker.affinity={json.dumps(own)}", "--set-json", f"ps.affinity={json.dumps(own)}"],
    )
    for role in ("worker", "ps"):
        affinity = pod_spec(named(docs, "StatefulSet", f"{PREFIX}-{role}"))["affinity"]
        assert affinity["nodeAffinity"] == own["nodeAffinity"]
        assert (
            affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            == (own["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
        )
        required = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required[0] == own["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert required[1:] == [
            {
                "labelSelector": {
                    "matchLabels": {"app.kubernetes.io/name": "tf-distributed", "app.kubernetes.io/instance": "mnist"}
                },
                "topologyKey": HOSTNAME,
            }
        ]
    chief = pod_spec(named(docs, "Job", f"{PREFIX}-chief"))["affinity"]
    assert set(chief) == {"podAffinity"}  # the user's worker/ps affinity did not leak into other pods
    assert len(chief["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]) == 1


@pytest.mark.parametrize("values_file", ["gpu.yaml", "sync-allreduce.yaml"])
def test_read_write_many_values_let_pods_spread_over_nodes(values_file: str) -> None:
    docs = render(values=[VALUES_DIR / values_file])
    [claim] = by_kind(docs, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for name, pod in claim_mounting_pods(docs):
        assert required_pod_affinity(pod) == [], name
    test_pod = pod_spec(named(docs, "Job", f"{PREFIX}-test"))
    assert "tolerations" not in test_pod and "affinity" not in test_pod


def test_single_gpu_node_values_let_every_co_located_pod_onto_the_tainted_gpu_node() -> None:
    docs = render(values=[VALUES_DIR / "multi-gpu.yaml"])
    [claim] = by_kind(docs, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    pods = claim_mounting_pods(docs)
    assert {name.removeprefix(f"{PREFIX}-") for name, _ in pods} == {"chief", "tensorboard", "serving", "test"}
    for name, pod in pods:
        assert len(co_location_terms(pod)) == 1, name
        tolerations = pod["spec"].get("tolerations", [])
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations, name


def test_existing_claim_with_declared_read_write_once_is_co_located_too() -> None:
    docs = render(values=[CI_DIR / "byo-image-values.yaml"], sets=["storage.accessModes={ReadWriteOnce}"])
    assert by_kind(docs, "PersistentVolumeClaim") == []
    for name, pod in claim_mounting_pods(docs):
        labels = pod["metadata"]["labels"]
        [term] = [t for t in required_pod_affinity(pod) if t["topologyKey"] == HOSTNAME]
        assert selector_matches(term["labelSelector"]["matchLabels"], labels), name


# -- multi_worker_mirrored with chief.replicas=0: worker 0 is the chief ------------------------------

WORKERS_ONLY = ["training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=3",
                "training.batchSize=99"]


def test_without_a_chief_the_workers_are_an_indexed_job_with_statefulset_dns_names() -> None:
    docs = render(sets=WORKERS_ONLY)
    assert not [d for d in docs if d["metadata"]["name"] == f"{PREFIX}-chief"]
    assert not by_kind(docs, "StatefulSet")
    job = named(docs, "Job", f"{PREFIX}-worker")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    # one worker's failure ends every worker's pod in synchronous training: chief.backoffLimit per worker
    assert spec["backoffLimit"] == 3 * 6 and spec["podReplacementPolicy"] == "Failed"
    assert spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["containerName"] == "worker"
    pod = pod_spec(job)
    assert pod["restartPolicy"] == "Never" and pod["subdomain"] == f"{PREFIX}-worker" and "hostname" not in pod
    assert named(docs, "Service", f"{PREFIX}-worker")["spec"]["clusterIP"] == "None"
    assert "tf-distributed.io/run-spec" in pod_template(job)["metadata"]["annotations"]
    container = pod["containers"][0]
    index = next(i for i in container["env"] if i["name"] == "TFD_TASK_INDEX")
    completion_index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert index["valueFrom"]["fieldRef"]["fieldPath"] == completion_index
    assert "--exit-when-done" in container["args"]
    cluster = json.loads(env_of(container)["TFD_CLUSTER"])
    assert cluster == {"worker": [f"{PREFIX}-worker-{i}.{PREFIX}-worker.{NAMESPACE}.svc.cluster.local:2222"
                                  for i in range(3)]}
    # Kubernetes names the pods <job>-<index>: the prelude's hostname fallback gives the same index
    for hostname, from_annotation in ((f"{PREFIX}-worker-2", "2"), (f"{PREFIX}-worker-1", None)):
        result = run_prelude(container, hostname, from_annotation)
        assert result.returncode == 0, result.stderr
        tf_config = json.loads(result.stdout)
        assert tf_config == {"cluster": cluster, "task": {"type": "worker", "index": int(hostname[-1])}}
    # nothing to scale down: no supervisor unless it has an evaluator to end or progress to write, and no worker PDB
    with_pdb = render(sets=[*WORKERS_ONLY, "worker.podDisruptionBudget.enabled=true",
                            "supervisor.progress.enabled=false"])
    assert not [d for d in with_pdb if d["metadata"]["name"] == f"{PREFIX}-supervisor"]
    assert by_kind(with_pdb, "PodDisruptionBudget") == []


def test_without_a_chief_the_supervisor_watches_the_workers_job() -> None:
    docs = render(sets=[*WORKERS_ONLY, "evaluator.enabled=true"])
    supervisor = pod_spec(named(docs, "Deployment", f"{PREFIX}-supervisor"))["containers"][0]
    env = env_of(supervisor)
    assert env["TFD_CHIEF_JOB"] == f"{PREFIX}-worker" and env["TFD_STATEFULSETS"] == ""
    # progress: worker 0's container in the workers' Job
    assert (env["TFD_PROGRESS_JOB"], env["TFD_PROGRESS_CONTAINER"]) == (f"{PREFIX}-worker", "worker")
    assert env["TFD_EXPECTED_PODS"] == "4"  # 3 workers + the evaluator
    role = named(docs, "Role", f"{PREFIX}-supervisor")
    jobs = [rule for rule in role["rules"] if "jobs" in rule["resources"]]
    assert set(jobs[0]["resourceNames"]) == {f"{PREFIX}-worker", f"{PREFIX}-evaluator"}
    assert (jobs[1]["resourceNames"], jobs[1]["verbs"]) == ([f"{PREFIX}-worker"], ["list", "watch"])


def test_chief_replicas_zero_is_refused_outside_synchronous_training() -> None:
    result = template(sets=["chief.replicas=0"])
    assert result.returncode != 0
    assert "only training.strategy=multi_worker_mirrored runs without a separate chief" in result.stderr
    assert "--set chief.replicas=1 (or --set training.strategy=multi_worker_mirrored)" in result.stderr
