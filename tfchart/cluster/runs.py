"""The run's object, of either `workload.kind` (docs/architecture.md, "3. Lifecycle"): native, the run's Job (the
chief Job, or the workers' Job without a chief); jobset, the release's JobSet, which outlives its child Jobs and
carries the run's records (ending, suspension). `find_run` is the one place that tells the two apart; every command
reads the run through its `Run`. A native release costs no call more than before: JobSets are looked for only when
a Job of the release belongs to one (JobSet's label) or no Job is the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfchart.cluster.kube import CUSTOM, AccessDenied
from tfchart.cluster.objects import JobInfo, job_info, name_of, newest, pod_reason, role_of, run_role, stamp
from tfdcontract import (
    CHIEF,
    END_REASON_ANNOTATION,
    ENDING_ANNOTATION,
    PROGRESS_ANNOTATION,
    parse_suspension,
    release_selector,
)
from tfdcontract.runstate import JOBSET_NAME_LABEL, ended, is_suspended
from tfdcontract.runstate import QUEUE_LABEL as QUEUE_LABEL  # the preflight's, from here

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

JOBSET = CUSTOM["JobSet"]


@dataclass(frozen=True)
class Run:
    """A release's run: its object (`kind` Job or JobSet; a client model, or the JobSet's JSON) and its state."""

    kind: str
    info: JobInfo
    document: Any = None  # None: no run object (info.state Missing)
    jobs: tuple[Any, ...] = ()  # a JobSet's child Jobs (client models)

    @property
    def jobset(self) -> bool:
        return self.kind == "JobSet"

    @property
    def annotations(self) -> dict[str, str]:
        if self.kind == "JobSet":
            return dict((self.document.get("metadata") or {}).get("annotations") or {})
        return dict(self.document.metadata.annotations or {}) if self.document is not None else {}

    @property
    def suspend(self) -> bool:
        """Its spec.suspend."""
        if self.kind == "JobSet":
            return bool((self.document.get("spec") or {}).get("suspend"))
        return bool(self.document is not None and self.document.spec and self.document.spec.suspend)

    def child(self, role: str) -> Any | None:
        """A JobSet's newest child Job of `role` (the chief Job `<jobset>-chief-0`), else None."""
        return newest([job for job in self.jobs if role_of(job) == role])


def in_jobset(obj: Any) -> bool:
    """Whether a Job or pod (client model) was made by a JobSet."""
    return JOBSET_NAME_LABEL in (obj.metadata.labels or {})


def may_be_jobset(jobs: list[Any]) -> bool:
    """Whether the release's run may be a JobSet: one of its Jobs belongs to one, or none of them is the run's."""
    native = [job for job in jobs if not in_jobset(job)]
    return len(native) < len(jobs) or job_info(run_role(native), native, []).name is None


def jobsets(api: KubeApi, namespace: str | None, selector: str) -> list[dict[str, Any]]:
    """The JobSets matching the selector; none where the API is not served (no JobSet installed) or not readable."""
    try:
        return api.list_namespaced_custom(*JOBSET, namespace, selector) or []
    except AccessDenied:
        return []


def find_run(api: KubeApi, release: str, namespace: str, jobs: list[Any], pods: Sequence[Any] = ()) -> Run:
    """The release's run from its Jobs (listed by the caller) and the candidate chief pods (for a Pending/Running
    state): its JobSet when it has one, else its run Job."""
    found = jobsets(api, namespace, release_selector(release)) if may_be_jobset(jobs) else []
    return run_of(newest_document(found), jobs, list(pods))


def run_of(jobset: dict[str, Any] | None, jobs: list[Any], pods: list[Any]) -> Run:
    """The run of a release whose JobSet is `jobset` (None: a native release), from its Jobs and candidate chief
    pods (those not of the run's role are ignored)."""
    if jobset is None:
        native = [job for job in jobs if not in_jobset(job)]
        role = run_role(native)
        info = job_info(role, native, [pod for pod in pods if role_of(pod) == role and not in_jobset(pod)])
        document = next((job for job in native if name_of(job) == info.name), None)
        return Run("Job", info, document)
    name = str(jobset["metadata"]["name"])
    children = tuple(job for job in jobs if (job.metadata.labels or {}).get(JOBSET_NAME_LABEL) == name)
    role = jobset_role(jobset)
    own = [pod for pod in pods if role_of(pod) == role and (pod.metadata.labels or {}).get(JOBSET_NAME_LABEL) == name]
    return Run("JobSet", jobset_info(jobset, role, list(children), own), jobset, children)


def newest_document(documents: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(documents, key=lambda d: (d["metadata"].get("creationTimestamp") or "", d["metadata"]["name"]),
               default=None)  # fmt: skip


def jobset_role(jobset: dict[str, Any]) -> str:
    """The role whose Job completes the run: the success policy's target (chief, or worker without a chief)."""
    targets = ((jobset.get("spec") or {}).get("successPolicy") or {}).get("targetReplicatedJobs") or [CHIEF]
    return str(targets[0])


def jobset_info(jobset: dict[str, Any], role: str, jobs: list[Any], pods: list[Any]) -> JobInfo:
    """The state of a JobSet run: its Completed/Failed/Suspended conditions, then its `role` Job's newest pod; the
    records are the JobSet's, the progress record its `role` Job's (the supervisor writes it on the chief's Job)."""
    metadata, status = jobset["metadata"], jobset.get("status") or {}
    annotations = metadata.get("annotations") or {}
    job = newest([job for job in jobs if role_of(job) == role])
    counts: dict[str, Any] = {key: (getattr(job.status, key) if job is not None and job.status else None) or 0
                              for key in ("active", "succeeded", "failed")}  # fmt: skip
    counts.update(ending=annotations.get(ENDING_ANNOTATION, ""), end_reason=annotations.get(END_REASON_ANNOTATION, ""),
                  kind="JobSet", restarts=int(status.get("restarts") or 0),
                  progress=((job.metadata.annotations or {}) if job is not None else {}).get(PROGRESS_ANNOTATION, ""))
    name = str(metadata["name"])
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    if (found := ended(jobset, "JobSet")) is not None:  # tfdcontract.runstate: which conditions end a JobSet
        state, cond = found
        return JobInfo(role, name, state, cond.get("reason") or cond["type"], cond.get("message") or "", **counts)
    if is_suspended(jobset):
        condition = conditions.get("Suspended") or {}
        record = parse_suspension(annotations)
        since = record.since if record else stamp(condition.get("lastTransitionTime"))
        message = condition.get("message") or "JobSet suspended"
        return JobInfo(role, name, "Suspended", "Suspended", message, **counts, suspended_since=since)
    pod = newest(pods)
    if pod is not None and pod.status and pod.status.phase == "Running":
        return JobInfo(role, name, "Running", "", "", **counts)
    if pod is not None:
        reason, message = pod_reason(pod)
        return JobInfo(role, name, "Pending", reason or "Pending", message, **counts)
    if job is None:
        starting = conditions.get("StartupPolicyInProgress")
        why = (starting or {}).get("message") or (f"the JobSet creates the {role}'s Job once the roles before it are "
                                                  "Ready (dependsOn)")  # fmt: skip
        return JobInfo(role, name, "Pending", "StartupPolicyInProgress" if starting else "NoJob", why, **counts)
    return JobInfo(role, name, "Pending", "NoPod", "the Job controller has not created a pod yet", **counts)
