"""Deciding: what the supervisor reads besides the run's ending (times, the pods' states); the ending itself and the
run's state are tfdcontract.lifecycle's (one model, shared with tfchart and `tfchart local`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfdcontract import STALLED, STALLED_REASON_PREFIX
from tfdcontract.lifecycle import Ending
from tfdcontract.runstate import why_not_running as why_not_running  # moved there: one reader of a pod's state


def pending_ending(reason: str) -> Ending:
    """The ending the supervisor began (its reason on the Job, the record not yet written)."""
    return Ending(STALLED if reason.startswith(STALLED_REASON_PREFIX) else "start-timeout", reason)


def pod_is_up(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded")
