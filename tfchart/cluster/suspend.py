"""`tfchart stop`, `suspend`, `resume` and `wait`: the run's wanted state written on its object, then waited for.

The state and the order of the steps are tfdcontract.lifecycle's (docs/lifecycle.md): `plan` returns the next step.
Where the run supervisor runs (a Ready replica) it carries the plan out and tfchart only writes the wanted state and
waits; where it does not, or with --force, tfchart itself reads, plans, patches, reads again until reached. A command
killed and run again continues from what the cluster holds. Past --timeout it names what is pending and exits 124.

`wait` blocks until the run ends, read from the cluster only (the run's Job or JobSet: its Complete/Failed conditions,
else the ending recorded on it by the supervisor or `tfchart stop`), polled, so a wait started after the run ended
answers at once. Once the run was seen, a few failed polls in a row (an API server restarting) are waited out. A
suspended run has not ended (the wait says so once per suspension), nor one that `tfchart upgrade --recreate` deletes
(marked first, RECREATING_ANNOTATION): the wait goes on for the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.objects import find_run, newest, role_of
from tfchart.errors import KubernetesError, TfchartError
from tfdcontract import (
    EVALUATOR,
    RECREATING_ANNOTATION,
    STATEFUL_ROLES,
    SUPERVISOR,
    TF_ROLES,
    WORKER,
    lifecycle,
    release_selector,
)
from tfdcontract.lifecycle import RUNNING_WANTED, STOPPED_WANTED, SUSPENDED_WANTED, TERMINAL, Backoff, Step
from tfdcontract.lifecycle import annotations_of as notes
from tfdcontract.lifecycle import name_of as named
from tfdcontract.runstate import KUEUE_GROUP, KUEUE_VERSIONS, now_text, spec

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

POLL_SECONDS = 1.0
WAIT_POLL_SECONDS = 2.0  # `tfchart wait`: it may wait for hours
TIMED_OUT_EXIT = 124  # as timeout(1): the wanted state not reached, or the run not ended, in time
NO_RUN_EXIT = 3  # wait: no run to wait for: the release (or its run's Job) is not there, or was deleted
FAILED_POLLS_TOLERATED = 5  # wait: in a row, once the run was seen
SEEN_SECONDS = 15.0  # for a Ready supervisor to take the wanted state up (its watch wakes it at once; its poll is 10 s)
GRACE_MARGIN_SECONDS = 60  # after the pods' terminationGracePeriodSeconds, for the kubelet to report them gone
RESUME_TIMEOUT_SECONDS = 600.0  # ps/workers scheduled, images pulled, servers listening
VERBS = {SUSPENDED_WANTED: "suspend", RUNNING_WANTED: "resume", STOPPED_WANTED: "stop"}
STATES = {SUSPENDED_WANTED: "Suspended", RUNNING_WANTED: "Running", STOPPED_WANTED: "Stopped"}


class TimedOut(TfchartError):
    """A wait given up at its --timeout (`tfchart wait`, `stop`, `suspend`, `resume`)."""

    exit_code = TIMED_OUT_EXIT


class NoRun(KubernetesError):
    exit_code = NO_RUN_EXIT


@dataclass
class Outcome:
    """What the command did (one line each) and where the run stands; `-o json` prints it as a dict."""

    release: str
    namespace: str
    state: str = ""  # Suspended | Running (resumed) | Stopped
    since: str = ""  # Suspended: since when
    replicas: dict[str, int] = field(default_factory=dict)  # the ps/worker replicas a resume brings back
    actions: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def read(api: KubeApi, release: str, namespace: str) -> lifecycle.RunView:
    """The release's objects as the planner reads them, found by the chart's labels; refused when there are none."""
    selector = release_selector(release)
    sets, jobs, deployments, pods = (api.items(kind, namespace, selector)
                                     for kind in ("StatefulSet", "Job", "Deployment", "Pod"))  # fmt: skip
    run = find_run(api, release, namespace, jobs)  # a JobSet release: its JobSet, also before it made its Jobs
    if not (sets or jobs or deployments or run.info.kind == "JobSet"):
        raise KubernetesError(f"no release {release} in namespace {namespace}: no StatefulSets, Jobs, Deployments or "
                              "JobSet carry its labels",
                              f"check the release name and namespace: `helm list -n {namespace}` (or `helm list -A`)")
    supervisor, tf_pods = newest([d for d in deployments if role_of(d) == SUPERVISOR]), [
        p for p in pods if role_of(p) in TF_ROLES]
    if run.info.kind == "JobSet":
        view = lifecycle.RunView("JobSet", run.document, supervisor=supervisor, pods=tf_pods, jobs=list(run.jobs))
        return replace(view, workload=kueue_workload(api, view.run, namespace) if view.queue else None)
    evaluator = newest([job for job in jobs if role_of(job) == EVALUATOR])
    return lifecycle.RunView("Job", run.document, [s for s in sets if role_of(s) in STATEFUL_ROLES], evaluator,
                             supervisor, tf_pods)


def carry_out(api: KubeApi, release: str, namespace: str, timeout: float | None, *, wanted: str, force: bool = False,
              end_run: bool = False, now: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> Outcome:  # fmt: skip
    """Asks for `wanted` and waits until the plan is reached: carried out by the supervisor where it runs (and takes
    the wanted state up within SEEN_SECONDS), else (or with `force`) by tfchart, step by step. A stop frees what an
    ended run holds; one still training only with `end_run`. Nothing is deleted. `now`, `sleep`: the waits' clock."""
    view = read(api, release, namespace)
    refuse(view, wanted, release, namespace, end_run)
    done, record = Outcome(release, namespace, STATES[wanted]), view.suspension
    step = lifecycle.plan(view, wanted, now=now_text(), force=force)
    if step.blocked:  # refused before anything is written
        raise blocked(view, step, wanted, release, namespace)
    run = view.run  # none (its Job deleted, or gone after keep): nothing carries the wanted state; tfchart acts
    ask = lifecycle.wanted_patch(wanted)
    if str(notes(run).get(lifecycle.WANTED_SEEN_ANNOTATION) or "").startswith(f"{wanted}: "):  # asked again: the
        ask["metadata"]["annotations"][lifecycle.WANTED_SEEN_ANNOTATION] = None  # supervisor's refusal is old news
    if run is not None and not step.reached and notes(run) | ask["metadata"]["annotations"] != notes(run):
        api.patch(view.kind, view.name, namespace, ask)
    by_supervisor = not force and run is not None and supervising(view.supervisor)
    if by_supervisor:
        done.actions.append(f"asked the run supervisor ({named(view.supervisor)}) for {wanted} on {view.kind} "
                            f"{view.name}; it carries it out")
    limit = default_timeout(view, wanted) if timeout is None else timeout
    asked, waiting, backoff, before = now(), list[str](), Backoff(), view  # `before`: read before asking
    acted: set[tuple[str, str]] = set()
    unchanged: dict[tuple[str, str], str] = {}
    while True:
        if step.blocked:
            raise blocked(view, step, wanted, release, namespace)
        waiting += [] if waiting else step.pending
        if waiting and not step.pending:
            done.actions.append(f"waited for {'; '.join(waiting)}")
            waiting = []
        for action in step.unchanged:
            unchanged.setdefault((action.kind, action.name), action.line)
        if step.reached:
            break
        pause = 0.0 if by_supervisor or not step.actions else backoff.wait(step, now())  # undone: not at once
        for action in () if pause else step.actions:  # carried out here, or by the supervisor (its lines once)
            if not by_supervisor:  # a merge patch of the object, or of its Scale (a Workload: of the version read)
                kind = "workloads." + ".".join(reversed(str((view.workload or {}).get("apiVersion")).split("/")))
                api.patch(action.kind if action.kind != "Workload" else kind, action.name, namespace,
                          dict(action.patch), action.subresource)  # fmt: skip
            acted.add((action.kind, action.name))
            done.actions += [] if by_supervisor and action.line in done.actions else [action.line]
        if by_supervisor or pause or not step.actions:  # waiting: for the supervisor, for pods, before a repeat
            waited = now() - asked
            late = unseen(view, wanted, waited) if by_supervisor and view is not before else ""
            if late or waited >= limit:
                raise timed_out(step, done, wanted, round(waited) if late else limit, late, by_supervisor, backoff)
            sleep(min(pause or POLL_SECONDS, max(asked + limit - now(), 0.0)))
        view = read(api, release, namespace)
        step = lifecycle.plan(view, wanted, now=now_text(), force=force)
        by_supervisor = by_supervisor and supervising(view.supervisor)  # one gone meanwhile: tfchart goes on
    done.unchanged = [line for key, line in unchanged.items() if key not in acted]
    record = view.suspension or record
    done.since, done.replicas = (record.since, dict(record.replicas)) if record else ("", {})
    return done


suspend = partial(carry_out, wanted=SUSPENDED_WANTED)
resume = partial(carry_out, wanted=RUNNING_WANTED)
stop = partial(carry_out, wanted=STOPPED_WANTED)


def unseen(view: lifecycle.RunView, wanted: str, waited: float) -> str:
    """Why the run supervisor is not carrying `wanted` out, as it says (its wanted-seen annotation), or once it has
    not taken it up within SEEN_SECONDS (an older image ignores it; its Role may not let it write); else ""."""
    seen, supervisor = str(notes(view.run).get(lifecycle.WANTED_SEEN_ANNOTATION) or ""), view.supervisor
    if seen.startswith(f"{wanted}: "):
        return f"the run supervisor {named(supervisor)} cannot carry it out: {seen.partition(': ')[2]}"
    if seen == wanted or waited < SEEN_SECONDS:
        return ""
    return (f"the run supervisor {named(supervisor)} has not taken it up in {SEEN_SECONDS:g}s: an older supervisor "
            f"image ignores {lifecycle.WANTED_ANNOTATION}, or its Role does not let it act (its log says which)")


def blocked(view: lifecycle.RunView, step: Step, wanted: str, release: str, namespace: str) -> TfchartError:
    """The plan's refusal in one line, with the fix for its case."""
    fix, workload = f"see `tfchart status {release} -n {namespace}`", view.workload
    if view.run is None:
        fix = f"start a new run: `tfchart upgrade {release} -n {namespace} ...` creates it again"
    elif lifecycle.run_state(view) in TERMINAL:  # by its controller, or recorded (the supervisor's ending, a stop)
        recorded = lifecycle.recorded_ending(view.run)
        ended = f"{recorded.kind}: {recorded.reason}" if recorded else lifecycle.run_state(view)
        return TfchartError(f"release {release}'s run has ended ({ended}): there is nothing to {VERBS[wanted]}",
                            f"free what it holds with `tfchart stop {release} -n {namespace}`; train again with "
                            f"`tfchart upgrade {release} -n {namespace} ... --recreate`")
    elif view.queue and workload is None:
        fix = (f"see `kubectl -n {namespace} get workloads` and `kubectl -n {namespace} describe jobset {view.name}`;"
               f" to {VERBS[wanted]} it tfchart needs its Workload (Kueue undoes a spec.suspend it did not write)")
    elif wanted == RUNNING_WANTED and view.suspension is None:  # suspended, but not by `tfchart suspend`
        target, setting = ((f"workload {named(workload)}", '"active":true') if workload is not None
                           else (f"{view.kind.lower()} {view.name}", '"suspend":false'))  # fmt: skip
        fix = f"let it run: `kubectl -n {namespace} patch {target} --type merge -p '{{\"spec\":{{{setting}}}}}'`"
    done = {RUNNING_WANTED: "resumed"}.get(wanted, STATES[wanted].lower())
    return TfchartError(f"release {release}'s run cannot be {done}: {step.blocked}", fix)


def supervising(supervisor: Mapping[str, Any] | None) -> bool:
    """Whether the run supervisor runs: its Deployment has a Ready replica and is not scaled to 0."""
    ready = ((supervisor or {}).get("status") or {}).get("readyReplicas") or 0
    return ready > 0 and spec(supervisor).get("replicas") != 0


def refuse(view: lifecycle.RunView, wanted: str, release: str, namespace: str, end_run: bool) -> None:
    """What the command will not ask for that the plan would carry out, in one line with the fix (what the plan
    cannot carry out it says itself: blocked)."""
    state, kind, name = lifecycle.run_state(view), view.kind, view.name
    if wanted == STOPPED_WANTED and state == lifecycle.RUNNING and not end_run:
        what = "JobSet" if kind == "JobSet" else {WORKER: "workers' Job"}.get(view.role, "chief Job")
        raise TfchartError(f"the {what} {name} of release {release} has not ended: stopping now ends its training",
                           f"wait for it (`tfchart status {release} -n {namespace}`), or end the run now: "
                           f"`tfchart stop {release} -n {namespace} --end-run` (the project's trainer saves a "
                           "checkpoint on SIGTERM)")  # fmt: skip
    held = spec(view.run).get("suspend") or not spec(view.workload).get("active", True)
    if wanted == RUNNING_WANTED and view.run is not None and state not in TERMINAL and not view.suspension and not held:
        raise TfchartError(f"release {release}'s run is not suspended: its {kind} {name} runs",
                           f"suspend it with `tfchart suspend {release} -n {namespace}`")


def timed_out(step: Step, done: Outcome, wanted: str, after: float, why: str, by_supervisor: bool,
              backoff: Backoff) -> TimedOut:  # fmt: skip
    """The wait given up after `after` seconds (`why`, else the timeout), naming what is pending and what to do."""
    release, namespace, verb = done.release, done.namespace, VERBS[wanted]
    why = why or ("the run supervisor has not reached it" if by_supervisor else "still pending")
    pending = [*step.pending, *(f"not done yet: {action.line}{backoff.undone(step)}" for action in step.actions)]
    again = (f"`tfchart {verb} {release} -n {namespace} --force` carries it out from here" if by_supervisor
             else f"run `tfchart {verb} {release} -n {namespace}` again to finish (it carries on from here)")
    lines = "".join(f"\n  {line}" for line in pending)
    return TimedOut(f"release {release}'s run is not {STATES[wanted].lower()} after {after:g}s ({why}):{lines}",
                    f"see why with `tfchart status {release} -n {namespace}`; {again}")


def default_timeout(view: lifecycle.RunView, wanted: str) -> float:
    """Suspend and stop --end-run: the pods' longest terminationGracePeriodSeconds (the run's, then the servers') plus
    a minute; resume: scheduling, image pulls and servers listening; stop: a minute."""
    if wanted == RUNNING_WANTED:
        return RESUME_TIMEOUT_SECONDS
    if wanted == STOPPED_WANTED and lifecycle.run_state(view) != lifecycle.RUNNING:  # --end-run: its checkpoint
        return GRACE_MARGIN_SECONDS
    run = spec(view.run)  # a JobSet's Jobs stop together; a native run's Job, then its servers
    jobs = [spec(job.get("template")).get("template") for job in run.get("replicatedJobs") or []]
    servers = [spec(stateful_set).get("template") for stateful_set in view.stateful_sets]
    stages = [jobs] if view.kind == "JobSet" else [[run.get("template")], servers]
    periods = [[spec(template).get("terminationGracePeriodSeconds") for template in each] for each in stages]
    # each stage's longest terminationGracePeriodSeconds (Kubernetes' default 30)
    return sum(max((30 if p is None else p for p in each), default=0) for each in periods) + GRACE_MARGIN_SECONDS


def kueue_workload(api: KubeApi, jobset: Mapping[str, Any] | None, namespace: str) -> dict[str, Any] | None:
    """Kueue's Workload of the JobSet (JSON, its apiVersion the one read): the one whose owner is the JobSet; none,
    the plan says why it cannot go on (Kueue has not admitted it to a queue yet, or is not running)."""
    for version in KUEUE_VERSIONS:
        for listed in api.pages(f"workloads.{version}.{KUEUE_GROUP}", namespace, page_size=None):  # none: not served
            found = lifecycle.owned(listed, jobset or {})
            return None if found is None else {**found, "apiVersion": f"{KUEUE_GROUP}/{version}"}
    return None


# -- `tfchart wait` ------------------------------------------------------------------------------------------------
def wait(
    api: KubeApi, release: str, namespace: str, timeout: float | None, *,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    notice: Callable[[str], None] = lambda line: None,
) -> tuple[str, str]:  # fmt: skip
    """The run's ending, once it has one: Succeeded or Failed (a run stopped early did not succeed), and why; raises
    TimedOut after `timeout` seconds (None: never). `notice` gets a line when the run is found suspended (once per
    suspension)."""
    deadline = None if timeout is None else clock() + timeout
    seen, failed_polls, suspended, recreating = False, 0, False, False
    while True:
        left = None if deadline is None else deadline - clock()  # before the look: a run ended by then is an answer
        try:
            run = find_run(api, release, namespace, api.items("Job", namespace, release_selector(release)))
        except KubernetesError as error:  # an API server restarting or a proxy's hiccup must not end an hours-long wait
            failed_polls += 1
            if isinstance(error, AccessDenied) or not seen or failed_polls > FAILED_POLLS_TOLERATED:
                raise
        else:
            failed_polls, info = 0, run.info
            if info.state == "Missing" and not recreating:  # none, and none is being re-created
                gone = "was deleted while waiting" if seen else f"has no run in namespace {namespace}"
                raise NoRun(f"release {release} {gone}: no chief (or workers') Job carries its labels, nor a JobSet",
                            "check the release name and namespace (`tfchart list -A`); a finished run's Job (or "
                            "JobSet) may have been removed by ttlSecondsAfterFinished: its result is in "
                            "<storage>/status.json")  # fmt: skip
            marked = info.state == "Missing" or RECREATING_ANNOTATION in notes(run.document)
            if marked and not recreating:
                notice(f"release {release}'s run is being re-created (`tfchart upgrade --recreate` deletes its "
                       f"{info.kind}): waiting for the new run to end")
            recreating, detail = marked, f"{info.reason}: {info.message}" if info.message else info.reason
            if info.state in ("Succeeded", "Failed") and not marked:
                return info.state, "; ".join(part for part in (detail, info.end_reason) if part)
            if info.ending and not marked:  # stopped (`tfchart stop --end-run`) or ended by the supervisor first
                return "Failed", info.end_reason or f"the run ended ({info.ending}) before its {info.kind} completed"
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
        sleep(WAIT_POLL_SECONDS if left is None else min(WAIT_POLL_SECONDS, left))

