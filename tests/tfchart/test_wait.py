"""`tfchart wait` against the fake API server on the loopback: the real CLI in a subprocess, its exit code
for each way a run ends (or does not), and a run that ends while the wait is under way."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import click
import pytest

from tests import kubeapi as kf
from tests.chartlib import REPO
from tests.kubeapi import Call, KubeServer, kube_server
from tfchart.cli.app import DURATION
from tfchart.cluster.suspend import NO_RUN_EXIT, TIMED_OUT_EXIT
from tfchart.helm.runner import go_duration

NS = "team-a"
CHIEF = "mnist-tf-distributed-chief"
SELECTOR = "app.kubernetes.io/instance=mnist,app.kubernetes.io/part-of=tf-distributed"
LIST_JOBS = Call("list", "jobs", NS, label_selector=SELECTOR)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server(read_only=True) as running:
        yield running


def run_job(server: KubeServer, state: str, **status: Any) -> dict[str, Any]:
    """The release's run Job (the chief's) in `state`, as the Job controller writes it."""
    chief = kf.job(kf.manifest(kf.rendered(namespace=NS), "Job", "chief"), state, **status)
    server.add(chief)
    return chief


def tfchart_wait(server: KubeServer, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tfchart", "wait", "mnist", *args, "--kubeconfig", str(server.kubeconfig(NS))]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


STOPPED = "stopped by tfchart stop (training ended early)"


@pytest.mark.parametrize(("state", "code", "err"), [
    ("complete", 0, ""),
    ("failed", 1, "error: release mnist's run failed: BackoffLimitExceeded: Job has reached the specified backoff "
                  "limit\n"),
    ("stopped", 1, f"error: release mnist's run failed: {STOPPED}\n"),  # ended early: not a success
])  # fmt: skip
def test_a_run_that_already_ended_answers_at_once_with_its_ending(server: KubeServer, state: str, code: int,
                                                                  err: str) -> None:  # fmt: skip
    job = run_job(server, "running" if state == "stopped" else state)
    if state == "stopped":
        server.update("Job", NS, job["metadata"]["name"], {"spec": {"suspend": True}, "metadata": {"annotations": {
            "tf-distributed.io/ending": "stopped", "tf-distributed.io/end-reason": STOPPED}}})  # fmt: skip
    answer = finished(tfchart_wait(server))
    assert answer == (code, f"mnist: {'Succeeded' if code == 0 else 'Failed'}\n", err)
    assert server.calls == [LIST_JOBS]  # one look


def test_a_run_that_ends_while_waiting(server: KubeServer) -> None:
    run_job(server, "running")
    waiting = tfchart_wait(server)
    server.wait_for(LIST_JOBS)  # the wait has seen the run still going
    ended = kf.job(kf.manifest(kf.rendered(namespace=NS), "Job", "chief"), "complete")
    server.update("Job", NS, CHIEF, {"status": ended["status"]})
    code, out, err = finished(waiting)
    assert (code, out) == (0, "mnist: Succeeded\n"), err
    assert server.calls.count(LIST_JOBS) >= 2


def test_a_release_deleted_while_waiting(server: KubeServer) -> None:
    run_job(server, "running")
    waiting = tfchart_wait(server)
    server.wait_for(LIST_JOBS)
    server.delete("Job", NS, CHIEF)  # `helm uninstall`
    code, out, err = finished(waiting)
    assert code == NO_RUN_EXIT and out == ""
    assert err.startswith("error: release mnist was deleted while waiting: no chief (or workers') Job carries its")
    assert "Traceback" not in err


def test_a_run_recreated_by_upgrade_is_waited_for_not_reported_deleted(server: KubeServer) -> None:
    """`tfchart upgrade --recreate` marks the run's Job, deletes it, and helm creates the new run: the wait sees the
    marked Job, then none, then the new one, and answers with the new run's ending."""
    run_job(server, "running")
    waiting = tfchart_wait(server)
    server.wait_for(LIST_JOBS)
    server.update("Job", NS, CHIEF, {"metadata": {"annotations": {"tf-distributed.io/recreating": "true"}}})
    server.wait_for(LIST_JOBS, 2)  # saw the marked Job
    server.delete("Job", NS, CHIEF)
    server.wait_for(LIST_JOBS, 4)  # saw no Job at least once (the poll after the deletion may have been under way)
    run_job(server, "complete")  # helm upgrade created the new run, which succeeded
    code, out, err = finished(waiting)
    assert (code, out) == (0, "mnist: Succeeded\n"), err
    assert err == ("note: release mnist's run is being re-created (`tfchart upgrade --recreate` deletes its Job): "
                   "waiting for the new run to end\n")


def test_a_release_that_never_existed(server: KubeServer) -> None:
    code, _, err = finished(tfchart_wait(server, "-n", "elsewhere"))
    assert code == NO_RUN_EXIT
    assert err.startswith("error: release mnist has no run in namespace elsewhere:")
    assert "tfchart list -A" in err


def test_timeout_exits_124_and_says_the_run_still_goes(server: KubeServer) -> None:
    run_job(server, "running")
    code, out, err = finished(tfchart_wait(server, "--timeout", "1s"))
    assert code == TIMED_OUT_EXIT == 124 and out == ""
    assert err.startswith("error: release mnist's run has not ended after 1s: it still runs")
    assert server.calls.count(LIST_JOBS) >= 2  # looked again before giving up


def test_a_bad_duration_is_a_usage_error(server: KubeServer) -> None:
    code, _, err = finished(tfchart_wait(server, "--timeout", "ten minutes"))
    assert code == 2
    assert "'ten minutes' is not a duration such as 90s, 10m or 1h30m (helm's), or plain seconds (90)" in err
    assert server.calls == []


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("10m", 600), ("1h30m", 5400),
                                               ("1.5m", 90), ("250ms", 0.25), ("", None), ("10x", None),
                                               ("m", None), ("-5s", None)])  # fmt: skip
def test_durations(text: str, seconds: float | None) -> None:
    if seconds is None:
        with pytest.raises(click.BadParameter):
            DURATION.convert(text, None, None)
    else:
        assert DURATION.convert(text, None, None) == seconds


@pytest.mark.parametrize(("seconds", "text"), [(300, "5m"), (5400, "1h30m"), (90.5, "1m30.5s"), (10, "10s"),
                                               (0.25, "250ms"), (0, "0")])  # fmt: skip
def test_durations_are_written_as_go_reads_them(seconds: float, text: str) -> None:
    """helm's --timeout and tfchart's messages (the --recreate wait's) get a Go duration, which reads back."""
    assert go_duration(seconds) == text
    assert DURATION.convert(text, None, None) == seconds


def test_an_answer_that_is_not_kubernetes_is_one_line(server: KubeServer) -> None:
    server.proxy_answer = (502, "text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>")
    code, _, err = finished(tfchart_wait(server))
    assert code == 69 and "Traceback" not in err  # not a failed run: the cluster could not be asked
    assert err.startswith("error: ") and "502" in err


def test_a_failed_poll_once_the_run_was_seen_is_waited_out(server: KubeServer) -> None:
    run_job(server, "running")
    waiting = tfchart_wait(server)
    server.wait_for(LIST_JOBS)
    server.fail("list", "jobs", 503, "the server is currently unable to handle the request")  # restarting
    server.wait_for(LIST_JOBS, count=2)
    server.failures.clear()
    ended = kf.job(kf.manifest(kf.rendered(namespace=NS), "Job", "chief"), "complete")
    server.update("Job", NS, CHIEF, {"status": ended["status"]})
    code, out, err = finished(waiting)
    assert (code, out) == (0, "mnist: Succeeded\n"), err
    assert 503 in server.answered(LIST_JOBS)


def test_a_stalled_run_is_a_failure_before_and_after_its_job_fails(server: KubeServer) -> None:
    """The supervisor ends a stalled run by a 1 s deadline: its record comes with the Job's Failed condition
    (or just before it); either way the wait says Failed with the stall's reason."""
    job = run_job(server, "running")
    reason = "Stalled: step 1200 has not risen for 1800 s"
    record = {"tf-distributed.io/ending": "stalled", "tf-distributed.io/end-reason": reason}
    server.update("Job", NS, job["metadata"]["name"], {"metadata": {"annotations": record}})
    code, _, err = finished(tfchart_wait(server))
    assert code == 1 and err == f"error: release mnist's run failed: {reason}\n"
    failed = kf.job(kf.manifest(kf.rendered(namespace=NS), "Job", "chief"), "failed", reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline")
    server.update("Job", NS, CHIEF, {"status": failed["status"]})
    code, _, err = finished(tfchart_wait(server))
    assert code == 1 and err == ("error: release mnist's run failed: DeadlineExceeded: Job was active longer than "
                                 f"specified deadline; {reason}\n")
