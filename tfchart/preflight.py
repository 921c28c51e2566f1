"""`tfchart preflight`: will this release fit the cluster? Checked before `helm install`.

Four checks, each a list of Findings (ok | warn | fail, with a hint):

- gpu-capacity: GPUs the release's pods request (per extended resource) against the allocatable
  GPUs of schedulable nodes, minus what running pods hold (best effort), and whether one node can
  host the largest pod (a pod cannot span nodes). nodeSelector/tolerations/affinity are not
  evaluated; the message says so when a GPU role sets them.
- storage: the existing claim (exists, Bound or Pending, access modes) or the StorageClass the
  created claim would use (named or the default), and ReadWriteMany on provisioners known not to
  support it.
- quota: every ResourceQuota of the namespace: used + what the release adds against hard.
- network-policy: whether a CNI that enforces NetworkPolicies runs (DaemonSets in kube-system).

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

from tfchart.errors import KubernetesError
from tfchart.status import CHART_NAME, INSTANCE_LABEL, NAME_LABEL, container_gpus

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.kube import KubeApi

OK, WARN, FAIL = "ok", "warn", "fail"
STRATEGY_ROLES = {
    "parameter_server": ("ps", "worker", "chief"),
    "multi_worker_mirrored": ("worker", "chief"),
    "mirrored": ("chief",),
    "single_device": ("chief",),
}
OPTIONAL_ROLES = ("evaluator", "tensorboard", "serving")
NO_RWX_PROVISIONERS = {
    "kubernetes.io/aws-ebs",
    "ebs.csi.aws.com",
    "kubernetes.io/gce-pd",
    "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk",
    "disk.csi.azure.com",
    "rancher.io/local-path",
    "kubernetes.io/no-provisioner",
    "csi.vsphere.vmware.com",
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


def enabled_roles(values: dict[str, Any]) -> list[str]:
    strategy = str(values.get("training", {}).get("strategy", "parameter_server"))
    roles = list(STRATEGY_ROLES.get(strategy, ("chief",)))
    return roles + [role for role in OPTIONAL_ROLES if values.get(role, {}).get("enabled")]


def replicas_of(values: dict[str, Any], role: str) -> int:
    if role in ("chief", "evaluator"):
        return 1
    return int(values.get(role, {}).get("replicas", 1) or 0)


def planned_role(values: dict[str, Any], role: str) -> PlannedRole:
    block = values.get(role, {})
    resources = block.get("resources") or {}
    requests = {key: quantity(value) for key, value in (resources.get("requests") or {}).items() if value is not None}
    limits = {key: quantity(value) for key, value in (resources.get("limits") or {}).items() if value is not None}
    gpu = block.get("gpu") or {}
    count = int(gpu.get("count") or 0)
    resource = str(gpu.get("resourceName") or "nvidia.com/gpu")
    if count:
        limits[resource] = Decimal(count)
        requests.setdefault(resource, Decimal(count))  # API server defaulting: request = limit
    placement = tuple(key for key in ("nodeSelector", "tolerations", "affinity") if block.get(key))
    return PlannedRole(role, replicas_of(values, role), requests, limits, resource, count, placement)


def plan(values: dict[str, Any]) -> Plan:
    """Pods, objects and storage the chart would create from these values."""
    result = Plan()
    for role in enabled_roles(values):
        planned = planned_role(values, role)
        if planned.replicas <= 0:
            continue
        result.roles.append(planned)
        result.objects["pods"] += planned.replicas
        if role in ("ps", "worker", "chief", "tensorboard", "serving"):
            result.objects["services"] += 1
            service_type = str(values.get(role, {}).get("service", {}).get("type", "ClusterIP"))
            if service_type in ("NodePort", "LoadBalancer"):
                result.objects["services.nodeports"] += 1
            if service_type == "LoadBalancer":
                result.objects["services.loadbalancers"] += 1
        kind = {"ps": "statefulsets.apps", "worker": "statefulsets.apps", "tensorboard": "deployments.apps"}
        kind |= {"serving": "deployments.apps", "chief": "jobs.batch", "evaluator": "jobs.batch"}
        result.objects[f"count/{kind[role]}"] += 1
    storage = values.get("storage", {})
    if storage.get("create") and not storage.get("existingClaim"):
        result.objects["persistentvolumeclaims"] += 1
        result.claim_size = quantity(storage.get("size", "0"))
    result.objects["secrets"] += 1  # helm's release record (sh.helm.release.v1.<release>.v1)
    for plain in ("pods", "services", "persistentvolumeclaims", "secrets"):
        result.objects[f"count/{plain}"] = result.objects[plain]
    return result


def total(roles: list[PlannedRole], kind: str, resource: str) -> Decimal:
    return sum(
        (Decimal(r.replicas) * getattr(r, kind).get(resource, Decimal(0)) for r in roles),
        Decimal(0),
    )


# -- the checks ---------------------------------------------------------------------------------


def run(api: KubeApi, values: dict[str, Any], release: str, namespace: str) -> list[Finding]:
    """Every check's findings, in order: GPUs, storage, quota, network policy."""
    planned = plan(values)
    findings: list[Finding] = []
    checks: tuple[tuple[str, Callable[[], list[Finding]]], ...] = (
        ("gpu-capacity", lambda: check_gpus(api, planned, release)),
        ("storage", lambda: check_storage(api, values, namespace)),
        ("quota", lambda: check_quota(api, planned, namespace)),
        ("network-policy", lambda: check_network_policy(api, values)),
    )
    for name, check in checks:
        try:
            findings += check()
        except KubernetesError as error:
            if not is_access_denied(error):
                raise
            findings.append(Finding(name, WARN, f"could not check: {error.message}", error.hint))
    return findings


def is_access_denied(error: KubernetesError) -> bool:
    from tfchart.kube import AccessDenied

    return isinstance(error, AccessDenied)


# (a) GPUs


def check_gpus(api: KubeApi, planned: Plan, release: str) -> list[Finding]:
    demand: dict[str, list[PlannedRole]] = {}
    for role in planned.roles:
        if role.gpus_per_pod > 0:
            demand.setdefault(role.gpu_resource, []).append(role)
    if not demand:
        return [Finding("gpu-capacity", OK, "the release requests no GPUs")]
    nodes = [node for node in api.list_nodes() if schedulable(node)]
    used, usage_note = gpu_usage(api, release)
    return [gpu_finding(resource, roles, nodes, used, usage_note) for resource, roles in sorted(demand.items())]


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


def check_storage(api: KubeApi, values: dict[str, Any], namespace: str) -> list[Finding]:
    storage = values.get("storage", {})
    modes = [str(mode) for mode in storage.get("accessModes") or []]
    if storage.get("existingClaim"):
        return [check_existing_claim(api, str(storage["existingClaim"]), namespace, modes)]
    if not storage.get("create"):
        return [
            Finding(
                "storage",
                FAIL,
                "no volume: storage.create=false and no storage.existingClaim",
                "--set storage.create=true or --set storage.existingClaim=<pvc-name>",
            )
        ]
    return [check_storage_class(api, storage.get("storageClassName"), modes)]


def check_existing_claim(api: KubeApi, claim: str, namespace: str, modes: list[str]) -> Finding:
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
    missing = [mode for mode in modes if mode not in has]
    if missing:
        return Finding(
            "storage",
            FAIL,
            f"claim {claim} has access modes {', '.join(has) or 'none'}, the release needs {', '.join(missing)}",
            "pods on different nodes share the volume: use a ReadWriteMany claim (NFS, CephFS, EFS, Filestore...)",
        )
    state = "Bound" if phase == "Bound" else "Pending (binds when the first pod is scheduled, or waits for a volume)"
    return Finding("storage", OK, f"claim {claim} is {state} with {', '.join(has)}")


def check_storage_class(api: KubeApi, class_name: str | None, modes: list[str]) -> Finding:
    if class_name == "":
        return Finding(
            "storage",
            WARN,
            'storage.storageClassName is "": the claim binds only to a pre-created PersistentVolume',
            "create a matching PersistentVolume, or set storage.storageClassName (null = the default class)",
        )
    classes = api.list_storage_classes()
    names = ", ".join(sorted(name_of(c) for c in classes)) or "none"
    if class_name is None:
        defaults = [c for c in classes if is_default_class(c)]
        if not defaults:
            return Finding(
                "storage",
                FAIL,
                "no default StorageClass and storage.storageClassName is not set: the claim would stay Pending",
                f"--set storage.storageClassName=<one of: {names}>, or mark a class as the default",
            )
        chosen = max(defaults, key=lambda c: (c.metadata.creation_timestamp is not None, c.metadata.creation_timestamp))
        label = f"default StorageClass {name_of(chosen)}"
        if len(defaults) > 1:
            label += f" (one of {len(defaults)} default classes: Kubernetes picks the newest)"
    else:
        chosen = next((c for c in classes if name_of(c) == class_name), None)
        if chosen is None:
            return Finding(
                "storage",
                FAIL,
                f"StorageClass {class_name} does not exist",
                f"--set storage.storageClassName=<one of: {names}>",
            )
        label = f"StorageClass {class_name}"
    provisioner = str(chosen.provisioner)
    if "ReadWriteMany" in modes and provisioner in NO_RWX_PROVISIONERS:
        return Finding(
            "storage",
            WARN,
            f"{label} uses {provisioner}, which does not support ReadWriteMany: the claim will not bind",
            "use an RWX class (NFS, CephFS, EFS, Filestore, Azure Files), or --set storage.accessModes={ReadWriteOnce} "
            "when every pod runs on one node",
        )
    return Finding("storage", OK, f"{label} ({provisioner}) for {', '.join(modes) or 'the claim'}")


def is_default_class(storage_class: Any) -> bool:
    annotations = storage_class.metadata.annotations or {}
    return any(annotations.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


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
