"""Following the chief's progress: its log tail read, its progress record written, a stall found."""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

from tfdcontract import (
    COMPLETION_INDEX_ANNOTATION,
    FAILED,
    JOB_NAME_LABEL,
    PROGRESS_ANNOTATION,
    RUNNING,
    SUCCEEDED,
    format_job_progress,
    parse_job_progress,
)
from tfdcontract.lifecycle import Ending
from tfdcontract.runstate import parse_time
from trainer.kube import NO_ANSWER, ApiException
from trainer.progress import LOG_TAIL_LINES, Report, next_progress, report, stalled, worth_writing
from trainer.supervisor_act import Acting

log = logging.getLogger("trainer.supervisor")


class Following(Acting):
    """The progress record on the chief's own Job, and the stall clock kept in it."""

    own_uid: str | None
    step_seen: tuple[int, float | None] | None

    def follow_progress(self, run: Mapping[str, Any], now: float, ending: Ending | None, suspended: bool,
                        started: float | None) -> str | None:
        """Reads the chief's report and writes its progress on the chief's Job (throttled; at once on a
        change of state, and the last one at the ending); returns a stall's reason. A failure to read or
        write is a warning: it never holds up an ending, and a log that cannot be read ends nothing."""
        s = self.settings
        try:
            job = self.kind.own_job(self, run)
            if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
                return None  # not created yet (a JobSet's dependsOn), or deleted with its run
            uid = (job.get("metadata") or {}).get("uid")
            if self.own_uid is not None and uid != self.own_uid:
                log.info("the chief's Job %s was created again: its stall clock starts over", s.chief_own_job)
                self.step_seen = None
            self.own_uid = uid
            stored = parse_job_progress(((job.get("metadata") or {}).get("annotations") or {}).get(
                PROGRESS_ANNOTATION))
            seen, answered = (None, True) if suspended else self.read_report()
            if seen is not None and (self.step_seen is None or self.step_seen[0] != seen.step):
                self.step_seen = (seen.step, None if self.step_seen is None else now)
            state = RUNNING if ending is None else SUCCEEDED if ending.succeeded else FAILED
            new = next_progress(stored, seen, now, suspended=suspended, job_state=state,
                                step_since=self.step_seen[1] if self.step_seen and seen else None)
            if new is not None and worth_writing(stored, new, now, 0.0 if ending else s.progress_interval_seconds):
                self.annotate_job({PROGRESS_ANNOTATION: format_job_progress(new)}, s.chief_own_job)
        except ApiException as error:
            if not error.status:
                log.warning("cannot follow the chief's progress: %s", error.reason)
            else:
                log.warning("cannot follow the chief's progress: HTTP %s %s (does the supervisor's Role allow it?)",
                            error.status, error.reason)
            return None
        except NO_ANSWER as error:
            log.warning("cannot follow the chief's progress: %s", error)
            return None
        if ending is not None or suspended or not s.stall_timeout_seconds or started is None or not answered:
            return None
        return stalled(new, self.kind.clock_start(started, job), now, s.stall_timeout_seconds)

    def chief_pod(self) -> Mapping[str, Any] | None:
        """The chief's newest pod: of the chief's Job, its task 0 when the Job is Indexed."""
        selector = urllib.parse.quote(f"{JOB_NAME_LABEL}={self.settings.chief_own_job}")
        pods = (self.api("GET", self.path("", "pods") + f"?labelSelector={selector}") or {}).get("items") or []
        chiefs = [p for p in pods if str(((p.get("metadata") or {}).get("annotations") or {}).get(
            COMPLETION_INDEX_ANNOTATION, "0")) == "0"]
        return max(chiefs, key=lambda p: (parse_time(p["metadata"].get("creationTimestamp")) or 0.0,
                                          str(p["metadata"].get("name"))), default=None)

    def read_report(self) -> tuple[Report | None, bool]:
        """The chief's report in its log tail, and whether the API answered (a pod not started yet, or gone,
        is an answer: nothing to read; a refusal or no answer is not)."""
        try:
            pod = self.chief_pod()
            if pod is None:
                return None, True
            text = self.kube.pod_log(str(pod["metadata"]["name"]), self.settings.progress_container, LOG_TAIL_LINES)
        except ApiException as error:
            if error.status in (400, 404):  # waiting to start, or deleted meanwhile
                return None, True
            if not error.status:
                log.warning("cannot read the chief's log: %s", error.reason)
            else:
                log.warning("cannot read the chief's log: HTTP %s %s (does the supervisor's Role allow pods/log?)",
                            error.status, error.reason)
            return None, False
        except NO_ANSWER as error:
            log.warning("cannot read the chief's log: %s", error)
            return None, False
        return report(text), True
