"""A local run's objects as the API would show them (plain dicts: its Job, StatefulSets and evaluator Job, or its
JobSet and Jobs, and its running pods), so that tfdcontract.lifecycle, the planner the run supervisor and tfchart
use, decides a local run's state, its ending and the order of its suspend and resume steps; `advance` carries the
plan's next step out on the emulated controllers (jobsetrun.py): a Job or the JobSet suspended or let run again, a
StatefulSet scaled, a record written on the run's object. There is no API server: the objects live in this
process, and `resumed` makes a resumed run's as the suspension left them in a cluster.
"""

from __future__ import annotations

from typing import Any

from tfchart.local.jobset import COMPLETE
from tfchart.local.jobsetrun import COMPLETED, JobRun, JobSetRun
from tfdcontract import COMPONENT_LABEL, EVALUATOR
from tfdcontract.lifecycle import (
    RUNNING,
    RUNNING_WANTED,
    STOPPED_WANTED,
    SUSPENDED,
    SUSPENDED_WANTED,
    TERMINAL,
    Action,
    RunView,
    ending_of,
    plan,
    run_state,
)
from tfdcontract.runstate import now_text


def job_object(run: JobSetRun, job: JobRun) -> dict[str, Any]:
    """A Job, or a StatefulSet, as the API shows it."""
    template, role = job.template, run.pods[job.template.pods[0]].role
    meta = {"name": template.name, "labels": {COMPONENT_LABEL: role}, "annotations": dict(job.annotations)}
    if template.kind == "StatefulSet":
        ready = sum(pod.ready and job.runs(pod) for pod in job.pods)
        return {"kind": "StatefulSet", "metadata": meta, "spec": {"replicas": job.replicas},
                "status": {"readyReplicas": ready}}  # fmt: skip
    conditions = [{"type": job.condition, "status": "True", "reason": job.reason, "message": job.message}]
    return {"kind": "Job", "metadata": meta, "spec": {"suspend": job.suspended},
            "status": {"conditions": conditions if job.condition else []}}  # fmt: skip


def view(run: JobSetRun) -> RunView:
    """What an executor reads of a cluster, read from the emulated controllers."""
    pods = [{"metadata": {"name": name, "labels": {COMPONENT_LABEL: process.pod.role}}, "status": {"phase": RUNNING}}
            for name, process in run.engine.processes.items() if process.running and run.manages(name)]  # fmt: skip
    objects = [job_object(run, job) for job in run.jobs.values()]
    if run.spec.kind == "JobSet":
        ended = [{"type": run.state, "status": "True", "reason": run.reason, "message": run.message}]
        targets = {"targetReplicatedJobs": list(run.spec.success_targets)}
        jobset = {"kind": "JobSet", "metadata": {"name": run.spec.name, "annotations": dict(run.annotations)},
                  "spec": {"suspend": run.suspended, "successPolicy": targets},
                  "status": {"conditions": ended if run.finished else []}}  # fmt: skip
        return RunView("JobSet", jobset, pods=pods, jobs=objects)
    jobs = [o for o in objects if o["kind"] == "Job"]
    evaluator = next((o for o in jobs if o["metadata"]["labels"][COMPONENT_LABEL] == EVALUATOR), None)
    return RunView("Job", next(o for o in jobs if o["metadata"]["name"] == run.spec.name),
                   [o for o in objects if o["kind"] == "StatefulSet"], evaluator, pods=pods)  # fmt: skip


def carry_out(run: JobSetRun, action: Action) -> None:
    """One of the plan's writes, as the object's controller answers it (a Deployment or a Kueue Workload is never
    planned: no supervisor runs here, no Kueue)."""
    patch, job = action.patch, run.jobs.get(action.name) if action.kind != "JobSet" else None
    record = job.annotations if job is not None else run.annotations
    for key, value in ((patch.get("metadata") or {}).get("annotations") or {}).items():
        record.pop(key, None) if value is None else record.update({key: value})
    wanted = patch.get("spec") or {}
    if "suspend" in wanted or "replicas" in wanted:
        run.hold(job, wanted.get("suspend"), wanted.get("replicas"))


def advance(run: JobSetRun, suspend: bool) -> tuple[str, list[str]]:
    """Carries out the plan's next step towards the wanted state (suspended, else running; once the run has ended,
    its ending: stopped); the run's state once that is reached (tfdcontract's Running, Suspended, Succeeded,
    Failed), else "", and the lines of what was done."""
    current = view(run)
    state, now = run_state(current), now_text()
    ended = state in TERMINAL
    wanted = STOPPED_WANTED if ended else SUSPENDED_WANTED if suspend else RUNNING_WANTED
    step = plan(current, wanted, now=now, ending=ending_of(current.run) if ended else None)
    for action in step.actions:
        carry_out(run, action)
    return ("" if step.actions or step.pending else state), [action.line for action in step.actions]


def resumed(run: JobSetRun) -> None:
    """The objects as `tfchart suspend` left them (the plan's suspension, carried out before any pod runs: the
    run's Job or JobSet suspended with its record, ps/worker at 0), so that the plan's resume brings the servers
    back Ready before the chief."""
    for _ in range(4):  # suspend, scale down, reached
        if advance(run, suspend=True)[0] == SUSPENDED:
            return


def describe(run: JobSetRun) -> str:
    """The JobSet's state and each replicatedJob's, in one line."""
    parts = []
    for rjob in run.spec.replicated_jobs:
        jobs = [run.jobs[t.name] for t in rjob.jobs]
        if not any(job.created is not None for job in jobs):
            parts.append(f"{rjob.name} waits for {rjob.waits_for}")
        elif failed := next((job for job in jobs if job.condition == "Failed"), None):
            parts.append(f"{rjob.name} Failed ({failed.reason})")
        elif all(job.condition == COMPLETE for job in jobs):
            parts.append(f"{rjob.name} Complete")
        else:
            alive = any(pod.alive for job in jobs for pod in job.pods)
            state = "Ready" if all(job.ready for job in jobs) else "Active" if alive else "starting"
            parts.append(f"{rjob.name} {state}")
    state = SUSPENDED if run.suspended and not run.finished else run.state
    restarts = f" (restart {run.restarts})" if run.restarts else ""
    return f"JobSet {run.spec.name} {state}{restarts}: {', '.join(parts)}"


def outcome(run: JobSetRun) -> str:
    """How the run ended, for the closing summary: the state, its reason, and on failure the rule and Job."""
    if run.state == COMPLETED:
        targets = ", ".join(run.spec.success_targets) or "every replicatedJob"
        return f"JobSet {run.spec.name} Completed: successPolicy {run.spec.success_operator} of {targets}"
    first = run.first_failed
    by = (f" by failure policy rule {run.rule['name']} ({run.rule['action']})" if run.rule else
          f": no failure policy rule matched, and JobSet's default, RestartJobSet, had used up maxRestarts "
          f"{run.spec.max_restarts}")  # fmt: skip
    job = f"; Job {first.template.name} failed: {first.reason}: {first.message}" if first else ""
    return f"JobSet {run.spec.name} {run.state} ({run.reason}){by}{job}"
