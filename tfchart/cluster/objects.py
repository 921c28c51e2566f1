"""A release's Kubernetes objects (the API's JSON) read, found by the chart's labels (tfdcontract), never by
computed names, and its run: the run's object, of either `workload.kind` (docs/architecture.md, "3. Lifecycle"): native,
the run's Job (the chief Job, or the workers' Job without a chief); jobset, the release's JobSet, which outlives its
child Jobs and carries the run's records (ending, suspension). `find_run` is the one place that tells the two apart;
every command reads the run through its `Run`. A native release costs no call more than before: JobSets are looked
for (the only call here) only when a Job of the release belongs to one (JobSet's label) or no Job is the run's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from tfchart.cluster.kube import AccessDenied, split_resource
from tfdcontract import (
    CHIEF,
    COMPLETION_INDEX_ANNOTATION,
    COMPONENT_LABEL,
    END_REASON_ANNOTATION,
    ENDING_ANNOTATION,
    PROGRESS_ANNOTATION,
    WORKER,
    parse_suspension,
    release_selector,
    runstate,
)
from tfdcontract.runstate import JOBSET_NAME_LABEL, RunView, annotations_of, name_of

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi


@dataclass(frozen=True)
class JobInfo:
    role: str
    name: str | None
    state: str  # Running | Succeeded | Failed | Pending | Suspended | Missing
    reason: str = ""
    message: str = ""
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    ending: str = ""  # the run record (tf-distributed.io/ending on the run's Job): supervisor or tfchart stop
    end_reason: str = ""
    suspended_since: str = ""  # a suspended Job: since when (the run's suspension record, else its condition)
    progress: str = ""  # the chief's progress record (tf-distributed.io/progress, written by the supervisor)
    kind: str = "Job"  # the run's object: Job, or JobSet (workload.kind=jobset; find_run)
    restarts: int = 0  # a JobSet's restarts (its failure policy's RestartJobSet)


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


def role_of(obj: Mapping[str, Any]) -> str:
    return labels_of(obj).get(COMPONENT_LABEL, "?")


def run_role(jobs: list[Any]) -> str:
    """The role whose Job owns completion: the chief, or the workers' Indexed Job when worker 0 is the
    chief (chief.replicas=0)."""
    roles = {role_of(job) for job in jobs}
    return WORKER if WORKER in roles and CHIEF not in roles else CHIEF


def is_chief_pod(pod: Mapping[str, Any]) -> bool:
    """The chief's pod, or worker 0's in a workers' Job (its completion index)."""
    return role_of(pod) == CHIEF or str(annotations_of(pod).get(COMPLETION_INDEX_ANNOTATION, "")) == "0"


def newest(objects: list[Any]) -> Any | None:
    """The newest object (RFC 3339 times in UTC sort as text), by name among equals."""
    return max(objects, key=lambda o: (o["metadata"].get("creationTimestamp") or "", name_of(o)), default=None)


def container_statuses(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def has_started(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's main container has run at least once (so it has a log)."""
    return any({"running", "terminated"} & (s.get("state") or {}).keys() or (s.get("restartCount") or 0) > 0
               or (s.get("lastState") or {}).get("terminated")
               for s in (pod.get("status") or {}).get("containerStatuses") or [])  # fmt: skip


def pod_reason(pod: Mapping[str, Any]) -> tuple[str, str]:
    """Why a pod is not simply Running/Succeeded: scheduling, waiting or terminated containers, eviction."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("reason") or "Unschedulable", condition.get("message") or ""
    for container in container_statuses(pod):
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason") not in (None, "PodInitializing"):
            last = (container.get("lastState") or {}).get("terminated")
            end = f"last exit: {last.get('reason') or 'Error'}, code {last.get('exitCode')}" if last is not None else ""
            return str(waiting["reason"]), "; ".join(filter(None, [end, waiting.get("message")]))
        if terminated and terminated.get("exitCode"):
            return terminated.get("reason") or "Error", f"exit code {terminated['exitCode']}"
    return (str(status["reason"]), status.get("message") or "") if status.get("reason") else ("", "")


def job_info(role: str, jobs: list[Any], pods: list[Any]) -> JobInfo:
    """The state of the role's Job: its conditions first, then its newest pod."""
    job: Any = newest([job for job in jobs if role_of(job) == role])
    return run_info(job and {**job, "kind": "Job"}, role, job, pods)


def run_info(run: dict[str, Any] | None, role: str, job: Any | None, pods: list[Any]) -> JobInfo:
    """The state of the run's object as JSON (a Job, or a JobSet whose `role` Job is `job`; None: Missing): the
    conditions its controller ended it with (tfdcontract.runstate), its suspension, then the newest of `pods`. The
    records are the run object's, the progress record the `role` Job's (the supervisor writes it on the chief's Job)."""
    if run is None:
        return JobInfo(role, None, "Missing", "NotFound", f"no {role} Job (deleted, or removed by "
                       "ttlSecondsAfterFinished)")  # fmt: skip
    kind, annotations, status = run["kind"], annotations_of(run), (job or {}).get("status") or {}
    counts: dict[str, Any] = {key: status.get(key) or 0 for key in ("active", "succeeded", "failed")}
    counts.update(ending=annotations.get(ENDING_ANNOTATION, ""), end_reason=annotations.get(END_REASON_ANNOTATION, ""),
                  kind=kind, restarts=int((run.get("status") or {}).get("restarts") or 0),
                  progress=annotations_of(job).get(PROGRESS_ANNOTATION, ""))
    name = name_of(run)
    if (found := runstate.ended(run, kind)) is not None:  # which conditions end a Job or JobSet
        state, cond = found
        return JobInfo(role, name, state, cond.get("reason") or cond["type"], cond.get("message") or "", **counts)
    if runstate.is_suspended(run):
        cond = runstate.condition(run, "Suspended") or {}
        record = parse_suspension(annotations)
        when = runstate.parse_time(cond.get("lastTransitionTime"))  # written again as the API writes a time
        since = record.since if record else "" if when is None else runstate.now_text(when)
        message = cond.get("message") or f"{kind} suspended"
        return JobInfo(role, name, "Suspended", "Suspended", message, **counts, suspended_since=since)
    pod = newest(pods)
    if pod is not None and (pod.get("status") or {}).get("phase") == "Running":
        return JobInfo(role, name, "Running", "", "", **counts)
    if pod is not None:
        reason, message = pod_reason(pod)
        return JobInfo(role, name, "Pending", reason or "Pending", message, **counts)
    if job is None:  # a JobSet that has not created the role's Job yet
        starting = runstate.condition(run, "StartupPolicyInProgress")
        why = (starting or {}).get("message") or (f"the JobSet creates the {role}'s Job once the roles before it are "
                                                  "Ready (dependsOn)")  # fmt: skip
        return JobInfo(role, name, "Pending", "StartupPolicyInProgress" if starting else "NoJob", why, **counts)
    return JobInfo(role, name, "Pending", "NoPod", "the Job controller has not created a pod yet", **counts)


def main_container(pod: Any, role: str) -> str | None:
    """The container named after the role (the chart's convention), else the first one."""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    return role if role in names else (names[0] if names else None)


JOBSET = split_resource("JobSet")


class Run(NamedTuple):
    """A release's run: its object (info.kind Job or JobSet, as the API's JSON) and its state."""

    info: JobInfo
    document: Any = None  # the JSON; None: no run object (info.state Missing)
    jobs: tuple[Any, ...] = ()  # a JobSet's child Jobs


def in_jobset(obj: Any) -> bool:
    """Whether a Job or pod was made by a JobSet."""
    return JOBSET_NAME_LABEL in labels_of(obj)


def may_be_jobset(jobs: list[Any]) -> bool:
    """Whether the release's run may be a JobSet: one of its Jobs belongs to one, or none of them is the run's."""
    return any(in_jobset(job) for job in jobs) or run_of(None, jobs, []).document is None


def jobsets(api: KubeApi, namespace: str | None, selector: str) -> list[dict[str, Any]]:
    """The JobSets matching the selector; none where the API is not served (no JobSet installed) or not readable."""
    try:
        return api.items("JobSet", namespace, selector)
    except AccessDenied:
        return []


def find_run(api: KubeApi, release: str, namespace: str, jobs: list[Any], pods: Sequence[Any] = ()) -> Run:
    """The release's run from its Jobs (listed by the caller) and the candidate chief pods (for a Pending/Running
    state): its JobSet when it has one, else its run Job."""
    found = jobsets(api, namespace, release_selector(release)) if may_be_jobset(jobs) else []
    return run_of(newest(found), jobs, list(pods))


def run_of(jobset: dict[str, Any] | None, jobs: list[Any], pods: list[Any]) -> Run:
    """The run of a release whose JobSet is `jobset` (None: a native release), from its Jobs and candidate chief
    pods (those not of the run's role are ignored). The Jobs and pods that are the run's carry the JobSet's name in
    JobSet's label, a native run's none."""
    name, run = name_of(jobset) or None, jobset and {**jobset, "kind": "JobSet"}
    own = [job for job in jobs if labels_of(job).get(JOBSET_NAME_LABEL) == name]
    role = RunView("JobSet", run).role if run else run_role(own)  # a JobSet's success policy's target
    job = newest([job for job in own if role_of(job) == role])
    run = run or (job and {**job, "kind": "Job"})
    pods = [pod for pod in pods if role_of(pod) == role and labels_of(pod).get(JOBSET_NAME_LABEL) == name]
    return Run(run_info(run, role, job, pods), run, tuple(own) if jobset else ())

