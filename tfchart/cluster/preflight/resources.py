"""Whether the release's requests fit. gpu-capacity: GPUs the release's pods request (per extended resource) against
the allocatable GPUs of schedulable nodes, minus what running pods of other releases hold (best effort), and whether
one node can host the largest pod (a pod cannot span nodes). co-location (co-located releases only): one schedulable
node must hold the requests of every pod of the release (allocatable, other pods' requests not counted). quota: every
ResourceQuota of the namespace: used + what the release adds, against hard. nodeSelector/tolerations/affinity are not
evaluated; the messages say so when a role sets them."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from functools import partial
from typing import Any

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.objects import gpu_requests
from tfchart.cluster.preflight.plan import FAIL, OK, WARN, Context, Finding, allocatable, name, requested
from tfchart.manifests.quantity import parse, shown
from tfchart.manifests.workloads import Workload
from tfdcontract import CHART_NAME, INSTANCE_LABEL, PART_OF_LABEL, SUPERVISOR

gpu, colocation, quota = (partial(Finding, check) for check in ("gpu-capacity", "co-location", "quota"))
UNMOUNTED_ROLES = (SUPERVISOR,)  # pods that do not mount the shared claim

# -- gpu-capacity -----------------------------------------------------------------------------------------------------
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"


def check_gpus(context: Context) -> list[Finding]:
    asks: dict[str, list[tuple[Workload, int]]] = {}  # per GPU resource: the roles and their GPUs per pod
    for role in context.roles:
        for resource, count in role.gpus.items():
            asks.setdefault(resource, []).append((role, count))
    if not asks:
        return [gpu(OK, "the release requests no GPUs")]
    nodes, (used, usage_note) = context.nodes, gpu_usage(context)
    return [gpu_finding(resource, asks[resource], nodes, used, usage_note) for resource in sorted(asks)]


def gpu_usage(context: Context) -> tuple[Counter[tuple[str, str]], str]:
    """GPUs held per (node, resource) by unfinished pods of other releases (a release of the same name in another
    namespace is another release); best effort. Read a page at a time: a large cluster's pods never all at once."""
    used: Counter[tuple[str, str]] = Counter()
    own = (context.namespace, context.release, CHART_NAME)
    try:
        for page in context.api.pages("Pod", field_selector=NOT_FINISHED):
            for metadata, spec in ((pod.get("metadata") or {}, pod.get("spec") or {}) for pod in page):
                labels = metadata.get("labels") or {}
                if spec.get("nodeName") and own != (metadata.get("namespace"), labels.get(INSTANCE_LABEL),
                                                    labels.get(PART_OF_LABEL)):  # fmt: skip
                    gpus = gpu_requests(c.get("resources") for c in spec.get("containers") or [])
                    used.update({(spec["nodeName"], resource): count for resource, count in gpus.items()})
    except AccessDenied:
        return Counter(), " (other pods' GPU use is unknown: listing pods in all namespaces is forbidden)"
    return used, ""


def gpu_finding(resource: str, asks: list[tuple[Workload, int]], nodes: list[dict[str, Any]],
                used: Counter[tuple[str, str]], usage_note: str) -> Finding:  # fmt: skip
    pods = [count for role, count in asks for _ in range(role.replicas)]
    needed, who = sum(pods), ", ".join(f"{role.role} {role.replicas}x{count}" for role, count in asks)
    capacity = {name(node): int(allocatable(node, resource)) for node in nodes}
    free = {node: max(0, count - used[(node, resource)]) for node, count in capacity.items()}
    placed = placement([role for role, _ in asks])
    note = usage_note + (f" ({placed} of the GPU roles not evaluated: counted every schedulable node)"
                         if placed else "")  # fmt: skip
    total, largest, biggest_node = sum(capacity.values()), max(pods), max(capacity.values(), default=0)
    if total == 0:
        return gpu(FAIL, f"the release needs {needed} {resource} ({who}) but no schedulable node advertises "
                       f"{resource}{note}", f"install the device plugin for {resource} (e.g. the NVIDIA GPU operator) "
                       "or add GPU nodes; check with `kubectl describe nodes | grep -i gpu`")  # fmt: skip
    if biggest_node < largest:
        return gpu(FAIL, f"a pod needs {largest} {resource} but the largest node has {biggest_node}: a pod cannot "
                       f"span nodes{note}", f"lower gpu.count per pod (and raise replicas) or add a node with "
                       f"{largest} {resource}")  # fmt: skip
    if total < needed or not fits(pods, capacity):
        return gpu(FAIL, f"the release needs {needed} {resource} ({who}); schedulable nodes have {total} "
                       f"({describe_nodes(capacity)}){note}", "lower the replicas or gpu.count of the GPU roles, or "
                       "add GPU nodes")  # fmt: skip
    available = f"{sum(free.values())} of {total}"
    if not fits(pods, free):
        return gpu(WARN, f"tight: the release needs {needed} {resource} ({who}); {available} are free now "
                       f"({describe_nodes(free)}){note}", "some pods will stay Pending until other workloads release "
                       "GPUs (`kubectl describe nodes`)")  # fmt: skip
    return gpu(OK, f"{needed} {resource} needed ({who}); {available} free ({describe_nodes(free)}){note}")


def fits(pods: list[int], capacity: dict[str, int]) -> bool:
    """First-fit decreasing: can every pod get its GPUs on one node?"""
    left = dict(capacity)
    for need in sorted(pods, reverse=True):
        if (node := next((node for node, count in sorted(left.items()) if count >= need), None)) is None:
            return False
        left[node] -= need
    return True


def placement(roles: list[Workload]) -> str:
    """The placement the values set on the roles (nodeSelector, tolerations, node affinity), which is not evaluated."""
    chosen = {key for role in roles for key in ("nodeSelector", "tolerations") if role.spec.get(key)}
    affinity = {"affinity" for role in roles if (role.spec.get("affinity") or {}).get("nodeAffinity")}
    return "/".join(sorted(chosen | affinity))


def describe_nodes(counts: dict[str, int]) -> str:
    return ", ".join(f"{node}: {count}" for node, count in sorted(counts.items()) if count) or "none"


# -- quota ------------------------------------------------------------------------------------------------------------
def check_quota(context: Context) -> list[Finding]:
    quotas = context.api.items("ResourceQuota", context.namespace)
    if not quotas:
        return [quota(OK, f"no ResourceQuota in namespace {context.namespace}")]
    return [quota_finding(context, each) for each in quotas]


def quota_finding(context: Context, resource_quota: dict[str, Any]) -> Finding:
    status = resource_quota.get("status") or {}
    hard, used = status.get("hard") or (resource_quota.get("spec") or {}).get("hard") or {}, status.get("used") or {}
    over, tight, missing = [], [], []
    for key in sorted(hard):
        if not (adds := context.adds(key)):
            continue
        limit, now = parse(hard[key]), parse(used.get(key, "0"))
        if now + adds > limit:
            over.append(f"{key}: {shown(now)} used + {shown(adds)} > {shown(limit)}")
        elif now + adds > limit * Decimal("0.9"):
            tight.append(f"{key}: {shown(now + adds)} of {shown(limit)} after install")
        kind, _, resource = key.partition(".")  # quota on a compute resource rejects pods that do not set it
        missing += [f"{role.role} pods set no {key} and would be rejected by the quota"
                    for role in context.roles if kind in ("requests", "limits")
                    and resource in ("cpu", "memory") and resource not in role.resources(kind)]  # fmt: skip
    called = name(resource_quota)
    if over or missing:
        return quota(FAIL, f"ResourceQuota {called} would be exceeded: " + "; ".join(over + missing),
                       f"lower replicas/resources, or ask for more quota (`kubectl describe resourcequota {called}`)")
    if tight:
        return quota(WARN, f"ResourceQuota {called} is almost full: " + "; ".join(tight),
                       "a restart or an upgrade's extra pod may not fit")
    return quota(OK, f"ResourceQuota {called} has room for the release")


# -- co-location -----------------------------------------------------------------------------------------------------
def check_colocation(context: Context) -> list[Finding]:
    """Co-located pods must all fit one node: their requests against each schedulable node's allocatable.
    The supervisor mounts no claim, so it is free to run elsewhere. Run only when the values co-locate the pods."""
    if not (context.storage and context.storage.colocated):
        return []
    roles = [role for role in context.roles if role.role not in UNMOUNTED_ROLES]
    pods = sum(role.replicas for role in roles)
    needed = requested(roles)
    what = ", ".join(f"{shown(value)} {key}" for key, value in needed.items()) or "nothing"
    note = f" ({placed} not evaluated)" if (placed := placement(roles)) else ""
    listed = context.nodes
    fitting = [name(n) for n in listed if all(allocatable(n, key) >= value for key, value in needed.items())]
    head = f"storage needs {context.storage.mode}, so all {pods} pods run on one node: they request {what}"
    if fitting:
        return [colocation(OK, f"{head}; fits {', '.join(fitting)} (allocatable, before other pods){note}")]
    sizes = "; ".join(f"{name(node)}: " + ", ".join(f"{shown(allocatable(node, key))} {key}" for key in needed)
                      for node in listed)
    return [colocation(FAIL, f"{head}; no schedulable node has that much allocatable ({sizes or 'no schedulable node'})"
                       f"{note}", "lower the requests (values/cpu.yaml fits a 4-CPU, 8 GiB node), add a bigger node, "
                       "or --set storage.accessModes={ReadWriteMany} with a StorageClass that offers it, so pods may "
                       "spread")]
