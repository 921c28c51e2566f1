"""Acting: the supervisor's requests, and what it does at a run's ending (scales, the evaluator, the record)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from tfdcontract import ending_annotations
from trainer.kube import ApiException, Kube, scale_path
from trainer.supervisor_endings import Ending, job_ending, now_text
from trainer.supervisor_kinds import JOB_RUN, JOBSET_RUN, JobRun
from trainer.supervisor_settings import Settings

log = logging.getLogger("trainer.supervisor")


class Acting:
    """The requests of one supervised run (through :class:`trainer.kube.Kube`) and the ending's actions."""

    settings: Settings
    kube: Kube
    clock: Callable[[], float]

    @property
    def namespace(self) -> str:
        return self.kube.namespace

    @property
    def kind(self) -> JobRun:
        """What differs between the kinds of the run's object (JobRun, JobSetRun)."""
        return JOBSET_RUN if self.settings.run_kind == "JobSet" else JOB_RUN

    def api(self, method: str, path: str, body: Mapping[str, object] | None = None) -> dict[str, Any] | None:
        """A request (its query in `path`); None for 404. Other HTTP errors propagate (ApiException)."""
        path, _, query = path.partition("?")
        try:
            return self.kube.request(method, path, parse_qsl(query), body)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def path(self, group: str, resource: str, name: str = "") -> str:
        base = "/api/v1" if group == "" else f"/apis/{group}"
        return f"{base}/namespaces/{self.namespace}/{resource}" + (f"/{name}" if name else "")

    def job_path(self, name: str) -> str:
        return self.path("batch/v1", "jobs", name)

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
        if ending.record:
            self.annotate_run(ending_annotations(ending.kind, ending.reason, now_text(self.clock())))

    def end_statefulset(self, name: str, policy: str) -> None:
        path = scale_path(self.namespace, "statefulsets", name)
        scale = self.api("GET", path)
        if scale is None:
            log.info("statefulset %s is gone; nothing to free", name)
            return
        replicas = (scale.get("spec") or {}).get("replicas", 0)  # autoscaling/v1 Scale omits a 0
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
