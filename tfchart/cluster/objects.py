"""Readers of Kubernetes objects as the chart renders them: a release's pods, Jobs and StatefulSets by
the chart's labels (tfdcontract), never by computed names. Shared by `tfchart status`, `logs`,
`stop` and `preflight`; no Kubernetes calls here (tfchart.kube makes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tfdcontract import CHIEF, COMPLETION_INDEX_ANNOTATION, COMPONENT_LABEL, WORKER


def is_gpu_resource(name: str) -> bool:
    """Extended resources that are GPUs: nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, nvidia.com/mig-..."""
    return "/" in name and ("gpu" in name.lower() or name.startswith("nvidia.com/"))


@dataclass(frozen=True)
class GpuRequest:
    resource: str
    count: int


@dataclass(frozen=True)
class JobInfo:
    role: str
    name: str | None
    state: str  # Running | Succeeded | Failed | Pending | Missing
    reason: str = ""
    message: str = ""
    active: int = 0
    succeeded: int = 0
    failed: int = 0


def run_role(jobs: list[Any]) -> str:
    """The role whose Job owns completion: the chief, or the workers' Indexed Job when worker 0 is the
    chief (chief.replicas=0)."""
    roles = {role_of(job) for job in jobs}
    return WORKER if WORKER in roles and CHIEF not in roles else CHIEF


def is_chief_pod(pod: Any) -> bool:
    """The chief's pod, or worker 0's in a workers' Job (its completion index)."""
    if role_of(pod) == CHIEF:
        return True
    annotations = pod.metadata.annotations or {}
    return str(annotations.get(COMPLETION_INDEX_ANNOTATION, "")) == "0"


def role_of(obj: Any) -> str:
    labels = obj.metadata.labels or {}
    return str(labels.get(COMPONENT_LABEL, "?"))


def name_of(obj: Any) -> str:
    return str(obj.metadata.name)


def newest(pods: list[Any]) -> Any | None:
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return max(pods, key=lambda pod: (pod.metadata.creation_timestamp or epoch, name_of(pod)), default=None)


def started(pods: list[Any]) -> list[Any]:
    """Pods whose main container has run at least once (so they have a log)."""
    return [pod for pod in pods if has_started(pod)]


def has_started(pod: Any) -> bool:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    for status in statuses:
        state = status.state
        if (state and (state.running or state.terminated)) or (status.restart_count or 0) > 0:
            return True
        if status.last_state and status.last_state.terminated:
            return True
    return False


def container_statuses(pod: Any) -> list[Any]:
    status = pod.status
    if not status:
        return []
    return list(status.init_container_statuses or []) + list(status.container_statuses or [])


def condition_true(pod: Any, kind: str) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == kind and c.status == "True" for c in conditions)


def pod_reason(pod: Any) -> tuple[str, str]:
    """Why a pod is not simply Running/Succeeded: scheduling, waiting or terminated containers, eviction."""
    status = pod.status
    if status is None:
        return "", ""
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return condition.reason or "Unschedulable", condition.message or ""
    for container in container_statuses(pod):
        state = container.state
        if state and state.waiting and state.waiting.reason not in (None, "PodInitializing"):
            last = container.last_state.terminated if container.last_state else None
            detail = state.waiting.message or ""
            if last is not None:
                detail = f"last exit: {last.reason or 'Error'}, code {last.exit_code}" + (
                    f"; {detail}" if detail else ""
                )
            return str(state.waiting.reason), detail
        if state and state.terminated and state.terminated.exit_code:
            return state.terminated.reason or "Error", f"exit code {state.terminated.exit_code}"
    if status.reason:
        return str(status.reason), status.message or ""
    return "", ""


def pod_gpus(pod: Any) -> tuple[GpuRequest, ...]:
    """GPUs requested by the pod's containers (limits; requests when no limit), per resource name."""
    totals: dict[str, int] = {}
    for container in (pod.spec.containers if pod.spec else None) or []:
        for resource, count in container_gpus(container).items():
            totals[resource] = totals.get(resource, 0) + count
    return tuple(GpuRequest(resource, count) for resource, count in sorted(totals.items()))


def container_gpus(container: Any) -> dict[str, int]:
    resources = container.resources
    if resources is None:
        return {}
    merged = {**(resources.requests or {}), **(resources.limits or {})}
    found: dict[str, int] = {}
    for name, value in merged.items():
        if is_gpu_resource(name):
            try:
                found[name] = int(str(value))
            except ValueError:
                continue
    return found


def job_info(role: str, jobs: list[Any], pods: list[Any]) -> JobInfo:
    """The state of the role's Job: its conditions first, then its newest pod."""
    mine = [job for job in jobs if role_of(job) == role]
    if not mine:
        return JobInfo(
            role, None, "Missing", "NotFound", f"no {role} Job (deleted, or removed by ttlSecondsAfterFinished)"
        )
    job: Any = newest(mine)
    status = job.status
    counts = {
        "active": (status.active if status else None) or 0,
        "succeeded": (status.succeeded if status else None) or 0,
        "failed": (status.failed if status else None) or 0,
    }
    conditions = {c.type: c for c in ((status.conditions if status else None) or []) if c.status == "True"}
    for kind, state in (
        ("Complete", "Succeeded"),
        ("SuccessCriteriaMet", "Succeeded"),
        ("Failed", "Failed"),
        ("FailureTarget", "Failed"),
    ):
        if kind in conditions:
            condition = conditions[kind]
            return JobInfo(role, name_of(job), state, condition.reason or kind, condition.message or "", **counts)
    if "Suspended" in conditions:
        return JobInfo(role, name_of(job), "Pending", "Suspended", conditions["Suspended"].message or "", **counts)
    pod = newest(pods)
    if pod is not None and pod.status and pod.status.phase == "Running":
        return JobInfo(role, name_of(job), "Running", "", "", **counts)
    if pod is None:
        return JobInfo(role, name_of(job), "Pending", "NoPod", "the Job controller has not created a pod yet", **counts)
    reason, message = pod_reason(pod)
    return JobInfo(role, name_of(job), "Pending", reason or "Pending", message, **counts)


def main_container(pod: Any, role: str) -> str | None:
    """The container named after the role (the chart's convention), else the first one."""
    names = [c.name for c in (pod.spec.containers if pod.spec else None) or []]
    if role in names:
        return role
    return names[0] if names else None
