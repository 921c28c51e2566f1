"""Carrying out the shared plan (tfdcontract.lifecycle): where the supervisor runs, it is the only actor on its run.

`tfchart stop|suspend|resume` write the wanted state on the run's object (``tf-distributed.io/wanted``: suspended,
stopped, running) and wait; the supervisor's watch on that object wakes it, and each look reads the run's objects
into a :class:`RunView`, plans the next step and applies its merge patches in order (a Scale's through the
``/scale`` subresource, all its Role grants of a StatefulSet or of its Deployment). A step that waits (the chief's
pod to stop before the ps go, the servers to be Ready before the chief resumes) is watched for: the TensorFlow pods
and the StatefulSets, by name, until it is reached. The supervisor's own endings (succeeded, failed, stalled, a
start timeout, deleted) go through the same plan as a stop with that ending: ps/worker to 0 unless its policy is
``keep``, the evaluator suspended, the ending recorded last, and its own Deployment to 0.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from tfdcontract import parse_suspension
from tfdcontract.lifecycle import (
    QUEUE_LABEL,
    RUNNING_WANTED,
    STOPPED_WANTED,
    WANTED_ANNOTATION,
    WANTED_SEEN_ANNOTATION,
    Action,
    Backoff,
    Ending,
    RunView,
    Step,
    annotations_of,
    describe,
    metadata,
    owned,
    plan,
    wanted_of,
)
from tfdcontract.runstate import KUEUE_GROUP as KUEUE
from tfdcontract.runstate import KUEUE_VERSIONS, now_text
from trainer.kube import ApiException, scale_path
from trainer.supervisor_act import Acting
from trainer.supervisor_kinds import JOBSET_API

log = logging.getLogger("trainer.supervisor")

# Rounds of an ending's plan in one look, each after reading the run's objects again: a stop is one step, and a
# cluster that changes under it may take another; past that the next look goes on.
ENDING_ROUNDS = 4


class Planning(Acting):
    """The plan's executor: the view read, the step applied, the wanted state followed."""

    woken: threading.Event
    backoff: Backoff  # the actions carried out last: planned again, something undid them, and they wait
    due: float | None
    workload_version: str = ""  # the API version Kueue's Workload of a JobSet was read at
    waiting: bool = False  # the last step waits for pods or StatefulSets: they are watched
    said: str = ""  # the last step logged (a step that waits, or cannot be taken, is said once)

    def read_view(self, run: Mapping[str, Any] | None) -> RunView:
        """The run's objects as the plan reads them: the run's object (`run`, read by the caller), the ps/worker
        StatefulSets, the evaluator Job, the TensorFlow pods, this supervisor's Scale; under a JobSet the chief's
        Job and Kueue's Workload."""
        s = self.settings
        document = None if run is None else {**run, "kind": s.run_kind}
        listed = self.api("GET", self.path("", "pods") + "?labelSelector=" + urllib.parse.quote(s.pod_selector))
        pods = list((listed or {}).get("items") or [])
        supervisor = None
        if s.deployment:  # a Scale omits replicas 0
            scale = self.api("GET", scale_path(self.namespace, "deployments", s.deployment))
            supervisor = None if scale is None else {"metadata": {"name": s.deployment},
                                                     "spec": {"replicas": (scale.get("spec") or {}).get("replicas", 0)}}
        if s.run_kind == "JobSet":
            jobs = [job for job in (self.api("GET", self.job_path(s.chief_job)),) if job is not None]
            return RunView("JobSet", document, (), None, supervisor, pods, self.kueue_workload(run), jobs)
        sets = [found for name in s.statefulsets if (found := self.api("GET", self.path("apps/v1", "statefulsets",
                                                                                          name))) is not None]
        evaluator = self.api("GET", self.job_path(s.evaluator_job)) if s.evaluator_job else None
        return RunView("Job", document, sets, evaluator, supervisor, pods)

    def kueue_workload(self, run: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """Kueue's Workload of a JobSet that Kueue manages (its queue label): the one it owns."""
        if not (metadata(run).get("labels") or {}).get(QUEUE_LABEL):
            return None
        for version in KUEUE_VERSIONS:
            listed = self.api("GET", self.path(f"{KUEUE}/{version}", "workloads"))
            if listed is None:
                continue  # not served at this version
            self.workload_version = version
            return owned(listed.get("items") or [], {**(run or {}), "kind": "JobSet"})
        return None

    def action_path(self, action: Action) -> str:
        if action.kind == "Job":
            return self.job_path(action.name)
        if action.kind == "JobSet":
            return self.path(JOBSET_API, "jobsets", action.name)
        if action.kind == "Workload":
            return self.path(f"{KUEUE}/{self.workload_version}", "workloads", action.name)
        resource = {"StatefulSet": "statefulsets", "Deployment": "deployments"}[action.kind]
        if action.subresource == "scale":
            return scale_path(self.namespace, resource, action.name)
        return self.path("apps/v1", resource, action.name)

    def take_up(self, run: Mapping[str, Any] | None, wanted: str, failure: str | None = None) -> None:
        """Says on the run's object (WANTED_SEEN_ANNOTATION) that this supervisor has taken `wanted` up (`failure`
        None: a failure said before stands until a step succeeds, ""), or why it cannot carry it out (`failure`)."""
        seen = str(annotations_of(run).get(WANTED_SEEN_ANNOTATION) or "")
        failed, said = seen.startswith(f"{wanted}: "), f"{wanted}: {failure}" if failure else wanted
        if wanted_of(run) != wanted or WANTED_ANNOTATION not in annotations_of(run) or seen == said:
            return
        if failure or (failure is None and not failed) or (failure == "" and failed):
            self.annotate_run({WANTED_SEEN_ANNOTATION: said})

    def apply(self, step: Step, run: Mapping[str, Any] | None, wanted: str) -> bool:
        """The step's merge patches, in order (one the API answers 404 for is gone: nothing to change); False where
        they wait: planned again just after they were carried out, something undid them (Backoff)."""
        pause = self.backoff.wait(step, self.clock())
        if pause:
            self.due = self.clock() + pause
            if self.said != (said := f"{describe(step)} {self.backoff.times}"):
                log.warning("%s asked for: %s%s; again in %.0f s", wanted, step.actions[0].line,
                            self.backoff.undone(step), pause)
                self.said = said
            return False
        for action in step.actions:
            try:
                self.api("PATCH", self.action_path(action), dict(action.patch))
            except ApiException as error:
                if error.status in (401, 403):  # its Role does not allow it: tfchart says so (--force acts)
                    self.take_up(run, wanted, f"{action.line}: HTTP {error.status} {error.reason}")
                raise
            log.info("%s", action.line)
        self.take_up(run, wanted, "")
        return True

    def conclude(self, run: Mapping[str, Any] | None, ending: Ending | None) -> bool:
        """Ends the run through the plan: `ending` is the supervisor's, None the stop asked for on the run's object.
        A recorded ending stands: what it left (keep, or a hand's later scale) stays. True once reached."""
        s, keep = self.settings, False
        if ending is None:
            log.info("stop asked for on %s %s: ending the run", self.kind.noun, s.run_object)
        elif ending.recorded:
            log.info("the run already ended (%s): %s", ending.kind, ending.reason)
            keep = True
        else:
            policy = s.on_success if ending.succeeded else s.on_failure
            log.info("run ended (%s): %s; ps/worker policy %s", ending.kind, ending.reason, policy)
            keep = policy == "keep"
        self.take_up(run, STOPPED_WANTED)
        for _ in range(ENDING_ROUNDS):
            step = plan(self.read_view(run), STOPPED_WANTED, now=now_text(self.clock()), ending=ending, keep=keep)
            if not step.actions:
                return step.reached
            if not self.apply(step, run, STOPPED_WANTED):
                return False
            run = self.api("GET", self.kind.path(self))
        return False

    def pursue(self, run: Mapping[str, Any]) -> None:
        """One step towards the wanted state asked for on the run's object (suspended, or running again after a
        suspension). A step applied makes the next look at once; one that waits is watched for."""
        wanted = wanted_of(run)
        if wanted == RUNNING_WANTED and parse_suspension(annotations_of(run)) is None:
            self.waiting, self.said = False, ""
            return
        self.take_up(run, wanted)
        step = plan(self.read_view(run), wanted, now=now_text(self.clock()))
        self.waiting = bool(step.actions or step.pending)
        if step.actions:
            if self.apply(step, run, wanted):
                self.woken.set()
            return
        said = describe(step)
        if said != self.said:
            if step.blocked:
                log.warning("%s asked for, but the run cannot be: %s", wanted, step.blocked)
            elif step.pending:
                log.info("%s asked for: waiting for %s", wanted, "; ".join(step.pending))
            else:
                log.info("%s asked for: reached", wanted)
            self.said = said
