"""tfdcontract.lifecycle's planner, as functions on dicts: every ordering the executors rely on (the supervisor,
tfchart, `tfchart local`), the gangs, JobSet and Kueue's Workload, and a run carried out step by step and stopped
after any step (killed between writes): planning again from what the objects hold finishes the same way."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tfdcontract import ENDING_ANNOTATION, SUSPENDED_ANNOTATION, parse_suspension
from tfdcontract.lifecycle import (
    GANG_MARKERS,
    QUEUE_LABEL,
    RUNNING_WANTED,
    STOPPED_WANTED,
    SUSPENDED_WANTED,
    WANTED_ANNOTATION,
    Action,
    Backoff,
    Ending,
    RunView,
    Step,
    ending_of,
    plan,
    run_state,
    wanted_of,
)

NOW = "2026-11-28T12:00:00Z"
COMPONENT = "app.kubernetes.io/component"


def obj(name: str, role: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {COMPONENT: role}, "annotations": {}}, "spec": spec, "status": {}}


def pod(name: str, role: str, phase: str = "Running") -> dict[str, Any]:
    return {**obj(name, role), "status": {"phase": phase}}


def cond(kind: str, reason: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": reason}


def native(*, chief: str = "running", evaluator: bool = True, gang: bool = False) -> dict[str, Any]:
    """A native release as dicts: the chief Job (its pod), ps 1 and worker 2 (their pods), the evaluator, the
    supervisor's Deployment."""
    template = {"metadata": {"labels": {GANG_MARKERS[1]: "r"} if gang else {}}}
    objects: dict[str, Any] = {
        "run": {**obj("r-chief", "chief"), "kind": "Job"},
        "sets": [obj("r-ps", "ps", replicas=1, template=template),
                 obj("r-worker", "worker", replicas=2, template=template)],
        "evaluator": obj("r-evaluator", "evaluator") if evaluator else None,
        "supervisor": obj("r-supervisor", "supervisor", replicas=1),
        "pods": [pod("r-chief-x", "chief"), pod("r-ps-0", "ps"), pod("r-worker-0", "worker"),
                 pod("r-worker-1", "worker"), *([pod("r-evaluator-x", "evaluator")] if evaluator else [])],
    }
    if chief == "complete":
        objects["run"]["status"] = {"conditions": [cond("Complete")]}
        objects["pods"][0]["status"]["phase"] = "Succeeded"
    return objects


def view(objects: dict[str, Any], kind: str = "Job") -> RunView:
    return RunView(kind, objects["run"], objects.get("sets", ()), objects.get("evaluator"), objects.get("supervisor"),
                   objects["pods"], objects.get("workload"), objects.get("jobs", ()))  # fmt: skip


def merge(target: dict[str, Any], patch: Any) -> None:
    """RFC 7386, as the API server applies a merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def apply(objects: dict[str, Any], action: Action) -> None:
    """An executor's part: the action's merge patch on the object it names."""
    candidates = [objects["run"], *objects.get("sets", []), objects.get("evaluator"), objects.get("supervisor"),
                  objects.get("workload"), *objects.get("jobs", [])]  # fmt: skip
    target = next(o for o in candidates if o is not None and o["metadata"]["name"] == action.name)
    merge(target, action.patch)


def controllers(objects: dict[str, Any]) -> None:
    """The cluster's part between two reads: a suspended Job's pods go, a StatefulSet's pods follow its replicas
    (and are Ready), an active Workload runs its JobSet and an inactive one suspends it."""
    run, kept = objects["run"], []
    for p in objects["pods"]:
        role = p["metadata"]["labels"][COMPONENT]
        sets = {s["metadata"]["labels"][COMPONENT]: s for s in objects.get("sets", [])}
        if role in sets:
            keep = int(p["metadata"]["name"].rsplit("-", 1)[1]) < sets[role]["spec"].get("replicas", 1)
        elif role == "evaluator" and objects.get("evaluator"):
            keep = not objects["evaluator"]["spec"].get("suspend")
        else:
            keep = not run["spec"].get("suspend")
        kept += [p] if keep else []
    for s in objects.get("sets", []):
        role, count = s["metadata"]["labels"][COMPONENT], s["spec"].get("replicas", 1)
        have = {p["metadata"]["name"] for p in kept}
        kept += [pod(f"r-{role}-{i}", role) for i in range(count) if f"r-{role}-{i}" not in have]
        s["status"] = {"readyReplicas": count}
    if objects.get("workload") is not None:
        run["spec"]["suspend"] = not objects["workload"]["spec"].get("active", True)
    objects["pods"] = kept


def carry_out(objects: dict[str, Any], wanted: str, kind: str = "Job", steps: int = 50,
              between: Callable[[dict[str, Any]], None] = controllers, **options: Any) -> list[list[str]]:  # fmt: skip
    """What an executor does: plan, apply, let the controllers act, plan again; the lines of each step's actions."""
    done: list[list[str]] = []
    for _ in range(steps):
        step = plan(view(objects, kind), wanted, now=NOW, **options)
        assert not step.blocked, step.blocked
        if step.reached:
            return done
        for action in step.actions:
            apply(objects, action)
        done.append([action.line for action in step.actions])
        between(objects)
    raise AssertionError(f"not reached in {steps} steps")


def annotated(o: dict[str, Any]) -> dict[str, Any]:
    return dict(o["metadata"]["annotations"])


# -- the model ----------------------------------------------------------------------------------------------------


def test_run_state_ending_and_wanted_are_read_from_the_object() -> None:
    run = native()["run"]
    assert (run_state(RunView("Job", run)), ending_of(run), wanted_of(run)) == ("Running", None, RUNNING_WANTED)
    assert run_state(RunView("Job", None)) == "Missing"
    run["spec"]["suspend"] = True
    run["metadata"]["annotations"][SUSPENDED_ANNOTATION] = json.dumps({"since": NOW, "replicas": {}})
    assert (run_state(RunView("Job", run)), wanted_of(run)) == ("Suspended", SUSPENDED_WANTED)  # the record says so
    run["metadata"]["annotations"][WANTED_ANNOTATION] = STOPPED_WANTED
    assert wanted_of(run) == STOPPED_WANTED
    run["status"] = {"conditions": [cond("Failed", "BackoffLimitExceeded")]}
    assert ending_of(run) == Ending("failed", "Failed: BackoffLimitExceeded")
    run["metadata"]["annotations"][ENDING_ANNOTATION] = "stalled"  # the record first: that decision stands
    assert ending_of(run) == Ending("stalled", "", recorded=True) and run_state(RunView("Job", run)) == "Failed"
    jobset = {"kind": "JobSet", "metadata": {"name": "r"}, "status": {"terminalState": "Completed"}}
    assert ending_of(jobset) == Ending("succeeded", "Succeeded: JobSet r completed")


# -- native -------------------------------------------------------------------------------------------------------


def test_suspend_records_first_frees_the_servers_only_once_the_chief_is_gone_and_waits_for_the_rest() -> None:
    objects = native()
    first = plan(view(objects), SUSPENDED_WANTED, now=NOW)
    [record] = first.actions
    assert record.patch["spec"] == {"suspend": True} and record.name == "r-chief"
    suspension = parse_suspension(record.patch["metadata"]["annotations"])
    assert suspension is not None and dict(suspension.replicas) == {"ps": 1, "worker": 2} and suspension.evaluator
    apply(objects, record)
    waiting = plan(view(objects), SUSPENDED_WANTED, now=NOW)  # the chief's pod still saves its checkpoint
    assert waiting.actions == () and waiting.pending == ("pod r-chief-x to stop (it saves a checkpoint at its step "
                                                         "boundary)",)  # fmt: skip
    objects["pods"] = objects["pods"][1:]
    freeing = plan(view(objects), SUSPENDED_WANTED, now=NOW)
    assert [(a.kind, a.name, a.subresource, dict(a.patch)) for a in freeing.actions] == [
        ("StatefulSet", "r-ps", "scale", {"spec": {"replicas": 0}}),
        ("StatefulSet", "r-worker", "scale", {"spec": {"replicas": 0}}),
        ("Job", "r-evaluator", "", {"spec": {"suspend": True}})]
    for action in freeing.actions:
        apply(objects, action)
    assert len(plan(view(objects), SUSPENDED_WANTED, now=NOW).pending) == 4  # ps, workers, evaluator: not yet gone
    controllers(objects)
    done = plan(view(objects), SUSPENDED_WANTED, now=NOW)
    assert done.reached and [a.line for a in done.unchanged] == [
        "Job r-chief is already suspended (since 2026-11-28T12:00:00Z)", "StatefulSet r-ps is already at 0 replicas",
        "StatefulSet r-worker is already at 0 replicas", "Job r-evaluator has already ended or is suspended"]


def test_a_job_unsuspended_by_hand_is_suspended_again_under_its_record() -> None:
    objects = native()
    carry_out(objects, SUSPENDED_WANTED)
    objects["run"]["spec"]["suspend"] = False
    [again] = plan(view(objects), SUSPENDED_WANTED, now="later").actions
    assert again.patch == {"spec": {"suspend": True}} and "again (its record says since 2026-11-28" in again.line


@pytest.mark.parametrize("gang", [False, True])
def test_resume_brings_the_servers_back_before_the_chief_or_with_it_in_a_gang(gang: bool) -> None:
    objects = native(gang=gang)
    carry_out(objects, SUSPENDED_WANTED)
    steps = carry_out(objects, RUNNING_WANTED)
    if gang:  # the gang admits no pod before all exist: the chief's Job runs with the servers, the record goes last
        assert steps == [["scaled StatefulSet r-ps from 0 to 1 replicas", "scaled StatefulSet r-worker from 0 to 2 "
                          "replicas", "let Job r-evaluator run again: the evaluator follows the checkpoints",
                          "resumed Job r-chief with its servers, as one gang (scheduling.x-k8s.io/pod-group): a new "
                          "chief pod continues from the last checkpoint"],
                         ["dropped the suspension record from Job r-chief"]]  # fmt: skip
    else:
        assert steps == [["scaled StatefulSet r-ps from 0 to 1 replicas", "scaled StatefulSet r-worker from 0 to 2 "
                          "replicas"], ["let Job r-evaluator run again: the evaluator follows the checkpoints",
                          "resumed Job r-chief and dropped the suspension record: a new chief pod continues from the "
                          "last checkpoint"]]  # fmt: skip
    assert SUSPENDED_ANNOTATION not in annotated(objects["run"]) and not objects["run"]["spec"]["suspend"]


def test_resume_waits_for_ready_servers_and_says_why_one_is_not() -> None:
    objects = native(evaluator=False)
    carry_out(objects, SUSPENDED_WANTED)
    for action in plan(view(objects), RUNNING_WANTED, now=NOW).actions:
        apply(objects, action)
    objects["pods"] = [{**pod("r-worker-1", "worker", "Pending"), "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]}}]
    step = plan(view(objects), RUNNING_WANTED, now=NOW)
    assert step.actions == () and step.pending == ("StatefulSet r-ps to be Ready (0/1 Ready)",
                                                   "StatefulSet r-worker to be Ready (0/2 Ready)",
                                                   "pod r-worker-1: Unschedulable: 0/3 nodes")  # fmt: skip


def test_resume_refuses_a_suspension_it_has_no_record_of_and_has_nothing_to_do_for_a_running_run() -> None:
    objects = native()
    assert plan(view(objects), RUNNING_WANTED, now=NOW).reached
    objects["run"]["spec"]["suspend"] = True
    assert "not by `tfchart suspend`" in plan(view(objects), RUNNING_WANTED, now=NOW).blocked
    objects["run"]["status"] = {"conditions": [cond("Complete")]}
    assert plan(view(objects), SUSPENDED_WANTED, now=NOW).blocked == "the run has ended (Succeeded)"


@pytest.mark.parametrize("wanted", [SUSPENDED_WANTED, RUNNING_WANTED, STOPPED_WANTED])
def test_an_executor_killed_after_any_step_is_finished_by_the_next_one(wanted: str) -> None:
    """Level-triggered: stopping after k steps (the controllers acting meanwhile or not) and planning again from the
    objects reaches the same end as an uninterrupted run."""

    def start() -> dict[str, Any]:
        objects = native()
        if wanted == RUNNING_WANTED:
            carry_out(objects, SUSPENDED_WANTED)
        return objects

    whole = start()
    total = len(carry_out(whole, wanted))
    controllers(whole)  # settled: what the cluster holds once its controllers caught up
    for k in range(total + 1):
        for controllers_acted in (False, True):
            objects = start()
            for _ in range(k):  # the first executor, killed after k steps
                for action in plan(view(objects), wanted, now=NOW).actions:
                    apply(objects, action)
                if controllers_acted:
                    controllers(objects)
            carry_out(objects, wanted)
            controllers(objects)
            assert objects == whole, (k, controllers_acted)


def test_stop_ends_the_run_frees_the_rest_records_the_ending_and_scales_the_supervisor_last() -> None:
    objects = native()
    ending, step = carry_out(objects, STOPPED_WANTED)  # the servers stay until the chief's checkpoint is saved
    assert ending == ["suspended Job r-chief: its pod gets SIGTERM and saves a checkpoint"]
    assert step == ["scaled StatefulSet r-ps from 1 to 0 replicas", "scaled StatefulSet r-worker from 2 to 0 replicas",
                    "suspended Job r-evaluator: the evaluator ends with the run",
                    "recorded the ending on Job r-chief: upgrading the same run keeps it stopped",
                    "scaled Deployment r-supervisor from 1 to 0 replicas"]  # fmt: skip
    assert annotated(objects["run"])["tf-distributed.io/end-reason"] == "stopped by tfchart stop (training ended " \
                                                                          "early)"  # fmt: skip
    assert plan(view(objects), STOPPED_WANTED, now=NOW).reached  # run again: nothing to do


def test_stop_of_a_run_its_controller_ended_records_that_ending_and_keeps_its_success() -> None:
    objects = native(chief="complete")
    carry_out(objects, STOPPED_WANTED)
    assert ending_of(objects["run"]) == Ending("succeeded", "Succeeded: Job r-chief completed", recorded=True)
    assert run_state(view(objects)) == "Succeeded" and objects["sets"][0]["spec"]["replicas"] == 0


def test_the_supervisor_s_ending_keeps_the_servers_under_keep_and_records_no_ending_on_a_deleted_run() -> None:
    objects = native(chief="complete")
    ending = Ending("succeeded", "Succeeded: Job r-chief completed")
    [step] = carry_out(objects, STOPPED_WANTED, ending=ending, keep=True)
    assert step == ["suspended Job r-evaluator: the evaluator ends with the run",
                    "recorded the ending on Job r-chief: upgrading the same run keeps it stopped",
                    "scaled Deployment r-supervisor from 1 to 0 replicas"]  # fmt: skip
    assert annotated(objects["run"])[ENDING_ANNOTATION] == "succeeded" and objects["sets"][1]["spec"]["replicas"] == 2
    gone = native()
    gone["run"] = None
    freeing = plan(view(gone), STOPPED_WANTED, now=NOW, ending=Ending("deleted", "gone", record=False))
    assert [a.name for a in freeing.actions] == ["r-ps", "r-worker", "r-evaluator", "r-supervisor"]


# -- JobSet -------------------------------------------------------------------------------------------------------


def jobset(queue: bool = False) -> dict[str, Any]:
    run = {**obj("r", "run"), "kind": "JobSet"}
    if queue:
        run["metadata"]["labels"][QUEUE_LABEL] = "team-q"
    objects: dict[str, Any] = {"run": run, "pods": [pod("r-chief-0-0-x", "chief"), pod("r-ps-0-0-x", "ps")],
                               "jobs": [obj("r-ps-0", "ps"), obj("r-chief-0", "chief")]}  # fmt: skip
    if queue:
        objects["workload"] = {"metadata": {"name": "jobset-r-1"}, "spec": {"active": True}}
    return objects


def jobset_controller(objects: dict[str, Any]) -> None:
    """JobSet's (and Kueue's) part: a suspended JobSet has no pods."""
    if objects.get("workload") is not None:
        objects["run"]["spec"]["suspend"] = not objects["workload"]["spec"]["active"]
    objects["pods"] = [] if objects["run"]["spec"].get("suspend") else objects["pods"]


@pytest.mark.parametrize("queue", [False, True])
def test_a_jobset_is_suspended_and_resumed_itself_or_through_kueue_s_workload_with_the_record_first_and_last(
    queue: bool,
) -> None:
    objects = jobset(queue)
    waiting = plan(view(objects, "JobSet"), SUSPENDED_WANTED, now=NOW)
    apply(objects, waiting.actions[0])
    assert parse_suspension(annotated(objects["run"])) is not None
    if queue:  # the record first, alone: Kueue undoes a spec.suspend it did not write
        assert waiting.actions[0].patch.get("spec") is None
        [deactivate] = plan(view(objects, "JobSet"), SUSPENDED_WANTED, now=NOW).actions
        assert (deactivate.kind, dict(deactivate.patch)) == ("Workload", {"spec": {"active": False}})
        apply(objects, deactivate)
    assert len(plan(view(objects, "JobSet"), SUSPENDED_WANTED, now=NOW).pending) == 2  # every pod, at once
    jobset_controller(objects)
    assert plan(view(objects, "JobSet"), SUSPENDED_WANTED, now=NOW).reached
    steps = carry_out(objects, RUNNING_WANTED, "JobSet", between=jobset_controller)
    assert [line.split(":")[0] for line in steps[0]] == (
        ["activated Kueue Workload jobset-r-1 (spec.active", "dropped the suspension record from JobSet r"] if queue
        else ["resumed JobSet r and dropped the suspension record"])  # fmt: skip
    assert SUSPENDED_ANNOTATION not in annotated(objects["run"])


def test_a_kueue_jobset_resumed_is_reached_before_kueue_lets_it_run() -> None:
    """Once the Workload is active and the record dropped, the JobSet's spec.suspend is Kueue's to write (when it
    admits the Workload again): the resume is reached, not taken for a suspension by hand."""
    objects = jobset(queue=True)
    carry_out(objects, SUSPENDED_WANTED, "JobSet", between=jobset_controller)
    for action in plan(view(objects, "JobSet"), RUNNING_WANTED, now=NOW).actions:
        apply(objects, action)
    assert objects["run"]["spec"]["suspend"] is True and plan(view(objects, "JobSet"), RUNNING_WANTED, now=NOW).reached


def test_a_kueue_jobset_without_its_workload_is_blocked() -> None:
    objects = jobset(queue=True)
    objects["workload"] = None
    assert "no Kueue Workload is owned by it" in plan(view(objects, "JobSet"), SUSPENDED_WANTED, now=NOW).blocked


def test_stop_ends_a_running_jobset_through_its_chief_job_s_deadline_or_suspends_one_with_no_job_yet() -> None:
    objects = jobset()
    step = plan(view(objects, "JobSet"), STOPPED_WANTED, now=NOW)
    assert next((a.kind, a.name, dict(a.patch)) for a in step.actions) == (
        "Job", "r-chief-0", {"spec": {"activeDeadlineSeconds": 1}})
    assert annotations_patch(step.actions[1])[ENDING_ANNOTATION] == "stopped"
    objects["jobs"] = []
    assert plan(view(objects, "JobSet"), STOPPED_WANTED, now=NOW).actions[0].patch == {"spec": {"suspend": True}}
    queued = jobset(queue=True)  # under Kueue, its Workload: Kueue undoes a spec.suspend it did not write
    queued["jobs"] = []
    assert plan(view(queued, "JobSet"), STOPPED_WANTED, now=NOW).actions[0].patch == {"spec": {"active": False}}
    queued["run"]["spec"]["suspend"] = True  # held in its queue by Kueue, not admitted: it must not run later
    assert plan(view(queued, "JobSet"), STOPPED_WANTED, now=NOW).actions[0].kind == "Workload"
    ended = jobset()
    ended["run"]["status"] = {"terminalState": "Completed"}
    step = plan(view(ended, "JobSet"), STOPPED_WANTED, now=NOW)  # JobSet freed what it ran: nothing to do, no record
    assert step.reached and "nothing of the run is left to scale down" in step.unchanged[0].line


def annotations_patch(action: Action) -> dict[str, Any]:
    return dict(action.patch["metadata"]["annotations"])


def test_a_step_is_reached_only_with_nothing_to_do_wait_for_or_refuse() -> None:
    assert Step().reached and not Step(pending=("x",)).reached and not Step(blocked="x").reached
    assert not Step((Action("Job", "j", {}, "line"),)).reached


@pytest.mark.parametrize("force", [False, True])
def test_a_pod_stuck_terminating_is_named_waited_for_or_with_force_counted_as_gone(force: bool) -> None:
    """A pod on an unreachable node keeps its deletionTimestamp for ever: past it by its grace period again, the
    pending line says so (and what deleting it by force means); with force the plan goes on without it."""
    objects = native(evaluator=False)
    apply(objects, plan(view(objects), SUSPENDED_WANTED, now=NOW).actions[0])  # the chief's Job suspended
    chief = objects["pods"][0]
    chief["metadata"].update(deletionTimestamp="2026-11-28T11:58:00Z", deletionGracePeriodSeconds=30)
    chief["spec"]["nodeName"] = "gpu-7"
    assert plan(view(objects), SUSPENDED_WANTED, now="2026-11-28T11:58:20Z").pending == (
        "pod r-chief-x to stop (it saves a checkpoint at its step boundary)",)  # within its grace: not stuck
    step = plan(view(objects), SUSPENDED_WANTED, now=NOW, force=force)
    stuck = ("stuck terminating since 2026-11-28T11:58:00Z, past its grace period, on node gpu-7 (unreachable?); "
             "`kubectl delete pod r-chief-x --force` frees its name, your decision: the node may still run it")
    if force:
        assert [a.name for a in step.actions] == ["r-ps", "r-worker"]
        assert step.unchanged[-1].line == f"counted pod r-chief-x as gone: {stuck}"
    else:
        saving = "it saves a checkpoint at its step boundary"
        assert step.actions == () and step.pending == (f"pod r-chief-x to stop ({saving}; {stuck}; `--force` counts "
                                                       "it as gone)",)  # fmt: skip


def test_the_same_actions_planned_again_after_they_were_carried_out_back_off() -> None:
    """Something undoing a write (a GitOps self-heal scaling the StatefulSet back) makes the same step come back:
    the executor waits 1, 2, 4... s (at most 60) before each repeat, and says what keeps being undone."""
    objects, backoff, waits = native(), Backoff(), []
    carry_out(objects, SUSPENDED_WANTED)
    objects["sets"][0]["spec"]["replicas"] = 1  # the self-heal, every time
    clock = 100.0
    for _ in range(9):
        step = plan(view(objects), SUSPENDED_WANTED, now=NOW)
        pause = backoff.wait(step, clock)
        if pause:
            waits.append(pause)
            clock += pause
        else:
            apply(objects, step.actions[0])
            objects["sets"][0]["spec"]["replicas"] = 1
    assert waits == [1.0, 2.0, 4.0, 8.0] and backoff.times == 5
    assert "carried out 5 times and undone each time" in backoff.undone(step)
    assert backoff.wait(Step((Action("Job", "j", {}, "another"),)), clock) == 0.0 and backoff.undone(step) == ""
