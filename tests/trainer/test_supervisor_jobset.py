"""The run supervisor under workload.kind=jobset: in-process against the loopback API (tests/kubeapi.py, which
serves JobSet's vendored CRD) with an injected clock, configured from the rendered Deployment's environment.

The run's object is the JobSet: its ending comes from its conditions, the records go on it, and the chief's
progress goes on the chief's own Job `<fullname>-chief-0`. A stall writes its reason on the JobSet, then the chief
Job's 1 s deadline, which the Job controller turns into DeadlineExceeded and JobSet's DeadlineEndsTheRun rule into
the run's failure (kubeapi.JobSetController does both, as JobSet v0.12.0: the other Jobs deleted). Every request is
one the rendered Role allows. No TensorFlow here: the native end-to-end stall is in test_supervisor.py.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.parse
from dataclasses import replace
from datetime import datetime, timezone
from functools import cache
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import named
from tests.kubeapi import KubeServer, kube_server
from tests.trainer.test_supervisor import allowed, container_env, killed_at_each_write, runs
from tfdcontract import (
    END_REASON_ANNOTATION,
    ENDED_AT_ANNOTATION,
    ENDING_ANNOTATION,
    PROGRESS_ANNOTATION,
    RUNNING,
    STARTED_AT_ANNOTATION,
    JobProgress,
    format_job_progress,
    format_step_line,
    parse_job_progress,
)
from tfdcontract.runstate import now_text as time_text
from trainer.kube import KubeTarget
from trainer.supervisor import Settings, Supervisor, SupervisorConfigError

NS = "ml-jobs"
PREFIX = "mnist-tf-distributed"
SETS = ("workload.kind=jobset", "ps.replicas=1", "worker.replicas=2", "training.stallTimeoutSeconds=600")
T0 = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc).timestamp()
JOBSET = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/{PREFIX}"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
CHIEF_JOB = f"{JOBS}/{PREFIX}-chief-0"
CHIEF_POD = f"{PREFIX}-chief-0-0-q8z4w"
PODS = f"/api/v1/namespaces/{NS}/pods"
SELF_DOWN = ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/{PREFIX}-supervisor/scale", {"spec": {"replicas": 0}})
STALLED = "Stalled: step 40 has not risen for 600 s"


@cache
def rendered() -> tuple[dict[str, Any], dict[str, str], list[dict[str, Any]]]:
    """The release's JobSet, its supervisor's environment and its Role's rules (one render)."""
    docs = kf.rendered(sets=SETS, namespace=NS)
    container = named(docs, "Deployment", f"{PREFIX}-supervisor")["spec"]["template"]["spec"]["containers"][0]
    return named(docs, "JobSet", PREFIX), container_env(container), named(docs, "Role", f"{PREFIX}-supervisor")["rules"]


@cache
def jobset_crd() -> list[dict[str, Any]]:
    """JobSet's vendored CRD as installed (parsed once: the server keeps a copy of what it is given)."""
    return kf.crds(*kf.JOBSET_CRDS)


def cluster(server: KubeServer, state: str = "running", *, started: float | None = T0 - 60,
            chief_log: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JobSet in `state` (running, suspended, completed, failed) as JobSet's controller leaves it, with its
    child Jobs (made an hour before T0) and their pods (running: every pod up; completed: the chief's), started at
    `started`; and the supervisor's Deployment."""
    doc = rendered()[0]
    jobset = kf.jobset(doc, state)
    if started is not None:
        jobset["metadata"]["annotations"][STARTED_AT_ANNOTATION] = time_text(started)
    server.add(*jobset_crd(), jobset, {"kind": "Deployment", "metadata": {
        "name": f"{PREFIX}-supervisor", "namespace": NS}, "spec": {"replicas": 1}})
    for child in kf.jobset_jobs(doc):
        child["metadata"]["creationTimestamp"] = time_text(T0 - 3600)
        job = kf.job(child, {"completed": "complete", "failed": "failed"}.get(state, "running"))
        if state == "suspended":
            job["spec"]["suspend"] = True
        server.add(job)
        if state == "running":
            server.add(*kf.jobset_pods(job, created=time_text(T0 - 3000)))
        elif state == "completed" and child["metadata"]["name"] == f"{PREFIX}-chief-0":
            server.add(*kf.jobset_pods(job, phase="Succeeded", terminated=("Completed", 0)))
    server.set_log(NS, CHIEF_POD, list(chief_log or [step(40)]))
    return jobset


def step(number: int) -> str:
    return format_step_line(number, 0.5, 1000.0, 0.1)


def supervisor(server: KubeServer, now: list[float], **settings: Any) -> Supervisor:
    """The supervisor as the chart configures it (its rendered environment), polling fast, on the clock `now`."""
    configured = replace(Settings.from_env(rendered()[1]), poll_seconds=0.1, **settings)
    return Supervisor(configured, KubeTarget(server.url, NS, "token", None), clock=lambda: now[0],
                      sleep=lambda s: time.sleep(0.01))


def progress_on_chief(server: KubeServer) -> JobProgress | None:
    job = server.get("Job", NS, f"{PREFIX}-chief-0") or {}
    return parse_job_progress(((job.get("metadata") or {}).get("annotations") or {}).get(PROGRESS_ANNOTATION))


def jobset_annotations(server: KubeServer) -> dict[str, str]:
    return dict(((server.get("JobSet", NS, PREFIX) or {}).get("metadata") or {}).get("annotations") or {})


def assert_allowed(server: KubeServer) -> None:
    refused = {(r.method, r.path) for r in server.requests if not allowed(rendered()[2], r)}
    assert refused == set()


# -- the environment and the Role ------------------------------------------------------------------------------


def test_the_rendered_environment_names_the_jobset_and_its_chief_job() -> None:
    settings = Settings.from_env(rendered()[1])
    assert (settings.run_kind, settings.run_object, settings.chief_job, settings.chief_own_job) == (
        "JobSet", PREFIX, f"{PREFIX}-chief-0", f"{PREFIX}-chief-0")
    assert (settings.statefulsets, settings.evaluator_job, settings.progress, settings.stall_timeout_seconds,
            settings.start_timeout_seconds, settings.expected_pods) == ((), None, True, 600.0, 0.0, 4)
    for broken, message in (({"TFD_RUN_KIND": "TFJob"}, "TFD_RUN_KIND='TFJob': expected one of Job, JobSet"),
                            ({"TFD_RUN_NAME": ""}, "TFD_RUN_KIND=JobSet needs TFD_RUN_NAME"),
                            ({"TFD_START_TIMEOUT_SECONDS": "600"}, "TFD_START_TIMEOUT_SECONDS does not apply")):
        with pytest.raises(SupervisorConfigError, match=re.escape(message)):
            Settings.from_env({**rendered()[1], **broken})


# -- progress and a stall ---------------------------------------------------------------------------------------


def test_a_stall_ends_the_jobset_run_through_its_chief_job_s_deadline_and_records_it_on_the_jobset() -> None:
    with kube_server() as server:
        jobset = cluster(server, started=None)
        now = [T0]
        sup = supervisor(server, now)
        assert sup.observe() is None
        tf_pods = "app.kubernetes.io/name=tf-distributed,app.kubernetes.io/instance=mnist,app.kubernetes.io/" \
                  "component in (ps,worker,chief)"  # fmt: skip
        # every TensorFlow pod runs: the run started (on the JobSet); the progress on the chief's own Job
        assert [(r.method, r.path, r.query) for r in server.requests] == [
            ("GET", JOBSET, ""), ("GET", PODS, f"labelSelector={urllib.parse.quote(tf_pods)}"), ("PATCH", JOBSET, ""),
            ("GET", CHIEF_JOB, ""),
            ("GET", PODS, f"labelSelector=batch.kubernetes.io/job-name%3D{PREFIX}-chief-0"),
            ("GET", f"{PODS}/{CHIEF_POD}/log", "container=chief&tailLines=200"), ("PATCH", CHIEF_JOB, "")]
        record = JobProgress(RUNNING, 40, None, None, 0.5, None, None, time_text(T0), time_text(T0))
        assert server.writes() == [
            ("PATCH", JOBSET, {"metadata": {"annotations": {STARTED_AT_ANNOTATION: time_text(T0)}}}),
            ("PATCH", CHIEF_JOB, {"metadata": {"annotations": {PROGRESS_ANNOTATION: format_job_progress(record)}}})]
        now[0] = T0 + 599
        assert sup.observe() is None and len(server.writes()) == 2
        now[0] = T0 + 600
        ending = sup.observe()
        assert ending is not None and (ending.kind, ending.reason) == ("stalled", STALLED)
        assert sup.conclude(sup.seen, ending)
        record_of_the_end = {ENDING_ANNOTATION: "stalled", END_REASON_ANNOTATION: STALLED,
                             ENDED_AT_ANNOTATION: time_text(T0 + 600)}
        assert server.writes()[2:] == [
            ("PATCH", JOBSET, {"metadata": {"annotations": {END_REASON_ANNOTATION: STALLED}}}),
            ("PATCH", CHIEF_JOB, {"spec": {"activeDeadlineSeconds": 1}}),  # nothing scaled: JobSet frees the pods
            ("PATCH", JOBSET, {"metadata": {"annotations": record_of_the_end}}), SELF_DOWN]
        assert_allowed(server)
        # JobSet's part: the chief Job fails (DeadlineExceeded), the DeadlineEndsTheRun rule fails the run and
        # JobSet deletes the other Jobs and their pods
        with kf.JobSetController(server, jobset), server.changed:
            assert server.changed.wait_for(lambda: "Failed" in str(
                (server.get("JobSet", NS, PREFIX) or {}).get("status", {}).get("terminalState")), 30)
        assert {key[2] for key in server.objects if key[0] == "jobs"} == {f"{PREFIX}-chief-0"}
        assert not [key for key in server.objects if key[0] == "pods"]
        # a supervisor started again (the Deployment at 1 after an upgrade) reads the record and only scales itself
        server.update("Deployment", NS, f"{PREFIX}-supervisor", {"spec": {"replicas": 1}})
        writes = len(server.writes())
        assert supervisor(server, [T0 + 900]).run() == 0
        assert server.writes()[writes:] == [SELF_DOWN]


def test_a_suspended_jobset_pauses_the_clock_and_its_resume_restarts_it() -> None:
    with kube_server() as server:
        cluster(server, "suspended", started=T0 - 7200)
        server.update("Job", NS, f"{PREFIX}-chief-0", {"metadata": {"annotations": {PROGRESS_ANNOTATION: (
            format_job_progress(JobProgress(RUNNING, 40, updated_at=time_text(T0 - 7000),
                                            step_changed_at=time_text(T0 - 7000))))}}})
        now = [T0]
        sup = supervisor(server, now)
        assert sup.observe() is None  # long past the timeout, had it not been suspended
        assert [(r.method, r.path) for r in server.requests] == [("GET", JOBSET), ("GET", CHIEF_JOB),
                                                                 ("PATCH", CHIEF_JOB)]
        assert progress_on_chief(server) == JobProgress("Suspended", 40, updated_at=time_text(T0),
                                                        step_changed_at=time_text(T0 - 7000))
        # JobSet's Suspended condition alone (its spec already let run, the controller not yet there) still holds it
        server.update("JobSet", NS, PREFIX, {"spec": {"suspend": False}})
        now[0] = T0 + 3600
        assert sup.observe() is None and len(server.writes()) == 1
        # resumed: JobSet lets its Jobs run again, new pods; the clock restarts at the resume
        server.update("JobSet", NS, PREFIX, {"status": {"conditions": [
            {**kf.condition("Suspended", "ResumeJobs", "jobset is resumed"), "status": "False"}]}})
        server.update("Job", NS, f"{PREFIX}-chief-0", {"spec": {"suspend": False}})
        server.add(*kf.jobset_pods(server.get("Job", NS, f"{PREFIX}-chief-0") or {}, created=time_text(T0 + 3650)))
        now[0] = T0 + 3700
        assert sup.observe() is None
        resumed = progress_on_chief(server)
        assert resumed is not None and (resumed.state, resumed.step, resumed.step_changed_at) == (
            RUNNING, 40, time_text(T0 + 3700))
        now[0] = T0 + 3700 + 599
        assert supervisor(server, now).observe() is None  # a supervisor restarted meanwhile continues the clock
        now[0] = T0 + 3700 + 600
        ending = sup.observe()
        assert ending is not None and ending.reason == STALLED
        assert_allowed(server)


def test_a_chief_job_created_again_by_a_restart_starts_the_stall_clock_over() -> None:
    """RestartJobSet deletes every Job and creates them again: the run (the JobSet, its started-at) is the same,
    the chief's Job and its record are new, and the stall clock runs from the new Job, not from the old step."""
    with kube_server() as server:
        cluster(server)
        now = [T0]
        sup = supervisor(server, now)
        assert sup.observe() is None  # step 40 seen at T0
        chief = server.get("Job", NS, f"{PREFIX}-chief-0")
        assert chief is not None
        for key in [key for key in server.objects if key[0] in ("jobs", "pods")]:
            server.delete(kf.KIND_OF[key[0]], NS, key[2])
        server.update("JobSet", NS, PREFIX, {"status": {"restarts": 1}})
        now[0] = T0 + 300
        assert sup.observe() is None  # no chief Job (dependsOn: not before ps and workers are Ready): no news
        again = {**chief, "metadata": {**chief["metadata"], "uid": "uid-after-the-restart",
                                       "creationTimestamp": time_text(T0 + 400), "annotations": {}}}
        server.add(again, *kf.jobset_pods(again, created=time_text(T0 + 420)))
        server.set_log(NS, CHIEF_POD, ["restoring the checkpoint"])  # no step yet
        for at in (450, 999):
            now[0] = T0 + at  # 600 s after the old step, and far after the run's start: not stalled
            assert sup.observe() is None and progress_on_chief(server) is None
        assert supervisor(server, now).observe() is None  # nor does a supervisor started now say otherwise
        now[0] = T0 + 1000
        ending = supervisor(server, now).observe()
        assert ending is not None and ending.reason == "Stalled: no step reported for 600 s"
    with kube_server() as server:  # the new chief reports the step it resumed at: its clock runs from then
        cluster(server, chief_log=(step(30),))
        now = [T0]
        sup = supervisor(server, now)
        assert sup.observe() is None
        server.set_log(NS, CHIEF_POD, [step(40)])
        now[0] = T0 + 10
        assert sup.observe() is None  # the old chief's step 40, seen rising at T0 + 10
        server.update("Job", NS, f"{PREFIX}-chief-0", {"metadata": {"uid": "uid-after-the-restart",
                                                                   "creationTimestamp": time_text(T0 + 400),
                                                                   "annotations": {PROGRESS_ANNOTATION: None}}})
        now[0] = T0 + 500
        assert sup.observe() is None
        record = progress_on_chief(server)
        assert record is not None and (record.step, record.step_changed_at) == (40, time_text(T0 + 500))
        now[0] = T0 + 1099
        assert sup.observe() is None
        now[0] = T0 + 1100
        assert sup.observe() is not None


# -- the run's ending from the JobSet ---------------------------------------------------------------------------


def test_a_jobset_failed_by_another_job_is_recorded_without_its_deleted_chief_job() -> None:
    """A worker's exit code 2 fails the run (ExitCode2FailsTheRun): JobSet deletes the still active chief Job."""
    with kube_server() as server:
        cluster(server, "failed")
        message = f"applying FailJobSet failure policy action (first failed job: {PREFIX}-worker-0)"
        server.update("JobSet", NS, PREFIX, {"status": {"conditions": [
            kf.condition("Failed", "FailJobSetFailurePolicyAction", message)]}})
        server.delete("Job", NS, f"{PREFIX}-chief-0")
        now = [T0]
        assert supervisor(server, now).run() == 0
        reason = f"Failed: FailJobSetFailurePolicyAction: {message}"
        assert server.writes() == [
            ("PATCH", JOBSET, {"metadata": {"annotations": {ENDING_ANNOTATION: "failed", END_REASON_ANNOTATION: reason,
                                                            ENDED_AT_ANNOTATION: time_text(T0)}}}), SELF_DOWN]
        assert_allowed(server)


def test_a_completed_jobset_gets_the_last_progress_then_its_record() -> None:
    with kube_server() as server:
        cluster(server, "completed", chief_log=(step(100),))
        now = [T0]
        assert supervisor(server, now).run() == 0
        writes = server.writes()
        assert [(method, path) for method, path, _ in writes] == [("PATCH", CHIEF_JOB), ("PATCH", JOBSET),
                                                                  SELF_DOWN[:2]]
        last = progress_on_chief(server)
        assert last is not None and (last.state, last.step) == ("Succeeded", 100)
        assert writes[1][2]["metadata"]["annotations"][END_REASON_ANNOTATION] == f"Succeeded: JobSet {PREFIX} completed"


def test_a_jobset_deleted_for_good_ends_the_run_without_a_record() -> None:
    with kube_server() as server:
        cluster(server)
        now = [T0]
        sup = supervisor(server, now, chief_missing_seconds=60)
        assert sup.observe() is None
        server.delete("JobSet", NS, PREFIX)
        assert sup.observe() is None
        now[0] += 60
        ending = sup.observe()
        assert ending is not None and (ending.kind, ending.reason) == (
            "deleted", f"JobSet {PREFIX} was deleted before it finished")


def test_the_jobset_is_watched_by_name_and_its_ending_acted_on_at_once() -> None:
    """A poll of 60 s and the run over within 30: the JobSet's Completed condition reaches the supervisor by its
    watch (by name, as the Role allows), and every request is one the Role allows."""
    with kube_server() as server:
        cluster(server)
        configured = replace(Settings.from_env(rendered()[1]), poll_seconds=60)
        sup = Supervisor(configured, KubeTarget(server.url, NS, "token", None))
        outcome: list[int] = []
        thread = threading.Thread(target=lambda: outcome.append(sup.run()), daemon=True)
        thread.start()
        watched = lambda: [r for r in server.requests if r.call.verb == "watch" and r.call.resource == "jobsets"]  # noqa: E731
        with server.answered_one:
            assert server.answered_one.wait_for(watched, 30)
        server.update("JobSet", NS, PREFIX, {"status": {"terminalState": "Completed", "conditions": [
            kf.condition("Completed", "AllJobsCompleted", "jobset completed successfully")]}})
        thread.join(30)
        assert outcome == [0]
        assert watched()[0].call.field_selector == f"metadata.name={PREFIX}"
        assert jobset_annotations(server)[ENDING_ANNOTATION] == "succeeded"
        assert_allowed(server)


# -- a supervisor killed at any write --------------------------------------------------------------------------

STALE = JobProgress(RUNNING, 40, updated_at=time_text(T0 - 700), step_changed_at=time_text(T0 - 700))
PHASES = {"succeeded": "completed", "failed, chief Job deleted": "failed", "stalled": "running"}


def phase_cluster(server: KubeServer, phase: str) -> None:
    server.reset()
    cluster(server, PHASES[phase], started=T0 - 1000)
    if phase == "stalled":
        server.update("Job", NS, f"{PREFIX}-chief-0", {"metadata": {"annotations": {
            PROGRESS_ANNOTATION: format_job_progress(STALE)}}})
    if phase.endswith("deleted"):
        server.delete("Job", NS, f"{PREFIX}-chief-0")


def final_state(server: KubeServer) -> dict[str, Any]:
    chief = server.get("Job", NS, f"{PREFIX}-chief-0") or {}
    return {"jobset": jobset_annotations(server), "chief": (chief.get("metadata") or {}).get("annotations"),
            "deadline": (chief.get("spec") or {}).get("activeDeadlineSeconds"),
            "supervisor": (server.get("Deployment", NS, f"{PREFIX}-supervisor") or {}).get("spec")}


@pytest.mark.parametrize("phase", PHASES)
def test_a_supervisor_killed_at_any_write_decides_as_the_uninterrupted_one(phase: str) -> None:
    with kube_server() as server:
        expected = killed_at_each_write(server, lambda: phase_cluster(server, phase), lambda: supervisor(server, [T0]),
                                        runs, lambda: final_state(server))
        assert expected["supervisor"] == {"replicas": 0}
        assert expected["jobset"][ENDING_ANNOTATION] == phase.split(",")[0]
        if phase == "stalled":
            assert (expected["deadline"], expected["jobset"][END_REASON_ANNOTATION]) == (1, STALLED)
