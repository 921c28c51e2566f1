"""The run supervisor: frees a release's accelerators on every ending of its chief.

The chart runs this as the Deployment ``<fullname>-supervisor`` (``python -m trainer.supervisor``) under its own
ServiceAccount, whose Role names exactly the objects it touches; it never depends on code in the chief's image. It
talks to the API through the pinned ``kubernetes`` client (trainer/kube.py), as tfchart does. Its parts: settings
(trainer/supervisor_settings.py), watching (supervisor_watch.py), deciding (supervisor_endings.py, and
:meth:`Supervisor.observe` here), acting (supervisor_act.py, supervisor_kinds.py), carrying out tfdcontract.lifecycle's
plan (supervisor_plan.py: the wanted state `tfchart stop|suspend|resume` write on the run's object, and its own
endings), the progress record and stalls (supervisor_progress.py), health (supervisor_health.py).

A run is one object: the chief Job (or the workers' Job without a chief), or under ``workload.kind=jobset``
(``TFD_RUN_KIND=JobSet``) the JobSet ``TFD_RUN_NAME``. The supervisor list+watches it by name
(``fieldSelector=metadata.name=...``); each event only wakes it, and every decision rests on a fresh read of what the
cluster stores, so a watch resumed after a cut, or listed again after a 410, misses no ending, and a restarted
supervisor decides the same. The poll (TFD_POLL_SECONDS) stays the backstop and does the time-based work. Endings:

* ``Complete``/``SuccessCriteriaMet`` (a JobSet's ``Completed``): ``succeeded``; ``Failed``/``FailureTarget``:
  ``failed``, with the controller's reason (BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy...);
* deleted by hand: ``deleted``, at once (seen terminating, or in the watch's DELETED event). A Job that ``tfchart
  upgrade --recreate`` marks (``tf-distributed.io/recreating``) before deleting it is waited for, since it is created
  again: while it is terminating, up to ``TFD_CHIEF_MISSING_SECONDS`` from its deletionTimestamp (the cluster's clock,
  so a restarted supervisor goes on counting; past it, a stuck finalizer or an upgrade that never ran helm, the run
  ends, the reason recorded on that Job); once gone, up to ``TFD_CHIEF_MISSING_SECONDS`` (likewise one whose
  deletion this supervisor did not see);
* with ``TFD_START_TIMEOUT_SECONDS`` (native only): TensorFlow pods not all running that long after the Job was
  created or resumed: ``start-timeout``, naming the pod and why; the Job is ended (``activeDeadlineSeconds: 1``).
  Once every pod was up, ``tf-distributed.io/started-at`` on the run's object says the run started;
* with ``TFD_STALL_TIMEOUT_SECONDS``: a started run whose chief's step has not risen that long: ``stalled``, ended
  through the chief Job's deadline (under a JobSet, its DeadlineEndsTheRun rule fails the run).

A suspended run is waited for (and resumed when asked). With ``TFD_PROGRESS=true`` the chief container's log tail
(trainer/progress.py) is read each poll and its progress written on the chief's own Job
(``tf-distributed.io/progress``), which also keeps the stall clock. On an ending it carries out the plan's stop with
that ending: the ps/worker StatefulSets to 0 unless that ending's policy is ``keep`` (``TFD_ON_SUCCESS``/
``TFD_ON_FAILURE``), the evaluator Job suspended, the ending recorded on the run's object (``tf-distributed.io/ending``,
``end-reason``, ``ended-at``; the chart's ``lookup`` reads it back) and its own Deployment to 0. The record is
written last: a supervisor restarted at any point decides as the first would have.
Under a JobSet, JobSet's controller frees the other Jobs itself; the supervisor scales nothing but itself.

The tests run it against tests/kubeapi.py (``TFD_KUBE_API``), which answers as the API server does.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from types import FrameType
from typing import Any

from tfdcontract import END_REASON_ANNOTATION, RECREATING_ANNOTATION, STALLED, STARTED_AT_ANNOTATION
from tfdcontract.env import HEALTH_PORT_ENV
from tfdcontract.lifecycle import (
    STOPPED_WANTED,
    SUSPENDED_WANTED,
    Backoff,
    Ending,
    ending_of,
    is_suspended,
    recorded_ending,
    wanted_of,
)
from tfdcontract.runstate import now_text, parse_time
from trainer.kube import NO_ANSWER, ApiException, Kube, KubeTarget, target_from_env
from trainer.supervisor_endings import pending_ending, pod_is_up, why_not_running
from trainer.supervisor_health import serve_health as serve
from trainer.supervisor_plan import Planning
from trainer.supervisor_progress import Following
from trainer.supervisor_settings import Settings, SupervisorConfigError
from trainer.supervisor_watch import Watcher

__all__ = ["Settings", "Supervisor", "SupervisorConfigError", "main", "now_text", "serve_health"]

log = logging.getLogger("trainer.supervisor")


@dataclass
class Supervisor(Following, Planning):
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
    woken: threading.Event = field(default_factory=threading.Event)  # a watch saw something: look now
    run_watch: Watcher | None = None
    # The TensorFlow pods while the run has not started (a start timeout, stalls) or a step of the plan waits for
    # them; the ps/worker StatefulSets, by name, while a step waits (for their Ready replicas).
    watches: dict[str, Watcher] = field(default_factory=dict)
    seen: dict[str, Any] | None = None  # the run's object at the last look (None: gone)
    started_seen: bool = False  # the last look found the run started
    # The run's object's last state, from its watch's DELETED event: its uid, and whether `tfchart upgrade
    # --recreate` marked it (it is then created again).
    gone: tuple[str, bool] | None = None
    # When the last look's time-based check is due (the chief missing long enough, a start timeout): the loop
    # looks then rather than at the next poll.
    due: float | None = None
    backoff: Backoff = field(default_factory=Backoff)  # the plan's actions carried out last (undone: they wait)
    kube: Kube = field(init=False)

    def __post_init__(self) -> None:
        self.kube = Kube(self.target)

    def alive(self) -> bool:
        """The poll loop (or, once done, the idle loop) went round recently: the liveness probe."""
        return time.monotonic() - self.heartbeat < max(3 * self.settings.poll_seconds, 60.0)

    # -- deciding ----------------------------------------------------------------------------------

    def observe(self) -> Ending | None:
        """One look at the run's object, its Job or JobSet (and, until the run started, its TensorFlow pods)."""
        kind = self.kind
        job = self.seen = self.api("GET", kind.path(self))
        now = self.clock()
        metadata = (job or {}).get("metadata") or {}
        if job is None or metadata.get("deletionTimestamp"):
            return self.missing(job, now)
        if self.job_uid is not None and metadata.get("uid") != self.job_uid:
            log.info("%s %s was created again: a new run", kind.noun, self.settings.run_object)
            self.step_seen, self.own_uid = None, None
        self.job_uid, self.missing_since = metadata.get("uid"), None
        annotations = metadata.get("annotations") or {}
        recorded = recorded_ending(job)
        if recorded is not None:
            return recorded
        if annotations.get(END_REASON_ANNOTATION):  # a start timeout or a stall is ending it
            kind.carry_out(self, str(annotations[END_REASON_ANNOTATION]))
            return pending_ending(str(annotations[END_REASON_ANNOTATION]))
        ending = ending_of({**job, "kind": self.settings.run_kind})
        # A suspended run (or one asked to be) is waited for: no start timeout, no stall (tfchart suspend, Kueue).
        suspended = ending is None and (is_suspended(job) or wanted_of(job) == SUSPENDED_WANTED)
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

    def missing(self, job: Mapping[str, Any] | None, now: float) -> Ending | None:
        """The run's object being deleted (`job`, its deletionTimestamp set) or gone (None): the ending, or None while
        it is waited for (marked by `tfchart upgrade --recreate`, or a deletion this supervisor did not see)."""
        name, noun, limit = self.settings.run_object, self.kind.noun, self.settings.chief_missing_seconds
        deleted = Ending("deleted", f"{noun} {name} was deleted before it finished", record=False)
        if job is not None:  # being deleted, its pods terminating
            metadata = job.get("metadata") or {}
            annotations = metadata.get("annotations") or {}
            if RECREATING_ANNOTATION not in annotations:
                return deleted
            if recorded_ending(job) is not None:  # ended as stuck by a supervisor before this one
                return recorded_ending(job)
            # --recreate deletes it to create it again: waited for from its deletionTimestamp (the cluster's clock,
            # which a restarted supervisor reads again), not for ever: a finalizer may hold it, or the upgrade
            # stopped before helm ran
            self.missing_since = None
            since = parse_time(metadata.get("deletionTimestamp")) or now
            if now - since < limit:
                self.due = since + limit
                return None
            finalizers = ", ".join(str(f) for f in metadata.get("finalizers") or []) or "none"
            return Ending("deleted", f"{noun} {name} was marked for re-creation (tfchart upgrade --recreate) but has "
                          f"been terminating for {now - since:.0f} s, over the {limit:.0f} s allowed "
                          f"(supervisor.chiefMissingSeconds; finalizers: {finalizers})")
        if self.gone is not None and self.job_uid is not None and self.gone == (self.job_uid, False):
            return deleted  # its deletion seen by the watch, not one --recreate made
        self.missing_since = now if self.missing_since is None else self.missing_since
        waited = now - self.missing_since
        if waited < limit:
            self.due = self.missing_since + limit
            return None
        return deleted if self.job_uid else Ending("deleted", f"{noun} {name} not found for {waited:.0f} s",
                                                   record=False)

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

    # -- the loop ----------------------------------------------------------------------------------

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
            self.run_watch = self.watcher(self.kind.noun, self.kind.list_kind,
                                          {"field_selector": f"metadata.name={s.run_object}"}).start()
        try:
            while not self.stopping:
                self.heartbeat = time.monotonic()
                self.woken.clear()  # an event from now on makes the next look
                self.due = None
                try:
                    ending, run = self.observe(), self.seen
                    live = run is not None and not (run.get("metadata") or {}).get("deletionTimestamp")
                    if ending is not None or (live and wanted_of(run) == STOPPED_WANTED):
                        if self.conclude(run, ending):
                            return 0
                    elif live and run is not None:
                        self.pursue(run)
                except ApiException as error:
                    if error.status:
                        log.warning("API request failed: HTTP %s %s (does the supervisor's Role allow it?); "
                                    "retrying", error.status, error.reason)
                    else:
                        log.warning("API server not reachable: %s; retrying", error.reason)
                except NO_ANSWER as error:
                    log.warning("API server not reachable: %s; retrying", error)
                if self.sleep is not None:
                    self.sleep(s.poll_seconds)
                else:
                    self.follow_pods()
                    self.wait_for_change()
        finally:
            for watch in (self.run_watch, *self.watches.values()):
                if watch is not None:
                    watch.stop()
        log.info("stopped before the run ended")
        return 0

    def watcher(self, name: str, kind: str, selector: Mapping[str, str]) -> Watcher:
        return Watcher(name, self.kube, self.kube.lister(kind, selector), self.heard, self.settings.poll_seconds)

    def heard(self, kind: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        if kind == "DELETED" and metadata.get("name") == self.settings.run_object:
            self.gone = (str(metadata.get("uid")), RECREATING_ANNOTATION in (metadata.get("annotations") or {}))
        self.woken.set()

    def follow_pods(self) -> None:
        """The TensorFlow pods are watched while the run has not started (and a start timeout or stalls are looked
        for), and with the ps/worker StatefulSets (by name) while a step of the plan waits: the look that finds what
        was waited for comes with the event."""
        s = self.settings
        wanted = {"pods": ("TensorFlow pods", "pods", {"label_selector": s.pod_selector})} if self.waiting or (
            s.watches_start and not self.started_seen) else {}
        if self.waiting:
            wanted |= {name: (f"StatefulSet {name}", "statefulsets", {"field_selector": f"metadata.name={name}"})
                       for name in s.statefulsets}
        for key in [key for key in self.watches if key not in wanted]:
            self.watches.pop(key).stop()
        for key, (name, kind, selector) in wanted.items():
            if key not in self.watches:
                self.watches[key] = self.watcher(name, kind, selector).start()

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
    return serve(supervisor.alive, port)


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
    supervisor = Supervisor(settings, target)
    port = environment.get(HEALTH_PORT_ENV, "").strip()
    if port:
        try:
            serve_health(supervisor, int(port))
        except (ValueError, OSError) as error:
            log.error("configuration error: %s=%r: %s", HEALTH_PORT_ENV, port, error)
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
