"""tfchart preflight: GPU capacity, storage, quota, NetworkPolicy, gang scheduling, Kueue and topology checks against
the fake API server.

preflight reads only the render: each test renders the chart (helm 4) with the values it checks and
hands the manifests to the checks, which read the cluster through the real kubernetes
client from the loopback server (tests/kubeapi.py).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from decimal import Decimal
from functools import cache
from typing import Any

import pytest
from rich.console import Console

from tests import kubeapi as kf
from tests.chartlib import REPO, helm_path, pod_spec, render
from tests.crds import crdlib
from tests.kubeapi import Call, KubeServer, kube_server
from tests.kubeapi import served as served_pod
from tests.tfchart.hostile import helm_env, measured
from tfchart.cli.app import main
from tfchart.cluster import kube, preflight
from tfchart.cluster.preflight import FAIL, OK, WARN, Context
from tfchart.cluster.preflight.controllers import check_gang, check_kueue, check_network_policy
from tfchart.cluster.preflight.resources import check_gpus, check_quota, check_storage
from tfchart.errors import KubernetesError, TfchartError
from tfchart.manifests import quantity
from tfchart.manifests.workloads import gpus, resources

NS = "ml-training"
GPU = "nvidia.com/gpu"
ALL_PODS = Call("list", "pods", None, field_selector="status.phase!=Succeeded,status.phase!=Failed",
                params=(("limit", "500"),))  # a page at a time
NODES = Call("list", "nodes")


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    with kube_server(read_only=True) as server:
        yield server


@cache
def _rendered(files: tuple[str, ...], sets: tuple[str, ...]) -> str:
    return json.dumps(render(values=[REPO / file for file in files], sets=list(sets), namespace=NS))


def docs(*files: str, sets: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The release as helm 4 renders these values files and --set arguments (cached; a fresh copy each call)."""
    rendered: list[dict[str, Any]] = json.loads(_rendered(files, tuple(sets)))
    return rendered


def gpu_nodes(*counts: int) -> list[dict[str, Any]]:
    return [kf.node(f"gpu-{i}", gpus={GPU: count}) for i, count in enumerate(counts)]


def context(cluster: KubeServer, rendered: list[dict[str, Any]]) -> Context:
    return Context(cluster.api(), rendered, NS, "mnist")


def only(findings: list[preflight.Finding], check: str) -> preflight.Finding:
    [finding] = [f for f in findings if f.check == check]
    return finding


# -- quantities -----------------------------------------------------------------------------------


@pytest.mark.parametrize(  # the kubernetes client parses; a few of each kind hold tfchart's use of it
    ("text", "expected"),
    [("100m", Decimal("0.1")), (4, Decimal(4)), ("1k", Decimal(1000)), ("1.5Gi", Decimal(3 * 2**29)),
     ("1E", Decimal(10**18)), ("2e3", Decimal(2000))],
)  # fmt: skip
def test_quantities(text: str | int, expected: Decimal) -> None:
    assert quantity.parse(text) == expected


def test_invalid_quantity_is_a_clear_error() -> None:
    with pytest.raises(TfchartError, match="invalid quantity '1Zi'"):
        quantity.parse("1Zi")


def test_a_request_left_out_is_the_limit_container_by_container() -> None:
    """As the API server defaults it: the sidecar's limit is its request, whatever the main container asks."""
    pod = {"containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"limits": {"cpu": "2", GPU: "1"}}}]}
    assert (resources(pod), resources(pod, "limits"), gpus(pod)) == ({"cpu": 3, GPU: 1}, {"cpu": 2, GPU: 1}, {GPU: 1})


@pytest.mark.parametrize(
    ("value", "text"),
    [(Decimal("0.5"), "500m"), (Decimal(2**31), "2Gi"), (Decimal(10), "10"), (Decimal("19.6"), "19.6")],
)
def test_quantities_print_readably(value: Decimal, text: str) -> None:
    assert quantity.shown(value) == text


# -- what the release adds (quota) matches what the chart renders --------------------------------


def effective(resources: dict[str, Any], kind: str) -> dict[str, Decimal]:
    """A container's requests (defaulted from limits, like the API server) or limits."""
    chosen = {**(resources.get("limits") or {}), **(resources.get(kind) or {})}
    return {key: quantity.parse(value) for key, value in chosen.items()}


@pytest.mark.parametrize("values_file", ["values/cpu.yaml", "values/gpu.yaml", "values/multi-gpu.yaml",
                                         "values/sync-allreduce.yaml",
                                         "charts/tf-distributed/ci/sync-workers-only-values.yaml"])  # fmt: skip
def test_what_the_release_adds_matches_the_rendered_manifests(values_file: str) -> None:
    rendered = docs(values_file)
    ctx = Context(None, rendered, NS)  # what the release adds, read with no API
    release = [d for d in rendered if d["metadata"]["labels"].get("app.kubernetes.io/component") != "test"]
    totals: dict[str, Decimal] = {}
    pods = 0
    for doc in release:
        if doc["kind"] not in ("StatefulSet", "Deployment", "Job"):
            continue
        replicas = doc["spec"].get("replicas", doc["spec"].get("parallelism", 1))
        pods += replicas
        for container in pod_spec(doc)["containers"]:
            for kind in ("requests", "limits"):
                for key, value in effective(container.get("resources", {}), kind).items():
                    totals[f"{kind}.{key}"] = totals.get(f"{kind}.{key}", Decimal(0)) + replicas * value
    for key, expected in totals.items():
        assert ctx.adds[key] == expected, key
    assert ctx.adds["pods"] == pods
    assert ctx.adds["services"] == sum(1 for d in release if d["kind"] == "Service")
    assert ctx.adds["persistentvolumeclaims"] == sum(1 for d in release if d["kind"] == "PersistentVolumeClaim")
    for kind, quota_key in (("StatefulSet", "count/statefulsets.apps"), ("Deployment", "count/deployments.apps"),
                            ("Job", "count/jobs.batch")):  # fmt: skip
        assert ctx.adds[quota_key] == sum(1 for d in release if d["kind"] == kind), kind


# -- (a) GPU capacity ---------------------------------------------------------------------------


def test_gpus_fit_with_room(cluster: KubeServer) -> None:
    cluster.add(*gpu_nodes(4, 4), kf.node("cpu-0"))
    cluster.add(kf.running_pod("other-training", "team-b", "gpu-0", {GPU: "2", "cpu": "1"}))
    findings = check_gpus(context(cluster, docs("values/gpu.yaml")))
    assert findings == [preflight.Finding("gpu-capacity", OK, "4 nvidia.com/gpu needed (worker 4x1); 6 of 8 free "
                                          "(gpu-0: 2, gpu-1: 4) (tolerations of the GPU roles not evaluated: counted "
                                          "every schedulable node)")]  # fmt: skip
    assert cluster.calls == [NODES, ALL_PODS]


def release_pods(namespace: str = NS) -> list[dict[str, Any]]:
    """The gpu.yaml release's own two workers on gpu-0 and gpu-1 (an upgrade), in `namespace`."""
    worker = kf.manifest(docs("values/gpu.yaml"), "StatefulSet", "worker")
    pods = [kf.pod(worker, index=index, node=f"gpu-{index}") for index in range(2)]
    return [{**pod, "metadata": {**pod["metadata"], "namespace": namespace}} for pod in pods]


@pytest.mark.parametrize(
    ("objects", "values_file", "severity", "says"),
    [
        pytest.param(lambda: [kf.running_pod("notebook", "team-b", "gpu-1", {GPU: "1"}),
                              kf.running_pod("done", "team-b", "gpu-0", {GPU: "2"}, phase="Succeeded")],
                     "values/gpu.yaml", WARN, "tight: the release needs 4 nvidia.com/gpu (worker 4x1); 3 of 4 are "
                     "free now", id="other-pods-hold-them-finished-ones-do-not"),
        pytest.param(release_pods, "values/gpu.yaml", OK, "4 of 4 free", id="the-releases-own-pods-are-not-used"),
        pytest.param(lambda: release_pods("team-b"), "values/gpu.yaml", WARN, "2 of 4 are free now",
                     id="the-same-name-in-another-namespace-is-another-release"),
        pytest.param(lambda: [kf.node("gpu-1", unschedulable=True, gpus={GPU: 8})], "values/gpu.yaml", FAIL,
                     "the release needs 4 nvidia.com/gpu (worker 4x1); schedulable nodes have 2 (gpu-0: 2)",
                     id="too-small-unschedulable-nodes-aside"),
        pytest.param(list, "values/multi-gpu.yaml", FAIL, "a pod needs 4 nvidia.com/gpu but the largest node has 2: "
                     "a pod cannot span nodes", id="a-pod-larger-than-any-node"),
    ],
)  # fmt: skip
def test_gpu_capacity(
    objects: Any, values_file: str, severity: str, says: str, cluster: KubeServer
) -> None:
    """Two 2-GPU nodes (gpu-0, gpu-1; `objects` may replace gpu-1) against the release's GPUs."""
    cluster.add(*gpu_nodes(2, 2), *objects())
    [finding] = check_gpus(context(cluster, docs(values_file)))
    assert finding.severity == severity and says in finding.message, finding


def test_gpus_fail_without_a_device_plugin(cluster: KubeServer) -> None:
    cluster.add(kf.node("cpu-0"), kf.node("cpu-1"))
    [finding] = check_gpus(context(cluster, docs("values/sync-allreduce.yaml")))
    assert finding.severity == FAIL and "device plugin" in finding.hint
    assert "needs 4 nvidia.com/gpu (worker 3x1, chief 1x1) but no schedulable node advertises nvidia.com/gpu" \
        in finding.message  # fmt: skip


def test_no_gpus_requested_needs_no_api_call(cluster: KubeServer) -> None:
    assert check_gpus(context(cluster, docs("values/cpu.yaml")))[0].severity == OK
    assert cluster.calls == []


def test_gpu_usage_is_read_a_page_at_a_time(cluster: KubeServer) -> None:
    cluster.add(*gpu_nodes(2, 2))
    cluster.add(*(kf.running_pod(f"other-{n:04d}", "team-b", "gpu-0", {"cpu": "10m"}) for n in range(1200)))
    cluster.add(kf.running_pod("notebook", "team-c", "gpu-1", {GPU: "1"}))
    [finding] = check_gpus(context(cluster, docs("values/gpu.yaml")))
    assert "3 of 4 are free now" in finding.message, finding
    pages = [call for call in cluster.calls if call.resource == "pods"]
    assert ["continue" in dict(call.params) for call in pages] == [False, True, True]  # the server's opaque token


def test_gpu_usage_unknown_when_listing_all_pods_is_forbidden(cluster: KubeServer) -> None:
    cluster.add(*gpu_nodes(4))
    cluster.fail("list", "pods", 403, "pods is forbidden: cannot list resource pods at the cluster scope")
    [finding] = check_gpus(context(cluster, docs("values/gpu.yaml")))
    assert finding.severity == OK
    assert "other pods' GPU use is unknown" in finding.message


# -- (b) storage --------------------------------------------------------------------------------

KIND_CLASS = kf.storage_class("standard", "rancher.io/local-path", default=True)  # kind's (and k3d's) only class
RWO_FIX = "--set storage.accessModes={ReadWriteOnce} to co-locate every pod on one node"


def kind_cluster(cluster: KubeServer, *extra: dict[str, Any]) -> KubeServer:
    """A stock one-node kind cluster: a 4-CPU, 8 GiB node and the local-path class, which offers ReadWriteOnce only."""
    return cluster.add(kf.node("kind-control-plane", cpu="4", memory="8Gi"), KIND_CLASS, *extra)


def test_multi_node_rwx_values_are_not_installable_on_an_rwo_only_cluster(cluster: KubeServer) -> None:
    kind_cluster(cluster)
    [finding] = check_storage(context(cluster, docs("values/gpu.yaml")))
    assert finding.severity == FAIL
    assert finding.message == ("needs ReadWriteMany: 10 pods mount the claim (ps 2, worker 4, chief 1, tensorboard 1, "
                               "serving 1, helm test 1) from any node, but default StorageClass standard (rancher.io/"
                               "local-path) offers ReadWriteOnce only: the claim would stay Pending. StorageClasses: "
                               "standard (rancher.io/local-path, default): ReadWriteOnce only")  # fmt: skip
    assert finding.hint.startswith(f"on one node: {RWO_FIX}, which any StorageClass serves (as values/cpu.yaml does")
    assert "across nodes: install a provisioner that offers ReadWriteMany (NFS, CephFS" in finding.hint
    assert cluster.calls == [Call("list", "storageclasses"), Call("list", "persistentvolumes")]  # none pre-created


def test_cpu_values_pass_on_an_rwo_only_one_node_cluster(cluster: KubeServer) -> None:
    kind_cluster(cluster)
    findings = preflight.run(cluster.api(), docs("values/cpu.yaml"), "mnist", NS)
    assert only(findings, "storage") == preflight.Finding("storage", OK, "needs ReadWriteOnce: default StorageClass "
                                                          "standard (rancher.io/local-path) offers it. StorageClasses: "
                                                          "standard (rancher.io/local-path, default): offers "
                                                          "ReadWriteOnce")  # fmt: skip
    assert only(findings, "co-location") == preflight.Finding("co-location", OK, "storage needs ReadWriteOnce, so all "
                                                              "6 pods run on one node: they request 1.95 cpu, 4352Mi "
                                                              "memory; fits kind-control-plane (allocatable, before "
                                                              "other pods)")  # fmt: skip
    assert preflight.refusal(findings) is None


def test_preflight_command_fails_before_anything_is_applied_and_names_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cluster: KubeServer
) -> None:
    kind_cluster(cluster, kf.daemon_set("kindnet"))
    monkeypatch.setenv("COLUMNS", "400")
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig())]
    with pytest.raises(SystemExit) as exit_info:
        main(["preflight", "-f", "values/sync-allreduce.yaml", "-n", NS, *kubeconfig])
    captured = capsys.readouterr()
    out, err = captured.out, captured.err  # the findings are the report (stdout); the refusal is an error
    assert exit_info.value.code == 1
    assert "needs ReadWriteMany: 7 pods mount the claim" in out
    assert "default StorageClass standard (rancher.io/local-path) offers ReadWriteOnce only" in out
    assert RWO_FIX in out and "values/cpu.yaml" in out
    assert "preflight checks failed" in err and "✓ preflight passed" not in out
    assert all(call.verb in ("list", "get") for call in cluster.calls)  # nothing applied

    with pytest.raises(SystemExit) as exit_info:
        main(["preflight", "-f", "values/cpu.yaml", "-n", NS, "--skip-image-check", *kubeconfig])
        raise SystemExit(0)
    captured = capsys.readouterr()
    assert exit_info.value.code == 0, captured.err
    assert "✓ preflight passed" in captured.out


def test_an_rwx_class_passes_and_is_named(cluster: KubeServer) -> None:
    cluster.add(kf.storage_class("nfs", "nfs.csi.k8s.io", default=True), kf.storage_class("fast", "ebs.csi.aws.com"))
    [finding] = check_storage(context(cluster, docs("values/gpu.yaml")))
    assert finding == preflight.Finding("storage", OK, "needs ReadWriteMany: default StorageClass nfs (nfs.csi.k8s.io) "
                                        "offers it. StorageClasses: fast (ebs.csi.aws.com): ReadWriteOnce only; nfs "
                                        "(nfs.csi.k8s.io, default): offers ReadWriteMany")  # fmt: skip
    assert cluster.calls == [Call("list", "storageclasses")]


GP3_EFS = (("gp3", "ebs.csi.aws.com"), ("efs", "efs.csi.aws.com"))  # EKS's, neither the default
CEPHFS = (("standard", "rancher.io/local-path", True), ("cephfs", "rook-ceph.cephfs.csi.ceph.com"))  # kind's + Rook's
NAMED = "storage.storageClassName="
NO_CLASS_FIX = ("the cluster has no StorageClass: install a provisioner that offers ReadWriteMany (NFS, CephFS, EFS, "
                'Azure Files, Filestore, Longhorn...), or create a PersistentVolume that does and --set '
                'storage.storageClassName=""')  # fmt: skip


@pytest.mark.parametrize(
    ("classes", "values_file", "sets", "severity", "says", "hint"),
    [
        (CEPHFS, "values/gpu.yaml", (), FAIL, "cephfs (rook-ceph.cephfs.csi.ceph.com): offers ReadWriteMany",
         f"--set {NAMED}cephfs (it offers ReadWriteMany), or {RWO_FIX}"),
        (CEPHFS, "values/gpu.yaml", (f"{NAMED}cephfs",), OK, "needs ReadWriteMany: StorageClass cephfs "
         "(rook-ceph.cephfs.csi.ceph.com) offers it. ", ""),
        ((CEPHFS[0], ("nfs", "nfs.csi.k8s.io")), "values/cpu.yaml", (), OK, "needs ReadWriteOnce: default StorageClass "
         "standard (rancher.io/local-path) offers it (nfs offers ReadWriteMany: --set storage.accessModes="
         "{ReadWriteMany} --set storage.storageClassName=nfs lets the pods spread over nodes)", ""),
        (GP3_EFS, "values/gpu.yaml", (), FAIL, "no default StorageClass and storage.storageClassName is not set",
         f"--set {NAMED}<one that offers ReadWriteMany: efs>"),
        (GP3_EFS, "values/gpu.yaml", (f"{NAMED}nfs",), FAIL, "StorageClass nfs does not exist. ", ""),
        (GP3_EFS, "values/gpu.yaml", (f"{NAMED}efs",), OK, "StorageClass efs (efs.csi.aws.com) offers", ""),
        (GP3_EFS, "values/cpu.yaml", (), FAIL, "", f"--set {NAMED}<one that offers ReadWriteOnce: efs, gp3>"),
        ((), "values/gpu.yaml", (), FAIL, "", NO_CLASS_FIX),
        ((), "values/gpu.yaml", (f"{NAMED}nfs",), FAIL, "", "the cluster has no StorageClass: install"),
    ],
)  # fmt: skip
def test_the_class_the_claim_would_use_and_the_one_that_would_do(
    classes: tuple[tuple[Any, ...], ...], values_file: str, sets: tuple[str, ...], severity: str, says: str, hint: str,
    cluster: KubeServer,
) -> None:  # fmt: skip
    """The named (else the default) StorageClass against the mode the values need; the fix names the class that
    offers it, or what to install where none does."""
    cluster.add(*(kf.storage_class(*each) for each in classes))
    [finding] = check_storage(context(cluster, docs(values_file, sets=sets)))
    assert finding.severity == severity and says in finding.message and finding.hint.startswith(hint), finding


@pytest.mark.parametrize(
    ("provisioner", "nodes", "severity", "says"),
    [
        ("k8s.io/minikube-hostpath", 1, WARN, "shared only because this cluster has one schedulable node"),
        ("docker.io/hostpath", 2, FAIL, "pods on the other 1 node(s) would not see the data"),
        ("csi.vsphere.vmware.com", 1, WARN, "unknown (vSphere: ReadWriteMany only for vSAN file volumes)"),
        ("example.com/homegrown", 1, WARN, "unknown (example.com/homegrown is not a provisioner tfchart knows)"),
    ],
)
def test_node_local_and_unknown_provisioners(
    provisioner: str, nodes: int, severity: str, says: str, cluster: KubeServer
) -> None:
    cluster.add(kf.storage_class("local", provisioner, default=True))
    cluster.add(*(kf.node(f"node-{i}") for i in range(nodes)))
    [finding] = check_storage(context(cluster, docs("values/gpu.yaml")))
    assert finding.severity == severity
    assert says in finding.message
    assert RWO_FIX in finding.hint


def volume(name: str, size: str, class_name: str = "", phase: str = "Available",
           modes: Sequence[str] = ("ReadWriteMany",)) -> dict[str, Any]:  # fmt: skip
    """A pre-created PersistentVolume (an NFS export an admin made), as the API server serves it."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": class_name,
                     "nfs": {"server": "10.0.0.5", "path": f"/exports/{name}"}, "volumeMode": "Filesystem",
                     "persistentVolumeReclaimPolicy": "Retain"}, "status": {"phase": phase}}  # fmt: skip


def test_a_pre_created_volume_that_offers_read_write_many_is_what_the_claim_binds_to(cluster: KubeServer) -> None:
    """No class offers ReadWriteMany, but an admin's NFS volume does: the claim binds to it (too small, bound or of
    another class, a volume does not count)."""
    cluster.add(volume("small", "1Gi"), volume("taken", "100Gi", phase="Bound"), volume("other", "100Gi", "gold"))
    [finding] = check_storage(context(cluster, docs("values/gpu.yaml")))
    assert finding.severity == FAIL, finding.message
    cluster.add(volume("nfs-data", "100Gi"))
    [finding] = check_storage(context(cluster, docs("values/gpu.yaml")))
    assert (finding.severity, finding.message) == (
        OK, "needs ReadWriteMany: the claim has no StorageClass and binds to PersistentVolume nfs-data (pre-created, "
            "Available, 100Gi, ReadWriteMany)")  # fmt: skip
    [finding] = check_storage(context(cluster, docs("values/gpu.yaml", sets=["storage.storageClassName="])))
    assert finding.severity == OK and "binds to PersistentVolume nfs-data" in finding.message
    kind_cluster(cluster, volume("manual-nfs", "50Gi", "standard"))  # local-path's class, ReadWriteOnce only
    [finding] = check_storage(context(cluster, docs("values/gpu.yaml")))
    assert (finding.severity, finding.message.split(". ")[0]) == (
        OK, "needs ReadWriteMany: the claim of default StorageClass standard (rancher.io/local-path) binds to "
            "PersistentVolume manual-nfs (pre-created, Available, 50Gi, ReadWriteMany)")  # fmt: skip


@pytest.mark.parametrize(
    ("claim", "values_file", "severity", "says"),
    [
        ("shared", "values/gpu.yaml", OK, "claim shared is Bound with ReadWriteMany: the release needs ReadWriteMany"),
        ("new", "values/gpu.yaml", OK, "claim new is Pending (binds when the first pod is scheduled"),
        ("absent", "values/gpu.yaml", FAIL, "storage.existingClaim absent does not exist in namespace ml-training"),
        ("rwo", "values/gpu.yaml", FAIL, "claim rwo has access modes ReadWriteOnce, the release needs ReadWriteMany: "
         "10 pods mount the claim"),
        ("rwo", "values/cpu.yaml", OK, "claim rwo is Bound with ReadWriteOnce: the release needs ReadWriteOnce"),
        ("shared", "values/cpu.yaml", OK, "; it offers ReadWriteMany: --set storage.accessModes={ReadWriteMany} lets "
         "the pods spread"),
        ("rwop", "values/cpu.yaml", FAIL, "claim rwop has access modes ReadWriteOncePod: not one that 7 pods can "
         "share"),
    ],
)  # fmt: skip
def test_existing_claim_is_judged_by_its_own_access_modes(
    claim: str, values_file: str, severity: str, says: str, cluster: KubeServer
) -> None:
    modes = {"shared": "ReadWriteMany", "rwo": "ReadWriteOnce", "rwop": "ReadWriteOncePod"}
    cluster.add(*(kf.claim(name, NS, access_modes=[mode]) for name, mode in modes.items()),
                kf.claim("new", NS, phase="Pending"))  # fmt: skip
    [finding] = check_storage(context(cluster, docs(values_file, sets=[f"storage.existingClaim={claim}"])))
    assert finding.severity == severity and says in finding.message, finding
    if (claim, severity) == ("rwo", FAIL):
        assert finding.hint.startswith(RWO_FIX)
    assert cluster.calls == [Call("get", "persistentvolumeclaims", NS, claim)]


# -- co-location: every pod on one node -------------------------------------------------------


def test_co_located_release_must_fit_one_node(cluster: KubeServer) -> None:
    cluster.add(kf.node("minikube", cpu="2", memory="2Gi"), kf.node("small", cpu="8", memory="4Gi"), KIND_CLASS)
    findings = preflight.run(cluster.api(), docs("values/cpu.yaml"), "mnist", NS)
    finding = only(findings, "co-location")
    assert finding.severity == FAIL
    assert finding.message == (
        "storage needs ReadWriteOnce, so all 6 pods run on one node: they request 1.95 cpu, 4352Mi memory; "
        "no schedulable node has that much allocatable (minikube: 2 cpu, 2Gi memory; small: 8 cpu, 4Gi memory)"
    )
    assert "--set storage.accessModes={ReadWriteMany}" in finding.hint
    assert cluster.calls.count(NODES) == 1


def test_gpu_and_co_location_checks_share_one_node_listing(cluster: KubeServer) -> None:
    cluster.add(*gpu_nodes(2, 4), KIND_CLASS)
    findings = preflight.run(cluster.api(), docs("values/multi-gpu.yaml"), "mnist", NS)
    assert only(findings, "gpu-capacity").severity == OK
    colocation = only(findings, "co-location")
    assert colocation.severity == OK
    assert colocation.message.startswith("storage needs ReadWriteOnce, so all 3 pods run on one node: they request")
    assert "4 nvidia.com/gpu" in colocation.message and "fits gpu-1 " in colocation.message
    assert "(tolerations not evaluated)" in colocation.message
    assert cluster.calls.count(NODES) == 1


def test_spread_values_have_no_co_location_check(cluster: KubeServer) -> None:
    cluster.add(kf.storage_class("nfs", "nfs.csi.k8s.io", default=True))
    spread = docs("values/cpu.yaml", sets=["storage.accessModes={ReadWriteMany}"])
    findings = preflight.run(cluster.api(), spread, "m", NS)
    assert "co-location" not in {f.check for f in findings}
    assert NODES not in cluster.calls


# -- (c) quota ----------------------------------------------------------------------------------


def test_no_quota_passes(cluster: KubeServer) -> None:
    findings = check_quota(context(cluster, docs("values/gpu.yaml")))
    assert findings == [preflight.Finding("quota", OK, "no ResourceQuota in namespace ml-training")]
    assert cluster.calls == [Call("list", "resourcequotas", NS)]


NO_CPU_REQUEST = "tensorboard.resources.requests.cpu=null"


@pytest.mark.parametrize(
    ("hard", "used", "sets", "severity", "says"),
    [
        ({"requests.cpu": "40", "requests.memory": "64Gi", "limits.memory": "128Gi", "requests.nvidia.com/gpu": "8",
          "pods": "20"}, {"requests.cpu": "2", "pods": "2"}, (), OK, "ResourceQuota team has room for the release"),
        ({"requests.cpu": "21"}, {"requests.cpu": "0"}, (), WARN, "ResourceQuota team is almost full: requests.cpu: "
         "19.61 of 21 after install"),
        ({"requests.nvidia.com/gpu": "4", "pods": "10", "limits.memory": "200Gi", "count/jobs.batch": "5",
          "configmaps": "1"}, {"requests.nvidia.com/gpu": "2", "pods": "3", "limits.memory": "8Gi",
          "count/jobs.batch": "0", "configmaps": "1"}, (), FAIL, "ResourceQuota team would be exceeded: pods: 3 used "
         "+ 10 > 10; requests.nvidia.com/gpu: 2 used + 4 > 4"),
        # with a limit, the API server makes the request the limit: the quota admits the pod; without, it refuses it
        ({"requests.cpu": "100"}, {}, (NO_CPU_REQUEST,), OK, "has room"),
        ({"requests.cpu": "100"}, {}, (NO_CPU_REQUEST, "tensorboard.resources.limits.cpu=null"), FAIL,
         "tensorboard pods set no requests.cpu and would be rejected by the quota"),
    ],
)  # fmt: skip
def test_quota_used_plus_the_release_against_hard(
    hard: dict[str, str], used: dict[str, str], sets: tuple[str, ...], severity: str, says: str, cluster: KubeServer
) -> None:
    cluster.add(kf.resource_quota("team", NS, hard, used))
    [finding] = check_quota(context(cluster, docs("values/gpu.yaml", sets=sets)))
    assert finding.severity == severity and says in finding.message, finding
    assert severity != FAIL or "kubectl describe resourcequota team" in finding.hint


# -- (d) NetworkPolicy enforcement --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "daemon_sets", "severity", "says"),
    [
        ((), [("kube-proxy",), ("calico-node",)], OK, "NetworkPolicies are enforced by calico-node"),
        ((), [("kube-proxy",), ("kindnet",), ("calico-node", "other")], WARN,
         "NetworkPolicies are likely NOT enforced (no known enforcing CNI found"),
        (("networkPolicy.enabled=false",), [], WARN, "any pod can reach the TensorFlow gRPC ports"),
    ],
)  # fmt: skip
def test_network_policy_enforcement(
    sets: tuple[str, ...], daemon_sets: list[tuple[str, ...]], severity: str, says: str, cluster: KubeServer
) -> None:
    """A known CNI in kube-system enforces them (one in another namespace does not); disabled, nothing is read."""
    cluster.add(*(kf.daemon_set(*each) for each in daemon_sets))
    [finding] = check_network_policy(context(cluster, docs(sets=sets)))
    assert (finding.check, finding.severity) == ("network-policy", severity) and says in finding.message, finding
    assert cluster.calls == ([Call("list", "daemonsets", "kube-system")] if daemon_sets else [])


# -- (e) gang scheduling and (f) Kueue: only when the values ask for them ----------------------------

VOLCANO_DISCOVERY = Call("discover", "scheduling.volcano.sh/v1beta1")
COSCHEDULING_DISCOVERY = Call("discover", "scheduling.x-k8s.io/v1alpha1")
KUEUE_V1BETA2 = Call("discover", "kueue.x-k8s.io/v1beta2")
KUEUE_V1BETA1 = Call("discover", "kueue.x-k8s.io/v1beta1")
# values/gpu.yaml's TensorFlow pods: 2 ps (1 CPU, 2Gi), 4 workers (4 CPU, 8Gi, 1 GPU), the chief (1 CPU, 2Gi).
GPU_ASKS = {"cpu": "19", "memory": "38Gi", GPU: "4"}


def volcano(queue: str = "", *more: str) -> list[dict[str, Any]]:
    """values/gpu.yaml gang-scheduled by Volcano in `queue` (empty: Volcano's default queue)."""
    return docs("values/gpu.yaml", sets=["scheduling.gang.provider=volcano", f"scheduling.gang.volcanoQueue={queue}",
                                         *more])  # fmt: skip


def kueue(queue: str = "team-a", priority: str = "", *more: str) -> list[dict[str, Any]]:
    """values/gpu.yaml queued by Kueue in LocalQueue `queue`, with the WorkloadPriorityClass `priority`."""
    sets = [f"scheduling.kueue.queueName={queue}", f"scheduling.kueue.priorityClass={priority}", *more]
    return docs("values/gpu.yaml", sets=sets)


def kueue_cluster(cluster: KubeServer, *objects: dict[str, Any], served: tuple[str, ...] | None = None) -> None:
    cluster.add(*kf.crds(*kf.KUEUE_CRDS, served=served), *objects)


def team_queues(quota: dict[str, str] | None = None, **cluster_queue: Any) -> list[dict[str, Any]]:
    return [kf.local_queue("team-a", NS, "team"),
            kf.cluster_queue("team", [{"default-flavor": quota or GPU_ASKS}], **cluster_queue)]


def kueue_findings(cluster: KubeServer, release: list[dict[str, Any]]) -> list[tuple[str, str]]:
    findings = check_kueue(context(cluster, release))
    assert {f.check for f in findings} == {"kueue"}
    return [(f.severity, f.message) for f in findings]


@pytest.mark.parametrize("values_file", ["values/cpu.yaml", "values/gpu.yaml"])
def test_gang_and_kueue_are_not_checked_unless_the_values_ask(values_file: str, cluster: KubeServer) -> None:
    good_cluster(cluster).add(*kf.crds(*kf.VOLCANO_CRDS, *kf.COSCHEDULING_CRDS, *kf.KUEUE_CRDS))
    findings = preflight.run(cluster.api(), docs(values_file), "mnist", NS)
    assert not {"gang-scheduling", "kueue"} & {f.check for f in findings}
    assert {call.resource for call in cluster.calls} <= {"nodes", "pods", "storageclasses", "resourcequotas",
                                                         "daemonsets"}  # fmt: skip


def test_volcano_podgroup_crd_and_open_queue_pass(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS), kf.volcano_queue("research"))
    findings = check_gang(context(cluster, volcano("research")))
    assert [(f.severity, f.message) for f in findings] == [
        (
            OK,
            "CRD podgroups.scheduling.volcano.sh serves scheduling.volcano.sh/v1beta1 "
            "(that a scheduler runs as volcano is not checked)",
        ),
        (OK, "Volcano Queue research is Open"),
    ]
    assert cluster.calls == [VOLCANO_DISCOVERY, Call("get", "queues", None, "research")]
    cluster.requests.clear()
    default_queue = check_gang(context(cluster, volcano()))
    assert [f.severity for f in default_queue] == [OK]  # the default queue: not read
    assert cluster.calls == [VOLCANO_DISCOVERY]


@pytest.mark.parametrize(
    ("provider", "installed", "served", "install"),
    [
        ("volcano", (), "scheduling.volcano.sh/v1beta1", "install Volcano (`helm repo add volcano-sh"),
        ("volcano", kf.COSCHEDULING_CRDS, "scheduling.volcano.sh/v1beta1", "install Volcano (`helm repo add"),
        ("coscheduling", kf.VOLCANO_CRDS, "scheduling.x-k8s.io/v1alpha1",
         "install kubernetes-sigs/scheduler-plugins as a second scheduler with the Coscheduling"),
    ],
)  # fmt: skip
def test_a_gang_provider_without_its_podgroup_crd_fails(
    provider: str, installed: tuple[str, ...], served: str, install: str, cluster: KubeServer
) -> None:
    cluster.add(*kf.crds(*installed))
    [finding] = check_gang(context(cluster, docs("values/gpu.yaml", sets=[f"scheduling.gang.provider={provider}"])))
    crd = f"podgroups.{served.split('/')[0]}"
    assert (finding.check, finding.severity, finding.message) == (
        "gang-scheduling", FAIL, f"scheduling.gang.provider={provider} but CRD {crd} is not installed (the API server "
        f"serves no podgroups in {served}): the chart's PodGroup cannot be created")  # fmt: skip
    assert finding.hint.startswith(install) and finding.hint.endswith("or --set scheduling.gang.provider=none")
    assert cluster.calls == [Call("discover", served)]


@pytest.mark.parametrize(
    ("queue", "severity", "message", "hint"),
    [
        (None, FAIL, "Volcano Queue research does not exist: Volcano refuses a PodGroup in an unknown queue",
         'or --set scheduling.gang.volcanoQueue="" for Volcano\'s default queue'),
        (kf.volcano_queue("research", "Closed"), FAIL, "Volcano Queue research is Closed: Volcano refuses new "
         "PodGroups in a queue that is not Open", "open it (`vcctl queue operate --name research --action open`)"),
        (kf.volcano_queue("research", "Closing"), FAIL, "Volcano Queue research is Closing: Volcano refuses new "
         "PodGroups in a queue that is not Open", "--set scheduling.gang.volcanoQueue=<queue>"),
        (kf.volcano_queue("research", None), WARN, "Volcano Queue research has no state yet: Volcano accepts "
         "PodGroups only in an Open queue", "kubectl get pods -n volcano-system"),
    ],
)  # fmt: skip
def test_volcano_queue_missing_or_not_open(
    queue: dict[str, Any] | None, severity: str, message: str, hint: str, cluster: KubeServer
) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS), kf.volcano_queue("other"))
    if queue:
        cluster.add(queue)
    crd, finding = check_gang(context(cluster, volcano("research")))
    assert crd.severity == OK
    assert (finding.severity, finding.message) == (severity, message)
    assert hint in finding.hint


def test_coscheduling_podgroup_crd_passes_and_names_the_pods_scheduler(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.COSCHEDULING_CRDS))
    coscheduled = ["scheduling.gang.provider=coscheduling"]
    [finding] = check_gang(context(cluster, docs("values/gpu.yaml", sets=coscheduled)))
    assert (finding.severity, finding.message) == (OK, "CRD podgroups.scheduling.x-k8s.io serves scheduling.x-k8s.io/"
                                                   "v1alpha1 (that a scheduler runs as scheduler-plugins-scheduler is "
                                                   "not checked)")  # fmt: skip
    named = docs("values/gpu.yaml", sets=[*coscheduled, "schedulerName=coscheduler"])
    assert "runs as coscheduler" in check_gang(context(cluster, named))[0].message
    assert cluster.calls == [COSCHEDULING_DISCOVERY, COSCHEDULING_DISCOVERY]  # once per run


def test_kueue_queue_quota_and_priority_class_pass(cluster: KubeServer) -> None:
    kueue_cluster(cluster, *team_queues({"cpu": "32", "memory": "64Gi", GPU: "8"}), kf.workload_priority_class("high",
                                                                                                           1000))
    assert kueue_findings(cluster, kueue(priority="high")) == [
        (OK, f"LocalQueue team-a exists in namespace {NS} (ClusterQueue team)"),
        (OK, "ClusterQueue team has the nominal quota for the 7 TensorFlow pods: cpu 19 of 32, memory 38Gi of 64Gi, "
             "nvidia.com/gpu 4 of 8 (other workloads' usage not counted)"),
        (OK, "WorkloadPriorityClass high exists (value 1000)"),
    ]  # fmt: skip
    assert cluster.calls == [KUEUE_V1BETA2, Call("get", "localqueues", NS, "team-a"),
                             Call("get", "clusterqueues", None, "team"),
                             Call("get", "workloadpriorityclasses", None, "high")]  # fmt: skip


def test_kueue_before_v0_15_is_read_at_v1beta1(cluster: KubeServer) -> None:
    objects = [kf.local_queue("team-a", NS, "team", version="v1beta1"),
               kf.cluster_queue("team", [{"default-flavor": GPU_ASKS}], version="v1beta1"),
               kf.workload_priority_class("high", 1000, version="v1beta1")]  # fmt: skip
    kueue_cluster(cluster, *objects, served=("v1beta1",))
    assert [severity for severity, _ in kueue_findings(cluster, kueue(priority="high"))] == [OK, OK, OK]
    assert cluster.calls[:2] == [KUEUE_V1BETA2, KUEUE_V1BETA1]
    assert cluster.requests[0].status == 404  # the fake serves only what the CRDs serve


def test_kueue_not_installed_fails(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS))
    [(severity, message)] = kueue_findings(cluster, kueue(priority="high"))
    assert (severity, message) == (FAIL, "scheduling.kueue.queueName=team-a but Kueue is not installed: CRD "
                                   "localqueues.kueue.x-k8s.io is missing (the API server serves no localqueues in "
                                   "kueue.x-k8s.io/v1beta2 or v1beta1), so the pods would start unqueued")  # fmt: skip
    assert cluster.calls == [KUEUE_V1BETA2, KUEUE_V1BETA1]


def test_missing_local_queue_fails_and_the_priority_class_is_still_checked(cluster: KubeServer) -> None:
    kueue_cluster(cluster, kf.local_queue("team-b", NS, "team"), kf.local_queue("team-a", "other", "team"))
    findings = check_kueue(context(cluster, kueue(priority="high")))
    assert [(f.severity, f.message) for f in findings] == [
        (FAIL, f"LocalQueue team-a does not exist in namespace {NS}: Kueue would hold the pods until it does"),
        (FAIL, "WorkloadPriorityClass high does not exist: Kueue would not admit the pods"),
    ]
    assert findings[0].hint.startswith(f"`kubectl get localqueues -n {NS}` lists the queues there")
    assert 'or --set scheduling.kueue.priorityClass="" for the default priority' in findings[1].hint


def test_stopped_local_queue_missing_or_inactive_cluster_queue_fail(cluster: KubeServer) -> None:
    kueue_cluster(cluster, kf.local_queue("team-a", NS, "team", stop_policy="Hold"))
    assert kueue_findings(cluster, kueue()) == [
        (FAIL, f"LocalQueue team-a in namespace {NS} is stopped (stopPolicy Hold): it admits no new workload"),
        (FAIL, "ClusterQueue team of LocalQueue team-a does not exist: nothing would admit the pods"),
    ]
    missing_flavor = ("FlavorNotFound", "Can't admit new workloads: references missing ResourceFlavor(s): "
                      "default-flavor.")
    cluster.reset()
    kueue_cluster(cluster, *team_queues(inactive=missing_flavor))
    assert kueue_findings(cluster, kueue())[1] == (FAIL, "ClusterQueue team is not active (FlavorNotFound: Can't admit "
                                                   "new workloads: references missing ResourceFlavor(s): default-flavor"
                                                   ".): it admits no workload, the pods would wait gated")  # fmt: skip


NEVER = ": it can never be admitted (Kueue admits the 7 TensorFlow pods together)"
SHORT_OF_GPUS = [{"default-flavor": {"cpu": "32", "memory": "64Gi", GPU: "2"}}]
BORROWS = ("nvidia.com/gpu: the release asks 4, ClusterQueue team offers 2 nominal: admitted only by borrowing from "
           "cohort research, while other ClusterQueues leave that much unused")
LIMITS_ONLY = ("chief.resources.requests=null", "chief.resources.limits.cpu=3", "chief.resources.limits.memory=4Gi")


@pytest.mark.parametrize(
    ("groups", "more", "sets", "severity", "says"),
    [(SHORT_OF_GPUS, {}, (), FAIL, f"nvidia.com/gpu: the release asks 4, ClusterQueue team offers 2 nominal{NEVER}"),
     ([{"default-flavor": {"cpu": "32", GPU: "8"}}], {}, (), FAIL,
      f"memory: the release asks 38Gi, ClusterQueue team does not cover memory{NEVER}"),
     ([{"default-flavor": {"cpu": "8", "memory": "64Gi", "pods": "5"}}], {}, (), FAIL,
      "cpu: the release asks 19, ClusterQueue team offers 8 nominal; nvidia.com/gpu: the release asks 4, "
      f"ClusterQueue team does not cover nvidia.com/gpu; pods: the release asks 7, ClusterQueue team offers 5 nominal"
      f"{NEVER}"),
     # every flavor of every group summed; pods counted where the ClusterQueue covers them
     ([{"default-flavor": {"cpu": "10", "memory": "20Gi", "pods": "4"}, "spot": {"cpu": "10", "memory": "20Gi",
                                                                               "pods": "4"}},
       {"a100": {GPU: "2"}, "h100": {GPU: "2"}}], {}, (), OK, "ClusterQueue team has the nominal quota for the 7 "
      "TensorFlow pods: cpu 19 of 20, memory 38Gi of 40Gi, nvidia.com/gpu 4 of 4, pods 7 of 8 (other workloads' "
      "usage not counted)"),
     # requests default from limits; TensorBoard (and Serving) are not of the pod group
     ([{"default-flavor": {"cpu": "21", "memory": "40Gi", GPU: "4"}}], {}, (*LIMITS_ONLY, "tensorboard.enabled=true"),
      OK, "cpu 21 of 21, memory 40Gi of 40Gi"),
     (SHORT_OF_GPUS, {"cohort": "research"}, (), WARN, BORROWS),  # no borrowingLimit: unlimited
     (SHORT_OF_GPUS, {"cohort": "research", "borrowing_limit": "2"}, (), WARN, BORROWS),
     (SHORT_OF_GPUS, {"cohort": "research", "borrowing_limit": "0"}, (), FAIL, NEVER)],
)  # fmt: skip
def test_kueue_quota_admits_the_pod_group_whole_or_never(
    groups: list[dict[str, dict[str, str]]], more: dict[str, str], sets: tuple[str, ...], severity: str, says: str,
    cluster: KubeServer,
) -> None:  # fmt: skip
    kueue_cluster(cluster, kf.local_queue("team-a", NS, "team"), kf.cluster_queue("team", groups, **more))
    _, (found, message) = kueue_findings(cluster, kueue("team-a", "", *sets))
    assert found == severity and says in message, message


def test_kueue_reads_that_rbac_forbids_become_warnings_check_by_check(cluster: KubeServer) -> None:
    kueue_cluster(cluster, *team_queues(), kf.workload_priority_class("high", 1000))
    cluster.fail("get", "clusterqueues", 403, 'clusterqueues.kueue.x-k8s.io "team" is forbidden')
    findings = check_kueue(context(cluster, kueue(priority="high")))
    assert [(f.severity, f.message) for f in findings] == [
        (OK, f"LocalQueue team-a exists in namespace {NS} (ClusterQueue team)"),
        (
            WARN,
            "could not check: forbidden: you may not get clusterqueues.kueue.x-k8s.io/team (cluster-wide): "
            'clusterqueues.kueue.x-k8s.io "team" is forbidden',
        ),
        (OK, "WorkloadPriorityClass high exists (value 1000)"),
    ]
    assert "kubectl auth can-i get clusterqueues.kueue.x-k8s.io" in findings[1].hint
    cluster.fail("discover", "kueue.x-k8s.io/v1beta2", 403, "forbidden")
    [finding] = preflight.run(cluster.api(), kueue(), "mnist", NS)[-1:]
    assert (finding.check, finding.severity) == ("kueue", WARN)
    assert (
        finding.message
        == "could not check: forbidden: you may not get /apis/kueue.x-k8s.io/v1beta2 (cluster-wide): forbidden"
    )


def test_volcano_queue_read_forbidden_keeps_the_crd_finding(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS))
    cluster.fail("get", "queues", 403, 'queues.scheduling.volcano.sh "research" is forbidden')
    crd, queue = check_gang(context(cluster, volcano("research")))
    assert (crd.severity, queue.severity) == (OK, WARN)
    assert queue.message.startswith("could not check: forbidden: you may not get queues.scheduling.volcano.sh/research")


def test_run_checks_gang_scheduling_and_kueue_last(cluster: KubeServer) -> None:
    good_cluster(cluster).add(*kf.crds(*kf.VOLCANO_CRDS), kf.volcano_queue("research"))
    findings = preflight.run(cluster.api(), volcano("research"), "mnist", NS)
    assert [f.check for f in findings][-3:] == ["network-policy", "gang-scheduling", "gang-scheduling"]
    assert cluster.calls[-2:] == [VOLCANO_DISCOVERY, Call("get", "queues", None, "research")]
    cluster.reset()
    good_cluster(cluster).add(*kf.crds(*kf.KUEUE_CRDS), *team_queues())
    findings = preflight.run(cluster.api(), kueue(), "mnist", NS)
    assert [(f.check, f.severity) for f in findings][-3:] == [("network-policy", OK), ("kueue", OK), ("kueue", OK)]
    assert preflight.refusal(findings) is None


def test_fake_kueue_objects_validate_against_the_vendored_crds() -> None:
    broken = kf.cluster_queue("team", [{"default-flavor": {"cpu": "1"}}])
    broken["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    assert any("nominalQuota" in error for error in crdlib.validate(broken))
    with pytest.raises(AssertionError):
        kf.assert_served_valid(broken)


# -- run: every check, exact calls, forbidden checks degrade to warnings --------------------------


def good_cluster(cluster: KubeServer) -> KubeServer:
    return cluster.add(*gpu_nodes(4, 4), kf.storage_class("nfs", "nfs.csi.k8s.io", default=True),
                       kf.daemon_set("cilium"))


def test_run_calls_each_api_once_and_renders(cluster: KubeServer) -> None:
    good_cluster(cluster)
    findings = preflight.run(cluster.api(), docs("values/gpu.yaml"), "mnist", NS)
    assert [(f.check, f.severity) for f in findings] == [("gpu-capacity", OK), ("storage", OK), ("quota", OK),
                                                         ("network-policy", OK)]  # fmt: skip
    assert preflight.refusal(findings) is None
    assert cluster.calls == [NODES, ALL_PODS, Call("list", "storageclasses"), Call("list", "resourcequotas", NS),
                             Call("list", "daemonsets", "kube-system")]  # fmt: skip
    console = Console(width=250, record=True, color_system=None)
    preflight.render(findings, console)
    text = console.export_text()
    assert "✓ ok" in text and "NetworkPolicies are enforced by cilium" in text
    assert "0 failed, 0 warning(s), 4 ok" in text


def test_forbidden_check_becomes_a_warning_and_failures_are_reported(cluster: KubeServer) -> None:
    good_cluster(cluster)
    cluster.fail("list", "daemonsets", 403, 'daemonsets.apps is forbidden: User "dev" cannot list resource '
                 '"daemonsets"')
    cluster.fail("list", "storageclasses", 403, "storageclasses.storage.k8s.io is forbidden")
    findings = preflight.run(cluster.api(), docs("values/multi-gpu.yaml"), "mnist", NS)
    network = only(findings, "network-policy")
    assert network.severity == WARN
    assert network.message.startswith("could not check: forbidden: you may not list daemonsets.apps in namespace "
                                      "kube-system")  # fmt: skip
    assert "kubectl auth can-i list daemonsets.apps -n kube-system" in network.hint
    assert only(findings, "storage").hint.startswith("RBAC verb `list` on resource `storageclasses.storage.k8s.io` "
                                                     "is missing")  # fmt: skip
    assert preflight.refusal(findings) is None
    cluster.reset()
    cluster.add(*gpu_nodes(1))
    findings = preflight.run(cluster.api(), docs("values/multi-gpu.yaml"), "mnist", NS)
    assert preflight.refusal(findings) is not None


def test_unreachable_cluster_is_an_error_not_four_warnings(cluster: KubeServer) -> None:
    good_cluster(cluster)
    cluster.fail("list", "nodes", 500, "etcdserver: leader changed")
    with pytest.raises(KubernetesError, match="HTTP 500"):
        preflight.run(cluster.api(), docs("values/gpu.yaml"), "mnist", NS)


@pytest.mark.cluster
@pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"), reason="no live cluster: set KUBECONFIG (e.g. after `kind create cluster`)"
)
def test_live_cluster_preflight_of_the_cpu_values() -> None:
    api = kube.KubeApi.from_config(None, None)
    namespace = os.environ.get("TFCHART_TEST_NAMESPACE", "default")
    findings = preflight.run(api, render(values=[REPO / "values/cpu.yaml"], namespace=namespace), "mnist", namespace)
    assert [f.check for f in findings] == ["gpu-capacity", "storage", "co-location", "quota", "network-policy"]
    assert only(findings, "gpu-capacity").severity == OK  # values/cpu.yaml requests no GPUs


def test_preflight_of_a_cluster_with_15000_pods_stays_within_200_mb(cluster: KubeServer) -> None:
    """Every pod of the cluster is read to count the GPUs other releases hold: a page at a time, so memory stays
    flat whatever the cluster's size (one unpaginated list of 15,000 pods took 500 MB)."""
    kind_cluster(cluster)
    cluster.add(*gpu_nodes(4, 4))
    worker = served_pod(kf.pod(kf.manifest(docs("values/gpu.yaml"), "StatefulSet", "worker"), index=0, node="gpu-0"))
    with cluster.lock:  # 15,000 realistic pods (the chart's worker pod), sharing one spec to spare this process
        for n in range(15000):
            metadata = {**worker["metadata"], "name": f"pod-{n:05d}", "namespace": f"team-{n % 50}",
                        "uid": f"uid-{n}", "labels": {"app": "other"}}
            cluster.objects[("pods", metadata["namespace"], metadata["name"])] = {**worker, "metadata": metadata}
    argv = [sys.executable, "-m", "tfchart", "--helm", str(helm_path("4")), "preflight", "-f", "values/gpu.yaml",
            "-n", NS, "--kubeconfig", str(cluster.kubeconfig())]  # fmt: skip
    run = measured(argv, env=helm_env(), kill_after=300)  # memory is the limit here, not time
    assert not run.timed_out and b"Traceback" not in run.stderr, run.stderr.decode()[-2000:]
    assert b"gpu-capacity" in run.stdout + run.stderr
    pages = [call for call in cluster.calls if call.resource == "pods" and call.namespace is None]
    assert len(pages) == 30
    assert run.max_rss_mb <= 200, f"tfchart preflight used {run.max_rss_mb:.0f} MB"
    print(f"\npreflight against 15,000 pods: {run.seconds:.1f} s, {run.max_rss_mb:.0f} MB peak")


# -- topology: the kueue and gang-scheduling checks' findings for scheduling.topology ------------------------------
# The release is the chart with scheduling.topology; the cluster holds Kueue's LocalQueue -> ClusterQueue ->
# ResourceFlavors -> Topology, or Volcano's HyperNodes, built from the vendored CRDs (tests/crds) and checked
# against them.

RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
HOSTNAME = "kubernetes.io/hostname"
KUEUE = ("scheduling.kueue.queueName=team-a", "ps.replicas=1")
VOLCANO = ("scheduling.gang.provider=volcano",)
CPU_ONLY = ("worker.gpu.count=0", "worker.replicas=2")


def release(*sets: str) -> list[dict[str, Any]]:
    """CPU-only TensorFlow pods (two workers) with these --set arguments: what the topology checks read."""
    return docs(sets=[*CPU_ONLY, *sets])


def kueue_release(*more: str) -> list[dict[str, Any]]:
    return release(*KUEUE, "scheduling.topology.mode=required", f"scheduling.topology.level={RACK}", *more)


def placed(cluster: KubeServer, rendered: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The topology findings of the checks that read the queue (kueue) or the PodGroup (gang-scheduling)."""
    read = context(cluster, rendered)
    return [(f.severity, f.message, f.hint) for f in check_kueue(read) + check_gang(read) if f.check == "topology"]


def tas_cluster(cluster: KubeServer, *objects: dict[str, Any], flavor_topology: str | None = "default",
                served: tuple[str, ...] | None = None, inactive: tuple[str, str] | None = None) -> KubeServer:
    """Kueue with LocalQueue team-a -> ClusterQueue team, whose flavors are `default` (no topology) and `tas`
    (the Topology `flavor_topology`, nodes labelled pool=tas), and two racks of two nodes in one block."""
    version = (served or ("v1beta2",))[-1]
    quota = {"cpu": "64", "memory": "256Gi"}
    racks = [kf.labelled_node(f"node-{i}", {"pool": "tas", BLOCK: "b1", RACK: f"r{i // 2}"}) for i in range(4)]
    return cluster.add(
        *kf.crds(*kf.KUEUE_CRDS, *kf.KUEUE_TAS_CRDS, served=served), *racks, kf.node("other"),
        kf.local_queue("team-a", NS, "team", version=version),
        kf.cluster_queue("team", [{"default": quota, "tas": quota}], inactive=inactive, version=version),
        kf.resource_flavor("default", version=version),
        kf.resource_flavor("tas", flavor_topology, {"pool": "tas"}, version=version), *objects,
    )  # fmt: skip


def test_the_level_of_the_flavors_topology_passes_with_its_nodes_and_domains(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, RACK, HOSTNAME))
    assert placed(cluster, kueue_release()) == [
        (OK, f"the ps, worker and chief pods ask for level {RACK} of Topology default (ResourceFlavor tas) "
             "(required): 4 schedulable node(s) in 2 domain(s)", ""),
    ]  # fmt: skip
    assert [call for call in cluster.calls if call.resource not in ("nodes",)] == [
        Call("discover", "kueue.x-k8s.io/v1beta2"),
        Call("get", "localqueues", NS, "team-a"), Call("get", "clusterqueues", None, "team"),
        Call("get", "resourceflavors", None, "default"), Call("get", "resourceflavors", None, "tas"),
        Call("get", "topologies", None, "default"),
    ]  # fmt: skip


def test_a_missing_level_fails_with_the_levels_there_are_and_the_set_that_uses_one(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, HOSTNAME))
    [(severity, message, hint)] = placed(cluster, kueue_release())
    assert severity == FAIL
    assert message == (
        f"no Topology of ClusterQueue team has the level {RACK} that the ps, worker and chief pods ask for "
        "(required): Kueue would not admit them; the levels: "
        f"Topology default (ResourceFlavor tas): {BLOCK}, {HOSTNAME}"
    )
    assert hint == (f"--set scheduling.topology.level={BLOCK} (a level there), or ask the Kueue admin to add {RACK} to "
                    "a Topology of ClusterQueue team")  # fmt: skip


def test_a_roles_own_level_is_fixed_by_its_own_key(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, RACK, HOSTNAME))
    rendered = kueue_release("scheduling.topology.worker.level=cloud.provider.com/topology-rak")
    (ok, _, _), (severity, message, hint) = placed(cluster, rendered)
    assert (ok, severity) == (OK, FAIL)
    assert "level cloud.provider.com/topology-rak that the worker pods ask for" in message
    assert hint.startswith(f"--set scheduling.topology.worker.level={RACK} (a level there)")


def test_no_topology_aware_flavor_or_a_missing_topology_fails(cluster: KubeServer) -> None:
    tas_cluster(cluster, flavor_topology=None)
    [(severity, message, hint)] = placed(cluster, kueue_release())
    assert (severity, message) == (FAIL, "ClusterQueue team has no flavor with a Topology (no ResourceFlavor of it "
                                   "names one in spec.topologyName): Kueue admits no pod that asks for a topology "
                                   "there")  # fmt: skip
    assert hint.endswith("or --set scheduling.topology.mode=none")

    cluster.reset()  # a missing Topology: Kueue keeps the ClusterQueue inactive, which the kueue check reports
    tas_cluster(cluster, flavor_topology="racks", inactive=("TopologyNotFound", "Can't admit new workloads: "
                                                            "references missing Topology racks."))  # fmt: skip
    read = context(cluster, kueue_release())
    assert (FAIL, "ClusterQueue team is not active (TopologyNotFound: Can't admit new workloads: references missing "
            "Topology racks.): it admits no workload, the pods would wait gated") in [
        (f.severity, f.message) for f in check_kueue(read) if f.check == "kueue"]  # fmt: skip
    [level] = placed(cluster, kueue_release())
    assert level[:2] == (FAIL, f"no Topology of ClusterQueue team has the level {RACK} that the ps, worker and "
                         "chief pods ask for (required): Kueue would not admit them; the levels: none of its "
                         "Topologies exists")  # fmt: skip
    assert level[2] == f"ask the Kueue admin to add {RACK} to a Topology of ClusterQueue team"


def test_nodes_without_the_label_warn(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, RACK, "cloud.provider.com/topology-host"))
    rendered = release(*KUEUE, "scheduling.topology.mode=preferred", "scheduling.topology.level=cloud.provider.com/"
                   "topology-host", "scheduling.topology.together=true")  # fmt: skip
    [(severity, message, hint)] = placed(cluster, rendered)  # one level asked, by every placed role
    assert severity == WARN
    assert message.startswith("the ps, worker and chief pods ask for level cloud.provider.com/topology-host")
    assert "no schedulable node of that flavor carries the label" in message
    assert hint.startswith("`kubectl get nodes -L cloud.provider.com/topology-host` shows the label")


def test_kueue_before_v0_14_has_no_topology(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.KUEUE_CRDS, served=("v1beta1",)), kf.local_queue("team-a", NS, "team", version="v1beta1"),
                kf.cluster_queue("team", [{"default": {"cpu": "64"}}], version="v1beta1"))  # fmt: skip
    [(severity, message, hint)] = placed(cluster, kueue_release())
    assert severity == FAIL and message.startswith("Kueue serves no Topology in kueue.x-k8s.io/v1beta1")
    assert hint == "upgrade Kueue to v0.14 or later, or --set scheduling.topology.mode=none"


def test_a_missing_queue_is_left_to_the_kueue_check(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.KUEUE_CRDS, *kf.KUEUE_TAS_CRDS))
    assert placed(cluster, kueue_release()) == []
    assert placed(cluster, release(*KUEUE)) == []  # no topology asked: nothing read


# -- Volcano: HyperNodes --------------------------------------------------------------------------------------


def volcano_release(tier: int, *more: str) -> list[dict[str, Any]]:
    return release(*VOLCANO, "scheduling.topology.mode=required", f"scheduling.topology.tier={tier}", *more)


def hypernodes(cluster: KubeServer, *tiers: int) -> KubeServer:
    """Leaf switches s0, s1 (tier 1) of two nodes each, and a spine (tier 2) over them when `tiers` has 2."""
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS, *kf.HYPERNODE_CRDS))
    if 1 in tiers:
        cluster.add(kf.hypernode("s0", 1, "node-0", "node-1"), kf.hypernode("s1", 1, "node-2", "node-3"))
    if 2 in tiers:
        cluster.add(kf.hypernode("spine", 2, "s0", "s1", tier_name="spine"))
    return cluster


def test_hypernodes_of_the_tier_pass_per_placed_role(cluster: KubeServer) -> None:
    hypernodes(cluster, 1, 2)
    assert placed(cluster, volcano_release(2)) == [
        (OK, f"the {role} pods stay within one HyperNode of tier 2 at most (2 of tier 1, 1 of tier 2)", "")
        for role in ("ps", "worker", "chief")
    ]
    assert Call("list", "hypernodes", params=(("limit", "500"),)) in cluster.calls


def test_a_tier_below_every_hypernode_fails_and_one_above_them_all_warns(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS, *kf.HYPERNODE_CRDS), kf.hypernode("spine", 2, "s0", "s1"))
    rendered = volcano_release(1, "scheduling.topology.together=true", "scheduling.topology.chief.mode=none")
    [(severity, message, hint)] = placed(cluster, rendered)
    assert (severity, message) == (FAIL, "no HyperNode of tier 1 or lower (1 of tier 2): Volcano would hold the ps "
                                   "and worker pods forever")  # fmt: skip
    assert hint == ("--set scheduling.topology.ps.tier=2 --set scheduling.topology.worker.tier=2, or build "
                    "HyperNodes of tier 1 (`kubectl get hypernodes`)")  # fmt: skip

    [(severity, message, _)] = placed(cluster, volcano_release(3, "training.strategy=mirrored"))
    assert (severity, message) == (WARN, "the chief pods may spread across a HyperNode of tier 3, but the highest "
                                   "tier there is is 2 (1 of tier 2): tier 3 is the whole cluster, the pods are not "
                                   "kept together")  # fmt: skip


def test_without_hypernodes_required_fails_and_preferred_warns(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS))
    [(severity, message, hint)] = placed(cluster, volcano_release(1))
    assert severity == FAIL and message.startswith("Volcano serves no HyperNodes (topology.volcano.sh/v1alpha1)")
    assert hint.endswith("or --set scheduling.topology.mode=none")
    hypernodes(cluster)
    soft = release(*VOLCANO, "scheduling.topology.mode=preferred")
    assert placed(cluster, soft) == [
        (WARN, "no HyperNode exists: Volcano places the ps, worker and chief pods without a network topology",
         "build the HyperNodes (by hand or by Volcano's HyperNode auto-discovery; `kubectl get hypernodes`)")]


def test_preflight_json_reports_the_topology_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cluster: KubeServer
) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, HOSTNAME))
    monkeypatch.setenv("COLUMNS", "400")
    argv = ["preflight", "mnist", "-n", NS, "-o", "json", "--skip-image-check", "--kubeconfig",
            str(cluster.kubeconfig()), *[f"--set={item}" for item in (*CPU_ONLY, *KUEUE)],
            "--set=scheduling.topology.mode=required", f"--set=scheduling.topology.level={RACK}"]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    report = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == 1 and report["passed"] is False
    [topology] = [finding for finding in report["findings"] if finding["check"] == "topology"]
    assert topology["severity"] == FAIL and topology["message"].startswith(f"no Topology of ClusterQueue team has "
                                                                           f"the level {RACK}")  # fmt: skip
    assert topology["hint"].startswith(f"--set scheduling.topology.level={BLOCK}")
    checks = [finding["check"] for finding in report["findings"]]
    assert checks.index("kueue") < checks.index("topology") == len(checks) - 1
    assert preflight.Finding("topology", FAIL, topology["message"], topology["hint"]) in preflight.run(
        cluster.api(), release(*KUEUE, "scheduling.topology.mode=required", f"scheduling.topology.level={RACK}"),
        "mnist", NS)  # fmt: skip
