"""Deciding: what the supervisor reads besides the run's ending (times, the pods' states); the ending itself and the
run's state are tfdcontract.lifecycle's (one model, shared with tfchart and `tfchart local`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from tfdcontract import STALLED, STALLED_REASON_PREFIX
from tfdcontract.lifecycle import Ending


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

