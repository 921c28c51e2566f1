"""`tfchart preflight`: will this release fit the cluster? Checked before `helm install`.

The checks, each a list of Findings (ok | warn | fail, with a hint):

- gpu-capacity: GPUs the release's pods request (per extended resource) against the allocatable
  GPUs of schedulable nodes, minus what running pods hold (best effort), and whether one node can
  host the largest pod (a pod cannot span nodes). nodeSelector/tolerations/affinity are not
  evaluated; the message says so when a GPU role sets them.
- storage: the access mode the values need (tfchart.rules.storage_need: ReadWriteMany when pods may
  spread over nodes, ReadWriteOnce when the chart co-locates them) against the existing claim's own
  access modes, or against the StorageClass the created claim would use (named, else the default),
  judged by its provisioner (PROVISIONERS); every StorageClass of the cluster is listed with what it
  offers, so the message names the ones that would do.
- co-location (only when the pods are co-located): one schedulable node must hold the requests of
  every pod of the release (allocatable, other pods' requests not counted).
- quota: every ResourceQuota of the namespace: used + what the release adds against hard.
- network-policy: whether a CNI that enforces NetworkPolicies runs (DaemonSets in kube-system).
- gang-scheduling (only with scheduling.gang.provider volcano or coscheduling): the API server serves
  the PodGroup at the chart's version (API discovery, which every user may read: reading CRDs needs
  a ClusterRole); the Volcano Queue named by scheduling.gang.volcanoQueue exists and is Open. That a
  scheduler runs under the pods' schedulerName is not checked (its name lives in its own config).
- kueue (only with scheduling.kueue.queueName): Kueue serves LocalQueues (v1beta2, else v1beta1);
  the LocalQueue exists in the namespace and is not stopped; its ClusterQueue exists, is active and
  has the nominal quota (summed over flavors) for what the TensorFlow pods request, covering every
  resource they request; the WorkloadPriorityClass of scheduling.kueue.priorityClass exists.

A read that RBAC forbids turns only its own part into a `could not check` warning.

What the release creates is computed from the merged values, mirroring the chart's templates
(tests compare it with the rendered manifests). Init containers are ignored (the chart's are
smaller than the main containers); the `helm test` pod is not counted (it runs only on `helm test`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tfchart.errors import KubernetesError, TfchartError
from tfchart.kubeobjects import container_gpus, is_gpu_resource
from tfchart.rules import RWX_EXAMPLES, StorageNeed, storage_need
from tfdcontract import (
    CHART_NAME,
    CHIEF,
    COMPONENT_LABEL,
    EVALUATOR,
    INSTANCE_LABEL,
    NAME_LABEL,
    PS,
    SUPERVISOR,
    WORKER,
)

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.kube import KubeApi

OK, WARN, FAIL = "ok", "warn", "fail"
UNMOUNTED_ROLES = (SUPERVISOR,)  # pods that do not mount the shared claim
RWX, RWO_ONLY, NODE_LOCAL, DEPENDS, UNKNOWN = "rwx", "rwo-only", "node-local", "depends", "unknown"


@dataclass(frozen=True)
class Provisioner:
    """What a StorageClass's provisioner offers, for ReadWriteMany (every provisioner offers ReadWriteOnce)."""

    rwx: str  # RWX | RWO_ONLY | NODE_LOCAL | DEPENDS
    what: str


# Well-known provisioners, from each driver's documentation (and source where named). A class is
# matched by its provisioner, exactly or as a suffix after a dot (Rook names its Ceph drivers
# <operator-namespace>.cephfs.csi.ceph.com). Anything else is reported as unknown.
PROVISIONERS: dict[str, Provisioner] = {
    # ReadWriteOnce only: a ReadWriteMany claim stays Pending (ProvisioningFailed). local-path says
    # "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes".
    "rancher.io/local-path": Provisioner(RWO_ONLY, "local-path: kind, k3d, k3s"),
    "kubernetes.io/no-provisioner": Provisioner(RWO_ONLY, "pre-created local volumes"),
    "openebs.io/local": Provisioner(RWO_ONLY, "OpenEBS local PV"),
    "ebs.csi.aws.com": Provisioner(RWO_ONLY, "Amazon EBS"),
    "kubernetes.io/aws-ebs": Provisioner(RWO_ONLY, "Amazon EBS"),
    "pd.csi.storage.gke.io": Provisioner(RWO_ONLY, "GCE persistent disk"),
    "kubernetes.io/gce-pd": Provisioner(RWO_ONLY, "GCE persistent disk"),
    "disk.csi.azure.com": Provisioner(RWO_ONLY, "Azure Disk"),
    "kubernetes.io/azure-disk": Provisioner(RWO_ONLY, "Azure Disk"),
    "cinder.csi.openstack.org": Provisioner(RWO_ONLY, "OpenStack Cinder"),
    "dobs.csi.digitalocean.com": Provisioner(RWO_ONLY, "DigitalOcean block storage"),
    "rbd.csi.ceph.com": Provisioner(RWO_ONLY, "Ceph RBD (ReadWriteMany only as raw block)"),
    # hostPath on one node's disk, any access mode accepted (minikube copies the claim's modes into
    # a hostPath volume: kubernetes/minikube pkg/storage/storage_provisioner.go): ReadWriteMany
    # binds, but pods on other nodes would not see the data.
    "k8s.io/minikube-hostpath": Provisioner(NODE_LOCAL, "minikube hostPath"),
    "docker.io/hostpath": Provisioner(NODE_LOCAL, "Docker Desktop hostPath"),
    # ReadWriteMany: shared file systems.
    "nfs.csi.k8s.io": Provisioner(RWX, "NFS CSI driver"),
    "k8s-sigs.io/nfs-subdir-external-provisioner": Provisioner(RWX, "NFS subdir provisioner"),
    "cluster.local/nfs-subdir-external-provisioner": Provisioner(RWX, "NFS subdir provisioner"),
    "cephfs.csi.ceph.com": Provisioner(RWX, "CephFS"),
    "efs.csi.aws.com": Provisioner(RWX, "Amazon EFS"),
    "fsx.csi.aws.com": Provisioner(RWX, "Amazon FSx for Lustre"),
    "file.csi.azure.com": Provisioner(RWX, "Azure Files"),
    "kubernetes.io/azure-file": Provisioner(RWX, "Azure Files"),
    "filestore.csi.storage.gke.io": Provisioner(RWX, "GKE Filestore"),
    "driver.longhorn.io": Provisioner(RWX, "Longhorn, through its share manager"),
    "smb.csi.k8s.io": Provisioner(RWX, "SMB CSI driver"),
    # ReadWriteMany depending on the class's parameters or backend.
    "csi.vsphere.vmware.com": Provisioner(DEPENDS, "vSphere: ReadWriteMany only for vSAN file volumes"),
    "csi.trident.netapp.io": Provisioner(DEPENDS, "NetApp Trident: ReadWriteMany with NAS backends only"),
    "pxd.portworx.com": Provisioner(DEPENDS, "Portworx: ReadWriteMany with sharedv4 volumes only"),
}
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
ENFORCING_CNIS = ("calico-node", "cilium", "weave-net", "antrea-agent", "kube-router", "canal")
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # ok | warn | fail
    message: str
    hint: str = ""


# -- what the release would create ----------------------------------------------------------------


@dataclass(frozen=True)
class PlannedRole:
    """One component's pods as the chart renders them from the values."""

    role: str
    replicas: int
    requests: dict[str, Decimal]
    limits: dict[str, Decimal]
    gpu_resource: str
    gpus_per_pod: int
    placement: tuple[str, ...] = ()  # placement keys set (nodeSelector, tolerations, affinity)


@dataclass
class Plan:
    roles: list[PlannedRole] = field(default_factory=list)
    objects: Counter[str] = field(default_factory=Counter)  # quota resource names: pods, services, ...
    claim_size: Decimal | None = None


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (100m, 1.5Gi, 2e3, 4) as a number, via the pinned client's parser."""
    from kubernetes.utils import parse_quantity

    try:
        parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError) as error:
        raise KubernetesError(
            f"invalid quantity {value!r}: {error}", "use Kubernetes quantities: 500m, 2, 1Gi, 512Mi, 1e3"
        ) from None
    return parsed


WORKLOAD_QUOTA = {"StatefulSet": "statefulsets.apps", "Deployment": "deployments.apps", "Job": "jobs.batch"}


def plan(docs: list[dict[str, Any]], values: dict[str, Any]) -> Plan:
    """Pods, objects and storage of the release, read from a render of the chart (helm template of the
    same values), not re-derived from the values. A hook (the helm test pod) is not part of it."""
    result = Plan()
    for doc in docs:
        if "helm.sh/hook" in ((doc.get("metadata") or {}).get("annotations") or {}):
            continue
        kind, spec = doc.get("kind"), doc.get("spec") or {}
        if kind in WORKLOAD_QUOTA:
            result.objects[f"count/{WORKLOAD_QUOTA[kind]}"] += 1
            replicas = int(spec.get("parallelism", 1) if kind == "Job" else spec.get("replicas", 1))
            if replicas > 0:
                result.roles.append(rendered_role(doc, replicas, values))
                result.objects["pods"] += replicas
        elif kind == "Service":
            result.objects["services"] += 1
            if spec.get("type") in ("NodePort", "LoadBalancer"):
                result.objects["services.nodeports"] += 1
            if spec.get("type") == "LoadBalancer":
                result.objects["services.loadbalancers"] += 1
        elif kind == "PersistentVolumeClaim":
            result.objects["persistentvolumeclaims"] += 1
            result.claim_size = quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage", "0"))
    result.objects["secrets"] += 1  # helm's release record (sh.helm.release.v1.<release>.v1)
    for plain in ("pods", "services", "persistentvolumeclaims", "secrets"):
        result.objects[f"count/{plain}"] = result.objects[plain]
    return result


def rendered_role(doc: dict[str, Any], replicas: int, values: dict[str, Any]) -> PlannedRole:
    """One workload's pods: the requests and limits of its containers, its GPUs (a limit; the API
    server copies it to the request), and which placement keys the user set for the role."""
    role = str(((doc.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, ""))
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    for container in doc["spec"]["template"]["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        for kind, totals in (("requests", requests), ("limits", limits)):
            for key, value in (resources.get(kind) or {}).items():
                totals[key] = totals.get(key, Decimal(0)) + quantity(value)
    for key, value in limits.items():
        requests.setdefault(key, value)  # the API server's defaulting: a request left out is the limit
    gpus = {key: value for key, value in limits.items() if is_gpu_resource(key)}
    resource, count = next(iter(gpus.items()), ("nvidia.com/gpu", Decimal(0)))
    block = values.get(role) or {}
    placement = tuple(key for key in ("nodeSelector", "tolerations", "affinity") if block.get(key))
    return PlannedRole(role, replicas, requests, limits, resource, int(count), placement)


def total(roles: list[PlannedRole], kind: str, resource: str) -> Decimal:
    return sum(
        (Decimal(r.replicas) * getattr(r, kind).get(resource, Decimal(0)) for r in roles),
        Decimal(0),
    )


# -- the checks ---------------------------------------------------------------------------------


class Nodes:
    """The schedulable nodes, listed on first use and shared by the checks that need them."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._nodes: list[Any] | None = None

    def __call__(self) -> list[Any]:
        if self._nodes is None:
            self._nodes = [node for node in self._api.list_nodes() if schedulable(node)]
        return self._nodes


def run(
    api: KubeApi, values: dict[str, Any], docs: list[dict[str, Any]], release: str, namespace: str
) -> list[Finding]:
    """Every check's findings, in order: GPUs, storage, co-location (co-located releases only), quota,
    network policy, then gang scheduling and Kueue when the values ask for them. `docs` is the
    chart rendered with these values: what the release would create."""
    planned = plan(docs, values)
    need = storage_need(values)
    nodes = Nodes(api)
    findings: list[Finding] = []
    scheduling = values.get("scheduling") or {}
    checks: list[tuple[str, Callable[[], list[Finding]]]] = [
        ("gpu-capacity", lambda: check_gpus(api, planned, release, nodes)),
        ("storage", lambda: check_storage(api, values, namespace, nodes)),
    ]
    if need is not None and need.colocated:
        checks.append(("co-location", lambda: check_colocation(planned, need, nodes)))
    checks += [
        ("quota", lambda: check_quota(api, planned, namespace)),
        ("network-policy", lambda: check_network_policy(api, values)),
    ]
    if (scheduling.get("gang") or {}).get("provider") in GANG_PROVIDERS:
        checks.append(("gang-scheduling", lambda: check_gang(api, values)))
    if (scheduling.get("kueue") or {}).get("queueName"):
        checks.append(("kueue", lambda: check_kueue(api, scheduling["kueue"], planned, namespace)))
    for name, check in checks:
        findings += guarded(name, check)
    return findings


def guarded(name: str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """The check's findings; a read that RBAC forbids becomes one `could not check` warning."""
    try:
        return check()
    except KubernetesError as error:
        if not is_access_denied(error):
            raise
        return [Finding(name, WARN, f"could not check: {error.message}", error.hint)]


def is_access_denied(error: KubernetesError) -> bool:
    from tfchart.kube import AccessDenied

    return isinstance(error, AccessDenied)


# (a) GPUs


def check_gpus(
    api: KubeApi, planned: Plan, release: str, nodes: Callable[[], list[Any]] | None = None
) -> list[Finding]:
    demand: dict[str, list[PlannedRole]] = {}
    for role in planned.roles:
        if role.gpus_per_pod > 0:
            demand.setdefault(role.gpu_resource, []).append(role)
    if not demand:
        return [Finding("gpu-capacity", OK, "the release requests no GPUs")]
    listed = (nodes or Nodes(api))()
    used, usage_note = gpu_usage(api, release)
    return [gpu_finding(resource, roles, listed, used, usage_note) for resource, roles in sorted(demand.items())]


def schedulable(node: Any) -> bool:
    if node.spec and node.spec.unschedulable:
        return False
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def gpu_usage(api: KubeApi, release: str) -> tuple[dict[tuple[str, str], int], str]:
    """GPUs held per (node, resource) by unfinished pods of other releases; best effort."""
    try:
        pods = api.list_pods_all_namespaces(NOT_FINISHED)
    except KubernetesError as error:
        if not is_access_denied(error):
            raise
        return {}, " (other pods' GPU use is unknown: listing pods in all namespaces is forbidden)"
    used: dict[tuple[str, str], int] = {}
    for pod in pods:
        labels = pod.metadata.labels or {}
        own = labels.get(NAME_LABEL) == CHART_NAME and labels.get(INSTANCE_LABEL) == release
        if own or not pod.spec or not pod.spec.node_name:
            continue
        for container in pod.spec.containers or []:
            for resource, count in container_gpus(container).items():
                key = (pod.spec.node_name, resource)
                used[key] = used.get(key, 0) + count
    return used, ""


def allocatable(node: Any, resource: str) -> int:
    value = ((node.status.allocatable if node.status else None) or {}).get(resource)
    return int(quantity(value)) if value is not None else 0


def gpu_finding(
    resource: str, roles: list[PlannedRole], nodes: list[Any], used: dict[tuple[str, str], int], usage_note: str
) -> Finding:
    pods = [role.gpus_per_pod for role in roles for _ in range(role.replicas)]
    needed = sum(pods)
    who = ", ".join(f"{r.role} {r.replicas}x{r.gpus_per_pod}" for r in roles)
    capacity = {name_of(node): allocatable(node, resource) for node in nodes}
    free = {name: max(0, count - used.get((name, resource), 0)) for name, count in capacity.items()}
    placement = sorted({key for role in roles for key in role.placement})
    note = usage_note + (
        f" ({'/'.join(placement)} of the GPU roles not evaluated: counted every schedulable node)" if placement else ""
    )
    total_capacity = sum(capacity.values())
    if total_capacity == 0:
        return Finding(
            "gpu-capacity",
            FAIL,
            f"the release needs {needed} {resource} ({who}) but no schedulable node advertises {resource}{note}",
            f"install the device plugin for {resource} (e.g. the NVIDIA GPU operator) or add GPU nodes; "
            "check with `kubectl describe nodes | grep -i gpu`",
        )
    largest = max(pods)
    biggest_node = max(capacity.values())
    if biggest_node < largest:
        return Finding(
            "gpu-capacity",
            FAIL,
            f"a pod needs {largest} {resource} but the largest node has {biggest_node}: a pod cannot span nodes{note}",
            f"lower gpu.count per pod (and raise replicas) or add a node with {largest} {resource}",
        )
    if total_capacity < needed or not fits(pods, dict(capacity)):
        return Finding(
            "gpu-capacity",
            FAIL,
            f"the release needs {needed} {resource} ({who}); schedulable nodes have {total_capacity} "
            f"({describe_nodes(capacity)}){note}",
            "lower the replicas or gpu.count of the GPU roles, or add GPU nodes",
        )
    if not fits(pods, dict(free)):
        return Finding(
            "gpu-capacity",
            WARN,
            f"tight: the release needs {needed} {resource} ({who}); {sum(free.values())} of {total_capacity} are free "
            f"now ({describe_nodes(free)}){note}",
            "some pods will stay Pending until other workloads release GPUs (`kubectl describe nodes`)",
        )
    return Finding(
        "gpu-capacity",
        OK,
        f"{needed} {resource} needed ({who}); {sum(free.values())} of {total_capacity} free "
        f"({describe_nodes(free)}){note}",
    )


def fits(pods: list[int], capacity: dict[str, int]) -> bool:
    """First-fit decreasing: can every pod get its GPUs on one node?"""
    for need in sorted(pods, reverse=True):
        node = next((name for name, left in sorted(capacity.items()) if left >= need), None)
        if node is None:
            return False
        capacity[node] -= need
    return True


def describe_nodes(counts: dict[str, int]) -> str:
    shown = [f"{name}: {count}" for name, count in sorted(counts.items()) if count]
    return ", ".join(shown) or "none"


def name_of(obj: Any) -> str:
    return str(obj.metadata.name)


# (b) storage


def check_storage(
    api: KubeApi, values: dict[str, Any], namespace: str, nodes: Callable[[], list[Any]] | None = None
) -> list[Finding]:
    storage = values.get("storage", {})
    need = storage_need(values)
    if need is None:
        return [
            Finding(
                "storage",
                FAIL,
                f"storage.accessModes {storage.get('accessModes')} cannot hold the release's data",
                "`tfchart validate` says why and how to fix it",
            )
        ]
    if storage.get("existingClaim"):
        return [check_existing_claim(api, str(storage["existingClaim"]), namespace, need)]
    if not storage.get("create"):
        return [
            Finding(
                "storage",
                FAIL,
                "no volume: storage.create=false and no storage.existingClaim",
                "--set storage.create=true or --set storage.existingClaim=<pvc-name>",
            )
        ]
    return [check_storage_class(api, storage.get("storageClassName"), need, nodes or Nodes(api))]


COLOCATE_FIX = (
    "--set storage.accessModes={ReadWriteOnce} to co-locate every pod on one node, which any StorageClass serves "
    "(as values/cpu.yaml does; the node must fit them all)"
)


def check_existing_claim(api: KubeApi, claim: str, namespace: str, need: StorageNeed) -> Finding:
    """The claim's own access modes (as bound, else as requested) against what the values need."""
    pvc = api.read_persistent_volume_claim(namespace, claim)
    if pvc is None:
        return Finding(
            "storage",
            FAIL,
            f"storage.existingClaim {claim} does not exist in namespace {namespace}",
            f"create the PersistentVolumeClaim first (`kubectl -n {namespace} get pvc`) or unset storage.existingClaim",
        )
    phase = (pvc.status.phase if pvc.status else None) or "Pending"
    has = list((pvc.status.access_modes if pvc.status and phase == "Bound" else None) or pvc.spec.access_modes or [])
    if phase not in ("Bound", "Pending"):
        return Finding("storage", FAIL, f"claim {claim} is {phase}", "its volume is gone: recreate the claim")
    modes = ", ".join(has) or "none"
    if need.mode == "ReadWriteMany" and "ReadWriteMany" not in has:
        return Finding(
            "storage",
            FAIL,
            f"claim {claim} has access modes {modes}, the release needs ReadWriteMany: {need.pods_phrase} "
            "from any node",
            f"{COLOCATE_FIX}, or use a claim that offers ReadWriteMany ({RWX_EXAMPLES})",
        )
    if need.total > 1 and not {"ReadWriteOnce", "ReadWriteMany"} & set(has):
        return Finding(
            "storage",
            FAIL,
            f"claim {claim} has access modes {modes}: not one that {need.total} pods can share ({need.pods_phrase})",
            "use a ReadWriteOnce claim (the chart co-locates the pods) or a ReadWriteMany one",
        )
    if not {"ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"} & set(has):
        return Finding("storage", FAIL, f"claim {claim} has access modes {modes}: not writable", "use a writable claim")
    state = "Bound" if phase == "Bound" else "Pending (binds when the first pod is scheduled, or waits for a volume)"
    spread = (
        "; it offers ReadWriteMany: --set storage.accessModes={ReadWriteMany} lets the pods spread over nodes"
        if need.colocated and "ReadWriteMany" in has and need.total > 1
        else ""
    )
    return Finding("storage", OK, f"claim {claim} is {state} with {modes}: the release needs {need.mode}{spread}")


def provisioner_of(storage_class: Any) -> Provisioner | None:
    name = str(storage_class.provisioner)
    for known, provisioner in PROVISIONERS.items():
        if name == known or name.endswith(f".{known}"):
            return provisioner
    return None


def offers(storage_class: Any, mode: str) -> str:
    """RWX (offers the mode), RWO_ONLY, NODE_LOCAL, DEPENDS or UNKNOWN: what the class offers for `mode`."""
    if mode != "ReadWriteMany":
        return RWX  # every provisioner offers ReadWriteOnce (and a one-pod ReadWriteOncePod)
    provisioner = provisioner_of(storage_class)
    return provisioner.rwx if provisioner else UNKNOWN


CAPABILITY = {
    RWX: "offers {mode}",
    RWO_ONLY: "ReadWriteOnce only",
    NODE_LOCAL: "one node's disk",
    DEPENDS: "{mode} depends on the class",
    UNKNOWN: "unknown provisioner, check its docs",
}


def describe_class(storage_class: Any, mode: str) -> str:
    """`nfs (nfs.csi.k8s.io, default): offers ReadWriteMany`"""
    default = ", default" if is_default_class(storage_class) else ""
    capability = CAPABILITY[offers(storage_class, mode)].format(mode=mode)
    return f"{name_of(storage_class)} ({storage_class.provisioner}{default}): {capability}"


def check_storage_class(
    api: KubeApi, class_name: str | None, need: StorageNeed, nodes: Callable[[], list[Any]]
) -> Finding:
    mode = need.mode
    if class_name == "":
        return Finding(
            "storage",
            WARN,
            f'storage.storageClassName is "": the claim binds only to a pre-created PersistentVolume with {mode}',
            "create a matching PersistentVolume, or set storage.storageClassName (null = the default class)",
        )
    classes = sorted(api.list_storage_classes(), key=name_of)
    listing = "StorageClasses: " + ("; ".join(describe_class(c, mode) for c in classes) or "none")
    offering = [name_of(c) for c in classes if offers(c, mode) == RWX]
    choose = (
        f"<one that offers {mode}: {', '.join(offering)}>"
        if offering
        else f"<one of: {', '.join(map(name_of, classes)) or 'none'}>"
    )
    if class_name is None:
        defaults = [c for c in classes if is_default_class(c)]
        if not defaults:
            return Finding(
                "storage",
                FAIL,
                "no default StorageClass and storage.storageClassName is not set: the claim would stay Pending. "
                + listing,
                f"--set storage.storageClassName={choose}, or mark a class as the default",
            )
        chosen = max(defaults, key=lambda c: (c.metadata.creation_timestamp is not None, c.metadata.creation_timestamp))
        label = f"default StorageClass {name_of(chosen)}"
        if len(defaults) > 1:
            label += f" (one of {len(defaults)} default classes: Kubernetes picks the newest)"
    else:
        found = next((c for c in classes if name_of(c) == class_name), None)
        if found is None:
            return Finding(
                "storage",
                FAIL,
                f"StorageClass {class_name} does not exist. {listing}",
                f"--set storage.storageClassName={choose}",
            )
        chosen, label = found, f"StorageClass {class_name}"
    label += f" ({chosen.provisioner})"
    capability = offers(chosen, mode)
    if capability == RWX:
        spread = [name_of(c) for c in classes if offers(c, "ReadWriteMany") == RWX] if need.colocated else []
        tip = (
            f" ({spread[0]} offers ReadWriteMany: --set storage.accessModes={{ReadWriteMany}} "
            f"--set storage.storageClassName={spread[0]} lets the pods spread over nodes)"
            if spread and need.total > 1
            else ""
        )
        return Finding("storage", OK, f"needs {mode}: {label} offers it{tip}. {listing}")
    others = [name for name in offering if name != name_of(chosen)]
    if others:
        hint = f"--set storage.storageClassName={others[0]} (it offers {mode}), or {COLOCATE_FIX}"
    else:
        hint = (
            f"on one node: {COLOCATE_FIX}; across nodes: install a provisioner that offers {mode} "
            f"({RWX_EXAMPLES}) and --set storage.storageClassName=<its class>"
        )
    why = f"needs {mode}: {need.pods_phrase} from any node"
    if capability == RWO_ONLY:
        return Finding(
            "storage",
            FAIL,
            f"{why}, but {label} offers ReadWriteOnce only: the claim would stay Pending. {listing}",
            hint,
        )
    if capability == NODE_LOCAL:
        count = len(nodes())
        if count > 1:
            return Finding(
                "storage",
                FAIL,
                f"{why}, but {label} keeps each volume on one node's disk: pods on the other {count - 1} node(s) "
                f"would not see the data. {listing}",
                hint,
            )
        return Finding(
            "storage",
            WARN,
            f"{why}: {label} keeps each volume on one node's disk, shared only because this cluster has one "
            f"schedulable node (if the claim stays Pending, it refuses {mode}). {listing}",
            hint,
        )
    what = provisioner_of(chosen)
    detail = what.what if capability == DEPENDS and what else f"{chosen.provisioner} is not a provisioner tfchart knows"
    return Finding(
        "storage",
        WARN,
        f"{why}: whether {label} offers it is unknown ({detail}): check its docs. {listing}",
        hint,
    )


def is_default_class(storage_class: Any) -> bool:
    annotations = storage_class.metadata.annotations or {}
    return any(annotations.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


# co-location


def check_colocation(planned: Plan, need: StorageNeed, nodes: Callable[[], list[Any]]) -> list[Finding]:
    """Co-located pods must all fit one node: their requests against each schedulable node's allocatable.
    The supervisor mounts no claim, so it is free to run elsewhere."""
    roles = [role for role in planned.roles if role.role not in UNMOUNTED_ROLES]
    pods = sum(role.replicas for role in roles)
    resources = sorted({key for role in roles for key in role.requests})
    needed = {key: total(roles, "requests", key) for key in resources}
    needed = {key: value for key, value in needed.items() if value > 0}
    what = ", ".join(f"{fmt(value)} {key}" for key, value in needed.items()) or "nothing"
    placement = sorted({key for role in roles for key in role.placement})
    note = f" ({'/'.join(placement)} not evaluated)" if placement else ""
    listed = nodes()
    fitting = [
        name_of(node)
        for node in listed
        if all(allocatable_quantity(node, key) >= value for key, value in needed.items())
    ]
    head = f"storage needs {need.mode}, so all {pods} pods run on one node: they request {what}"
    if fitting:
        return [Finding("co-location", OK, f"{head}; fits {', '.join(fitting)} (allocatable, before other pods){note}")]
    sizes = "; ".join(
        f"{name_of(node)}: " + ", ".join(f"{fmt(allocatable_quantity(node, key))} {key}" for key in needed)
        for node in listed
    )
    return [
        Finding(
            "co-location",
            FAIL,
            f"{head}; no schedulable node has that much allocatable ({sizes or 'no schedulable node'}){note}",
            "lower the requests (values/cpu.yaml fits a 4-CPU, 8 GiB node), add a bigger node, or "
            "--set storage.accessModes={ReadWriteMany} with a StorageClass that offers it, so pods may spread",
        )
    ]


def allocatable_quantity(node: Any, resource: str) -> Decimal:
    value = ((node.status.allocatable if node.status else None) or {}).get(resource)
    return quantity(value) if value is not None else Decimal(0)


# (c) quota


def check_quota(api: KubeApi, planned: Plan, namespace: str) -> list[Finding]:
    quotas = api.list_resource_quotas(namespace)
    if not quotas:
        return [Finding("quota", OK, f"no ResourceQuota in namespace {namespace}")]
    return [quota_finding(quota, planned) for quota in sorted(quotas, key=name_of)]


def release_adds(planned: Plan, key: str) -> Decimal | None:
    """What the release adds to quota resource `key`, or None when the chart does not affect it."""
    if key in planned.objects:
        return Decimal(planned.objects[key])
    if key.startswith("count/"):
        return Decimal(0)
    if key == "requests.storage":
        return planned.claim_size or Decimal(0)
    kind, _, resource = key.partition(".")
    if kind in ("requests", "limits") and resource:
        return total(planned.roles, kind, resource)
    if key in ("cpu", "memory", "ephemeral-storage"):
        return total(planned.roles, "requests", key)
    return None


def quota_finding(quota: Any, planned: Plan) -> Finding:
    hard = (quota.status.hard if quota.status else None) or (quota.spec.hard if quota.spec else None) or {}
    used = (quota.status.used if quota.status else None) or {}
    over, tight, missing = [], [], []
    for key in sorted(hard):
        adds = release_adds(planned, key)
        if adds is None or adds == 0:
            continue
        limit, now = quantity(hard[key]), quantity(used.get(key, "0"))
        after = now + adds
        text = f"{key}: {fmt(now)} used + {fmt(adds)} > {fmt(limit)}"
        if after > limit:
            over.append(text)
        elif after > limit * Decimal("0.9"):
            tight.append(f"{key}: {fmt(after)} of {fmt(limit)} after install")
        missing += unset_requests(planned, key)
    name = name_of(quota)
    if over or missing:
        return Finding(
            "quota",
            FAIL,
            f"ResourceQuota {name} would be exceeded: " + "; ".join(over + missing),
            f"lower replicas/resources, or ask for more quota (`kubectl describe resourcequota {name}`)",
        )
    if tight:
        return Finding(
            "quota",
            WARN,
            f"ResourceQuota {name} is almost full: " + "; ".join(tight),
            "a restart or an upgrade's extra pod may not fit",
        )
    return Finding("quota", OK, f"ResourceQuota {name} has room for the release")


def unset_requests(planned: Plan, key: str) -> list[str]:
    """Quota on a compute resource rejects pods that do not set it."""
    kind, _, resource = key.partition(".")
    if kind not in ("requests", "limits") or resource not in ("cpu", "memory"):
        return []
    return [
        f"{role.role} pods set no {kind}.{resource} and would be rejected by the quota"
        for role in planned.roles
        if resource not in getattr(role, kind)
    ]


def fmt(value: Decimal) -> str:
    """A readable quantity: 1.5, 2Gi, 500m, 10."""
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m" if value < 1 else format(value.normalize(), "f")
    for suffix, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2)):
        if value >= size and value % size == 0:
            return f"{int(value / size)}{suffix}"
    return str(int(value))


# (d) network policy


def check_network_policy(api: KubeApi, values: dict[str, Any]) -> list[Finding]:
    if not values.get("networkPolicy", {}).get("enabled"):
        return [
            Finding(
                "network-policy",
                WARN,
                "networkPolicy.enabled=false: any pod can reach the TensorFlow gRPC ports, which run any graph sent",
                "--set networkPolicy.enabled=true (the default) on a cluster whose CNI enforces NetworkPolicies",
            )
        ]
    daemon_sets = [name_of(ds) for ds in api.list_daemon_sets("kube-system")]
    found = sorted({cni for cni in ENFORCING_CNIS for ds in daemon_sets if ds == cni or ds.startswith(f"{cni}-")})
    if found:
        return [Finding("network-policy", OK, f"NetworkPolicies are enforced by {', '.join(found)}")]
    return [
        Finding(
            "network-policy",
            WARN,
            "NetworkPolicies are likely NOT enforced (no known enforcing CNI found in kube-system: "
            + ", ".join(ENFORCING_CNIS)
            + ")",
            "install a CNI that enforces them (Calico, Cilium, Antrea...), or check your provider's setting "
            "(e.g. GKE Dataplane V2, EKS VPC CNI network policy agent)",
        )
    ]


# (e) gang scheduling


@dataclass(frozen=True)
class GangProvider:
    """Where a gang provider's PodGroup is served, the scheduler the chart names by default, how to install it."""

    group: str
    version: str
    scheduler: str
    install: str


GANG_PROVIDERS = {
    "volcano": GangProvider(
        "scheduling.volcano.sh",
        "v1beta1",
        "volcano",
        "install Volcano (`helm repo add volcano-sh https://volcano-sh.github.io/helm-charts && "
        "helm install volcano volcano-sh/volcano -n volcano-system --create-namespace`)",
    ),
    "coscheduling": GangProvider(
        "scheduling.x-k8s.io",
        "v1alpha1",
        "scheduler-plugins-scheduler",
        "install kubernetes-sigs/scheduler-plugins as a second scheduler with the Coscheduling plugin "
        "(its chart manifests/install/charts/as-a-second-scheduler)",
    ),
}
GANG_ROLES = (PS, WORKER, CHIEF, EVALUATOR)  # the pods of the PodGroup / Kueue pod group


def check_gang(api: KubeApi, values: dict[str, Any]) -> list[Finding]:
    """The PodGroup's CRD serves the chart's version (API discovery); Volcano's named queue exists and is Open."""
    gang = values["scheduling"]["gang"]
    provider = GANG_PROVIDERS[gang["provider"]]
    crd = f"podgroups.{provider.group}"
    served = f"{provider.group}/{provider.version}"
    if "podgroups" not in (api.served_resources(provider.group, provider.version) or []):
        return [
            Finding(
                "gang-scheduling",
                FAIL,
                f"scheduling.gang.provider={gang['provider']} but CRD {crd} is not installed (the API server serves "
                f"no podgroups in {served}): the chart's PodGroup cannot be created",
                f"{provider.install}, or --set scheduling.gang.provider=none",
            )
        ]
    scheduler = str(values.get("schedulerName") or provider.scheduler)
    findings = [
        Finding(
            "gang-scheduling",
            OK,
            f"CRD {crd} serves {served} (that a scheduler runs as {scheduler} is not checked)",
        )
    ]
    if gang["provider"] == "volcano" and gang.get("volcanoQueue"):
        queue = str(gang["volcanoQueue"])
        findings += guarded("gang-scheduling", lambda: [check_volcano_queue(api, queue)])
    return findings


def check_volcano_queue(api: KubeApi, name: str) -> Finding:
    """Volcano's admission webhook refuses a PodGroup whose queue is missing or not Open
    (pkg/webhooks/admission/podgroups/validate, Volcano v1.15.1); its scheduler skips such a queue."""
    pick = "pick another (`kubectl get queues.scheduling.volcano.sh`): --set scheduling.gang.volcanoQueue=<queue>"
    queue = api.read_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)
    if queue is None:
        return Finding(
            "gang-scheduling",
            FAIL,
            f"Volcano Queue {name} does not exist: Volcano refuses a PodGroup in an unknown queue",
            f'create the queue, {pick}, or --set scheduling.gang.volcanoQueue="" for Volcano\'s default queue',
        )
    state = str((queue.get("status") or {}).get("state") or "")
    if state == "Open":
        return Finding("gang-scheduling", OK, f"Volcano Queue {name} is Open")
    if not state:
        return Finding(
            "gang-scheduling",
            WARN,
            f"Volcano Queue {name} has no state yet: Volcano accepts PodGroups only in an Open queue",
            "Volcano's controller sets it: check that it runs (`kubectl get pods -n volcano-system`)",
        )
    return Finding(
        "gang-scheduling",
        FAIL,
        f"Volcano Queue {name} is {state}: Volcano refuses new PodGroups in a queue that is not Open",
        f"open it (`vcctl queue operate --name {name} --action open`) or {pick}",
    )


# (f) Kueue

KUEUE = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # v1beta2 since Kueue v0.15, v1beta1 (deprecated) before and beside it


def check_kueue(api: KubeApi, kueue: dict[str, Any], planned: Plan, namespace: str) -> list[Finding]:
    """Kueue serves LocalQueues; the named LocalQueue, its ClusterQueue (active, with the nominal quota the
    TensorFlow pods ask) and the WorkloadPriorityClass exist."""
    version = kueue_version(api)
    if version is None:
        return [
            Finding(
                "kueue",
                FAIL,
                f"scheduling.kueue.queueName={kueue['queueName']} but Kueue is not installed: CRD localqueues.{KUEUE} "
                f"is missing (the API server serves no localqueues in {KUEUE}/{' or '.join(KUEUE_VERSIONS)}), "
                "so the pods would start unqueued",
                "install Kueue (`kubectl apply --server-side -f "
                "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml`), "
                'or --set scheduling.kueue.queueName=""',
            )
        ]
    queue = str(kueue["queueName"])
    findings = guarded("kueue", lambda: check_local_queue(api, version, queue, namespace, planned))
    if kueue.get("priorityClass"):
        priority = str(kueue["priorityClass"])
        findings += guarded("kueue", lambda: [check_priority_class(api, version, priority)])
    return findings


def kueue_version(api: KubeApi) -> str | None:
    """The newest Kueue API version the cluster serves LocalQueues in."""
    return next((v for v in KUEUE_VERSIONS if "localqueues" in (api.served_resources(KUEUE, v) or [])), None)


def check_local_queue(api: KubeApi, version: str, name: str, namespace: str, planned: Plan) -> list[Finding]:
    queue = api.read_custom_object(KUEUE, version, "localqueues", name, namespace)
    if queue is None:
        return [
            Finding(
                "kueue",
                FAIL,
                f"LocalQueue {name} does not exist in namespace {namespace}: Kueue would hold the pods until it does",
                f"`kubectl get localqueues -n {namespace}` lists the queues there: "
                f"--set scheduling.kueue.queueName=<queue>, or ask the Kueue admin to create {name}",
            )
        ]
    spec = queue.get("spec") or {}
    cluster_queue = str(spec.get("clusterQueue") or "")
    stop = str(spec.get("stopPolicy") or "None")
    if stop != "None":
        head = Finding(
            "kueue",
            FAIL,
            f"LocalQueue {name} in namespace {namespace} is stopped (stopPolicy {stop}): it admits no new workload",
            f"ask the Kueue admin to resume it (stopPolicy None), or --set scheduling.kueue.queueName=<queue> "
            f"(`kubectl get localqueues -n {namespace}`)",
        )
    else:
        head = Finding("kueue", OK, f"LocalQueue {name} exists in namespace {namespace} (ClusterQueue {cluster_queue})")
    where = QueueRef(name, namespace, cluster_queue)
    return [head, *guarded("kueue", lambda: check_cluster_queue(api, version, where, planned))]


@dataclass(frozen=True)
class QueueRef:
    local_queue: str
    namespace: str
    cluster_queue: str


def check_cluster_queue(api: KubeApi, version: str, where: QueueRef, planned: Plan) -> list[Finding]:
    name = where.cluster_queue
    cluster_queue = api.read_custom_object(KUEUE, version, "clusterqueues", name)
    if cluster_queue is None:
        return [
            Finding(
                "kueue",
                FAIL,
                f"ClusterQueue {name} of LocalQueue {where.local_queue} does not exist: nothing would admit the pods",
                f"ask the Kueue admin to create it (`kubectl get clusterqueues`), or --set scheduling.kueue.queueName="
                f"<queue> (`kubectl get localqueues -n {where.namespace}`)",
            )
        ]
    return [*inactive(cluster_queue), kueue_quota(cluster_queue, where, planned)]


def inactive(cluster_queue: dict[str, Any]) -> list[Finding]:
    name = str(cluster_queue["metadata"]["name"])
    for condition in (cluster_queue.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Active" and condition.get("status") == "False":
            why = f"{condition.get('reason', 'Unknown')}: {condition.get('message', '')}".rstrip(": ")
            return [
                Finding(
                    "kueue",
                    FAIL,
                    f"ClusterQueue {name} is not active ({why}): it admits no workload, the pods would wait gated",
                    f"ask the Kueue admin to fix it (`kubectl describe clusterqueue {name}`)",
                )
            ]
    return []


def kueue_asks(planned: Plan, covered: set[str]) -> tuple[int, dict[str, Decimal]]:
    """The TensorFlow pods (Kueue's pod group) and their requests, defaulted from limits as the API server does;
    `pods` too when the ClusterQueue covers it (Kueue then counts pods)."""
    roles = [role for role in planned.roles if role.role in GANG_ROLES]
    pods = sum(role.replicas for role in roles)
    asks: dict[str, Decimal] = {"pods": Decimal(pods)} if "pods" in covered else {}
    for role in roles:
        for key, value in (role.limits | role.requests).items():
            asks[key] = asks.get(key, Decimal(0)) + role.replicas * value
    return pods, {key: value for key, value in sorted(asks.items()) if value > 0}


def nominal_quotas(cluster_queue: dict[str, Any]) -> dict[str, Decimal]:
    """nominalQuota per covered resource, summed over every flavor (borrowing and lending limits aside)."""
    quotas: dict[str, Decimal] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for resource in group.get("coveredResources") or []:
            quotas.setdefault(str(resource), Decimal(0))
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                key = str(entry["name"])
                quotas[key] = quotas.get(key, Decimal(0)) + quantity(entry.get("nominalQuota", 0))
    return quotas


def cohort_of(cluster_queue: dict[str, Any]) -> str:
    """The cohort it may borrow from: v1beta2 spec.cohortName, v1beta1 spec.cohort; empty when none."""
    spec = cluster_queue.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def borrowable(cluster_queue: dict[str, Any], resource: str) -> bool:
    """In a cohort, with a flavor of `resource` whose borrowingLimit (none = unlimited) allows borrowing."""
    limits = [
        entry.get("borrowingLimit")
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
        for flavor in group.get("flavors") or []
        for entry in flavor.get("resources") or []
        if entry.get("name") == resource
    ]
    return bool(cohort_of(cluster_queue)) and any(limit is None or quantity(limit) > 0 for limit in limits)


def kueue_quota(cluster_queue: dict[str, Any], where: QueueRef, planned: Plan) -> Finding:
    """Kueue admits the pod group whole or not at all: its requests against the ClusterQueue's nominal quota; a
    requested resource the ClusterQueue does not cover makes it inadmissible (`resource X unavailable in
    ClusterQueue`, pkg/scheduler/flavorassigner, Kueue v0.19.2)."""
    name = where.cluster_queue
    quotas = nominal_quotas(cluster_queue)
    pods, asks = kueue_asks(planned, set(quotas))
    short = [key for key, ask in asks.items() if ask > quotas.get(key, Decimal(0))]
    if not short:
        offered = ", ".join(f"{key} {fmt(value)} of {fmt(quotas[key])}" for key, value in asks.items())
        return Finding(
            "kueue",
            OK,
            f"ClusterQueue {name} has the nominal quota for the {pods} TensorFlow pods: {offered} "
            "(other workloads' usage not counted)",
        )
    said = "; ".join(shortfall(key, asks[key], quotas, name) for key in short)
    listing = f"`kubectl get clusterqueue {name} -o yaml` shows its quota"
    if all(key in quotas and borrowable(cluster_queue, key) for key in short):
        return Finding(
            "kueue",
            WARN,
            f"{said}: admitted only by borrowing from cohort {cohort_of(cluster_queue)}, while other ClusterQueues "
            "leave that much unused",
            f"{listing}: ask the Kueue admin for more nominalQuota, or lower the TensorFlow pods' requests",
        )
    return Finding(
        "kueue",
        FAIL,
        f"{said}: it can never be admitted (Kueue admits the {pods} TensorFlow pods together)",
        f"{listing}: lower the replicas or requests of the TensorFlow pods, ask the Kueue admin for "
        f"{admin_fix(short, quotas)}, or --set scheduling.kueue.queueName=<queue> "
        f"(`kubectl get localqueues -n {where.namespace}`)",
    )


def shortfall(key: str, ask: Decimal, quotas: dict[str, Decimal], name: str) -> str:
    offers = f"offers {fmt(quotas[key])} nominal" if key in quotas else f"does not cover {key}"
    return f"{key}: the release asks {fmt(ask)}, ClusterQueue {name} {offers}"


def admin_fix(short: list[str], quotas: dict[str, Decimal]) -> str:
    uncovered = [key for key in short if key not in quotas]
    wants = ["more nominalQuota"] if len(uncovered) < len(short) else []
    return " and ".join(wants + ([f"{', '.join(uncovered)} in its coveredResources"] if uncovered else []))


def check_priority_class(api: KubeApi, version: str, name: str) -> Finding:
    """The pods' label kueue.x-k8s.io/priority-class names a WorkloadPriorityClass; Kueue makes no Workload for a
    pod group whose class does not exist."""
    found = api.read_custom_object(KUEUE, version, "workloadpriorityclasses", name)
    if found is None:
        return Finding(
            "kueue",
            FAIL,
            f"WorkloadPriorityClass {name} does not exist: Kueue would not admit the pods",
            "`kubectl get workloadpriorityclasses` lists them: --set scheduling.kueue.priorityClass=<class>, "
            'or --set scheduling.kueue.priorityClass="" for the default priority',
        )
    return Finding("kueue", OK, f"WorkloadPriorityClass {name} exists (value {found.get('value')})")


# -- output -------------------------------------------------------------------------------------

SEVERITY_STYLE = {OK: ("green", "✓ ok"), WARN: ("yellow", "! warn"), FAIL: ("red", "✗ fail")}


def has_failures(findings: list[Finding]) -> bool:
    return any(finding.severity == FAIL for finding in findings)


def render(findings: list[Finding], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Preflight", title_justify="left")
    for column in ("CHECK", "RESULT", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for finding in findings:
        style, label = SEVERITY_STYLE.get(finding.severity, ("white", finding.severity))
        message = escape(finding.message) + (f"\n[dim]hint: {escape(finding.hint)}[/]" if finding.hint else "")
        table.add_row(finding.check, f"[{style}]{label}[/]", message)
    console.print(table)
    counts = Counter(finding.severity for finding in findings)
    console.print(f"{counts[FAIL]} failed, {counts[WARN]} warning(s), {counts[OK]} ok")


def enforce(
    api: KubeApi, values: dict[str, Any], docs: list[dict[str, Any]], release: str, namespace: str
) -> None:
    """Runs every check, shows the findings on stderr and refuses to go on after a failure."""
    from rich.console import Console

    findings = run(api, values, docs, release, namespace)
    render(findings, Console(stderr=True))
    if has_failures(findings):
        raise TfchartError(
            "preflight checks failed", "fix the failures above, or pass --skip-preflight to install anyway"
        )
