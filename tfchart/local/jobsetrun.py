"""The controllers of a local run, JobSet v0.12.0's and Kubernetes' Job and StatefulSet controllers, over the pods the
engine runs (processes or containers), one reconcile pass at a time (`JobSetRun.reconcile`, from the wait loop);
docs/architecture.md, section 8, says what they do. A native release runs as one JobSetRun too (jobset.native):
its Jobs and StatefulSets created at once, the chief's Job the run's. Their state is the API's objects themselves
(plain dicts: each Job or StatefulSet as rendered, with its status, and the JobSet), which tfdcontract.lifecycle's
plan reads and patches (session.py), answered in their next pass (a JobSet's suspension: `suspend`). Every step is
an event, as Kubernetes' events name them.
"""

from __future__ import annotations

import copy
import math
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tfchart.errors import plural
from tfchart.local import jobset
from tfchart.local.jobset import JobRun, PodRun
from tfdcontract.runstate import FAILED, QUEUE_LABEL, RUNNING

if TYPE_CHECKING:
    from tfchart.local.processes import LocalCluster

MAX_BACKOFF_S = 10.0
PROBE_EVERY_S = 1.0
COMPLETED = "Completed"  # the JobSet's condition (its other states: tfdcontract.runstate's)


@dataclass
class JobSetRun:
    doc: dict[str, Any]  # the JobSet as read (jobset.read; a native release: jobset.native), then as the API shows it
    engine: LocalCluster  # processes (containers.ContainerCluster: containers)
    pods: Mapping[str, Any]  # pod name -> the pod to start (processes.LocalPod)
    on_event: Callable[..., None]  # (kind: JobSet, Job or Pod, name, reason, message, job-level: not a pod's)
    clock: Callable[[], float] = time.monotonic
    rule: dict[str, Any] | None = None  # the failure policy rule that ended the run
    first_failed: JobRun | None = None
    restarts: int = 0
    counted: int = 0  # restarts counted against maxRestarts
    jobs: dict[str, JobRun] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)  # pod name -> pods started under it
    starting: list[tuple[Any, str]] = field(default_factory=list)  # pods (and why) started at once by this pass

    def __post_init__(self) -> None:
        self.doc = {**copy.deepcopy(self.doc), "status": {"conditions": []}}
        (self.doc["metadata"].get("labels") or {}).pop(QUEUE_LABEL, None)  # no Kueue here: the JobSet suspends itself
        self.jobs = self._fresh()
        missing = [pod.name for job in self.jobs.values() for pod in job.pods if pod.name not in self.pods]
        assert not missing, f"pods of JobSet {self.name} not rendered: {missing}"

    def _fresh(self) -> dict[str, JobRun]:
        return {job.name: job for job in jobset.jobs_of(self.doc)}

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def is_jobset(self) -> bool:
        """A JobSet's run (else a native release's: its Jobs and StatefulSets)."""
        return bool(self.doc["kind"] == "JobSet")

    @property
    def targets(self) -> list[str]:
        """The successPolicy's target replicatedJobs (none: every one)."""
        return list(self.doc["spec"]["successPolicy"].get("targetReplicatedJobs") or ())

    @property
    def state(self) -> str:
        """Completed or Failed, else Running."""
        return str(jobset.condition(self.doc).get("type", RUNNING))

    @property
    def suspended(self) -> bool:
        return bool(self.doc["spec"].get("suspend"))

    @property
    def finished(self) -> bool:
        return self.state in (COMPLETED, FAILED)

    def manages(self, pod: str) -> bool:
        return any(pod == run.name for job in self.jobs.values() for run in job.pods)

    def restarts_of(self, pod: str) -> int:
        return max(0, self.starts.get(pod, 0) - 1)

    def suspend(self, suspended: bool) -> None:
        """The JobSet suspended (session.advance: the plan's patch of its spec.suspend), as its controller answers:
        every pod stops, the chief's first (its checkpoint); resumed, it creates its Jobs again, in their order."""
        if suspended:
            self.on_event("JobSet", self.name, "SuspendedJobs", "jobset is suspended: its pods stop, the chief's first")
            self._stop_all([job for job in self.jobs.values() if job.rjob in self.targets])
            self._stop_all()
        else:
            self.on_event("JobSet", self.name, "ResumedJobs", "jobset is resumed")
            self.jobs = self._fresh()

    def reconcile(self) -> None:
        """One pass of both controllers (see the module's docstring). A Job's and a StatefulSet's are level-triggered
        as theirs are: a Job suspended or a StatefulSet scaled down (the plan's patches) stops the pods it no longer
        wants, let run again or scaled up it starts them."""
        self._stop_all(every=False)
        if self.finished:
            return
        now = self.clock()
        for job in self.jobs.values():
            if job.created is not None:
                self._sync(job, now)
        if failed := [job for job in self.jobs.values() if job.state == FAILED  # native: only the run's Job fails it
                      and (self.is_jobset or job.rjob in self.targets)]:  # fmt: skip
            if not self.suspended:
                self._failure_policy(failed)
        elif self._succeeded():
            self._finish(COMPLETED, "AllJobsCompleted", "jobset completed successfully")
        elif not self.suspended:
            self._probe(now)
            self._create(now)
        if self.starting:
            self.engine.start([local for local, _ in self.starting])
            for local, why in self.starting:
                self.on_event("Pod", local.name, "Started", why, False)
            self.starting = []

    # the Job controller

    def _sync(self, job: JobRun, now: float) -> None:
        for pod in job.pods:
            process = self.engine.processes.get(pod.name)
            if pod.alive and (process is None or not process.running):
                pod.alive = pod.ready = False
                code = process.exit_code if process is not None else None
                self._ended(job, pod, 1 if code is None else int(code), now)
        if job.state:
            return
        if all(pod.succeeded for pod in job.pods):
            jobset.ended_as(job.doc, jobset.COMPLETE, "CompletionsReached", "")
            job.ended = now
            self.on_event("Job", job.name, "Completed", f"{plural(len(job.pods), 'pod')} succeeded")
            return
        if self.suspended or job.doc["spec"].get("suspend"):
            return
        deadline = job.doc["spec"].get("activeDeadlineSeconds")
        if deadline is not None and job.created is not None and now - job.created >= float(deadline):
            self._fail(job, "DeadlineExceeded", "Job was active longer than specified deadline", now)
            return
        active = sum(pod.alive for pod in job.pods)
        for pod in job.pods:
            due = pod.due is None or pod.due <= now  # none: created, let run again, scaled up
            if active < job.parallelism and not (pod.alive or pod.succeeded) and due and job.runs(pod):
                self._start(job, pod)
                active += 1

    def _start(self, job: JobRun, pod: PodRun) -> None:
        local = self.pods[pod.name]
        for item in job.container.get("env") or []:  # the restart-attempt label, as the downward API gives it
            if jobset.RESTART_ATTEMPT in str(((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")):
                local.env[item["name"]] = str(self.restarts)
        pod.alive, pod.due, pod.probed = True, None, -math.inf
        self.starts[pod.name] = self.starts.get(pod.name, 0) + 1
        again = f" (pod {self.starts[pod.name]} of index {pod.index})" if self.starts[pod.name] > 1 else ""
        self.starting.append((local, f"Job {job.name} started it{again}"))

    def _ended(self, job: JobRun, pod: PodRun, code: int, now: float) -> None:
        if code == 0 and job.doc["kind"] == "Job":
            pod.succeeded = True
            self.on_event("Pod", pod.name, "Succeeded", "exited 0: its completion index is done", False)
            return
        if self.suspended or not job.runs(pod) or job.state or self.finished:
            return  # stopped on purpose: its Job has ended or is suspended, it was scaled down
        matched = job.first_rule(code) if job.doc["kind"] == "Job" else None
        if matched and matched[1]["action"] == jobset.FAIL_JOB:
            job.culprit = pod.name
            self._fail(job, "PodFailurePolicy", f"Container {job.container.get('name', '')} for pod "
                       f"{self.doc['metadata']['namespace']}/{pod.name} failed with exit code {code} matching FailJob "
                       f"rule at index {matched[0]}", now)  # fmt: skip
            return
        if job.doc["kind"] != "Job":  # a StatefulSet's pod: started again, never counted
            delay, why = min(MAX_BACKOFF_S, 2.0 ** (self.starts.get(pod.name, 1) - 1)), "restartPolicy Always"
        elif matched and matched[1]["action"] == jobset.IGNORE:
            delay, why = 0.0, f"Ignore rule at index {matched[0]}: not counted against backoffLimit"
        else:
            job.failures += 1
            if job.failures > (limit := int(job.doc["spec"].get("backoffLimit", 6))):
                job.culprit = pod.name
                self._fail(job, "BackoffLimitExceeded", "Job has reached the specified backoff limit", now)
                return
            delay = min(MAX_BACKOFF_S, 2.0 ** (job.failures - 1))
            why = f"failure {job.failures} of backoffLimit {limit}"
        pod.due = now + delay
        self.on_event("Pod", pod.name, "Failed", f"exited with {code}: a new pod in {delay:.0f} s ({why})")

    def _fail(self, job: JobRun, reason: str, message: str, now: float) -> None:
        jobset.ended_as(job.doc, FAILED, reason, message)
        job.ended = now
        self.on_event("Job", job.name, "Failed", f"{reason}: {message}")

    def _probe(self, now: float) -> None:
        """Readiness, probed only where a Job still to be created waits for it (dependsOn ... Ready)."""
        waited = {dep["name"] for rjob in self.doc["spec"]["replicatedJobs"] if not self._created(rjob["name"])
                  for dep in rjob["dependsOn"] if dep["status"] == jobset.READY}  # fmt: skip
        if any(job.doc["spec"].get("suspend") for job in self.jobs.values()):  # a resume: its servers' readiness
            waited |= {job.rjob for job in self.jobs.values() if job.doc["kind"] == "StatefulSet"}
        for job in self.jobs.values():
            if job.rjob not in waited or job.state:
                continue
            for pod in job.pods:
                if pod.alive and not pod.ready and now - pod.probed >= PROBE_EVERY_S:
                    pod.probed = now
                    if self.engine.probe(pod.name):
                        pod.ready = True
                        self.on_event("Pod", pod.name, "Ready", "its readiness probe passed", False)
                        if job.ready:
                            self.on_event("Job", job.name, "Ready", f"{plural(len(job.pods), 'pod')} Ready")

    # the JobSet controller

    def _created(self, rjob: str) -> bool:
        return any(job.created is not None for job in self.jobs.values() if job.rjob == rjob)

    def _reached(self, rjob: str, status: str) -> bool:
        replicas = sum(job.rjob == rjob for job in self.jobs.values())
        jobs = [job for job in self.jobs.values() if job.rjob == rjob and job.created is not None]
        done = sum(job.state == jobset.COMPLETE for job in jobs)
        if status == jobset.COMPLETE:
            return done == replicas
        return sum(job.ready for job in jobs) + done + sum(job.state == FAILED for job in jobs) == replicas

    def _create(self, now: float) -> None:
        for rjob in self.doc["spec"]["replicatedJobs"]:
            if self._created(rjob["name"]) or not all(self._reached(d["name"], d["status"]) for d in rjob["dependsOn"]):
                continue
            after = f" (dependsOn {jobset.waits_for(rjob)})" if rjob["dependsOn"] else ""
            for job in (job for job in self.jobs.values() if job.rjob == rjob["name"]):
                job.created = now
                self.on_event("Job", job.name, "Created", f"{plural(len(job.pods), 'pod')}{after}")
                self._sync(job, now)

    def _succeeded(self) -> bool:
        spec = self.doc["spec"]
        targets = self.targets or [rjob["name"] for rjob in spec["replicatedJobs"]]
        jobs = [job for job in self.jobs.values() if job.rjob in targets]
        done = sum(job.state == jobset.COMPLETE for job in jobs)
        expected = 1 if spec["successPolicy"]["operator"] == "Any" else len(jobs)
        return done > 0 and done >= expected

    def _failure_policy(self, failed: list[JobRun]) -> None:
        rule: dict[str, Any] | None = None
        first = min(failed, key=lambda job: job.ended)
        failure = self.doc["spec"]["failurePolicy"]
        for candidate in failure["rules"]:  # the first rule that matches a failed Job, and its earliest such Job
            if matching := [job for job in failed
                            if jobset.failure_rule_applies(candidate, job.rjob, jobset.condition(job.doc))]:
                rule, first = candidate, min(matching, key=lambda job: job.ended)
                break
        action = rule["action"] if rule else jobset.RESTART_JOBSET
        self.rule, self.first_failed = rule, first
        why = f"(first failed job: {first.name})"
        if action == jobset.FAIL_JOBSET:
            self._finish(FAILED, "FailJobSetFailurePolicyAction", f"applying FailJobSet failure policy action {why}")
        elif action == jobset.RESTART_JOBSET and self.counted >= failure["maxRestarts"]:
            self._finish(FAILED, "ReachedMaxRestarts", f"jobset failed due to reaching max number of restarts {why}")
        else:
            self.restarts += 1
            counted = action == jobset.RESTART_JOBSET
            self.counted += counted
            reason = f"FailurePolicy_{rule['name']}" if rule else "DefaultFailurePolicy"
            limit = f", {self.counted} of maxRestarts {failure['maxRestarts']}" if counted else ""
            self.on_event("JobSet", self.name, "Restarting", f"{reason}: applying {action} failure policy action "
                          f"{why}: every pod stops, then every Job is created again (restart {self.restarts}{limit})")
            self._stop_all()
            self.jobs = self._fresh()

    def _finish(self, state: str, reason: str, message: str) -> None:
        """The run has ended: a JobSet deletes its active Jobs (a native release's ending is the planner's: its
        StatefulSets scaled to 0, the evaluator suspended: `advance`)."""
        jobset.ended_as(self.doc, state, reason, message)
        alive = sum(pod.alive for job in self.jobs.values() for pod in job.pods) if self.is_jobset else 0
        stopping = f" (its active Jobs deleted: {plural(alive, 'pod')} stopping)" if alive else ""
        self.on_event("JobSet", self.name, state, f"{reason}: {message}{stopping}")
        if self.is_jobset:
            self._stop_all()

    def _stop_all(self, jobs: Sequence[JobRun] | None = None, every: bool = True) -> None:
        """SIGTERM to every pod of `jobs` (default: all) still running (not `every`: those their Job no longer wants),
        all at once; each gets its pod's grace period, then SIGKILL."""
        unstarted, self.starting = {local.name for local, _ in self.starting}, []
        alive = [(pod.name, job.grace) for job in (self.jobs.values() if jobs is None else jobs)
                 for pod in job.pods if pod.alive and pod.name not in unstarted and (every or not job.runs(pod))
                 and getattr(self.engine.processes.get(pod.name), "running", False)]  # fmt: skip
        with ThreadPoolExecutor(max(1, len(alive))) as pool:  # all at once, each waited for
            list(pool.map(lambda pod: self.engine.kill(pod[0], signal.SIGTERM, pod[1]), alive))

    # what the board shows

    def pending(self, pod: str) -> str | None:
        """Why a pod has no process yet (its Job waits for its dependsOn, or its next pod for its back-off)."""
        for job in self.jobs.values():
            for run in job.pods:
                if run.name != pod or run.alive:
                    continue
                if job.created is None:
                    rjob = next(r for r in self.doc["spec"]["replicatedJobs"] if r["name"] == job.rjob)
                    return f"pending: Job waits for {jobset.waits_for(rjob)}"
                if run.due is not None and not job.state:
                    return f"pending: new pod in {max(0.0, run.due - self.clock()):.0f} s"
        return None
