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
from tfchart.cluster.objects import JobInfo, as_json, job_info, name_of, newest, role_of, run_info, run_role
from tfdcontract import release_selector
from tfdcontract.runstate import JOBSET_NAME_LABEL, RunView, annotations_of

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

JOBSET = CUSTOM["JobSet"]


@dataclass(frozen=True)
class Run:
    """A release's run: its object (`kind` Job or JobSet, as the API's JSON) and its state."""

    kind: str
    info: JobInfo
    document: Any = None  # the JSON; None: no run object (info.state Missing)
    jobs: tuple[Any, ...] = ()  # a JobSet's child Jobs (client models)

    @property
    def jobset(self) -> bool:
        return self.kind == "JobSet"

    @property
    def annotations(self) -> dict[str, str]:
        return dict(annotations_of(self.document))


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
        return api.items("JobSet", namespace, selector) or []
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
        document = next((as_json(job) | {"kind": "Job"} for job in native if name_of(job) == info.name), None)
        return Run("Job", info, document)
    name, jobset = str(jobset["metadata"]["name"]), {**jobset, "kind": "JobSet"}
    children = tuple(job for job in jobs if (job.metadata.labels or {}).get(JOBSET_NAME_LABEL) == name)
    role = RunView("JobSet", jobset).role  # its success policy's target: chief, or worker without a chief
    own = [pod for pod in pods if role_of(pod) == role and (pod.metadata.labels or {}).get(JOBSET_NAME_LABEL) == name]
    info = run_info(jobset, role, newest([job for job in children if role_of(job) == role]), own)
    return Run("JobSet", info, jobset, children)


def newest_document(documents: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(documents, key=lambda d: (d["metadata"].get("creationTimestamp") or "", d["metadata"]["name"]),
               default=None)  # fmt: skip
