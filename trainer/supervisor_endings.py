"""Deciding: a run's ending from what the cluster stores (the controllers' conditions, the pods' states)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tfdcontract import CHIEF, STALLED, STALLED_REASON_PREFIX


@dataclass(frozen=True)
class Ending:
    """How the run ended: kind is succeeded | failed | deleted | start-timeout | stalled."""

    kind: str
    reason: str
    recorded: bool = False  # read back from the Job's record: already carried out
    record: bool = True  # the record goes on the run's object (not on one that is gone)

    @property
    def succeeded(self) -> bool:
        return self.kind == "succeeded"


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def job_ending(job: Mapping[str, Any]) -> Ending | None:
    """The ending the Job controller wrote into a chief Job's status, or None while it runs."""
    name = (job.get("metadata") or {}).get("name", CHIEF)
    for kind in ("Complete", "SuccessCriteriaMet"):
        if condition(job, kind):
            return Ending("succeeded", f"Succeeded: Job {name} completed")
    for kind in ("Failed", "FailureTarget"):
        cond = condition(job, kind)
        if cond:
            reason = str(cond.get("reason") or "Failed")
            message = str(cond.get("message") or "").strip()
            return Ending("failed", f"Failed: {reason}" + (f": {message}" if message else ""))
    return None


def jobset_ending(jobset: Mapping[str, Any]) -> Ending | None:
    """The ending JobSet's controller wrote into a JobSet's status, or None while it runs: Completed (its success
    policy: the chief's Job completed), Failed with JobSet's reason and message (a failure policy rule's FailJobSet,
    ReachedMaxRestarts), else its terminalState."""
    name = (jobset.get("metadata") or {}).get("name", "")
    terminal = (jobset.get("status") or {}).get("terminalState")
    if condition(jobset, "Completed") or terminal == "Completed":
        return Ending("succeeded", f"Succeeded: JobSet {name} completed")
    cond = condition(jobset, "Failed")
    if cond or terminal == "Failed":
        reason = str((cond or {}).get("reason") or "Failed")
        message = str((cond or {}).get("message") or "").strip()
        return Ending("failed", f"Failed: {reason}" + (f": {message}" if message else ""))
    return None


def parse_time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def now_text(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pending_ending(reason: str) -> Ending:
    """The ending the supervisor began (its reason on the Job, the record not yet written)."""
    return Ending(STALLED if reason.startswith(STALLED_REASON_PREFIX) else "start-timeout", reason)


def pod_is_up(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded")


def why_not_running(pod: Mapping[str, Any], events: list[Mapping[str, Any]]) -> str:
    """One line on why a pod is not running: a container's waiting reason, the unschedulable
    condition, a scheduling gate, else its newest warning event."""
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
    gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
    if gates:
        return f"SchedulingGated: waiting for {', '.join(str(g) for g in gates)}"
    warnings = [e for e in events if e.get("type") == "Warning"]
    if warnings:
        newest = max(warnings, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return f"{newest.get('reason')}: {str(newest.get('message') or '').strip()}"
    return f"{status.get('phase') or 'Pending'}"

