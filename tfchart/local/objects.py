"""tfdcontract.lifecycle's plan, the planner the run supervisor and tfchart use, carried out on a local run: it reads
the controllers' objects (jobsetrun.py: the run's Job, StatefulSets and evaluator Job, or its JobSet and Jobs) as it
reads a cluster's, with the running pods (`view`), and its actions, merge patches, apply to them as the API server
applies them, each answered by its controller (`advance`). `resumed` makes a resumed run's objects as the
suspension left them in a cluster. `describe` and `outcome` are the board's and the summary's lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfchart.local.jobset import COMPLETE
from tfchart.local.jobsetrun import COMPLETED, JobSetRun, condition
from tfdcontract import COMPONENT_LABEL, EVALUATOR
from tfdcontract.lifecycle import (
    FAILED,
    RUNNING,
    RUNNING_WANTED,
    STOPPED_WANTED,
    SUSPENDED,
    SUSPENDED_WANTED,
    TERMINAL,
    RunView,
    ending_of,
    plan,
    role_of,
    run_state,
)
from tfdcontract.runstate import now_text


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A JSON merge patch (RFC 7386) applied to `target` in place, as the API server applies one."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            merge(target.setdefault(key, {}), value)
        else:
            target[key] = value


def view(run: JobSetRun) -> RunView:
    """What an executor reads of a cluster: the objects (a StatefulSet's Ready pods counted, as its controller does)
    and the running pods."""
    pods = [{"metadata": {"name": name, "labels": {COMPONENT_LABEL: process.pod.role}}, "status": {"phase": RUNNING}}
            for name, process in run.engine.processes.items() if process.running and run.manages(name)]  # fmt: skip
    for job in run.jobs.values():
        if job.template.kind == "StatefulSet":
            job.doc["status"]["readyReplicas"] = sum(pod.ready and job.runs(pod) for pod in job.pods)
    docs = [job.doc for job in run.jobs.values()]
    if run.spec.kind == "JobSet":
        return RunView("JobSet", run.doc, pods=pods, jobs=docs)
    evaluator = next((doc for doc in docs if doc["kind"] == "Job" and role_of(doc) == EVALUATOR), None)
    return RunView("Job", run.jobs[run.spec.name].doc, [doc for doc in docs if doc["kind"] == "StatefulSet"],
                   evaluator, pods=pods)  # fmt: skip


def advance(run: JobSetRun, suspend: bool) -> tuple[str, list[str]]:
    """Carries out the plan's next step towards the wanted state (suspended, else running; once the run has ended,
    its ending: stopped); the run's state once that is reached (tfdcontract's Running, Suspended, Succeeded,
    Failed), else "", and the lines of what was done. (A Deployment or a Kueue Workload is never planned: no
    supervisor runs here, no Kueue.)"""
    current = view(run)
    state = run_state(current)
    ended = state in TERMINAL
    wanted = STOPPED_WANTED if ended else SUSPENDED_WANTED if suspend else RUNNING_WANTED
    step = plan(current, wanted, now=now_text(), ending=ending_of(current.run) if ended else None)
    for action in step.actions:
        job = run.jobs[action.name] if action.kind != "JobSet" else None
        merge(run.doc if job is None else job.doc, action.patch)
        if "spec" in action.patch:
            run.hold(job)
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
        elif failed := next((job for job in jobs if job.state == FAILED), None):
            parts.append(f"{rjob.name} Failed ({condition(failed.doc)['reason']})")
        elif all(job.state == COMPLETE for job in jobs):
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
    failed = condition(first.doc) if first else {}
    job = f"; Job {first.template.name} failed: {failed['reason']}: {failed['message']}" if first else ""
    return f"JobSet {run.spec.name} {run.state} ({condition(run.doc)['reason']}){by}{job}"
