"""Acting per kind of run object: a Job (workload.kind=native) or a JobSet (workload.kind=jobset)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfdcontract import END_REASON_ANNOTATION
from tfdcontract.lifecycle import job_ending
from tfdcontract.runstate import parse_time

if TYPE_CHECKING:
    from trainer.supervisor_act import Acting as Supervisor

log = logging.getLogger("trainer.supervisor")

JOBSET_API = "jobset.x-k8s.io/v1alpha2"


class JobRun:
    """workload.kind=native: the run's object is its Job (the chief Job, or the workers' Job without a chief), which
    is also the chief's own Job, and which a 1 s deadline ends (the Job controller fails it)."""

    noun = "chief Job"

    def path(self, sup: Supervisor) -> str:
        return sup.job_path(sup.settings.run_object)

    list_kind = "jobs"  # what the run's object is listed (and watched) as; the Role allows it by name's selector

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

    list_kind = f"{JOBSET_API}/jobsets"

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
