"""The run supervisor: frees a release's accelerators on every ending of its chief (standard library only).

The chart runs this as the Deployment ``<fullname>-supervisor`` (``python -m trainer.supervisor``),
beside the training, under its own ServiceAccount whose Role names exactly the objects it touches.
It never depends on code inside the chief's image, so a bring-your-own chief command is supervised
the same way as the project's trainer.

A run is one Job object (the chief Job, or the workers' Job without a chief): the supervisor
follows that Job by name, and a Job deleted and created again (``tfchart upgrade --recreate``) is a
new run that it supervises from the start. It watches the Job (Kubernetes' list+watch by name,
``fieldSelector=metadata.name=<job>``: :class:`Watcher`) and, on each event, reads the Job again and its ending
from its status, the way the Job controller writes it, so an ending is acted on within a second of being written.
The event only wakes it: every decision rests on a fresh read, so a watch resumed from its last resourceVersion
after a cut, or listed again after a 410, misses no ending, and a restarted supervisor decides the same. A look
every TFD_POLL_SECONDS stays the backstop (the watch refused or failing) and keeps the time-based work (the chief's
progress, the stall clock); a start timeout and the wait for a deleted Job are looked at when due. The endings:

* ``Complete`` (or ``SuccessCriteriaMet``): ``succeeded``;
* ``Failed`` (or ``FailureTarget``): ``failed``, with the controller's reason (BackoffLimitExceeded
  after the last retry, DeadlineExceeded for ``activeDeadlineSeconds``, PodFailurePolicy for exit
  code 2);
* the Job deleted by hand: ``deleted``, at once: seen being deleted (Foreground, its pods terminating), or in
  the watch's DELETED event (its last state). ``tfchart upgrade --recreate`` marks a Job it deletes
  (``tf-distributed.io/recreating``): that one is waited for, up to ``TFD_CHIEF_MISSING_SECONDS``, since it is created
  again; so is one whose deletion this supervisor did not see (restarted meanwhile, or a watch history expired);
* with ``TFD_START_TIMEOUT_SECONDS``: TensorFlow pods (watched until the run started) not all running that long
  after the Job was created (or resumed): ``start-timeout``, naming the pod and its reason (waiting reason,
  unschedulable condition or latest warning event); the Job is then ended too
  (``activeDeadlineSeconds: 1``). Once every pod was up, the run has started:
  ``tf-distributed.io/started-at`` on the Job says so, and no start timeout applies to that run again;
* with ``TFD_STALL_TIMEOUT_SECONDS``: a started run whose chief's step has not changed for that long:
  ``stalled`` (``Stalled: step N has not risen for S s``), the Job ended as for a start timeout.

A suspended Job (``spec.suspend``) is none of these: it is waited for, and the stall clock restarts
when it resumes.

With ``TFD_PROGRESS=true`` it also reads the tail of the chief container's log each poll (its
``tfd-status:`` line, else its step line; trainer/progress.py) and writes what it says on the chief's
own Job (``tf-distributed.io/progress``, tfdcontract.JobProgress), at most once per 15 s besides every
change of state and the last one at the ending. The stall clock lives in that record, so a restarted
supervisor continues it.

On an ending it scales the ps/worker StatefulSets to 0 unless the policy for that ending is ``keep``
(``TFD_ON_SUCCESS`` / ``TFD_ON_FAILURE``), suspends the evaluator Job, records the ending on the
run's Job (``tf-distributed.io/ending``, ``end-reason``, ``ended-at``; the chart reads it back with
``lookup`` so that a later ``helm upgrade`` of the same run keeps them at 0), and scales its own
Deployment to 0. Its decisions rest only on what the cluster stores (the Job's status and these
annotations), and the record is written last: a supervisor restarted at any point decides as the
first one would have, and one restarted after the record only scales itself down.

Under ``workload.kind=jobset`` (``TFD_RUN_KIND=JobSet``) the run's object is the JobSet ``TFD_RUN_NAME``
(``jobset.x-k8s.io/v1alpha2``), which JobSet's controller ends and cleans up itself: its ending is read from its
``Completed`` / ``Failed`` conditions (the latter with JobSet's reason and message), its deletion and
``spec.suspend`` as a Job's (it is watched by name as the Job is), and the records go on it; the progress record
goes on the chief's own Job ``TFD_CHIEF_JOB`` (``<jobset>-chief-0``). A start timeout does not apply there. A
stall writes its reason on the JobSet, then sets the chief Job's ``activeDeadlineSeconds`` to 1: the Job controller
fails it with DeadlineExceeded, JobSet's ``DeadlineEndsTheRun`` rule fails the run and JobSet deletes the other
Jobs, which frees their GPUs; the supervisor scales nothing but itself. JobSet deletes the chief's Job when another Job
fails the run, and re-creates it on a restart (its failure policy's RestartJobSet): the run is the same, and
the stall clock starts over with the new Job (from its creation, and its own progress record). Everything kind
specific is in :class:`JobRun` and :class:`JobSetRun`.

A real API server cannot run on the development machine: the tests point ``TFD_KUBE_API`` at a
loopback server that keeps objects and records every request (tests/kubeapi.py).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from tfdcontract import (
    CHIEF,
    COMPLETION_INDEX_ANNOTATION,
    END_REASON_ANNOTATION,
    ENDING_ANNOTATION,
    FAILED,
    JOB_NAME_LABEL,
    PROGRESS_ANNOTATION,
    RECREATING_ANNOTATION,
    RUNNING,
    STALLED,
    STALLED_REASON_PREFIX,
    STARTED_AT_ANNOTATION,
    SUCCEEDED,
    ending_annotations,
    format_job_progress,
    parse_job_progress,
    run_ended,
)
from trainer.cleanup import KubeTarget, call, open_request, read_text, scale_path, target_from_env
from trainer.progress import (
    LOG_TAIL_LINES,
    WRITE_INTERVAL_SECONDS,
    Report,
    next_progress,
    report,
    stalled,
    worth_writing,
)

log = logging.getLogger("trainer.supervisor")

POLICIES = ("scaleDown", "keep")
RUN_KINDS = ("Job", "JobSet")  # the run's object: native, its Job; workload.kind=jobset, the JobSet
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
REQUEST_ERRORS = (urllib.error.URLError, OSError, ssl.SSLError, ValueError)
# One watch request lasts this long (timeoutSeconds; the API server ends it, and it is made again from the last
# resourceVersion); its socket waits a little longer for the server's clean end.
WATCH_SECONDS = 300
WATCH_READ_MARGIN_SECONDS = 30
# A watch that cannot be made (the API away, a refusal) is tried again after this long, doubling up to the poll.
WATCH_RETRY_SECONDS = 0.1


class SupervisorConfigError(Exception):
    """The supervisor's environment is incomplete or contradictory (exit 2)."""


@dataclass(frozen=True)
class Settings:
    """What the chart tells the supervisor, from its container's environment."""

    chief_job: str
    statefulsets: tuple[str, ...]
    evaluator_job: str | None = None
    deployment: str | None = None
    on_success: str = "scaleDown"
    on_failure: str = "scaleDown"
    start_timeout_seconds: float = 0.0
    pod_selector: str = ""
    expected_pods: int = 0
    poll_seconds: float = 10.0
    chief_missing_seconds: float = 60.0
    progress: bool = False  # read the chief's log and write its progress on its Job
    stall_timeout_seconds: float = 0.0
    # The chief's own Job and container, whose pods' log says the progress and whose deadline ends the
    # run (native: the run's Job itself, the chief Job or the workers' Job).
    progress_job: str = ""
    progress_container: str = CHIEF
    progress_interval_seconds: float = WRITE_INTERVAL_SECONDS
    # The run's object: native, the Job chief_job; workload.kind=jobset, the JobSet run_name, whose chief's Job
    # (chief_job, <jobset>-chief-0) gets the deadline that ends the run.
    run_kind: str = "Job"
    run_name: str = ""

    @property
    def chief_own_job(self) -> str:
        return self.progress_job or self.chief_job

    @property
    def run_object(self) -> str:
        """The name of the run's object (its Job, or its JobSet)."""
        return self.run_name or self.chief_job

    @property
    def watches_start(self) -> bool:
        """Whether the run's start (every TensorFlow pod up) is looked for: a start timeout or stalls."""
        return bool(self.start_timeout_seconds or self.stall_timeout_seconds)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def text(name: str) -> str:
            return env.get(name, "").strip()

        def number(name: str, default: float) -> float:
            raw = text(name)
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise SupervisorConfigError(f"{name}={raw!r} is not a number of seconds") from None
            if value < 0:
                raise SupervisorConfigError(f"{name}={raw!r} must be 0 or more")
            return value

        chief = text("TFD_CHIEF_JOB")
        if not chief:
            raise SupervisorConfigError("TFD_CHIEF_JOB (the chief Job's name) is not set")
        policies = {}
        for name in ("TFD_ON_SUCCESS", "TFD_ON_FAILURE"):
            policies[name] = text(name) or "scaleDown"
            if policies[name] not in POLICIES:
                raise SupervisorConfigError(f"{name}={policies[name]!r}: expected one of {', '.join(POLICIES)}")
        timeout = number("TFD_START_TIMEOUT_SECONDS", 0.0)
        stall = number("TFD_STALL_TIMEOUT_SECONDS", 0.0)
        selector = text("TFD_POD_SELECTOR")
        expected = int(number("TFD_EXPECTED_PODS", 0.0))
        for name, value in (("TFD_START_TIMEOUT_SECONDS", timeout), ("TFD_STALL_TIMEOUT_SECONDS", stall)):
            if value and (not selector or expected < 1):
                raise SupervisorConfigError(
                    f"{name} needs TFD_POD_SELECTOR and TFD_EXPECTED_PODS (the TensorFlow pods)"
                )
        progress = text("TFD_PROGRESS").lower() or "false"
        if progress not in ("true", "false"):
            raise SupervisorConfigError(f"TFD_PROGRESS={progress!r}: expected true or false")
        if stall and progress != "true":
            raise SupervisorConfigError("TFD_STALL_TIMEOUT_SECONDS needs TFD_PROGRESS=true (the stall clock is kept "
                                        "in the progress record)")
        kind, run_name = text("TFD_RUN_KIND") or "Job", text("TFD_RUN_NAME")
        if kind not in RUN_KINDS:
            raise SupervisorConfigError(f"TFD_RUN_KIND={kind!r}: expected one of {', '.join(RUN_KINDS)}")
        if kind == "JobSet" and not run_name:
            raise SupervisorConfigError("TFD_RUN_KIND=JobSet needs TFD_RUN_NAME (the JobSet's name)")
        if kind == "JobSet" and timeout:
            raise SupervisorConfigError("TFD_START_TIMEOUT_SECONDS does not apply to a JobSet: it creates the chief's "
                                        "Job, whose deadline ends the run, only once the roles before it are Ready")
        return cls(
            chief_job=chief,
            statefulsets=tuple(n.strip() for n in text("TFD_STATEFULSETS").split(",") if n.strip()),
            evaluator_job=text("TFD_EVALUATOR_JOB") or None,
            deployment=text("TFD_SUPERVISOR_DEPLOYMENT") or None,
            on_success=policies["TFD_ON_SUCCESS"],
            on_failure=policies["TFD_ON_FAILURE"],
            start_timeout_seconds=timeout,
            pod_selector=selector,
            expected_pods=expected,
            poll_seconds=max(0.1, number("TFD_POLL_SECONDS", 10.0)),
            chief_missing_seconds=number("TFD_CHIEF_MISSING_SECONDS", 60.0),
            progress=progress == "true",
            stall_timeout_seconds=stall,
            progress_job=text("TFD_PROGRESS_JOB"),
            progress_container=text("TFD_PROGRESS_CONTAINER") or CHIEF,
            run_kind=kind,
            run_name=run_name,
        )


@dataclass(frozen=True)
class Ending:
    """How the run ended: kind is succeeded | failed | deleted | start-timeout | stalled."""

    kind: str
    reason: str
    recorded: bool = False  # read back from the Job's record: already carried out

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


class Watcher:
    """Kubernetes' list+watch of the objects of one list URL (`path`, `query`: its selectors), in a thread: each
    event (and each list) calls `heard`, which only wakes the supervisor's loop; what to do is then decided from a
    fresh read of the cluster, never from the event. A watch ended by the server (timeoutSeconds) or cut is made
    again from the last resourceVersion seen (the events' and the bookmarks'), so none is missed; a resourceVersion
    too old for the API server (410 Gone, as an HTTP status or an ERROR event) is listed again, and that list too
    wakes the loop. A refusal (403: the Role does not allow watch) or an API away is tried again, doubling the
    wait up to `retry_max`: meanwhile the loop's periodic look does the work, as before."""

    def __init__(self, name: str, path: str, query: Mapping[str, str], target: Callable[[], KubeTarget],
                 heard: Callable[[str, Mapping[str, Any]], None], retry_max: float) -> None:
        self.name, self.path, self.query, self.target, self.heard = name, path, dict(query), target, heard
        self.retry_max = retry_max
        self.version: str | None = None  # the last resourceVersion seen; None: list first
        self.lists = self.watches = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True, name=f"watch-{name}")

    def start(self) -> Watcher:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()

    def url(self, **more: str) -> str:
        return f"{self.path}?{urllib.parse.urlencode({**self.query, **more})}"

    def run(self) -> None:
        retry = WATCH_RETRY_SECONDS
        while not self.stopping.is_set():
            try:
                if self.version is None:
                    self.relist()
                if self.follow():
                    retry = WATCH_RETRY_SECONDS
                    continue
            except urllib.error.HTTPError as error:
                if error.code == 410:  # too old: list again
                    log.info("watch of %s: resourceVersion %s expired; listing again", self.name, self.version)
                    self.version = None
                    continue
                log.warning("cannot watch %s: HTTP %s %s (does the supervisor's Role allow list and watch?); "
                            "looking every poll meanwhile", self.name, error.code, error.reason)
            except (*REQUEST_ERRORS, http.client.HTTPException) as error:
                log.info("watch of %s cut (%s); resuming from resourceVersion %s", self.name, error, self.version)
            self.stopping.wait(retry)
            retry = min(2 * retry, self.retry_max)

    def relist(self) -> None:
        listing = call(self.target(), "GET", self.url())[1]
        self.lists += 1
        metadata = listing.get("metadata")
        self.version = str(metadata.get("resourceVersion") or "") or None if isinstance(metadata, dict) else None
        self.heard("LISTED", listing)

    def follow(self) -> bool:
        """One watch request, read to its end; True when it ended as the server ends it (or expired)."""
        query = {"watch": "1", "resourceVersion": self.version or "0", "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(WATCH_SECONDS)}
        with open_request(self.target(), "GET", self.url(**query),
                          timeout=WATCH_SECONDS + WATCH_READ_MARGIN_SECONDS) as stream:
            self.watches += 1
            for line in stream:
                if self.stopping.is_set():
                    return True
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info("watch of %s: resourceVersion %s expired; listing again", self.name, self.version)
                        self.version = None
                        return True
                    raise ValueError(f"watch of {self.name}: {obj.get('code')} {obj.get('message')}")
                self.version = str((obj.get("metadata") or {}).get("resourceVersion") or self.version)
                if kind != "BOOKMARK":
                    self.heard(kind, obj)
        return True


class JobRun:
    """workload.kind=native: the run's object is its Job (the chief Job, or the workers' Job without a chief), which
    is also the chief's own Job, and which a 1 s deadline ends (the Job controller fails it)."""

    noun = "chief Job"

    def path(self, sup: Supervisor) -> str:
        return sup.job_path(sup.settings.run_object)

    def list_path(self, sup: Supervisor) -> str:
        """The list (and watch) URL of the run's object's kind; the Role allows it with its name's field selector."""
        return sup.job_path("")

    def ending(self, run: Mapping[str, Any]) -> Ending | None:
        return job_ending(run)

    def suspended(self, run: Mapping[str, Any]) -> bool:
        return bool((run.get("spec") or {}).get("suspend"))

    def end(self, sup: Supervisor, reason: str) -> None:
        """Ends a run that cannot start or stalled: its reason and the deadline, in one PATCH of its Job."""
        body = {"metadata": {"annotations": {END_REASON_ANNOTATION: reason}}, "spec": {"activeDeadlineSeconds": 1}}
        sup.api("PATCH", self.path(sup), body)
        log.warning("%s; ending the chief Job %s", reason, sup.settings.run_object)

    def carry_out(self, sup: Supervisor, reason: str) -> None:
        """An ending begun by a supervisor killed since (its reason on the run's object): the deadline went with it."""

    def own_job(self, sup: Supervisor, run: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The chief's own Job (whose pods' log says the progress, which carries the record)."""
        s = sup.settings
        return run if s.chief_own_job == s.run_object else sup.api("GET", sup.job_path(s.chief_own_job))

    def clock_start(self, started: float, own_job: Mapping[str, Any]) -> float:
        """When the stall clock may start at the earliest: the run's start."""
        return started


class JobSetRun(JobRun):
    """workload.kind=jobset: the run's object is the JobSet, which outlives its child Jobs; the chief's own Job
    `<jobset>-chief-0` (settings.chief_job) carries the progress, and its deadline ends the run through JobSet's
    DeadlineEndsTheRun rule (FailJobSet), JobSet then deleting the other Jobs. JobSet deletes that Job when another
    Job fails the run, and creates it again on a RestartJobSet: the stall clock starts over with it."""

    noun = "JobSet"

    def path(self, sup: Supervisor) -> str:
        return sup.path(JOBSET_API, "jobsets", sup.settings.run_object)

    def list_path(self, sup: Supervisor) -> str:
        return sup.path(JOBSET_API, "jobsets")

    def ending(self, run: Mapping[str, Any]) -> Ending | None:
        return jobset_ending(run)

    def suspended(self, run: Mapping[str, Any]) -> bool:
        return super().suspended(run) or condition(run, "Suspended") is not None

    def end(self, sup: Supervisor, reason: str) -> None:
        """The reason on the JobSet first (a restarted supervisor reads it back and carries the ending out), then
        the chief Job's deadline."""
        sup.api("PATCH", self.path(sup), {"metadata": {"annotations": {END_REASON_ANNOTATION: reason}}})
        sup.api("PATCH", sup.job_path(sup.settings.chief_job), {"spec": {"activeDeadlineSeconds": 1}})
        log.warning("%s; ending the JobSet %s through its chief Job %s's deadline", reason, sup.settings.run_object,
                    sup.settings.chief_job)

    def carry_out(self, sup: Supervisor, reason: str) -> None:
        """The chief Job's deadline, unless it is set, the Job ended or is gone (the JobSet failed meanwhile)."""
        job = sup.api("GET", sup.job_path(sup.settings.chief_job))
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp") or job_ending(job) or \
                (job.get("spec") or {}).get("activeDeadlineSeconds") == 1:
            return
        sup.api("PATCH", sup.job_path(sup.settings.chief_job), {"spec": {"activeDeadlineSeconds": 1}})
        log.warning("%s; ending the JobSet %s through its chief Job %s's deadline", reason, sup.settings.run_object,
                    sup.settings.chief_job)

    def own_job(self, sup: Supervisor, run: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return sup.api("GET", sup.job_path(sup.settings.chief_own_job))

    def clock_start(self, started: float, own_job: Mapping[str, Any]) -> float:
        """The later of the run's start and the chief Job's creation: a RestartJobSet makes it again."""
        created = parse_time((own_job.get("metadata") or {}).get("creationTimestamp"))
        return max(started, created or started)


JOB_RUN, JOBSET_RUN = JobRun(), JobSetRun()


@dataclass
class Supervisor:
    """One supervised run. ``clock`` and ``sleep`` are injectable for tests: with ``sleep``, the loop sleeps the
    poll between two looks and watches nothing; without, it waits for a watch event or the poll."""

    settings: Settings
    target: KubeTarget
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] | None = None
    started_at: float = field(default=0.0)
    job_uid: str | None = None  # the run (its Job or JobSet object) last seen
    own_uid: str | None = None  # the chief's own Job last seen (a JobSet creates it again on a restart)
    missing_since: float | None = None
    stopping: bool = False
    heartbeat: float = field(default_factory=time.monotonic)
    # The chief's step at the last look, and when this supervisor saw it change to that (None: not seen
    # changing); trainer.progress.next_progress refines the stored clock with it, which stays the clock a
    # restarted supervisor continues.
    step_seen: tuple[int, float | None] | None = None
    # Re-reads the service-account token before each request: the chart projects a short-lived
    # token that the kubelet rotates in place.
    fresh_target: Callable[[], KubeTarget | None] | None = None
    woken: threading.Event = field(default_factory=threading.Event)  # a watch saw something: look now
    run_watch: Watcher | None = None
    pod_watch: Watcher | None = None  # while the run has not started (a start timeout, stalls)
    started_seen: bool = False  # the last look found the run started
    # The run's object's last state, from its watch's DELETED event: its uid, and whether `tfchart upgrade
    # --recreate` marked it (it is then created again).
    gone: tuple[str, bool] | None = None
    # When the last look's time-based check is due (the chief missing long enough, a start timeout): the loop
    # looks then rather than at the next poll.
    due: float | None = None

    def alive(self) -> bool:
        """The poll loop (or, once done, the idle loop) went round recently: the liveness probe."""
        return time.monotonic() - self.heartbeat < max(3 * self.settings.poll_seconds, 60.0)

    @property
    def namespace(self) -> str:
        return self.target.namespace

    @property
    def kind(self) -> JobRun:
        """What differs between the kinds of the run's object (JobRun, JobSetRun)."""
        return JOBSET_RUN if self.settings.run_kind == "JobSet" else JOB_RUN

    def current_target(self) -> KubeTarget:
        return (self.fresh_target() if self.fresh_target else None) or self.target

    def api(self, method: str, path: str, body: Mapping[str, object] | None = None) -> dict[str, Any] | None:
        """A request; None for 404. Other HTTP errors propagate."""
        try:
            return call(self.current_target(), method, path, body)[1]
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def path(self, group: str, resource: str, name: str = "") -> str:
        base = "/api/v1" if group == "" else f"/apis/{group}"
        return f"{base}/namespaces/{self.namespace}/{resource}" + (f"/{name}" if name else "")

    def job_path(self, name: str) -> str:
        return self.path("batch/v1", "jobs", name)

    # -- watching --------------------------------------------------------------------------------

    def observe(self) -> Ending | None:
        """One look at the run's object, its Job or JobSet (and, until the run started, its TensorFlow pods)."""
        name, kind = self.settings.run_object, self.kind
        job = self.api("GET", kind.path(self))
        now = self.clock()
        metadata = (job or {}).get("metadata") or {}
        if job is None or metadata.get("deletionTimestamp"):
            deleted = Ending("deleted", f"{kind.noun} {name} was deleted before it finished")
            if job is not None:  # being deleted, its pods terminating: by --recreate (marked), created again
                self.missing_since = None
                return None if RECREATING_ANNOTATION in (metadata.get("annotations") or {}) else deleted
            if self.gone is not None and self.job_uid is not None and self.gone == (self.job_uid, False):
                return deleted  # its deletion seen by the watch, not one --recreate made
            self.missing_since = now if self.missing_since is None else self.missing_since
            waited = now - self.missing_since
            if waited < self.settings.chief_missing_seconds:
                self.due = self.missing_since + self.settings.chief_missing_seconds
                return None
            return deleted if self.job_uid else Ending("deleted", f"{kind.noun} {name} not found for {waited:.0f} s")
        if self.job_uid is not None and metadata.get("uid") != self.job_uid:
            log.info("%s %s was created again: a new run", kind.noun, name)
            self.step_seen, self.own_uid = None, None
        self.job_uid, self.missing_since = metadata.get("uid"), None
        annotations = metadata.get("annotations") or {}
        if run_ended(annotations):
            return Ending(str(annotations[ENDING_ANNOTATION]), str(annotations.get(END_REASON_ANNOTATION, "")),
                          recorded=True)
        if annotations.get(END_REASON_ANNOTATION):  # a start timeout or a stall is ending it
            kind.carry_out(self, str(annotations[END_REASON_ANNOTATION]))
            return pending_ending(str(annotations[END_REASON_ANNOTATION]))
        ending = kind.ending(job)
        # A suspended run is waited for: no start timeout, no stall (tfchart suspend, Kueue).
        suspended = ending is None and kind.suspended(job)
        started = parse_time(annotations.get(STARTED_AT_ANNOTATION))
        if ending is None and not suspended and started is None and self.settings.watches_start:
            ending, started = self.check_start(job, now)
        self.started_seen = started is not None
        if self.settings.progress:
            stall = self.follow_progress(job, now, ending, suspended, started)
            if stall:
                self.end_chief(stall)
                return Ending(STALLED, stall)
        return ending

    def check_start(self, job: Mapping[str, Any], now: float) -> tuple[Ending | None, float | None]:
        """A start timeout's ending, else None; and when the run started (now, once every pod is up)."""
        pods = (self.api("GET", self.path("", "pods") + "?labelSelector="
                         + urllib.parse.quote(self.settings.pod_selector)) or {}).get("items") or []
        up = [p for p in pods if pod_is_up(p)]
        if len(up) >= self.settings.expected_pods:
            self.annotate_run({STARTED_AT_ANNOTATION: now_text(now)})
            log.info("all %d TensorFlow pods are running: the run started, the start timeout no longer applies",
                     len(up))
            return None, now
        # From the Job's creation, or its (re)start: the Job controller sets startTime again at a resume.
        created = max((t for t in (parse_time((job.get("metadata") or {}).get("creationTimestamp")),
                                   parse_time((job.get("status") or {}).get("startTime"))) if t is not None),
                      default=self.started_at)
        waited = now - created
        if not self.settings.start_timeout_seconds or waited < self.settings.start_timeout_seconds:
            if self.settings.start_timeout_seconds:
                self.due = created + self.settings.start_timeout_seconds
            return None, None
        stuck = sorted((p for p in pods if not pod_is_up(p)), key=lambda p: str(p["metadata"]["name"]))
        limit = f"{self.settings.start_timeout_seconds:.0f} s"
        if not stuck:
            reason = (f"start timeout ({limit}): only {len(up)} of {self.settings.expected_pods} TensorFlow "
                      f"pods exist and run (the others were never created: quota or admission?)")
        else:
            # The most telling pod: one with a reason of its own, else one whose events say why.
            named = [(p["metadata"]["name"], why_not_running(p, [])) for p in stuck]
            bare = {"Pending", "Running", "Unknown", "Failed"}
            name, why = next(((n, w) for n, w in named if w not in bare), named[0])
            if why in bare:
                for pod in stuck[:3]:
                    events = self.pod_events(pod["metadata"]["name"])
                    if events:
                        name, why = pod["metadata"]["name"], why_not_running(pod, events)
                        break
            reason = f"start timeout ({limit}): pod {name} is not running: {why}"
            if len(stuck) > 1:
                reason += f" (and {len(stuck) - 1} more pod{'s' if len(stuck) > 2 else ''} not running)"
        self.end_chief(reason)
        return Ending("start-timeout", reason), None

    def pod_events(self, pod: str) -> list[Mapping[str, Any]]:
        selector = urllib.parse.quote(f"involvedObject.kind=Pod,involvedObject.name={pod}")
        listing = self.api("GET", self.path("", "events") + f"?fieldSelector={selector}") or {}
        return list(listing.get("items") or [])

    def end_chief(self, reason: str) -> None:
        """Ends a run that cannot start or stalled: a 1 s deadline makes the Job controller fail the chief Job
        (under a JobSet, its DeadlineEndsTheRun rule then fails the run)."""
        self.kind.end(self, reason)

    def annotate_run(self, annotations: Mapping[str, str]) -> None:
        """Annotates the run's object (its Job, or its JobSet)."""
        self.api("PATCH", self.kind.path(self), {"metadata": {"annotations": dict(annotations)}})

    def annotate_job(self, annotations: Mapping[str, str], name: str) -> None:
        """Annotates the Job `name`."""
        self.api("PATCH", self.job_path(name), {"metadata": {"annotations": dict(annotations)}})

    # -- progress and stalls ---------------------------------------------------------------------

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
        except urllib.error.HTTPError as error:
            log.warning("cannot follow the chief's progress: HTTP %s %s (does the supervisor's Role allow it?)",
                        error.code, error.reason)
            return None
        except REQUEST_ERRORS as error:
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
            query = urllib.parse.urlencode({"container": self.settings.progress_container,
                                            "tailLines": LOG_TAIL_LINES})
            text = read_text(self.current_target(),
                             self.path("", "pods", str(pod["metadata"]["name"])) + f"/log?{query}")
        except urllib.error.HTTPError as error:
            if error.code in (400, 404):  # waiting to start, or deleted meanwhile
                return None, True
            log.warning("cannot read the chief's log: HTTP %s %s (does the supervisor's Role allow pods/log?)",
                        error.code, error.reason)
            return None, False
        except REQUEST_ERRORS as error:
            log.warning("cannot read the chief's log: %s", error)
            return None, False
        return report(text), True

    # -- ending ----------------------------------------------------------------------------------

    def finish(self, ending: Ending) -> None:
        if ending.recorded:  # a restarted supervisor, or `tfchart stop`: that decision stands
            log.info("the run already ended (%s): %s", ending.kind, ending.reason)
            return
        policy = self.settings.on_success if ending.succeeded else self.settings.on_failure
        log.info("run ended (%s): %s; ps/worker policy %s", ending.kind, ending.reason, policy)
        for name in self.settings.statefulsets:
            self.end_statefulset(name, policy)
        if self.settings.evaluator_job:
            self.suspend_evaluator(self.settings.evaluator_job)
        if ending.kind != "deleted":
            self.annotate_run(ending_annotations(ending.kind, ending.reason, now_text(self.clock())))

    def end_statefulset(self, name: str, policy: str) -> None:
        path = scale_path(self.namespace, "statefulsets", name)
        scale = self.api("GET", path)
        if scale is None:
            log.info("statefulset %s is gone; nothing to free", name)
            return
        replicas = (scale.get("spec") or {}).get("replicas")
        if policy == "keep":
            log.info("statefulset %s kept at %s replicas (policy keep)", name, replicas)
        elif replicas != 0:
            self.api("PATCH", path, {"spec": {"replicas": 0}})
            log.info("scaled statefulset %s/%s from %s to 0 replicas", self.namespace, name, replicas)

    def suspend_evaluator(self, name: str) -> None:
        path = self.path("batch/v1", "jobs", name)
        job = self.api("GET", path)
        if job is None or job_ending(job) or (job.get("spec") or {}).get("suspend") or \
                (job.get("metadata") or {}).get("deletionTimestamp"):
            return
        self.api("PATCH", path, {"spec": {"suspend": True}})
        log.info("suspended the evaluator Job %s: its pod ends with the run", name)

    def scale_self_down(self) -> None:
        if self.settings.deployment:
            self.api("PATCH", scale_path(self.namespace, "deployments", self.settings.deployment),
                     {"spec": {"replicas": 0}})
            log.info("scaled the supervisor Deployment %s to 0: its work is done", self.settings.deployment)

    def run(self) -> int:
        self.started_at = self.clock()
        s = self.settings
        log.info("supervising %s %s in %s: statefulsets %s, on success %s, on failure %s, start timeout %s, "
                 "progress %s, stall timeout %s", s.run_kind, s.run_object, self.namespace,
                 ", ".join(s.statefulsets) or "(none)",
                 s.on_success, s.on_failure, f"{s.start_timeout_seconds:.0f} s" if s.start_timeout_seconds else "off",
                 f"on Job {s.chief_own_job}" if s.progress else "off",
                 f"{s.stall_timeout_seconds:.0f} s" if s.stall_timeout_seconds else "off")
        if self.sleep is None:
            self.run_watch = self.watcher(self.kind.noun, self.kind.list_path(self),
                                          {"fieldSelector": f"metadata.name={s.run_object}"}).start()
        try:
            while not self.stopping:
                self.heartbeat = time.monotonic()
                self.woken.clear()  # an event from now on makes the next look
                self.due = None
                try:
                    ending = self.observe()
                    if ending is not None:
                        self.finish(ending)
                        self.scale_self_down()
                        return 0
                except urllib.error.HTTPError as error:
                    log.warning("API request failed: HTTP %s %s (does the supervisor's Role allow it?); retrying",
                                error.code, error.reason)
                except REQUEST_ERRORS as error:
                    log.warning("API server not reachable: %s; retrying", error)
                if self.sleep is not None:
                    self.sleep(s.poll_seconds)
                else:
                    self.follow_pods()
                    self.wait_for_change()
        finally:
            for watch in (self.run_watch, self.pod_watch):
                if watch is not None:
                    watch.stop()
        log.info("stopped before the run ended")
        return 0

    def watcher(self, name: str, path: str, query: Mapping[str, str]) -> Watcher:
        return Watcher(name, path, query, self.current_target, self.heard, self.settings.poll_seconds)

    def heard(self, kind: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        if kind == "DELETED" and metadata.get("name") == self.settings.run_object:
            self.gone = (str(metadata.get("uid")), RECREATING_ANNOTATION in (metadata.get("annotations") or {}))
        self.woken.set()

    def follow_pods(self) -> None:
        """The TensorFlow pods are watched while the run has not started (and a start timeout or stalls are
        looked for): the look that finds them all up comes with the last one's event."""
        wanted = self.settings.watches_start and not self.started_seen
        if wanted and self.pod_watch is None:
            self.pod_watch = self.watcher("TensorFlow pods", self.path("", "pods"),
                                          {"labelSelector": self.settings.pod_selector}).start()
        elif not wanted and self.pod_watch is not None:
            self.pod_watch.stop()
            self.pod_watch = None

    def wait_for_change(self) -> None:
        """Until a watch event, the poll interval (the periodic look: progress, the stall clock) or a time-based
        check's moment, whichever comes first; in slices of at most a second, so that SIGTERM is heard."""
        until = time.monotonic() + self.settings.poll_seconds
        if self.due is not None:
            until = min(until, time.monotonic() + max(0.0, self.due - self.clock()))
        while not self.stopping and time.monotonic() < until:
            if self.woken.wait(min(1.0, max(0.0, until - time.monotonic()))):
                return


def serve_health(supervisor: Supervisor, port: int) -> ThreadingHTTPServer:
    """GET /healthz: 200 while the supervisor's loop goes round, 503 once it is stuck."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?")[0] == "/healthz"
            code = (200 if supervisor.alive() else 503) if found else 404
            body = {200: b"ok\n", 503: b"stuck\n", 404: b"not found\n"}[code]
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would drown the log

    server = ThreadingHTTPServer(("", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
    return server


def main(env: Mapping[str, str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s supervisor %(levelname)s %(message)s")
    environment = env if env is not None else os.environ
    try:
        settings = Settings.from_env(environment)
    except SupervisorConfigError as error:
        log.error("configuration error: %s", error)
        return 2
    target = target_from_env(environment)
    if target is None or not target.namespace:
        log.error("configuration error: no Kubernetes API (service-account token, KUBERNETES_SERVICE_HOST "
                  "and the namespace are needed; the chart mounts them)")
        return 2
    supervisor = Supervisor(settings, target, fresh_target=lambda: target_from_env(environment))
    port = environment.get("TFD_HEALTH_PORT", "").strip()
    if port:
        try:
            serve_health(supervisor, int(port))
        except (ValueError, OSError) as error:
            log.error("configuration error: TFD_HEALTH_PORT=%r: %s", port, error)
            return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGTERM, stop)
    code = supervisor.run()
    # Done, and scaled to 0: Kubernetes sends SIGTERM shortly. Exiting first would make the
    # Deployment start the pod again, so idle until then.
    while not supervisor.stopping:
        supervisor.heartbeat = time.monotonic()
        time.sleep(0.5)
    return code


if __name__ == "__main__":
    sys.exit(main())
