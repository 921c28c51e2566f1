"""A run's state, read from its Kubernetes objects as the API's JSON (plain dicts): the run's object (a Job, or a
JobSet), its ending (the record on it, else its controller's conditions), its suspension and the wanted state
asked for on it. Standard library only, no I/O; the supervisor, tfchart and `tfchart local` read runs through it,
and tfdcontract.lifecycle plans on it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tfdcontract import (
    ANNOTATION_PREFIX,
    CHIEF,
    COMPONENT_LABEL,
    END_REASON_ANNOTATION,
    ENDING_ANNOTATION,
    Suspension,
    parse_suspension,
)

# -- the API's times ---------------------------------------------------------------------------------------------


def now_text(seconds: float | None = None) -> str:
    """A time as the API writes it (RFC 3339, UTC, whole seconds): `seconds` since the epoch, else now."""
    moment = datetime.fromtimestamp(time.time() if seconds is None else seconds, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> float | None:
    """An API time as seconds since the epoch; None for none or a malformed one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# -- the wanted state --------------------------------------------------------------------------------------------

#: On the run's object: what `tfchart stop`/`suspend`/`resume` asked for (absent: running).
WANTED_ANNOTATION = ANNOTATION_PREFIX + "wanted"
RUNNING_WANTED = "running"
SUSPENDED_WANTED = "suspended"
STOPPED_WANTED = "stopped"
WANTED_STATES = (RUNNING_WANTED, SUSPENDED_WANTED, STOPPED_WANTED)
#: On the run's object, by the run supervisor: the wanted state it has taken up ("<wanted>"), or "<wanted>: <why>"
#: where it cannot carry it out (an API error, its Role). tfchart, seeing none soon, says so rather than wait.
WANTED_SEEN_ANNOTATION = ANNOTATION_PREFIX + "wanted-seen"
#: The ending `tfchart stop` records.
STOPPED = "stopped"

# A pod template that joins a gang (Volcano, coscheduling, Kueue's plain-pod group): its pods are admitted together
GANG_MARKERS = ("scheduling.k8s.io/group-name", "scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name")
#: Kueue's queue label: on a JobSet, the chart puts it on the JobSet only (Kueue makes one Workload of it).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Kueue's API group, and the versions of its Workload an executor reads (newest first).
KUEUE_GROUP, KUEUE_VERSIONS = "kueue.x-k8s.io", ("v1beta2", "v1beta1")
#: The label JobSet puts on its child Jobs and their pods (jobset.x-k8s.io/v1alpha2).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: Run states (run_state); the first two are the trainer's SUCCEEDED/FAILED.
MISSING, SUCCEEDED, FAILED, SUSPENDED, RUNNING = "Missing", "Succeeded", "Failed", "Suspended", "Running"
TERMINAL = (SUCCEEDED, FAILED)
#: Whose the plan's ending reason is when no Ending is given (stop asked for on the run's object).
STOPPED_BY = "tfchart stop"


# -- reading the objects ------------------------------------------------------------------------------------------


def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("spec") or {}


def name_of(obj: Mapping[str, Any] | None) -> str:
    return str(metadata(obj).get("name") or "")


def annotations_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return metadata(obj).get("annotations") or {}


def role_of(obj: Mapping[str, Any] | None) -> str:
    return str((metadata(obj).get("labels") or {}).get(COMPONENT_LABEL) or "")


def replicas_of(obj: Mapping[str, Any]) -> int:
    """A StatefulSet's or Deployment's spec.replicas (Kubernetes' default 1)."""
    value = spec(obj).get("replicas")
    return 1 if value is None else int(value)


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    """The object's status condition of this type that is True, else None."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def pod_ended(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in TERMINAL


def stuck_terminating(pod: Mapping[str, Any], now: str) -> bool:
    """Whether a pod is being deleted and is still there past its deletionTimestamp (the delete asked for plus its
    grace period) by its grace period (at least 30 s) again: its kubelet does not answer (a node unreachable)."""
    deleting, moment = parse_time(metadata(pod).get("deletionTimestamp")), parse_time(now)
    grace = metadata(pod).get("deletionGracePeriodSeconds") or 30
    return deleting is not None and moment is not None and not pod_ended(pod) and moment >= deleting + max(grace, 30)


def owned(objects: Sequence[Mapping[str, Any]], owner: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first of `objects` whose owner reference is `owner` (by kind and uid): Kueue's Workload of a JobSet."""
    uid = metadata(owner).get("uid")
    return next((o for o in objects if any(ref.get("kind") == owner.get("kind") and ref.get("uid") == uid
                                           for ref in metadata(o).get("ownerReferences") or [])), None)  # fmt: skip


def marked(workload: Mapping[str, Any], marker: str) -> bool:
    """Whether the workload's pod template carries this label or annotation."""
    template = metadata(spec(workload).get("template"))
    return marker in {**(template.get("labels") or {}), **(template.get("annotations") or {})}


def why_not_running(pod: Mapping[str, Any], events: Sequence[Mapping[str, Any]] = ()) -> str:
    """One line on why a pod is not running: a container's waiting reason, the unschedulable condition, a
    scheduling gate, else its newest warning event, else its phase."""
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting.get("reason") not in ("ContainerCreating", "PodInitializing"):
            message = str(waiting.get("message") or "").strip()
            return f"{waiting['reason']}" + (f": {message}" if message else "")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = str(cond.get("message") or "").strip()
            return f"{cond.get('reason') or 'Unschedulable'}" + (f": {message}" if message else "")
    gates = [g.get("name") for g in spec(pod).get("schedulingGates") or []]
    if gates:
        return f"SchedulingGated: waiting for {', '.join(str(g) for g in gates)}"
    warnings = [e for e in events if e.get("type") == "Warning"]
    if warnings:
        newest = max(warnings, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return f"{newest.get('reason')}: {str(newest.get('message') or '').strip()}"
    return f"{status.get('phase') or 'Pending'}"


# -- endings -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ending:
    """How the run ended: kind is succeeded | failed | deleted | start-timeout | stalled | stopped."""

    kind: str
    reason: str
    recorded: bool = False  # read back from the run's record: already carried out
    record: bool = True  # the record goes on the run's object (not on one that is gone)

    @property
    def succeeded(self) -> bool:
        return self.kind == "succeeded"


#: A condition that is True -> the state it means, per kind of run object (SuccessCriteriaMet and FailureTarget are
#: set before Complete and Failed, while a Job's last pods terminate); a JobSet's terminalState counts as its condition.
ENDED_BY: Mapping[str, Mapping[str, str]] = {
    "Job": {"Complete": SUCCEEDED, "SuccessCriteriaMet": SUCCEEDED, "Failed": FAILED, "FailureTarget": FAILED},
    "JobSet": {"Completed": SUCCEEDED, "Failed": FAILED},
}


def ended(obj: Mapping[str, Any], kind: str = "Job") -> tuple[str, Mapping[str, Any]] | None:
    """(Succeeded | Failed, the condition that says so) of a Job or JobSet its controller ended, else None."""
    terminal = (obj.get("status") or {}).get("terminalState") if kind == "JobSet" else None
    for kind_of_condition, state in ENDED_BY[kind].items():
        cond = condition(obj, kind_of_condition)
        if cond is not None or terminal == kind_of_condition:
            return state, cond or {"type": kind_of_condition}
    return None


def controller_ending(obj: Mapping[str, Any], kind: str) -> Ending | None:
    """The ending the Job (or JobSet) controller wrote into the object's status, or None while it runs."""
    found = ended(obj, kind)
    if found is None:
        return None
    state, cond = found
    if state == SUCCEEDED:
        return Ending("succeeded", f"Succeeded: {kind} {metadata(obj).get('name', CHIEF)} completed")
    reason, message = str(cond.get("reason") or "Failed"), str(cond.get("message") or "").strip()
    return Ending("failed", f"Failed: {reason}" + (f": {message}" if message else ""))


def job_ending(job: Mapping[str, Any]) -> Ending | None:
    """The ending the Job controller wrote into a Job's status, or None while it runs."""
    return controller_ending(job, "Job")


def jobset_ending(jobset: Mapping[str, Any]) -> Ending | None:
    """The ending JobSet's controller wrote into a JobSet's status, or None while it runs: Completed (its success
    policy), Failed with JobSet's reason and message (a failure policy's FailJobSet, ReachedMaxRestarts), else its
    terminalState."""
    return controller_ending(jobset, "JobSet")


def recorded_ending(run: Mapping[str, Any] | None) -> Ending | None:
    """The ending recorded on the run's object (by the supervisor or `tfchart stop`), else None."""
    annotations = annotations_of(run)
    if not annotations.get(ENDING_ANNOTATION):
        return None
    return Ending(str(annotations[ENDING_ANNOTATION]), str(annotations.get(END_REASON_ANNOTATION) or ""), True)


def ending_of(run: Mapping[str, Any] | None) -> Ending | None:
    """The run's ending: its record first (that decision stands), then its controller's conditions (a Job's, or a
    JobSet's: told apart by the object's kind); None while it has not ended."""
    if run is None:
        return None
    recorded = recorded_ending(run)
    if recorded is not None:
        return recorded
    return jobset_ending(run) if run.get("kind") == "JobSet" else job_ending(run)


def is_suspended(run: Mapping[str, Any] | None) -> bool:
    """spec.suspend, or the Suspended condition (JobSet and Job controllers write it)."""
    return bool(spec(run).get("suspend")) or condition(run, "Suspended") is not None


def wanted_of(run: Mapping[str, Any] | None) -> str:
    """The wanted state on the run's object; absent (or not one of WANTED_STATES): SUSPENDED_WANTED while the run
    carries a suspension record (suspended before the annotation existed), else RUNNING_WANTED."""
    value = annotations_of(run).get(WANTED_ANNOTATION)
    if value in WANTED_STATES:
        return str(value)
    return SUSPENDED_WANTED if parse_suspension(annotations_of(run)) else RUNNING_WANTED


def wanted_patch(wanted: str) -> dict[str, Any]:
    """The one merge patch that asks for `wanted` on the run's object."""
    return {"metadata": {"annotations": {WANTED_ANNOTATION: wanted}}}


# -- the view --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunView:
    """What an executor read, as plain dicts (the API's JSON). `kind` is the run object's kind."""

    kind: str  # "Job" | "JobSet"
    run: Mapping[str, Any] | None  # the run's object; None = missing
    stateful_sets: Sequence[Mapping[str, Any]] = ()  # ps/worker (native)
    evaluator: Mapping[str, Any] | None = None  # evaluator Job (native)
    supervisor: Mapping[str, Any] | None = None  # the supervisor's Deployment
    pods: Sequence[Mapping[str, Any]] = ()  # the release's TensorFlow pods
    workload: Mapping[str, Any] | None = None  # Kueue's Workload of a JobSet, if any
    jobs: Sequence[Mapping[str, Any]] = ()  # a JobSet's child Jobs

    @property
    def name(self) -> str:
        return name_of(self.run)

    @property
    def role(self) -> str:
        """The role whose Job owns completion (chief, or worker without a chief; a JobSet's success target)."""
        if self.kind == "JobSet":
            targets = (spec(self.run).get("successPolicy") or {}).get("targetReplicatedJobs") or [CHIEF]
            return str(targets[0])
        return role_of(self.run) or CHIEF

    @property
    def queue(self) -> str:
        """The Kueue queue that manages a JobSet run (its label), else ""."""
        return str((metadata(self.run).get("labels") or {}).get(QUEUE_LABEL) or "") if self.kind == "JobSet" else ""

    @property
    def suspension(self) -> Suspension | None:
        return parse_suspension(annotations_of(self.run))

    def running_pods(self, roles: Sequence[str]) -> list[Mapping[str, Any]]:
        return [pod for pod in self.pods if role_of(pod) in roles and not pod_ended(pod)]


def run_state(view: RunView) -> str:
    """Missing | Succeeded | Failed | Suspended | Running: the conditions and the ending record first (a recorded
    ending other than succeeded counts as Failed: the run did not succeed), then spec.suspend."""
    if view.run is None:
        return MISSING
    ending = ending_of(view.run)
    if ending is not None:
        return SUCCEEDED if ending.succeeded else FAILED
    return SUSPENDED if is_suspended(view.run) else RUNNING
