"""`tfchart wait`: block until a release's run ends, and say how. The run's fate is read from the cluster
only (the run's Job: its Complete/Failed conditions, else the ending recorded on it by the supervisor or
`tfchart stop`), polled at a bounded interval, so a wait started after the run ended answers at once. Once
the run was seen, a few failed polls in a row (an API server restarting) are waited out. A suspended run
has not ended: the wait goes on (and says so once each time the run is seen suspended). Nor has a run whose object
`tfchart upgrade --recreate` deletes (it marks it first, RECREATING_ANNOTATION): the wait goes on for the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.objects import JobInfo, find_run
from tfchart.errors import KubernetesError, TfchartError
from tfdcontract import RECREATING_ANNOTATION, release_selector
from tfdcontract.runstate import annotations_of

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

POLL_SECONDS = 2.0
TIMED_OUT_EXIT = 124  # as timeout(1): the run did not end in time (it still runs)
NO_RUN_EXIT = 3  # no run to wait for: the release (or its run's Job) is not there, or was deleted
FAILED_POLLS_TOLERATED = 5  # in a row, once the run was seen


class TimedOut(TfchartError):
    """A wait given up at its --timeout (`tfchart wait`, `stop`, `suspend`, `resume`)."""

    exit_code = TIMED_OUT_EXIT


class NoRun(KubernetesError):
    exit_code = NO_RUN_EXIT


@dataclass(frozen=True)
class Ended:
    state: str  # Succeeded | Failed (a run stopped early counts as Failed: it did not succeed)
    reason: str


def wait(
    api: KubeApi, release: str, namespace: str, timeout: float | None, *,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    notice: Callable[[str], None] = lambda line: None,
) -> Ended:  # fmt: skip
    """The run's ending, once it has one; raises TimedOut after `timeout` seconds (None: never). `notice`
    gets a line when the run is found suspended (once per suspension)."""
    deadline = None if timeout is None else clock() + timeout
    seen, failed_polls, suspended, recreating = False, 0, False, False
    while True:
        left = None if deadline is None else deadline - clock()  # before the look: a run ended by then is an answer
        try:
            run = find_run(api, release, namespace, api.items("Job", namespace, release_selector(release)) or [])
        except AccessDenied:
            raise
        except KubernetesError:  # an API server restarting or a proxy's hiccup must not end an hours-long wait
            failed_polls += 1
            if not seen or failed_polls > FAILED_POLLS_TOLERATED:
                raise
        else:
            failed_polls, info = 0, run.info
            if info.state == "Missing" and not recreating:  # none, and none is being re-created
                gone = "was deleted while waiting" if seen else f"has no run in namespace {namespace}"
                raise NoRun(f"release {release} {gone}: no chief (or workers') Job carries its labels, nor a JobSet",
                            "check the release name and namespace (`tfchart list -A`); a finished run's Job (or "
                            "JobSet) may have been removed by ttlSecondsAfterFinished: its result is in "
                            "<storage>/status.json")  # fmt: skip
            marked = info.state == "Missing" or RECREATING_ANNOTATION in annotations_of(run.document)
            if marked and not recreating:
                notice(f"release {release}'s run is being re-created (`tfchart upgrade --recreate` deletes its "
                       f"{run.kind}): waiting for the new run to end")
            recreating, ended = marked, None if marked else ending_of(info)
            if ended is not None:
                return ended
            if info.state == "Suspended" and not suspended:
                notice(f"release {release}'s run is suspended (since {info.suspended_since}): it has not ended, "
                       f"waiting until it is resumed (`tfchart resume {release} -n {namespace}`) and ends")
            suspended = info.state == "Suspended"
        seen = True
        if left is not None and left <= 0:
            still, whole = "is suspended" if suspended else "still runs", int(timeout or 0)
            after = f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{timeout:g}s"
            raise TimedOut(f"release {release}'s run has not ended after {after}: it {still}",
                           f"see where it is: `tfchart status {release} -n {namespace}`; wait longer with "
                           "--timeout, or leave it out to wait until the run ends")
        sleep(POLL_SECONDS if left is None else min(POLL_SECONDS, left))


def ending_of(run: JobInfo) -> Ended | None:
    if run.state in ("Succeeded", "Failed"):
        detail = f"{run.reason}: {run.message}" if run.message else run.reason
        return Ended(run.state, "; ".join(part for part in (detail, run.end_reason) if part))
    if run.ending:  # stopped (`tfchart stop --end-run`) or ended by the supervisor before a Job condition
        return Ended("Failed", run.end_reason or f"the run ended ({run.ending}) before its {run.kind} completed")
    return None
