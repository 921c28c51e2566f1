"""gpu-capacity: GPUs the release's pods request (per extended resource) against the allocatable GPUs
of schedulable nodes, minus what running pods of other releases hold (best effort), and whether one
node can host the largest pod (a pod cannot span nodes). nodeSelector/tolerations/affinity are not
evaluated; the message says so when a GPU role sets them."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.objects import gpu_requests, name_of
from tfchart.cluster.preflight.findings import FAIL, OK, WARN, Context, Finding, allocatable
from tfchart.cluster.preflight.plan import PlannedRole
from tfdcontract import CHART_NAME, INSTANCE_LABEL, PART_OF_LABEL

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"


def check_gpus(context: Context) -> list[Finding]:
    demand: dict[str, list[PlannedRole]] = {}
    for role in context.planned.roles:
        if role.gpus_per_pod > 0:
            demand.setdefault(role.gpu_resource, []).append(role)
    if not demand:
        return [Finding("gpu-capacity", OK, "the release requests no GPUs")]
    nodes = context.nodes
    used, usage_note = gpu_usage(context.api, context.release, context.namespace)
    return [gpu_finding(resource, roles, nodes, used, usage_note) for resource, roles in sorted(demand.items())]


def gpu_usage(api: KubeApi, release: str, namespace: str) -> tuple[dict[tuple[str, str], int], str]:
    """GPUs held per (node, resource) by unfinished pods of other releases (a release of the same name in another
    namespace is another release); best effort. Read a page at a time: a large cluster's pods never all at once."""
    used: Counter[tuple[str, str]] = Counter()
    try:
        for page in api.pages("Pod", field_selector=NOT_FINISHED):
            for pod in page:
                metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
                labels = metadata.get("labels") or {}
                own = metadata.get("namespace") == namespace and labels.get(INSTANCE_LABEL) == release \
                    and labels.get(PART_OF_LABEL) == CHART_NAME
                if not own and spec.get("nodeName"):
                    for gpu in gpu_requests(c.get("resources") for c in spec.get("containers") or []):
                        used[(spec["nodeName"], gpu.resource)] += gpu.count
    except AccessDenied:
        return {}, " (other pods' GPU use is unknown: listing pods in all namespaces is forbidden)"
    return used, ""


def gpu_finding(
    resource: str, roles: list[PlannedRole], nodes: list[Any], used: dict[tuple[str, str], int], usage_note: str
) -> Finding:
    pods = [role.gpus_per_pod for role in roles for _ in range(role.replicas)]
    needed = sum(pods)
    who = ", ".join(f"{r.role} {r.replicas}x{r.gpus_per_pod}" for r in roles)
    capacity = {name_of(node): int(allocatable(node, resource)) for node in nodes}
    free = {name: max(0, count - used.get((name, resource), 0)) for name, count in capacity.items()}
    placement = sorted({key for role in roles for key in role.placement})
    unevaluated = f" ({'/'.join(placement)} of the GPU roles not evaluated: counted every schedulable node)"
    note = usage_note + (unevaluated if placement else "")
    total_capacity = sum(capacity.values())
    if total_capacity == 0:
        return Finding("gpu-capacity", FAIL, f"the release needs {needed} {resource} ({who}) but no schedulable node "
                       f"advertises {resource}{note}",
                       f"install the device plugin for {resource} (e.g. the NVIDIA GPU operator) or add GPU nodes; "
                       "check with `kubectl describe nodes | grep -i gpu`")
    largest, biggest_node = max(pods), max(capacity.values())
    if biggest_node < largest:
        return Finding("gpu-capacity", FAIL, f"a pod needs {largest} {resource} but the largest node has "
                       f"{biggest_node}: a pod cannot span nodes{note}",
                       f"lower gpu.count per pod (and raise replicas) or add a node with {largest} {resource}")
    if total_capacity < needed or not fits(pods, dict(capacity)):
        return Finding("gpu-capacity", FAIL,
                       f"the release needs {needed} {resource} ({who}); schedulable nodes have {total_capacity} "
                       f"({describe_nodes(capacity)}){note}",
                       "lower the replicas or gpu.count of the GPU roles, or add GPU nodes")
    available = f"{sum(free.values())} of {total_capacity}"
    if not fits(pods, dict(free)):
        return Finding("gpu-capacity", WARN,
                       f"tight: the release needs {needed} {resource} ({who}); {available} are free now "
                       f"({describe_nodes(free)}){note}",
                       "some pods will stay Pending until other workloads release GPUs (`kubectl describe nodes`)")
    free_nodes = describe_nodes(free)
    return Finding("gpu-capacity", OK, f"{needed} {resource} needed ({who}); {available} free ({free_nodes}){note}")


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
