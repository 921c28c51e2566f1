"""`tfchart local` of a workload.kind=jobset render: its pods walked as JobSet and the Job controller create them,
and run with their semantics (tfchart/local/jobset.py, jobsetrun.py).

Fast: the walk of a real render (names, indices, labels, env, the cluster map, probes, DNS aliases), the rendered
JobSet read as its controller reads it, and the controllers' decisions over a fake engine (no process starts).
Slow: the process engine trains a parameter-server JobSet to Succeeded with ps Ready before any worker starts, and
a worker's exit 2 fails it at once; podman trains one to Succeeded.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, render
from tests.e2e.test_local import assert_none_left
from tfchart.errors import UsageError
from tfchart.local.containers import plan_from_manifests
from tfchart.local.jobset import condition, jobs_of, read, waits_for
from tfchart.local.jobsetrun import COMPLETED, FAILED, JobSetRun
from tfchart.local.pods import rendered_pods, workload_of
from tfchart.local.processes import localise
from tfchart.local.session import advance, as_suspended, describe, merge, outcome
from tfdcontract import SUSPENDED_ANNOTATION

E2E_VALUES = REPO / "tests" / "fixtures" / "e2e-values.yaml"
NS = "ml-training"
JS = "mnist-tf-distributed"  # the JobSet, and the pods' subdomain
DOMAIN = f"{NS}.svc.cluster.local"
BASE = ["workload.kind=jobset", "ps.replicas=2", "worker.replicas=2", "evaluator.enabled=true"]


@cache
def _render(sets: tuple[str, ...], files: tuple[str, ...]) -> str:
    return json.dumps(render(values=[REPO / "values" / "cpu.yaml", E2E_VALUES, *files], sets=sets, namespace=NS))


def docs(*sets: str, files: Sequence[Path] = (), base: Sequence[str] = BASE) -> list[dict[str, Any]]:
    """The chart rendered as `tfchart install` renders it (a fresh copy; `base`: a JobSet's sets)."""
    rendered: list[dict[str, Any]] = json.loads(_render((*base, *sets), tuple(map(str, files))))
    return rendered


def jobset_doc(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    return next(doc for doc in rendered if doc["kind"] == "JobSet")


# ---------------------------------------------------------------------------------------------
# the walk


def test_every_pod_is_named_labelled_and_indexed_as_jobset_and_the_job_controller_make_it() -> None:
    pods = rendered_pods(docs(), NS)
    tf = [pod for pod in pods if pod.role != "tensorboard"]
    assert [(pod.name, pod.role, pod.index) for pod in tf] == [
        (f"{JS}-ps-0-0", "ps", 0), (f"{JS}-ps-0-1", "ps", 1), (f"{JS}-worker-0-0", "worker", 0),
        (f"{JS}-worker-0-1", "worker", 1), (f"{JS}-chief-0-0", "chief", 0), (f"{JS}-evaluator-0-0", "evaluator", 0),
    ]  # fmt: skip
    worker = tf[3]
    assert worker.controller["kind"] == "Job" and worker.controller["metadata"]["name"] == f"{JS}-worker-0"
    assert worker.spec["subdomain"] == JS and "hostname" not in worker.spec  # the Job controller's <job>-<index>
    assert {key: worker.labels[key] for key in worker.labels if key.startswith(("jobset.", "batch."))} == {
        "jobset.sigs.k8s.io/jobset-name": JS, "jobset.sigs.k8s.io/replicatedjob-name": "worker",
        "jobset.sigs.k8s.io/jobset-uid": worker.labels["jobset.sigs.k8s.io/jobset-uid"],
        "jobset.sigs.k8s.io/restart-attempt": "0", "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        "jobset.sigs.k8s.io/global-replicas": "4", "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"{NS}/{JS}-worker-0".encode()).hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": "1", "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "4", "jobset.sigs.k8s.io/job-group-index": "1",
        "batch.kubernetes.io/controller-uid": worker.labels["batch.kubernetes.io/controller-uid"],
        "batch.kubernetes.io/job-name": f"{JS}-worker-0", "batch.kubernetes.io/job-completion-index": "1",
    }  # fmt: skip
    assert worker.annotations["batch.kubernetes.io/job-completion-index"] == "1"
    assert worker.annotations["jobset.sigs.k8s.io/replicatedjob-name"] == "worker"
    assert [pod.name for pod in pods if pod.role == "tensorboard"] == [f"{JS}-tensorboard-0"]  # not the JobSet's


def test_env_resolves_the_downward_api_and_every_address_is_one_pods_dns_name(tmp_path: Path) -> None:
    extra = tmp_path / "downward.yaml"  # a user's own env from the labels JobSet adds
    extra.write_text("worker:\n  extraEnv:\n    - name: GLOBAL_INDEX\n      valueFrom:\n        fieldRef:\n"
                     "          fieldPath: metadata.labels['jobset.sigs.k8s.io/job-global-index']\n")  # fmt: skip
    rendered = docs(files=[extra])
    pods = rendered_pods(rendered, NS)
    cluster = json.loads(next(pod.env["TFD_CLUSTER"] for pod in pods if pod.role == "chief"))
    for pod in (pod for pod in pods if pod.role in cluster):
        env = pod.env
        assert (env["POD_NAME"], env["POD_NAMESPACE"], env["TFD_TASK_TYPE"]) == (pod.name, NS, pod.role)
        assert env["TFD_TASK_INDEX"] == env["JOB_COMPLETION_INDEX"] == str(pod.index)
        assert cluster[pod.role][pod.index] == f"{pod.name}.{JS}.{DOMAIN}:2222"
        assert env.get("GLOBAL_INDEX") == ("1" if pod.role == "worker" else None)
    addresses = [address for role in cluster.values() for address in role]
    assert len(addresses) == 5 == len({address.split(".")[0] for address in addresses})
    evaluator = next(pod for pod in pods if pod.role == "evaluator")
    assert evaluator.env["TFD_TASK_INDEX"] == "0" and "TFD_CLUSTER" in evaluator.env


def test_probes_point_at_each_pods_own_local_port() -> None:
    pods = rendered_pods(docs(), NS)
    assert {pod.role: pod.probe_port for pod in pods} == {"ps": 2222, "worker": 2222, "chief": None,
                                                          "evaluator": None, "tensorboard": 6006}  # fmt: skip
    localise(pods)
    local = json.loads(next(pod.env["TFD_CLUSTER"] for pod in pods if pod.role == "chief"))
    for pod in (pod for pod in pods if pod.role in ("ps", "worker")):
        assert pod.probe_port == int(local[pod.role][pod.index].rsplit(":", 1)[1])


def test_the_rendered_jobset_is_read_as_its_controller_reads_it() -> None:
    doc = read(jobset_doc(docs("workload.jobset.maxRestarts=3", "chief.backoffLimit=2",
                               "chief.activeDeadlineSeconds=600")), NS)  # fmt: skip
    spec = doc["spec"]
    assert [(r["name"], r["dependsOn"]) for r in spec["replicatedJobs"]] == [
        ("ps", []), ("worker", [{"name": "ps", "status": "Ready"}]), ("chief", [{"name": "worker", "status": "Ready"}]),
        ("evaluator", [{"name": "chief", "status": "Ready"}])]  # fmt: skip
    assert (spec["successPolicy"], spec["failurePolicy"]["maxRestarts"]) == (
        {"operator": "All", "targetReplicatedJobs": ["chief"]}, 3)
    assert [(r["name"], r["action"], r["onJobFailureReasons"]) for r in spec["failurePolicy"]["rules"]] == [
        ("ExitCode2FailsTheRun", "FailJobSet", ["PodFailurePolicy"]),
        ("DeadlineEndsTheRun", "FailJobSet", ["DeadlineExceeded"])]  # fmt: skip
    jobs = {job.rjob: job for job in jobs_of(doc)}
    assert (jobs["ps"].name, len(jobs["ps"].pods), jobs["ps"].doc["spec"]["backoffLimit"]) == (f"{JS}-ps-0", 2, 4)
    assert [jobs[r].doc["spec"].get(key) for r, key in (("chief", "backoffLimit"), ("chief", "activeDeadlineSeconds"),
                                                        ("ps", "activeDeadlineSeconds"))] == [2, 600, None]
    assert (jobs["chief"].grace, jobs["ps"].grace) == (60.0, 30.0)
    assert jobs["worker"].first_rule(2) is not None and jobs["worker"].first_rule(1) is None
    assert [pod.name for pod in jobs["worker"].pods] == [f"{JS}-worker-0-0", f"{JS}-worker-0-1"]
    sync = read(jobset_doc(docs("training.strategy=multi_worker_mirrored", "chief.replicas=0", "ps.replicas=0")), NS)
    assert [r["name"] for r in sync["spec"]["replicatedJobs"]] == ["worker", "evaluator"]
    assert sync["spec"]["successPolicy"]["targetReplicatedJobs"] == ["worker"]
    doc = jobset_doc(docs())  # the deprecated startupPolicy InOrder: each replicatedJob waits for the one before
    doc["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    for rjob in doc["spec"]["replicatedJobs"]:
        rjob.pop("dependsOn", None)
    assert [waits_for(rjob) for rjob in read(doc, NS)["spec"]["replicatedJobs"]] == [
        "", "ps Ready", "worker Ready", "chief Ready"]
    doc["spec"]["failurePolicy"]["rules"] = None  # null: no rule (JobSet's default, RestartJobSet, applies)
    assert read(doc, NS)["spec"]["failurePolicy"]["rules"] == []


def test_a_jobset_the_local_controllers_cannot_run_as_rendered_is_refused_in_one_line() -> None:
    doc = jobset_doc(docs())
    doc["spec"]["failurePolicy"]["rules"][0]["action"] = "RestartJob"
    with pytest.raises(UsageError, match="RestartJob needs its alpha RestartJob feature gate"):
        read(doc, NS)
    doc = jobset_doc(docs())
    doc["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "chief", "status": "Ready"}]
    with pytest.raises(UsageError, match="depends on chief, which is not an earlier replicatedJob"):
        read(doc, NS)


def test_containers_get_the_jobset_services_dns_names_and_its_controller_restarts_them(tmp_path: Path) -> None:
    from tests.e2e.test_containers import merged_values

    plan = plan_from_manifests(docs(), merged_values(BASE), tmp_path / "run", NS, "podman", "0:0", "tfd-test01")
    assert plan.workload["kind"] == "JobSet" and plan.workload["metadata"]["name"] == JS
    worker = next(pod for pod in plan.pods if pod.name == f"{JS}-worker-0-1")
    assert worker.aliases == [f"{worker.name}.{JS}.{DOMAIN}", f"{JS}.{DOMAIN}"]  # JobSet's headless Service
    assert worker.sandbox[worker.sandbox.index("--hostname") + 1] == worker.name
    assert worker.probe_port == 2222 and worker.env["TFD_TASK_INDEX"] == "1"
    assert any(worker.name == pod.name for job in jobs_of(plan.workload) for pod in job.pods)  # jobsetrun restarts it
    cluster = json.loads(worker.env["TFD_CLUSTER"])
    assert all(address.split(":")[0] in plan.addresses for role in cluster.values() for address in role)


def test_a_merge_patch_replaces_a_target_value_that_is_not_an_object_as_rfc_7386_says() -> None:
    target: dict[str, Any] = {"metadata": {"annotations": None, "labels": "x"}, "spec": {"suspend": False}}
    merge(target, {"metadata": {"annotations": {"a": "1", "b": None}, "labels": {"c": "2"}}, "spec": {"suspend": True}})
    assert target == {"metadata": {"annotations": {"a": "1"}, "labels": {"c": "2"}}, "spec": {"suspend": True}}


# ---------------------------------------------------------------------------------------------
# the controllers, over a fake engine


@dataclass
class FakeProcess:
    pod: Any
    running: bool = True
    exit_code: int | None = None


@dataclass
class FakeEngine:
    """Processes that run until the test ends them; a probe passes for the pods in `ready`."""

    processes: dict[str, FakeProcess] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    ready: set[str] = field(default_factory=set)

    def start(self, pods: Sequence[Any]) -> None:
        for pod in pods:
            self.processes[pod.name] = FakeProcess(pod)
            self.started.append(pod.name)

    def kill(self, name: str, sig: int = signal.SIGKILL, grace: float | None = None) -> None:
        assert sig == signal.SIGTERM and grace is not None
        self.killed.append(name)
        self.exit(name, 143)

    def probe(self, name: str) -> bool:
        process = self.processes.get(name)
        return process is not None and process.running and (name in self.ready or process.pod.probe_port is None)

    def exit(self, name: str, code: int) -> None:
        self.processes[name].running, self.processes[name].exit_code = False, code


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    controller: JobSetRun
    engine: FakeEngine
    clock: Clock
    events: list[tuple[Any, ...]]  # (kind, name, reason, message, job-level)

    def settle(self, seconds: float = 1.0) -> None:
        """Time passes, then one reconcile pass."""
        self.clock.now += seconds
        self.controller.reconcile()

    def said(self, reason: str) -> list[str]:
        return [name for _, name, said, *_ in self.events if said == reason]


def run_of(*sets: str, base: Sequence[str] = BASE, rendered: list[dict[str, Any]] | None = None) -> Run:
    """The controllers of the release (`rendered`, else rendered with `sets`), as pods.workload_of reads them
    (`base` (): a native release's Jobs and StatefulSets), over a fake engine."""
    rendered = rendered or docs(*sets, base=base)
    pods = rendered_pods(rendered, NS)
    engine, clock, events = FakeEngine(), Clock(), []
    controller = JobSetRun(workload_of(rendered, NS, pods), engine, {pod.name: pod for pod in pods},
                           lambda *event: events.append(event), clock)  # fmt: skip
    return Run(controller, engine, clock, events)


def pod_names(role: str, count: int) -> list[str]:
    return [f"{JS}-{role}-0-{index}" for index in range(count)]


def test_each_replicated_job_starts_once_the_one_it_depends_on_is_ready_and_the_chief_ends_the_run() -> None:
    run = run_of()
    ps, workers, chief, evaluator = pod_names("ps", 2), pod_names("worker", 2), f"{JS}-chief-0-0", f"{JS}-evaluator-0-0"
    run.settle()
    assert run.engine.started == ps
    run.engine.ready.add(ps[0])
    for _ in range(3):
        run.settle()
    assert run.engine.started == ps  # one ps is not Ready yet: no worker
    run.engine.ready.add(ps[1])
    run.settle()
    assert run.engine.started == [*ps, *workers] and run.said("Ready") == [*ps, f"{JS}-ps-0"]
    run.engine.ready.update(workers)
    run.settle()
    run.settle()  # the chief has no readiness probe: Ready while it runs, so the evaluator follows
    assert run.engine.started == [*ps, *workers, chief, evaluator]
    assert describe(run.controller) == f"JobSet {JS} Running: ps Ready, worker Ready, chief Ready, evaluator Active"
    run.engine.exit(chief, 0)
    run.settle()
    assert run.controller.state == COMPLETED and run.controller.finished
    assert sorted(run.engine.killed) == sorted([*ps, *workers, evaluator])  # JobSet deletes its active Jobs
    assert outcome(run.controller) == f"JobSet {JS} Completed: successPolicy All of chief"
    assert run.said("Started") == [*ps, *workers, chief, evaluator]  # nothing started twice


def test_exit_code_2_anywhere_fails_the_jobset_at_once() -> None:
    run = run_of()
    run.engine.ready.update([*pod_names("ps", 2), *pod_names("worker", 2)])
    for _ in range(4):
        run.settle()
    worker = pod_names("worker", 2)[1]
    run.engine.exit(worker, 2)
    run.settle(0.0)
    assert run.controller.state == FAILED and condition(run.controller.doc)["reason"] == "FailJobSetFailurePolicyAction"
    assert run.controller.rule is not None and run.controller.rule["name"] == "ExitCode2FailsTheRun"
    first = run.controller.first_failed
    failed = condition(first.doc) if first else {}
    assert first is not None and first.culprit == worker and failed["reason"] == "PodFailurePolicy"
    assert failed["message"] == (f"Container worker for pod {NS}/{worker} failed with exit code 2 matching FailJob "
                                 "rule at index 0")  # fmt: skip
    assert sorted(run.engine.killed) == sorted(name for name in run.engine.processes if name != worker)
    started = len(run.engine.started)
    run.settle(60)
    assert len(run.engine.started) == started  # no retry, no restart
    assert "by failure policy rule ExitCode2FailsTheRun (FailJobSet)" in outcome(run.controller)


def test_other_failures_retry_up_to_backoff_limit_then_the_jobset_restarts_up_to_max_restarts() -> None:
    run = run_of("ps.replicas=1", "worker.replicas=1", "evaluator.enabled=false", "chief.backoffLimit=1",
                 "workload.jobset.maxRestarts=1")  # fmt: skip
    ps, worker, chief = f"{JS}-ps-0-0", f"{JS}-worker-0-0", f"{JS}-chief-0-0"
    run.engine.ready.update([ps, worker])
    for _ in range(3):
        run.settle()
    assert run.engine.started == [ps, worker, chief]
    run.engine.exit(worker, 1)
    run.settle(0.1)
    assert run.engine.started == [ps, worker, chief]  # a new pod after its back-off (1 s)
    run.settle(1.0)
    assert run.engine.started == [ps, worker, chief, worker] and run.controller.restarts_of(worker) == 1
    run.engine.exit(worker, 1)  # the second failure: past backoffLimit 1 (chief.backoffLimit x 1 task)
    run.settle(0.1)
    assert run.said("Restarting") == [JS] and run.controller.restarts == 1 and run.controller.state == "Running"
    assert sorted(run.engine.killed) == sorted([ps, chief])  # every pod stops, then every Job is created again
    run.settle()
    assert run.engine.started[4:] == [ps]  # in order again: ps first
    for _ in range(3):
        run.settle()
    run.engine.exit(chief, 1)  # the chief's Job: a new pod after 1 s, then past its backoffLimit too
    run.settle(0.1)
    run.settle(1.0)
    run.engine.exit(chief, 1)
    run.settle(0.1)
    assert run.controller.state == FAILED and condition(run.controller.doc)["reason"] == "ReachedMaxRestarts"
    assert run.controller.rule is None and outcome(run.controller) == (
        f"JobSet {JS} Failed (ReachedMaxRestarts): no failure policy rule matched, and JobSet's default, "
        f"RestartJobSet, had used up maxRestarts 1; Job {JS}-chief-0 failed: BackoffLimitExceeded: Job has reached the "
        "specified backoff limit")  # fmt: skip


def test_the_chiefs_deadline_ends_the_run_by_its_rule() -> None:
    run = run_of("ps.replicas=1", "worker.replicas=1", "evaluator.enabled=false", "chief.activeDeadlineSeconds=30")
    run.engine.ready.update([f"{JS}-ps-0-0", f"{JS}-worker-0-0"])
    for _ in range(3):
        run.settle()
    run.settle(29.0)
    assert not run.controller.finished
    run.settle(1.0)
    assert run.controller.state == FAILED and run.controller.rule is not None
    assert run.controller.rule["name"] == "DeadlineEndsTheRun" and run.controller.first_failed is not None
    assert condition(run.controller.first_failed.doc)["message"] == "Job was active longer than specified deadline"


@pytest.mark.parametrize("queue", [[], ["scheduling.kueue.queueName=team-a"]])  # no Kueue here: its own suspend
def test_a_suspended_jobset_stops_the_chief_first_then_every_pod_and_starts_nothing(queue: list[str]) -> None:
    run = run_of("ps.replicas=1", "worker.replicas=1", "evaluator.enabled=false", *queue)
    ps, worker, chief = f"{JS}-ps-0-0", f"{JS}-worker-0-0", f"{JS}-chief-0-0"
    run.engine.ready.update([ps, worker])
    for _ in range(3):
        run.settle()
    assert advance(run.controller, suspend=True) == ("", [f"suspended JobSet {JS}"])  # tfdcontract.lifecycle's step
    assert run.engine.killed[0] == chief and sorted(run.engine.killed[1:]) == sorted([ps, worker])  # its checkpoint
    assert SUSPENDED_ANNOTATION in run.controller.doc["metadata"]["annotations"]
    for _ in range(3):
        run.settle(5.0)
    assert advance(run.controller, suspend=True) == ("Suspended", []) and len(run.engine.started) == 3
    assert not run.controller.finished and describe(run.controller).startswith(f"JobSet {JS} Suspended:")
    assert run.controller.pending(chief) is None


def test_native_pods_start_at_once_statefulsets_come_back_and_the_chiefs_job_ends_the_run() -> None:
    run = run_of("ps.replicas=1", "worker.replicas=1", "evaluator.enabled=true", "chief.backoffLimit=1", base=())
    ps, worker, chief, evaluator = (f"{JS}-{role}" for role in ("ps-0", "worker-0", "chief", "evaluator"))
    run.settle()
    assert run.engine.started == [ps, worker, chief, evaluator]  # no order, no probe: TensorBoard is not theirs
    run.engine.exit(worker, 137)  # a killed StatefulSet pod comes back after its back-off, uncounted
    run.engine.exit(evaluator, 2)  # the evaluator's Job fails (FailJob), the run goes on
    run.settle(0.1)
    assert run.engine.started[4:] == [] and run.controller.pending(worker) == "pending: new pod in 1 s"
    run.settle(1.0)
    assert run.engine.started[4:] == [worker] and run.controller.restarts_of(worker) == 1
    assert not run.controller.finished and run.said("Failed") == [worker, evaluator]
    run.engine.exit(chief, 1)  # counted: a new pod after 1 s, then past backoffLimit 1 the run has failed
    run.settle(0.1)
    run.settle(1.0)
    run.engine.exit(chief, 1)
    run.settle(0.1)
    assert run.controller.state == FAILED and run.controller.first_failed is not None
    assert run.controller.first_failed.culprit == chief
    assert condition(run.controller.first_failed.doc)["reason"] == "BackoffLimitExceeded"
    assert run.engine.killed == []  # the ending is the planner's: ps/worker to 0, then the ending recorded
    state, lines = advance(run.controller, suspend=False)
    run.settle(0.0)
    assert state == "" and sorted(run.engine.killed) == sorted([ps, worker]) and lines == [
        f"scaled StatefulSet {JS}-ps from 1 to 0 replicas", f"scaled StatefulSet {JS}-worker from 1 to 0 replicas",
        f"recorded the ending on Job {JS}-chief: upgrading the same run keeps it stopped"]  # fmt: skip
    assert advance(run.controller, suspend=False) == ("Failed", [])


@pytest.mark.parametrize("gang", [[], ["scheduling.gang.provider=volcano"]])  # no gang scheduler here: the same order
def test_a_native_suspension_follows_the_plan_and_a_resume_brings_the_servers_back_ready_before_the_chief(
        gang: list[str]) -> None:  # fmt: skip
    sets = ("ps.replicas=1", "worker.replicas=2", "evaluator.enabled=true", *gang)
    run = run_of(*sets, base=())
    ps, workers, chief, evaluator = f"{JS}-ps-0", [f"{JS}-worker-0", f"{JS}-worker-1"], f"{JS}-chief", f"{JS}-evaluator"
    run.settle()
    state, lines = advance(run.controller, suspend=True)
    run.settle(0.0)
    assert state == "" and run.engine.killed == [chief]  # the chief first: it saves its checkpoint
    assert lines == [f"suspended Job {chief}, recording the replicas to restore (ps 1, worker 2)"]
    run.settle()
    state, lines = advance(run.controller, suspend=True)
    run.settle(0.0)
    assert sorted(run.engine.killed[1:]) == sorted([ps, *workers, evaluator]) and len(lines) == 3
    run.settle(60)
    assert advance(run.controller, suspend=True) == ("Suspended", []) and len(run.engine.started) == 5

    run = run_of(*sets, base=())  # `tfchart resume --local`: a new tfchart, its objects as the suspension left them
    as_suspended(run.controller)
    run.settle()
    assert run.engine.started == [] and advance(run.controller, suspend=False)[0] == ""  # scaled up
    run.settle()
    assert run.engine.started == [ps, *workers]
    for _ in range(3):  # not Ready yet: the chief waits
        run.settle()
        assert advance(run.controller, suspend=False) == ("", [])
    run.engine.ready.update([ps, *workers])
    run.settle()
    state, lines = advance(run.controller, suspend=False)
    assert lines[-1].startswith(f"resumed Job {chief} and dropped the suspension record")
    run.settle()
    assert run.engine.started[3:] == [chief, evaluator] and advance(run.controller, suspend=False) == ("Running", [])


def test_an_ignore_rule_starts_a_new_pod_at_once_and_counts_no_failure() -> None:
    rendered = docs("ps.replicas=1", "worker.replicas=1", "chief.backoffLimit=0", base=())
    chief = next(doc for doc in rendered if doc["kind"] == "Job" and doc["metadata"]["name"] == f"{JS}-chief")
    chief["spec"]["podFailurePolicy"]["rules"].insert(0, {"action": "Ignore", "onExitCodes": {"operator": "In",
                                                                                             "values": [3]}})
    run = run_of(rendered=rendered)
    run.settle()
    run.engine.exit(f"{JS}-chief", 3)
    run.settle(0.0)
    said = "exited with 3: a new pod in 0 s (Ignore rule at index 0: not counted against backoffLimit)"
    assert [event[1:4] for event in run.events if event[2] == "Failed"] == [(f"{JS}-chief", "Failed", said)]
    assert run.engine.started.count(f"{JS}-chief") == 2 and not run.controller.finished  # backoffLimit 0 is intact


def test_a_native_chiefs_exit_2_fails_the_run_at_once_and_its_success_completes_it() -> None:
    run = run_of("ps.replicas=1", "worker.replicas=1", base=())
    run.settle()
    run.engine.exit(f"{JS}-chief", 2)
    run.settle(0.0)
    assert run.controller.state == FAILED and run.controller.first_failed is not None
    assert condition(run.controller.first_failed.doc)["reason"] == "PodFailurePolicy"
    run = run_of("training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=2", base=())
    workers = [f"{JS}-worker-0", f"{JS}-worker-1"]
    run.settle()
    assert run.engine.started == workers and run.controller.targets == [f"{JS}-worker"]
    run.engine.exit(workers[0], 0)
    run.settle()
    assert not run.controller.finished  # the workers' Job completes once every worker has
    run.engine.exit(workers[1], 0)
    run.settle()
    assert run.controller.state == COMPLETED


# ---------------------------------------------------------------------------------------------
# real runs

TRAIN = ["--set", "training.trainSteps=200", "--set", "tensorboard.enabled=false"]
EVENT = re.compile(r"^(\S+) (Pod|Job|JobSet) (\S+) (\w+): (.*)$")


def events_of(run_dir: Path) -> list[tuple[datetime, str, str, str, str]]:
    """events.log: (time, kind, name, reason, message), in order."""
    found = []
    for line in (run_dir / "events.log").read_text().splitlines():
        match = EVENT.match(line)
        assert match, line
        found.append((datetime.fromisoformat(match[1]), match[2], match[3], match[4], match[5]))
    return found


def when(events: list[tuple[datetime, str, str, str, str]], reason: str, prefix: str) -> list[datetime]:
    return [at for at, kind, name, said, _ in events if kind == "Pod" and said == reason and name.startswith(prefix)]


def tfchart_local(run_dir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    argv = [str(REPO / ".venv" / "bin" / "tfchart"), "local", "js", "-f", "values/cpu.yaml", "-f", str(E2E_VALUES),
            "--set", "workload.kind=jobset", *TRAIN, *args, "--workdir", str(run_dir)]  # fmt: skip
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)


def logged_at(line: str) -> datetime:
    """The time of a trainer's log line (`2026-01-01 12:00:00,123 INFO ...`)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


@pytest.mark.slow
def test_a_parameter_server_jobset_trains_to_succeeded_with_every_ps_ready_before_any_worker(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = tfchart_local(run_dir, "--set", "ps.replicas=2")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "✓ training Succeeded" in result.stdout
    assert "JobSet js-tf-distributed Completed: successPolicy All of chief" in result.stdout
    assert json.loads((run_dir / "status.json").read_text())["state"] == "Succeeded"
    events = events_of(run_dir)
    prefix = "js-tf-distributed"
    ps_ready, workers_started = when(events, "Ready", f"{prefix}-ps-"), when(events, "Started", f"{prefix}-worker-")
    assert len(ps_ready) == 2 and len(workers_started) == 2, events
    assert max(ps_ready) < min(workers_started)
    assert max(when(events, "Ready", f"{prefix}-worker-")) < min(when(events, "Started", f"{prefix}-chief-"))
    assert [name for _, kind, name, reason, _ in events if reason == "Started"] == [
        f"{prefix}-ps-0-0", f"{prefix}-ps-0-1", f"{prefix}-worker-0-0", f"{prefix}-worker-0-1", f"{prefix}-chief-0-0"]
    # the pods' own lines agree: each ps served before the first line of any worker
    logs = run_dir / "pod-logs"
    served = [logged_at(next(line for line in (logs / f"{prefix}-ps-0-{i}.log").read_text().splitlines()
                             if "server listening on 127.0.0.1:" in line)) for i in range(2)]  # fmt: skip
    first = [logged_at((logs / f"{prefix}-worker-0-{i}.log").read_text().splitlines()[0]) for i in range(2)]
    assert max(served) <= min(first), (served, first)
    assert [reason for _, kind, _, reason, _ in events if kind == "JobSet"] == ["Completed"]
    assert_none_left(run_dir)


EXIT_2_WORKER = """\
worker:
  # worker 1 serves; once the chief has trained a step (status.json), it exits 2: a configuration error
  command:
    - /bin/sh
    - -c
    - |
      python -m trainer "$@" &
      server=$!
      if [ "$TFD_TASK_INDEX" = 1 ]; then
        until grep -qs '"step": [1-9]' "$TFD_STORAGE_ROOT/status.json"; do sleep 0.2; done
        echo "worker 1: the chief trains; exiting with 2"
        kill "$server"
        exit 2
      fi
      wait "$server"
    - worker
  args:
    - --strategy=parameter_server
chief:
  # the chief cannot reach a step boundary without its workers: its grace ends (--shutdown-grace-seconds=1)
  terminationGracePeriodSeconds: 6
"""


@pytest.mark.slow
def test_a_workers_exit_2_fails_the_jobset_at_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (tmp_path / "exit2.yaml").write_text(EXIT_2_WORKER)
    result = tfchart_local(run_dir, "-f", str(tmp_path / "exit2.yaml"), "--set", "training.trainSteps=100000")
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    prefix = "js-tf-distributed"
    worker = f"{prefix}-worker-0-1"
    assert "worker 1: the chief trains; exiting with 2" in (run_dir / "pod-logs" / f"{worker}.log").read_text()
    events = events_of(run_dir)
    failed = [(at, name, message) for at, kind, name, reason, message in events if reason == "Failed"]
    assert [(kind_name[1], kind_name[2].split(":")[0]) for kind_name in failed] == [
        (f"{prefix}-worker-0", "PodFailurePolicy"), (prefix, "FailJobSetFailurePolicyAction")], failed
    assert (failed[1][0] - failed[0][0]).total_seconds() < 1  # at once: the same pass of the controllers
    started = [name for _, _, name, reason, _ in events if reason == "Started"]
    assert sorted(started) == sorted(set(started)), started  # no pod was started again: no retry, no restart
    said = re.search(r"✗ training failed after \d+ s: (.*)", result.stdout)
    assert said, result.stdout[-3000:]
    assert (f"JobSet {prefix} Failed (FailJobSetFailurePolicyAction) by failure policy rule ExitCode2FailsTheRun "
            f"(FailJobSet); Job {prefix}-worker-0 failed: PodFailurePolicy: Container worker for pod default/{worker} "
            "failed with exit code 2") in said[1]  # fmt: skip
    assert f"its log: {run_dir / 'pod-logs' / worker}.log" in said[1]
    assert_none_left(run_dir)


@pytest.fixture
def container_runs() -> Iterator[list[Any]]:
    runs: list[Any] = []
    yield runs
    for run in runs:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGINT)
            run.finish(timeout=120)


@pytest.mark.slow
def test_a_jobset_in_containers_trains_to_succeeded(tmp_path: Path, container_runs: list[Any]) -> None:
    from tests.e2e.test_containers import PREFIX, LocalRun, assert_nothing_left

    sets = ["workload.kind=jobset", "ps.replicas=1", "worker.replicas=2", "training.trainSteps=200",
            "tensorboard.enabled=false"]  # fmt: skip
    run = LocalRun(tmp_path / "run", sets)
    container_runs.append(run)
    assert run.finish() == 0, run.output[-4000:]
    assert f"JobSet {PREFIX} Completed: successPolicy All of chief" in run.output
    assert run.status()["state"] == "Succeeded"
    events = events_of(run.workdir)
    assert max(when(events, "Ready", f"{PREFIX}-ps-")) < min(when(events, "Started", f"{PREFIX}-worker-"))
    assert max(when(events, "Ready", f"{PREFIX}-worker-")) < min(when(events, "Started", f"{PREFIX}-chief-"))
    # TF_CONFIG names each task by the DNS name JobSet gives its pod, which resolved on the run's network
    assert f"{PREFIX}-worker-0-1.{PREFIX}.ml-training.svc.cluster.local:2222" in run.output
    assert_nothing_left(run)
