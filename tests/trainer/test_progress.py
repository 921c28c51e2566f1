"""The chief's progress on its Job and stalls: the run supervisor in-process against the loopback API
(tests/kubeapi.py) with an injected clock, each decision with the exact requests it makes; and the
pure pieces (trainer/progress.py, tfdcontract's record) on their own.

The rendered release (real TensorFlow processes, the chief Job under the emulated Job controller)
ending a stalled run, and a bring-your-own chief's progress, are in test_supervisor.py.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from tests.kubeapi import KubeServer, kube_server
from tests.trainer.test_supervisor import NAMESPACE, job_annotations, objects, supervisor
from tfdcontract import (
    JOB_NAME_LABEL,
    PROGRESS_ANNOTATION,
    RUNNING,
    SUCCEEDED,
    JobProgress,
    Status,
    format_job_progress,
    format_status_line,
    format_step_line,
    parse_job_progress,
    status_from_document,
)
from tfdcontract.runstate import now_text as time_text
from trainer.progress import Report, next_progress, report, stalled, worth_writing
from trainer.supervisor import Settings, Supervisor, SupervisorConfigError

T0 = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc).timestamp()
JOB = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/r-chief"
STS = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"
PODS_OF_CHIEF = (f"/api/v1/namespaces/{NAMESPACE}/pods", f"labelSelector={JOB_NAME_LABEL}%3Dr-chief")


def status_line(step: int, state: str = RUNNING, checkpoint: int | None = None, accuracy: float | None = None,
                loss: float = 0.5) -> str:
    return format_status_line(Status(
        state=state, strategy="parameter_server", step=step, train_steps=100, loss=loss, accuracy=accuracy,
        examples_per_sec=1000.0, export_path=None, started_at="2026-11-22T11:59:00Z", updated_at="x",
        message="training", checkpoint_step=checkpoint,
    ))  # fmt: skip


def step_line(step: int, loss: float = 0.5) -> str:
    return format_step_line(step, loss, 1000.0, 0.1)


def chief_pod(server: KubeServer, name: str, lines: list[str], *, job: str = "r-chief", index: str | None = None,
              created: str = "2026-11-22T11:00:00Z", container: str = "chief") -> None:
    """A pod of the Job `job` (index: of an Indexed Job), on a node and Running, with this log."""
    annotations = {"batch.kubernetes.io/job-completion-index": index} if index is not None else {}
    labels = {JOB_NAME_LABEL: job, "tf": "yes"}
    server.add({"kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels,
                                            "annotations": annotations, "creationTimestamp": created},
                "spec": {"nodeName": "node-1", "containers": [{"name": container}]},
                "status": {"phase": "Running", "containerStatuses": [{"name": container, "state": {"running": {}}}]}})
    server.set_log(NAMESPACE, name, lines)


def clocked(server: KubeServer, now: list[float], **settings: Any) -> Supervisor:
    sup = supervisor(server, progress=True, **settings)
    sup.clock = lambda: now[0]
    return sup


def progress_of(server: KubeServer) -> JobProgress | None:
    return parse_job_progress(job_annotations(server).get(PROGRESS_ANNOTATION))


def progress_patch(text: str) -> tuple[str, str, Any]:
    return ("PATCH", JOB, {"metadata": {"annotations": {PROGRESS_ANNOTATION: text}}})


def started(server: KubeServer, at: float = T0) -> None:
    server.update("Job", NAMESPACE, "r-chief", {"metadata": {"annotations": {
        "tf-distributed.io/started-at": time_text(at)}}})


# -- the record on the chief's Job ------------------------------------------------------------------


def test_progress_is_read_from_the_chiefs_log_and_written_on_its_job_throttled() -> None:
    with kube_server() as server:
        server.add(*objects())
        chief_pod(server, "r-chief-old", [step_line(10), status_line(10)], created="2026-11-22T10:00:00Z")
        chief_pod(server, "r-chief-abcde", ["starting", step_line(40), status_line(40, checkpoint=30, accuracy=0.9)])
        now = [T0]
        sup = clocked(server, now)
        assert sup.observe() is None
        # one look: the Job, the newest pod of the chief's Job, the tail of its chief container's log; the record
        assert [(r.method, r.path, r.query) for r in server.requests] == [
            ("GET", JOB, ""), ("GET", *PODS_OF_CHIEF),
            ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/r-chief-abcde/log", "container=chief&tailLines=200"),
            ("PATCH", JOB, "")]
        # 60 steps to go at 0.1 s a step (its step line's sec/batch): ETA in 6 s
        first = ('{"state":"Running","step":40,"target":100,"eta":"2026-11-22T12:00:06Z","loss":0.5,"accuracy":0.9,'
                 '"checkpointStep":30,"updatedAt":"2026-11-22T12:00:00Z","stepChangedAt":"2026-11-22T12:00:00Z"}')
        assert server.writes() == [progress_patch(first)]
        # the step rises: written at most once per 15 s
        server.set_log(NAMESPACE, "r-chief-abcde", [step_line(50, 0.4), step_line(50, 0.4)])  # a status line lost
        now[0] = T0 + 14
        assert sup.observe() is None and len(server.writes()) == 1
        now[0] = T0 + 15  # and the step changed when it was first seen, at T0 + 14
        assert sup.observe() is None and len(server.writes()) == 2
        assert progress_of(server) == JobProgress(
            RUNNING, 50, 100, "2026-11-22T12:00:20Z", 0.4, 0.9, 30, "2026-11-22T12:00:15Z", "2026-11-22T12:00:14Z")
        # nothing changed: nothing written; a change of state: written at once
        now[0] = T0 + 40
        assert sup.observe() is None and len(server.writes()) == 2
        server.set_log(NAMESPACE, "r-chief-abcde", [status_line(50, "Interrupted", checkpoint=50, loss=0.4)])
        now[0] = T0 + 41
        assert sup.observe() is None and len(server.writes()) == 3
        assert progress_of(server) == JobProgress(
            "Interrupted", 50, 100, None, 0.4, 0.9, 50, "2026-11-22T12:00:41Z", "2026-11-22T12:00:14Z")


def test_the_last_progress_is_written_at_the_ending_before_the_record() -> None:
    with kube_server() as server:
        server.add(*objects())
        chief_pod(server, "r-chief-abcde", [step_line(40)])
        now = [T0]
        sup = clocked(server, now)
        assert sup.observe() is None
        server.update("Job", NAMESPACE, "r-chief", {"status": {"conditions": [{"type": "Complete", "status": "True"}]}})
        server.set_log(NAMESPACE, "r-chief-abcde", [step_line(40), step_line(100, 0.1)])
        now[0] = T0 + 1  # within the 15 s: the last one is written all the same
        ending = sup.observe()
        assert ending is not None and ending.kind == "succeeded"
        assert sup.conclude(sup.seen, ending)
        # a chief that prints step lines only: its state is its Job's
        done = JobProgress(SUCCEEDED, 100, None, None, 0.1, None, None, "2026-11-22T12:00:01Z", "2026-11-22T12:00:01Z")
        writes = server.writes()
        assert writes[1] == progress_patch(format_job_progress(done))
        assert [(method, path) for method, path, _ in writes[2:]] == [
            ("PATCH", f"{STS}/r-ps/scale"), ("PATCH", f"{STS}/r-worker/scale"), ("PATCH", JOB),
            ("PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/r-sup/scale")]
        assert job_annotations(server)["tf-distributed.io/ending"] == "succeeded"


def test_the_workers_job_reports_through_worker_0() -> None:
    """chief.replicas=0: the progress is worker 0's, in the workers' Indexed Job."""
    with kube_server() as server:
        job = objects()[0]
        job["metadata"]["name"] = "r-worker"
        server.add(job)
        chief_pod(server, "r-worker-1-xyz", [step_line(70)], job="r-worker", index="1", created="2026-11-22T11:30:00Z",
                      container="worker")
        chief_pod(server, "r-worker-0-abc", [step_line(60)], job="r-worker", index="0", container="worker")
        sup = clocked(server, [T0], chief_job="r-worker", progress_container="worker")
        assert sup.observe() is None
        log = [r for r in server.requests if r.path.endswith("/log")]
        assert [(r.path, r.query) for r in log] == [
            (f"/api/v1/namespaces/{NAMESPACE}/pods/r-worker-0-abc/log", "container=worker&tailLines=200")]
        stored = parse_job_progress((server.get("Job", NAMESPACE, "r-worker") or {})["metadata"]["annotations"][
            PROGRESS_ANNOTATION])
        assert stored is not None and stored.step == 60


# -- stalls -----------------------------------------------------------------------------------------


STALL = {"stall_timeout_seconds": 600, "pod_selector": "tf=yes", "expected_pods": 3}


def test_a_step_that_stops_rising_ends_the_run_as_stalled_and_frees_everything() -> None:
    with kube_server() as server:
        server.add(*objects())
        started(server)
        chief_pod(server, "r-chief-abcde", [step_line(40)])
        now = [T0 + 10]
        sup = clocked(server, now, **STALL)
        assert sup.observe() is None  # the step is seen at T0 + 10: the clock runs from then
        assert progress_of(server).step_changed_at == "2026-11-22T12:00:10Z"  # type: ignore[union-attr]
        writes = len(server.writes())
        now[0] = T0 + 609
        assert sup.observe() is None and len(server.writes()) == writes
        now[0] = T0 + 610
        ending = sup.observe()
        reason = "Stalled: step 40 has not risen for 600 s"
        assert ending is not None and (ending.kind, ending.reason) == ("stalled", reason)
        assert sup.conclude(sup.seen, ending)
        annotations = {"tf-distributed.io/ending": "stalled", "tf-distributed.io/end-reason": reason,
                       "tf-distributed.io/ended-at": "2026-11-22T12:10:10Z"}
        assert server.writes()[writes:] == [
            ("PATCH", JOB, {"metadata": {"annotations": {"tf-distributed.io/end-reason": reason}},
                            "spec": {"activeDeadlineSeconds": 1}}),  # the Job controller fails the chief Job
            ("PATCH", f"{STS}/r-ps/scale", {"spec": {"replicas": 0}}),
            ("PATCH", f"{STS}/r-worker/scale", {"spec": {"replicas": 0}}),
            ("PATCH", JOB, {"metadata": {"annotations": annotations}}),
            ("PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/r-sup/scale", {"spec": {"replicas": 0}}),
        ]


def test_a_restarted_supervisor_continues_the_same_stall_clock() -> None:
    with kube_server() as server:
        server.add(*objects())
        started(server)
        chief_pod(server, "r-chief-abcde", [step_line(40)])
        assert clocked(server, [T0 + 10], **STALL).observe() is None  # then its pod is drained
        now = [T0 + 400]
        again = clocked(server, now, **STALL)
        assert again.observe() is None
        now[0] = T0 + 610  # 600 s after the step was first seen, not after this supervisor started
        ending = again.observe()
        assert ending is not None and ending.reason == "Stalled: step 40 has not risen for 600 s"
        # killed after ending the chief Job, before the rest: the next one carries the stall out
        third = clocked(server, [T0 + 700], **STALL)
        ending = third.observe()
        assert ending is not None and (ending.kind, ending.recorded) == ("stalled", False)


def test_the_clock_starts_with_the_run_and_a_rising_step_resets_it() -> None:
    with kube_server() as server:
        server.add(*objects())
        chief_pod(server, "r-chief-abcde", [])
        server.add(*({"kind": "Pod", "metadata": {"name": f"r-{n}", "namespace": NAMESPACE, "labels": {"tf": "yes"}},
                      "spec": {}, "status": {"phase": "Running"}} for n in ("ps-0", "worker-0")))
        now = [T0]
        sup = clocked(server, now, **STALL)
        assert sup.observe() is None  # every pod runs: the run started now
        assert job_annotations(server)["tf-distributed.io/started-at"] == "2026-11-22T12:00:00Z"
        for step, at in ((10, 599), (20, 1198)):  # each step seen just before the timeout
            server.set_log(NAMESPACE, "r-chief-abcde", [step_line(step)])
            now[0] = T0 + at
            assert sup.observe() is None
        server.set_log(NAMESPACE, "r-chief-abcde", [])  # the log's tail has no step line any more: no news
        now[0] = T0 + 1797
        assert sup.observe() is None
        now[0] = T0 + 1798
        ending = sup.observe()
        assert ending is not None and ending.reason == "Stalled: step 20 has not risen for 600 s"
    with kube_server() as server:  # no step ever reported once the run started
        server.add(*objects())
        started(server)
        now[0] = T0 + 600
        ending = clocked(server, now, **STALL).observe()
        assert ending is not None and ending.reason == "Stalled: no step reported for 600 s"


def test_a_step_that_went_and_came_back_between_two_records_restarts_the_clock() -> None:
    """Step 40 recorded, 50 seen while the writes are throttled, then 40 again (a retried chief resuming from
    its checkpoint): the step did change, so the clock runs from the return to 40."""
    with kube_server() as server:
        server.add(*objects())
        started(server)
        chief_pod(server, "r-chief-abcde", [step_line(40)])
        now = [T0]
        sup = clocked(server, now, **STALL)
        assert sup.observe() is None
        for at, step in ((5, 50), (10, 40)):
            server.set_log(NAMESPACE, "r-chief-abcde", [step_line(step)])
            now[0] = T0 + at
            assert sup.observe() is None
        now[0] = T0 + 609
        assert sup.observe() is None  # not stalled since T0
        assert progress_of(server).step_changed_at == time_text(T0 + 10)  # type: ignore[union-attr]
        now[0] = T0 + 610
        assert sup.observe() is not None


def test_a_suspended_run_is_no_ending_no_start_timeout_and_no_stall() -> None:
    with kube_server() as server:
        server.add(*objects())
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"},
                                                    "spec": {"suspend": True}})
        chief_pod(server, "r-chief-abcde", [step_line(40)])
        now = [T0]
        settings = {**STALL, "start_timeout_seconds": 60}  # both long past, had it not been suspended
        sup = clocked(server, now, **settings)
        assert sup.observe() is None
        # the suspension is written at once; no pod is listed, no log read, nothing ended
        assert [(r.method, r.path) for r in server.requests] == [("GET", JOB), ("PATCH", JOB)]
        assert progress_of(server) == JobProgress("Suspended", updated_at=time_text(T0), step_changed_at=time_text(T0))
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"annotations": {
            "tf-distributed.io/started-at": time_text(T0 - 3600)}}})  # it had started before the suspension
        now[0] = T0 + 3600
        assert sup.observe() is None and len(server.writes()) == 1
        # resumed (the Job controller starts it again): the clock restarts
        server.update("Job", NAMESPACE, "r-chief", {"spec": {"suspend": False}})
        now[0] = T0 + 3700
        assert sup.observe() is None
        resumed = progress_of(server)
        assert resumed is not None and (resumed.state, resumed.step, resumed.step_changed_at) == (
            RUNNING, 40, time_text(T0 + 3700))
        now[0] = T0 + 3700 + 599
        assert sup.observe() is None
        now[0] = T0 + 3700 + 600
        ending = sup.observe()
        assert ending is not None and ending.reason == "Stalled: step 40 has not risen for 600 s"


def test_a_start_timeout_counts_from_the_resume() -> None:
    """The Job controller sets a resumed Job's startTime again: the start timeout counts from there."""
    with kube_server() as server:
        server.add(*objects())
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"},
                                                    "status": {"startTime": time_text(T0)}})
        now = [T0 + 59]
        sup = clocked(server, now, start_timeout_seconds=60, pod_selector="tf=yes", expected_pods=1)
        assert sup.observe() is None
        now[0] = T0 + 60
        ending = sup.observe()
        assert ending is not None and ending.kind == "start-timeout"


def test_a_log_that_cannot_be_read_ends_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with kube_server() as server:
        server.add(*objects())
        started(server)
        chief_pod(server, "r-chief-abcde", [step_line(40)])
        server.fail("log", "pods", 403, 'pods "r-chief-abcde" is forbidden: cannot get resource "pods/log"')
        sup = clocked(server, [T0 + 3600], **STALL)
        with caplog.at_level(logging.WARNING, "trainer.supervisor"):
            assert sup.observe() is None
        assert server.writes() == []
        assert "cannot read the chief's log: HTTP 403" in caplog.text
    with kube_server() as server:  # nor does a Role without pods: the ending is still seen and carried out
        server.add(*objects(conditions=[{"type": "Complete", "status": "True"}]))
        server.fail("list", "pods", 403, "forbidden")
        ending = clocked(server, [T0], **STALL).observe()
        assert ending is not None and ending.kind == "succeeded"


def test_the_progress_and_stall_settings_come_from_the_environment() -> None:
    env = {"TFD_CHIEF_JOB": "r-chief", "TFD_PROGRESS": "true", "TFD_STALL_TIMEOUT_SECONDS": "1800",
           "TFD_POD_SELECTOR": "tf=yes", "TFD_EXPECTED_PODS": "3", "TFD_PROGRESS_JOB": "r-chief",
           "TFD_PROGRESS_CONTAINER": "chief"}
    settings = Settings.from_env(env)
    assert (settings.progress, settings.stall_timeout_seconds, settings.chief_own_job) == (True, 1800.0, "r-chief")
    assert Settings.from_env({"TFD_CHIEF_JOB": "r-chief"}).progress is False
    for broken, message in (({"TFD_PROGRESS": "yes"}, "TFD_PROGRESS='yes': expected true or false"),
                            ({"TFD_PROGRESS": "false"}, "TFD_STALL_TIMEOUT_SECONDS needs TFD_PROGRESS=true"),
                            ({"TFD_EXPECTED_PODS": ""}, "TFD_STALL_TIMEOUT_SECONDS needs TFD_POD_SELECTOR")):
        with pytest.raises(SupervisorConfigError, match=message.replace("(", r"\(")):
            Settings.from_env({**env, **broken})


# -- the pure pieces --------------------------------------------------------------------------------


def test_the_report_is_the_last_status_with_a_later_step_line_over_it() -> None:
    assert report("nothing here\n") is None
    only_steps = report(f"{step_line(10)}\n{step_line(20, 0.25)}\n")
    assert only_steps == Report(20, loss=0.25, seconds_per_step=0.1)
    # a bring-your-own chief that prints its status once, then step lines
    mixed = report(f"{status_line(0, checkpoint=None)}\n{step_line(30, 0.3)}\n")
    assert mixed == Report(30, RUNNING, 100, 0.3, None, None, 0.1)
    # the trainer: a step line, then the status line of the same step
    trainer = report(f"{step_line(30, 0.3)}\n{status_line(30, checkpoint=20, accuracy=0.8, loss=0.3)}\n")
    assert trainer == Report(30, RUNNING, 100, 0.3, 0.8, 20, 0.1)


def test_eta_from_the_pace_seen_when_the_chief_prints_no_sec_per_batch() -> None:
    stored = JobProgress(RUNNING, 10, 100, None, updated_at=time_text(T0), step_changed_at=time_text(T0))
    new = next_progress(stored, Report(20, RUNNING, 100), T0 + 10)  # 10 steps in 10 s: 80 to go
    assert new is not None and new.eta == time_text(T0 + 90) and new.step_changed_at == time_text(T0 + 10)
    assert next_progress(stored, Report(10, SUCCEEDED, 100), T0 + 10).eta is None  # type: ignore[union-attr]
    assert not worth_writing(new, new, T0 + 100)
    assert not worth_writing(new, replace(new, eta="later", updated_at="x"), T0 + 100)  # the ETA alone
    assert stalled(new, T0, T0 + 20, 10) == "Stalled: step 20 has not risen for 10 s"


def test_the_record_round_trips_and_refuses_what_is_not_one() -> None:
    record = JobProgress(RUNNING, 40, 100, "2026-11-22T12:00:06Z", 0.5, 0.9, 30, "t1", "t0")
    text = format_job_progress(record)
    assert parse_job_progress(text) == record and "\n" not in text and " " not in text
    assert format_job_progress(JobProgress("Suspended", updated_at="t")) == '{"state":"Suspended","updatedAt":"t"}'
    assert parse_job_progress('{"state":"Running","step":3,"future":"kept out"}') == JobProgress(RUNNING, 3)
    document = json.loads(text)
    for broken in ("", "{not json", "[1]", json.dumps({**document, "step": "40"}),
                   json.dumps({**document, "loss": True}), json.dumps({k: v for k, v in document.items()
                                                                        if k != "state"})):
        assert parse_job_progress(broken) is None, broken


def test_a_status_document_of_an_older_trainer_still_parses() -> None:
    """checkpoint_step is new: a document without it is read as not saying; a wrong type is refused."""
    line = status_line(40, checkpoint=30)
    document = json.loads(line.split("tfd-status: ", 1)[1])
    older = {k: v for k, v in document.items() if k != "checkpoint_step"}
    status = status_from_document(older)
    assert status is not None and status.checkpoint_step is None
    assert status_from_document({**document, "checkpoint_step": "30"}) is None
