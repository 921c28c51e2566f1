"""A run's lifecycle, in one place: its state read from the Kubernetes objects (as the API's JSON, plain dicts), the
wanted state asked for on the run's object (`tf-distributed.io/wanted`), and ONE pure planner of the steps that
suspend, resume, stop or end it. No I/O: three executors carry a plan out, each with its own client (the run
supervisor, tfchart when the supervisor is off or with --force, and `tfchart local`).

The planner is level-triggered: `plan(view, wanted)` reads what an executor just read and returns the NEXT step
only (actions to carry out now, in order, or what must happen first). The executor carries the actions out,
reads again and plans again until the step is `reached`; an executor killed at any point and run again (or
another executor taking over) continues from what the cluster holds. docs/lifecycle.md says the orderings:

- suspend, native: the run's Job gets `spec.suspend: true` with the suspension record (one patch); once its pod
  is gone (the chief saved its checkpoint, reading the variables from the parameter servers) the ps/worker
  StatefulSets go to 0 and the evaluator Job is suspended; reached when their pods are gone too.
- resume, native: the StatefulSets back to the recorded replicas; once Ready, the evaluator runs again and the
  run's Job is unsuspended with its record dropped (one patch). In a gang (GANG_MARKERS) the Job is let run with
  the servers (the gang admits none before all exist) and the record is dropped once they are Ready.
- JobSet: `spec.suspend` with the record on the JobSet, or, under Kueue (QUEUE_LABEL), the record on the JobSet
  first and its Workload's `spec.active` (Kueue suspends the JobSet); resume the other way round, record last.
- stop / an ending: end a run still running (native: suspend its Job; JobSet: a 1 s deadline on a running child
  Job), ps/worker to 0 (unless the ending's policy keeps them), the evaluator suspended, the ending recorded
  last, and the supervisor's Deployment to 0 after it (the supervisor scales itself down once its work is done).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tfdcontract import (
    HOLDING_ROLES,
    STATEFUL_ROLES,
    SUSPENDED_ANNOTATION,
    TF_ROLES,
    Suspension,
    ending_annotations,
    suspension_annotations,
)
from tfdcontract.runstate import (
    FAILED,
    GANG_MARKERS,
    JOBSET_NAME_LABEL,
    MISSING,
    QUEUE_LABEL,
    RUNNING,
    RUNNING_WANTED,
    STOPPED,
    STOPPED_BY,
    STOPPED_WANTED,
    SUCCEEDED,
    SUSPENDED,
    SUSPENDED_WANTED,
    TERMINAL,
    WANTED_ANNOTATION,
    WANTED_SEEN_ANNOTATION,
    WANTED_STATES,
    Ending,
    RunView,
    annotations_of,
    condition,
    ending_of,
    is_suspended,
    job_ending,
    jobset_ending,
    marked,
    metadata,
    name_of,
    owned,
    pod_ended,
    recorded_ending,
    replicas_of,
    role_of,
    run_state,
    spec,
    stuck_terminating,
    wanted_of,
    wanted_patch,
    why_not_running,
)
from tfdcontract.steps import Action, Backoff, Step, describe

# -- the plan ----------------------------------------------------------------------------------------------------------


def plan(view: RunView, wanted: str, *, now: str, ending: Ending | None = None, keep: bool = False,
         force: bool = False) -> Step:  # fmt: skip
    """The next step towards `wanted` (RUNNING_WANTED, SUSPENDED_WANTED or STOPPED_WANTED). `now` (RFC 3339, UTC)
    stamps a record written; `ending` is the supervisor's (None: stop asked for, the ending `stopped`); `keep`
    leaves ps/worker up (the ending's cleanup policy keep). A pod stuck terminating (stuck_terminating: its node
    does not answer) is waited for, its pending line saying so; with `force` it counts as gone (`unchanged` says
    which): deleting it by force is the user's decision, never the plan's."""
    stuck = {name_of(pod): pod for pod in view.pods if stuck_terminating(pod, now)}
    if not stuck:
        return _plan(view, wanted, now, ending, keep)
    if force:
        step = _plan(replace(view, pods=[p for p in view.pods if name_of(p) not in stuck]), wanted, now, ending, keep)
        return replace(step, unchanged=step.unchanged + tuple(
            _unchanged("Pod", name, f"counted pod {name} as gone: {_stuck(pod)}") for name, pod in stuck.items()))
    step = _plan(view, wanted, now, ending, keep)
    return replace(step, pending=tuple(next((f"{line[:-1]}; {_stuck(pod)}; `--force` counts it as gone)" for name, pod
                                             in stuck.items() if line.startswith(f"pod {name} to stop (")), line)
                                       for line in step.pending))  # fmt: skip


def _stuck(pod: Mapping[str, Any]) -> str:
    node, namespace = spec(pod).get("nodeName") or "unknown", metadata(pod).get("namespace")
    where = f" -n {namespace}" if namespace else ""
    return (f"stuck terminating since {metadata(pod).get('deletionTimestamp')}, past its grace period, on node {node} "
            f"(unreachable?); `kubectl delete pod {name_of(pod)}{where} --force` frees its name, your decision: the "
            "node may still run it")


def _plan(view: RunView, wanted: str, now: str, ending: Ending | None, keep: bool) -> Step:
    if wanted == STOPPED_WANTED:
        return _stop_jobset(view, now, ending) if view.kind == "JobSet" else _stop_native(view, now, ending, keep)
    if view.run is None:
        return Step(blocked=f"its run's {view.kind} is gone")
    if run_state(view) in TERMINAL:
        ended = recorded_ending(view.run)
        return Step(blocked=f"the run has ended ({f'{ended.kind}: {ended.reason}' if ended else run_state(view)})")
    if wanted == SUSPENDED_WANTED:
        return _suspend_jobset(view, now) if view.kind == "JobSet" else _suspend_native(view, now)
    return _resume_jobset(view) if view.kind == "JobSet" else _resume_native(view)


def _unchanged(kind: str, name: str, line: str) -> Action:
    return Action(kind, name, {}, line)


def _scale(kind: str, obj: Mapping[str, Any], to: int) -> Action:
    return Action(kind, name_of(obj), {"spec": {"replicas": to}},
                  f"scaled {kind} {name_of(obj)} from {replicas_of(obj)} to {to} replicas", "scale")


def _free(view: RunView, why: str, keep: bool = False) -> tuple[list[Action], list[Action]]:
    """ps/worker to 0 and the evaluator suspended: (actions, unchanged)."""
    actions, unchanged = [], []
    for stateful_set in [s for s in view.stateful_sets if role_of(s) in STATEFUL_ROLES]:
        if keep:
            continue
        if replicas_of(stateful_set) == 0:
            unchanged.append(_unchanged("StatefulSet", name_of(stateful_set),
                                        f"StatefulSet {name_of(stateful_set)} is already at 0 replicas"))
        else:
            actions.append(_scale("StatefulSet", stateful_set, 0))
    evaluator = view.evaluator
    if evaluator is not None and not metadata(evaluator).get("deletionTimestamp"):
        name = name_of(evaluator)
        if job_ending(evaluator) or spec(evaluator).get("suspend"):
            unchanged.append(_unchanged("Job", name, f"Job {name} has already ended or is suspended"))
        else:
            actions.append(Action("Job", name, {"spec": {"suspend": True}}, f"suspended Job {name}: {why}"))
    return actions, unchanged


def _scale_supervisor(view: RunView) -> tuple[list[Action], list[Action]]:
    supervisor = view.supervisor
    if supervisor is None:
        return [], []
    if replicas_of(supervisor) == 0:
        return [], [_unchanged("Deployment", name_of(supervisor),
                               f"Deployment {name_of(supervisor)} is already at 0 replicas")]
    return [_scale("Deployment", supervisor, 0)], []


def _pending_pods(pods: Sequence[Mapping[str, Any]], what: str) -> tuple[str, ...]:
    return tuple(f"pod {name_of(pod)} to stop ({what})" for pod in pods)


# -- native: the run's Job, the ps/worker StatefulSets, the evaluator Job -----------------------------------------


def _suspend_native(view: RunView, now: str) -> Step:
    kind, name, record = view.kind, view.name, view.suspension
    if record is None:
        evaluator = view.evaluator
        running = evaluator is not None and not job_ending(evaluator) and not spec(evaluator).get("suspend")
        record = Suspension(now, {role_of(s): replicas_of(s) for s in view.stateful_sets
                                  if role_of(s) in STATEFUL_ROLES}, running)  # fmt: skip
        kept = ", ".join(f"{role} {count}" for role, count in record.replicas.items())
        line = f"suspended {kind} {name}" + (f", recording the replicas to restore ({kept})" if kept else "")
        patch = {"metadata": {"annotations": suspension_annotations(record)}, "spec": {"suspend": True}}
        return Step((Action(kind, name, patch, line),))
    if not spec(view.run).get("suspend"):  # unsuspended by hand since: suspended again
        return Step((Action(kind, name, {"spec": {"suspend": True}},
                            f"suspended {kind} {name} again (its record says since {record.since})"),))
    unchanged = [_unchanged(kind, name, f"{kind} {name} is already suspended (since {record.since})")]
    own = view.running_pods((view.role,))
    if own:
        saving = "it saves a checkpoint at its step boundary"
        return Step(pending=_pending_pods(own, saving), unchanged=tuple(unchanged))
    actions, more = _free(view, "it evaluates again once resumed")
    if actions:
        return Step(tuple(actions), unchanged=tuple(unchanged + more))
    return Step(pending=_pending_pods(view.running_pods(HOLDING_ROLES), "released with what it holds"),
                unchanged=tuple(unchanged + more))


RUN_PHASES = ("Running", "Pending")  # a pod that runs, or waits with no reason to show


def _ready(stateful_set: Mapping[str, Any], count: int) -> bool:
    status, generation = stateful_set.get("status") or {}, metadata(stateful_set).get("generation") or 0
    return (status.get("readyReplicas") or 0) >= count and (status.get("observedGeneration") or 0) >= generation


def _resume_native(view: RunView) -> Step:
    kind, name, record = view.kind, view.name, view.suspension
    if record is None:
        if spec(view.run).get("suspend"):  # (its Suspended condition may lag behind a resume)
            return Step(blocked=f"its {kind} {name} is suspended, but not by `tfchart suspend` (no "
                                f"{SUSPENDED_ANNOTATION} record of what to bring back)")
        return Step()
    wanted = {name_of(s): (s, record.replicas[role_of(s)]) for s in view.stateful_sets if role_of(s) in record.replicas}
    actions = [_scale("StatefulSet", s, count) for s, count in wanted.values() if replicas_of(s) != count]
    unchanged = [_unchanged("StatefulSet", n, f"StatefulSet {n} is already at {count} replicas")
                 for n, (s, count) in wanted.items() if replicas_of(s) == count]
    gang = next((marker for s in view.stateful_sets for marker in GANG_MARKERS if marked(s, marker)), "")
    again = f"a new {view.role} pod continues from the last checkpoint"
    evaluator = view.evaluator
    if record.evaluator and evaluator is not None and spec(evaluator).get("suspend"):
        actions.append(Action("Job", name_of(evaluator), {"spec": {"suspend": False}},
                              f"let Job {name_of(evaluator)} run again: the evaluator follows the checkpoints"))
    late = tuple(f"StatefulSet {n} to be Ready ({(s.get('status') or {}).get('readyReplicas') or 0}/{count} Ready)"
                 for n, (s, count) in wanted.items() if not _ready(s, count))
    if late:  # why, where a server's pod says
        starting = [p for p in view.pods if role_of(p) in record.replicas and why_not_running(p) not in RUN_PHASES]
        late += tuple(f"pod {name_of(p)}: {why_not_running(p)}" for p in starting)
    if gang:  # the gang admits no pod before all of them exist: the chief's too, so it cannot wait for Ready
        if spec(view.run).get("suspend"):
            actions.append(Action(kind, name, {"spec": {"suspend": False}},
                                  f"resumed {kind} {name} with its servers, as one gang ({gang}): {again}"))
        if actions or late:
            return Step(tuple(actions), late if not actions else (), tuple(unchanged))
        return Step((Action(kind, name, {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}},
                            f"dropped the suspension record from {kind} {name}"),), unchanged=tuple(unchanged))
    scaled = [a for a in actions if a.kind == "StatefulSet"]
    if scaled or late:
        return Step(tuple(scaled), late if not scaled else (), tuple(unchanged))
    actions.append(Action(kind, name, {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}},
                                       "spec": {"suspend": False}},
                          f"resumed {kind} {name} and dropped the suspension record: {again}"))
    return Step(tuple(actions), unchanged=tuple(unchanged))


def _stop_native(view: RunView, now: str, ending: Ending | None, keep: bool) -> Step:
    kind, name = view.kind, view.name
    state = run_state(view)
    actions: list[Action] = []
    if ending is None and state in TERMINAL:  # ended by its controller: that ending is recorded, a success kept
        ending = ending_of(view.run)
    if view.run is not None and ending is None and state not in (*TERMINAL, SUSPENDED):
        return Step((Action(kind, name, {"spec": {"suspend": True}},
                            f"suspended {kind} {name}: its pod gets SIGTERM and saves a checkpoint"),))
    saving = view.running_pods((view.role,)) if ending is None and state == SUSPENDED else []
    if saving:  # its checkpoint reads the variables from the parameter servers: they stay until it is saved
        return Step(pending=_pending_pods(saving, "it saves a checkpoint at its step boundary"))
    freed, unchanged = _free(view, "the evaluator ends with the run", keep)
    actions += freed
    record: list[Action] = []
    if view.run is not None and recorded_ending(view.run) is None and (ending is None or ending.record):
        early = state == RUNNING or (state == SUSPENDED and view.suspension is None)  # suspended by this stop
        what = "training ended early" if early else f"chief Job {state}"
        kind_, reason = (ending.kind, ending.reason) if ending else (STOPPED, f"stopped by {STOPPED_BY} ({what})")
        record.append(Action(kind, name, {"metadata": {"annotations": ending_annotations(kind_, reason, now)}},
                             f"recorded the ending on {kind} {name}: upgrading the same run keeps it stopped"))
    own, more = _scale_supervisor(view)
    return Step(tuple(actions + record + own), unchanged=tuple(unchanged + more))


# -- jobset: the JobSet, or Kueue's Workload of it ----------------------------------------------------------------


def _workload_active(view: RunView) -> bool:
    return bool(spec(view.workload).get("active", True))


def _no_workload(view: RunView) -> Step:
    return Step(blocked=f"JobSet {view.name} is managed by Kueue (queue {view.queue}), but no Kueue Workload is owned "
                        "by it: Kueue has not admitted it to a queue yet, or is not running")


def _hold_jobset(view: RunView, why: str) -> list[Action]:
    """A JobSet kept from running: its own spec.suspend, or under Kueue (which undoes a spec.suspend it did not
    write) its Workload deactivated."""
    if not view.queue or view.workload is None:
        return [Action("JobSet", view.name, {"spec": {"suspend": True}}, f"suspended JobSet {view.name}: {why}")]
    workload = name_of(view.workload)
    return [Action("Workload", workload, {"spec": {"active": False}},
                   f"deactivated Kueue Workload {workload} of JobSet {view.name} (spec.active: false): {why}")]


def _suspend_jobset(view: RunView, now: str) -> Step:
    name, record, queue = view.name, view.suspension, view.queue
    if queue and view.workload is None:
        return _no_workload(view)
    if record is None:
        record = Suspension(now, {}, False)
        patch: dict[str, Any] = {"metadata": {"annotations": suspension_annotations(record)}}
        if not queue:
            patch["spec"] = {"suspend": True}
        line = f"suspended JobSet {name}" if not queue else f"recorded the suspension on JobSet {name}"
        return Step((Action("JobSet", name, patch, line),))
    unchanged: list[Action] = []
    if not queue and not spec(view.run).get("suspend"):
        return Step((Action("JobSet", name, {"spec": {"suspend": True}},
                            f"suspended JobSet {name} again (its record says since {record.since})"),))
    if not queue:
        unchanged.append(_unchanged("JobSet", name, f"JobSet {name} is already suspended (since {record.since})"))
    else:
        workload = name_of(view.workload)
        if _workload_active(view):
            return Step((Action("Workload", workload, {"spec": {"active": False}},
                                f"deactivated Kueue Workload {workload} (spec.active: false): Kueue evicts it, "
                                f"suspends JobSet {name} and releases its quota in ClusterQueue of queue {queue}"),))
        unchanged.append(_unchanged("Workload", workload,
                                    f"Kueue Workload {workload} is already deactivated (since {record.since})"))
    pods = view.running_pods(TF_ROLES)
    return Step(pending=_pending_pods(pods, "it stops once the chief saved its checkpoint"), unchanged=tuple(unchanged))


def _resume_jobset(view: RunView) -> Step:
    name, record, queue = view.name, view.suspension, view.queue
    if queue and view.workload is None:
        return _no_workload(view)
    if record is None:
        if not _workload_active(view) if queue else spec(view.run).get("suspend"):  # under Kueue, Kueue's to write
            return Step(blocked=f"its JobSet {name} is suspended, but not by `tfchart suspend` (no "
                                f"{SUSPENDED_ANNOTATION} record)")
        return Step()
    again = "a new chief pod continues from the last checkpoint"
    if not queue:
        return Step((Action("JobSet", name, {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}},
                                             "spec": {"suspend": False}},
                            f"resumed JobSet {name} and dropped the suspension record: JobSet starts its Jobs again "
                            f"in their dependsOn order; {again}"),))
    actions = []
    workload = name_of(view.workload)
    if not _workload_active(view):
        actions.append(Action("Workload", workload, {"spec": {"active": True}},
                              f"activated Kueue Workload {workload} (spec.active: true): it queues in {queue} again, "
                              f"and Kueue resumes JobSet {name} once admitted; {again}"))
    actions.append(Action("JobSet", name, {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}},
                          f"dropped the suspension record from JobSet {name}"))
    return Step(tuple(actions))


def _stop_jobset(view: RunView, now: str, ending: Ending | None) -> Step:
    """JobSet deletes its running Jobs when it ends: nothing to scale. A running one is ended through a Job's deadline
    (activeDeadlineSeconds 1 fails it, DeadlineExceeded; the JobSet's DeadlineEndsTheRun rule fails the run and JobSet
    deletes the other Jobs), or suspended when none of its Jobs runs yet; the ending is recorded on the JobSet."""
    name, state = view.name, run_state(view)
    actions: list[Action] = []
    unchanged: list[Action] = []
    running = view.run is not None and ending is None and state not in (*TERMINAL, SUSPENDED)
    if running:
        active = [job for job in view.jobs if job_ending(job) is None]
        chief = [job for job in active if role_of(job) == view.role]
        job = next(iter(chief or active), None)
        if job is not None and spec(job).get("activeDeadlineSeconds") != 1:
            actions.append(Action("Job", name_of(job), {"spec": {"activeDeadlineSeconds": 1}},
                                  f"set Job {name_of(job)}'s activeDeadlineSeconds to 1: it fails (DeadlineExceeded), "
                                  f"JobSet {name}'s DeadlineEndsTheRun rule fails the run and JobSet deletes its other "
                                  "Jobs; the chief's pod gets SIGTERM and saves a checkpoint"))
        elif job is None:
            actions += _hold_jobset(view, "none of its Jobs runs yet, and none will")
    elif state == SUSPENDED and view.queue and view.workload is not None and _workload_active(view):
        actions += _hold_jobset(view, "Kueue would admit it again")  # held in its queue: it must not run later
    elif view.run is not None and state != SUSPENDED:
        unchanged.append(_unchanged("JobSet", name, f"JobSet {name} has ended ({state}): JobSet deleted its Jobs "
                                                    "still running, so nothing of the run is left to scale down"))
    own, more = _scale_supervisor(view)
    record: list[Action] = []
    recorded = recorded_ending(view.run)
    if recorded is not None:
        unchanged.append(_unchanged("JobSet", name, f"JobSet {name} already records its ending ({recorded.kind})"))
    elif view.run is not None and (ending.record if ending else state not in TERMINAL):
        what = "training ended early" if state == RUNNING else f"JobSet {state}"
        kind, reason = (ending.kind, ending.reason) if ending else (STOPPED, f"stopped by {STOPPED_BY} ({what})")
        record.append(Action("JobSet", name, {"metadata": {"annotations": ending_annotations(kind, reason, now)}},
                             f"recorded the ending on JobSet {name}: upgrading the same run keeps it stopped"))
    return Step(tuple(actions + record + own), unchanged=tuple(unchanged + more))



__all__ = [
    "FAILED", "GANG_MARKERS", "JOBSET_NAME_LABEL", "MISSING", "QUEUE_LABEL", "RUNNING", "RUNNING_WANTED", "STOPPED",
    "STOPPED_BY", "STOPPED_WANTED", "SUCCEEDED", "SUSPENDED", "SUSPENDED_WANTED", "TERMINAL", "WANTED_ANNOTATION",
    "WANTED_SEEN_ANNOTATION", "WANTED_STATES", "Action", "Backoff", "Ending", "RunView", "Step", "annotations_of",
    "condition", "describe", "ending_of", "is_suspended", "job_ending", "jobset_ending", "marked", "metadata",
    "name_of", "owned", "plan", "pod_ended", "recorded_ending", "replicas_of", "role_of", "run_state", "spec",
    "stuck_terminating", "wanted_of", "wanted_patch", "why_not_running",
]
