"""gpu-capacity: GPUs the release's pods request (per extended resource) against the allocatable GPUs
of schedulable nodes, minus what running pods of other releases hold (best effort), and whether one
node can host the largest pod (a pod cannot span nodes). nodeSelector/tolerations/affinity are not
evaluated; the message says so when a GPU role sets them."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.objects import gpu_requests, name_of
from tfchart.cluster.preflight.plan import FAIL, OK, WARN, Context, Finding, PlannedRole, allocatable
from tfdcontract import CHART_NAME, INSTANCE_LABEL, PART_OF_LABEL

NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"
finding = partial(Finding, "gpu-capacity")


def check_gpus(context: Context) -> list[Finding]:
    demand: dict[str, list[PlannedRole]] = {}
    for role in context.planned.roles:
        if role.gpus_per_pod > 0:
            demand.setdefault(role.gpu_resource, []).append(role)
    if not demand:
        return [finding(OK, "the release requests no GPUs")]
    nodes, (used, usage_note) = context.nodes, gpu_usage(context)
    return [gpu_finding(resource, roles, nodes, used, usage_note) for resource, roles in sorted(demand.items())]


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
                    for gpu in gpu_requests(c.get("resources") for c in spec.get("containers") or []):
                        used[(spec["nodeName"], gpu.resource)] += gpu.count
    except AccessDenied:
        return Counter(), " (other pods' GPU use is unknown: listing pods in all namespaces is forbidden)"
    return used, ""


def gpu_finding(resource: str, roles: list[PlannedRole], nodes: list[Any], used: Counter[tuple[str, str]],
                usage_note: str) -> Finding:  # fmt: skip
    pods = [role.gpus_per_pod for role in roles for _ in range(role.replicas)]
    needed, who = sum(pods), ", ".join(f"{r.role} {r.replicas}x{r.gpus_per_pod}" for r in roles)
    capacity = {name_of(node): int(allocatable(node, resource)) for node in nodes}
    free = {name: max(0, count - used[(name, resource)]) for name, count in capacity.items()}
    placement = sorted({key for role in roles for key in role.placement})
    note = usage_note + (f" ({'/'.join(placement)} of the GPU roles not evaluated: counted every schedulable node)"
                         if placement else "")  # fmt: skip
    total, largest, biggest_node = sum(capacity.values()), max(pods), max(capacity.values(), default=0)
    if total == 0:
        return finding(FAIL, f"the release needs {needed} {resource} ({who}) but no schedulable node advertises "
                       f"{resource}{note}", f"install the device plugin for {resource} (e.g. the NVIDIA GPU operator) "
                       "or add GPU nodes; check with `kubectl describe nodes | grep -i gpu`")  # fmt: skip
    if biggest_node < largest:
        return finding(FAIL, f"a pod needs {largest} {resource} but the largest node has {biggest_node}: a pod cannot "
                       f"span nodes{note}", f"lower gpu.count per pod (and raise replicas) or add a node with "
                       f"{largest} {resource}")  # fmt: skip
    if total < needed or not fits(pods, capacity):
        return finding(FAIL, f"the release needs {needed} {resource} ({who}); schedulable nodes have {total} "
                       f"({describe_nodes(capacity)}){note}", "lower the replicas or gpu.count of the GPU roles, or "
                       "add GPU nodes")  # fmt: skip
    available = f"{sum(free.values())} of {total}"
    if not fits(pods, free):
        return finding(WARN, f"tight: the release needs {needed} {resource} ({who}); {available} are free now "
                       f"({describe_nodes(free)}){note}", "some pods will stay Pending until other workloads release "
                       "GPUs (`kubectl describe nodes`)")  # fmt: skip
    return finding(OK, f"{needed} {resource} needed ({who}); {available} free ({describe_nodes(free)}){note}")


def fits(pods: list[int], capacity: dict[str, int]) -> bool:
    """First-fit decreasing: can every pod get its GPUs on one node?"""
    left = dict(capacity)
    for need in sorted(pods, reverse=True):
        node = next((name for name, count in sorted(left.items()) if count >= need), None)
        if node is None:
            return False
        left[node] -= need
    return True


def describe_nodes(counts: dict[str, int]) -> str:
    return ", ".join(f"{name}: {count}" for name, count in sorted(counts.items()) if count) or "none"
