"""tfchart logs: picking the pod of a role/index by labels and streaming its log, against the fake API server
(tests/kubeapi.py), which streams a followed log in chunks over HTTP like the API server."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.kubeapi import Call, KubeServer, kube_server
from tfchart.cluster import kube, logs
from tfchart.errors import KubernetesError, UsageError

NS = "ml-training"
SELECTOR = "app.kubernetes.io/instance=mnist,app.kubernetes.io/part-of=tf-distributed"


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    with kube_server(read_only=True) as server:
        yield server


def selector(role: str) -> str:
    return f"{SELECTOR},app.kubernetes.io/component={role}"


def release(cluster: KubeServer, workers: int = 2) -> list[dict[str, Any]]:
    docs = kf.rendered()
    ps, worker = kf.manifest(docs, "StatefulSet", "ps"), kf.manifest(docs, "StatefulSet", "worker")
    chief = kf.manifest(docs, "Job", "chief")
    cluster.add(kf.pod(ps, index=0), *(kf.pod(worker, index=i) for i in range(workers)))
    cluster.add(kf.pod(chief, "mnist-tf-distributed-chief-old11", phase="Failed", ready=False, terminated=("Error", 1),
                       created=kf.ago(hours=2)))  # fmt: skip
    cluster.add(kf.pod(chief, "mnist-tf-distributed-chief-new22", created=kf.ago(minutes=10)))
    tensorboard = kf.manifest(docs, "Deployment", "tensorboard")
    cluster.add(*(kf.pod(tensorboard, f"mnist-tf-distributed-tensorboard-7c9-{tail}") for tail in ("bbbbb", "aaaaa")))
    return docs


class CtrlC(io.StringIO):
    """Output where the user presses Ctrl-C once `lines` lines were written."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines

    def write(self, text: str) -> int:
        if self.getvalue().count("\n") == self.lines:
            raise KeyboardInterrupt
        return super().write(text)


def run(
    cluster: KubeServer, role: str, index: int = 0, follow: bool = False, tail: int | None = None,
    out: io.StringIO | None = None,
) -> str:  # fmt: skip
    out = out or io.StringIO()
    logs.stream(cluster.api(), "mnist", NS, role, index, follow, tail, out)
    return out.getvalue()


def test_worker_by_ordinal_label_with_tail(cluster: KubeServer) -> None:
    release(cluster)
    cluster.set_log(NS, "mnist-tf-distributed-worker-1", [f"line {i}" for i in range(10)])

    assert run(cluster, "worker", 1, tail=3) == "line 7\nline 8\nline 9\n"
    assert cluster.calls == [
        Call("list", "pods", NS, label_selector=selector("worker")),
        Call("log", "pods", NS, "mnist-tf-distributed-worker-1", params=(("container", "worker"), ("tailLines", "3"))),
    ]


def test_ordinal_from_the_name_when_the_pod_index_label_is_missing(cluster: KubeServer) -> None:
    release(cluster)
    for index in (0, 1):
        name = f"mnist-tf-distributed-worker-{index}"
        cluster.update("Pod", NS, name, {"metadata": {"labels": {"apps.kubernetes.io/pod-index": None}}})  # < 1.28
    cluster.set_log(NS, "mnist-tf-distributed-worker-0", ["from worker 0"])
    assert run(cluster, "worker", 0) == "from worker 0\n"


def test_chief_is_the_newest_pod_of_the_job(cluster: KubeServer) -> None:
    release(cluster)
    cluster.set_log(NS, "mnist-tf-distributed-chief-new22", ["step 50, loss = 1.0 (10.0 examples/sec; 1.0 sec/batch)"])
    assert run(cluster, "chief").startswith("step 50")
    assert cluster.calls[-1] == Call(
        "log", "pods", NS, "mnist-tf-distributed-chief-new22", params=(("container", "chief"),)
    )


def test_tensorboard_pods_are_indexed_in_name_order(cluster: KubeServer) -> None:
    release(cluster)
    cluster.set_log(NS, "mnist-tf-distributed-tensorboard-7c9-bbbbb", ["second"])
    assert run(cluster, "tensorboard", 1) == "second\n"


def test_follow_streams_until_ctrl_c_and_releases_the_connection(cluster: KubeServer) -> None:
    release(cluster)
    log = cluster.set_log(NS, "mnist-tf-distributed-chief-new22", ["one", "two", "three", "four"], running=True)

    # no exception: Ctrl-C ends a followed log
    assert run(cluster, "chief", follow=True, out=CtrlC(lines=2)) == "one\ntwo\n"
    assert cluster.calls[-1].params == (("container", "chief"), ("follow", "true"))
    assert log.hung_up.wait(10), "the connection of the followed log was not released"


def test_last_line_without_newline_is_kept(cluster: KubeServer) -> None:
    release(cluster)
    api = cluster.api()
    cluster.logs[(NS, "mnist-tf-distributed-ps-0")] = kf.PodLog('{"looks": "like json"}')  # no newline at the end
    assert list(api.stream_pod_log(NS, "mnist-tf-distributed-ps-0", "ps", None, False)) == ['{"looks": "like json"}']


def test_index_out_of_range_says_how_many_pods_exist(cluster: KubeServer) -> None:
    release(cluster)
    with pytest.raises(UsageError) as error:
        run(cluster, "worker", 5)
    assert error.value.message == "worker index 5 is out of range: release mnist has 2 worker pod(s) (indices 0, 1)"
    with pytest.raises(UsageError) as error:
        run(cluster, "tensorboard", 2)
    assert error.value.message.endswith("release mnist has 2 tensorboard pod(s) (indices 0, 1)")
    with pytest.raises(UsageError, match="a release has one chief"):
        run(cluster, "chief", 1)
    with pytest.raises(UsageError, match="indices start at 0"):
        run(cluster, "ps", -1)


def test_no_pods_of_the_role(cluster: KubeServer) -> None:
    with pytest.raises(KubernetesError) as error:
        run(cluster, "evaluator")
    assert error.value.message == "release mnist has no evaluator pods in namespace ml-training"
    assert "scaled down after success" in error.value.hint


def test_pod_not_started_yet_gives_phase_and_waiting_reason(cluster: KubeServer) -> None:
    docs = release(cluster, workers=1)
    worker = kf.manifest(docs, "StatefulSet", "worker")
    cluster.add(kf.pod(worker, index=1, phase="Pending", ready=False,
                       waiting=("ImagePullBackOff", 'Back-off pulling image "ghcr.io/tf-distributed/trainer:0.1.0"')))
    cluster.add(kf.pod(worker, index=2, phase="Pending", ready=False, unschedulable="0/3 nodes are available"))
    with pytest.raises(KubernetesError) as error:
        run(cluster, "worker", 1)
    assert error.value.message == (
        "worker pod mnist-tf-distributed-worker-1 has not started yet (phase Pending, ImagePullBackOff: "
        'Back-off pulling image "ghcr.io/tf-distributed/trainer:0.1.0")'
    )
    assert "kubectl -n ml-training describe pod mnist-tf-distributed-worker-1" in error.value.hint
    with pytest.raises(KubernetesError, match=r"\(phase Pending, Unschedulable: 0/3 nodes are available\)"):
        run(cluster, "worker", 2)
    assert all(call.verb == "list" for call in cluster.calls)  # never asked for a log that cannot exist


def test_crash_looping_pod_still_has_a_log(cluster: KubeServer) -> None:
    docs = release(cluster, workers=0)
    worker = kf.manifest(docs, "StatefulSet", "worker")
    cluster.add(kf.pod(worker, index=0, ready=False, restarts=3, waiting=("CrashLoopBackOff", "back-off"),
                       last_terminated=("Error", 1)))
    cluster.set_log(NS, "mnist-tf-distributed-worker-0", ["Traceback: boom"])
    assert run(cluster, "worker") == "Traceback: boom\n"


def test_log_forbidden_names_pods_log(cluster: KubeServer) -> None:
    release(cluster)
    cluster.fail("log", "pods", 403, 'pods "mnist-tf-distributed-ps-0" is forbidden: cannot get resource "pods/log"')
    with pytest.raises(KubernetesError) as error:
        run(cluster, "ps")
    assert "`get` on resource `pods/log`" in error.value.hint
    assert "kubectl auth can-i get pods/log -n ml-training" in error.value.hint


def test_follow_delivers_each_line_as_it_arrives(cluster: KubeServer) -> None:
    release(cluster)
    lines = [f"step {step}, loss = 1.0 (1.0 examples/sec; 1.0 sec/batch)" for step in (1, 2)]
    log = cluster.set_log(NS, "mnist-tf-distributed-chief-new22", lines, pause_after=1)
    received = []
    for line in cluster.api().stream_pod_log(NS, "mnist-tf-distributed-chief-new22", "chief", None, True):
        received.append(line)
        log.resume.set()  # the server sends the second line only once the client holds the first
    assert [line.split(",")[0] for line in received] == ["step 1", "step 2"]
    assert [f"{request.path}?{request.query}" for request in cluster.requests] == [
        "/api/v1/namespaces/ml-training/pods/mnist-tf-distributed-chief-new22/log?container=chief&follow=true"
    ]


@pytest.mark.cluster
@pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"), reason="no live cluster: set KUBECONFIG (e.g. after `kind create cluster`)"
)
def test_live_cluster_logs_of_a_release() -> None:
    release_name = os.environ.get("TFCHART_TEST_RELEASE")
    if not release_name:
        pytest.skip("set TFCHART_TEST_RELEASE (and TFCHART_TEST_NAMESPACE) to an installed tf-distributed release")
    out = io.StringIO()
    api = kube.KubeApi.from_config(None, None)
    logs.stream(api, release_name, os.environ.get("TFCHART_TEST_NAMESPACE", "default"), "chief", 0, False, 50, out)
    assert len(out.getvalue().splitlines()) <= 50


def test_logs_of_a_release_installed_with_name_override(cluster: KubeServer) -> None:
    docs = kf.rendered(sets=("nameOverride=vision",))
    worker = kf.manifest(docs, "StatefulSet", "worker")
    cluster.add(kf.pod(worker, index=0))
    cluster.set_log(NS, "mnist-vision-worker-0", ["worker 0 says hello"])
    assert run(cluster, "worker") == "worker 0 says hello\n"


# -- the chief by default, --previous, --since, --timestamps, --all-roles ------------------------------------


def test_the_chief_by_default_is_the_run_jobs_newest_pod(cluster: KubeServer) -> None:
    docs = release(cluster)
    cluster.add(kf.job(kf.manifest(docs, "Job", "chief")))
    cluster.set_log(NS, "mnist-tf-distributed-chief-new22", ["chief here"])
    out = io.StringIO()
    logs.stream(cluster.api(), "mnist", NS, None, 0, False, None, out)
    assert out.getvalue() == "chief here\n"
    assert cluster.calls[:2] == [Call("list", "jobs", NS, label_selector=SELECTOR),
                                 Call("list", "pods", NS, label_selector=selector("chief"))]  # fmt: skip


def test_without_a_chief_worker_0_is_the_chief(cluster: KubeServer) -> None:
    docs = kf.rendered(sets=("training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=2"))
    workers = kf.manifest(docs, "Job", "worker")
    cluster.add(kf.job(workers))
    for index in (1, 0):
        pod = kf.pod(workers, f"mnist-tf-distributed-worker-{index}-abcde")
        pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(index)
        cluster.add(pod)
        cluster.set_log(NS, pod["metadata"]["name"], [f"worker {index}"])
    out = io.StringIO()
    logs.stream(cluster.api(), "mnist", NS, None, 0, False, None, out)
    assert out.getvalue() == "worker 0\n"


def test_previous_reads_the_restarted_containers_log(cluster: KubeServer) -> None:
    docs = release(cluster, workers=0)
    worker = kf.manifest(docs, "StatefulSet", "worker")
    cluster.add(kf.pod(worker, index=0, restarts=1, last_terminated=("OOMKilled", 137)))
    cluster.set_log(NS, "mnist-tf-distributed-worker-0", ["started again"], previous="step 10\nKilled\n")
    out = io.StringIO()
    logs.stream(cluster.api(), "mnist", NS, "worker", 0, False, None, out, previous=True)
    assert out.getvalue() == "step 10\nKilled\n"
    assert cluster.calls[-1].params == (("container", "worker"), ("previous", "true"))

    # a container that never restarted has no previous log: said before asking (the server would answer 400)
    asked = len(cluster.calls)
    with pytest.raises(KubernetesError) as error:
        logs.stream(cluster.api(), "mnist", NS, "ps", 0, False, None, out, previous=True)
    assert error.value.message == ("ps pod mnist-tf-distributed-ps-0 has no previous log: its container has not "
                                   "restarted")
    assert [call.verb for call in cluster.calls[asked:]] == ["list"]


def test_since_and_timestamps_are_the_api_servers(cluster: KubeServer) -> None:
    release(cluster)
    now = datetime.now(timezone.utc)
    written = [now - timedelta(hours=2), now - timedelta(minutes=1)]
    cluster.set_log(NS, "mnist-tf-distributed-ps-0", ["old", "new"], written=written)
    out = io.StringIO()
    logs.stream(cluster.api(), "mnist", NS, "ps", 0, False, None, out, since_seconds=600, timestamps=True)
    assert out.getvalue() == written[1].strftime("%Y-%m-%dT%H:%M:%S.%f000Z") + " new\n"
    assert cluster.calls[-1].params == (("container", "ps"), ("sinceSeconds", "600"), ("timestamps", "true"))


def test_all_roles_prefixes_each_pods_lines_and_names_those_without_a_log(cluster: KubeServer) -> None:
    docs = release(cluster, workers=1)
    cluster.add(kf.pod(kf.manifest(docs, "StatefulSet", "worker"), index=1, phase="Pending", ready=False,
                       unschedulable="0/3 nodes are available"))  # fmt: skip
    cluster.set_log(NS, "mnist-tf-distributed-chief-new22", ["c1", "c2"])
    cluster.set_log(NS, "mnist-tf-distributed-worker-0", ["w1"])
    out, err = io.StringIO(), io.StringIO()
    logs.stream(cluster.api(), "mnist", NS, None, 0, False, None, out, err, all_roles=True)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["[pod/mnist-tf-distributed-chief-new22/chief] c1",
                         "[pod/mnist-tf-distributed-chief-new22/chief] c2"]  # fmt: skip
    assert "[pod/mnist-tf-distributed-worker-0/worker] w1" in lines
    assert lines.index("[pod/mnist-tf-distributed-chief-new22/chief] c2") < lines.index(
        "[pod/mnist-tf-distributed-worker-0/worker] w1")  # the chief first, as status lists roles
    assert err.getvalue().startswith("skipped: worker pod mnist-tf-distributed-worker-1 has not started yet")
    assert "skipped: chief pod mnist-tf-distributed-chief-old11" not in err.getvalue()  # it ran: its log is there


class Releasing(io.StringIO):
    """Output that lets `log` send its held lines once `line` was written: the arrival order is the test's."""

    def __init__(self, line: str, log: kf.PodLog) -> None:
        super().__init__()
        self.line, self.log = line, log

    def write(self, text: str) -> int:
        if text.startswith(self.line):
            self.log.resume.set()
        return super().write(text)


def test_all_roles_followed_interleaves_lines_as_they_arrive(cluster: KubeServer) -> None:
    release(cluster, workers=1)
    for name in ("chief-old11", "tensorboard-7c9-aaaaa", "tensorboard-7c9-bbbbb"):
        cluster.delete("Pod", NS, f"mnist-tf-distributed-{name}")
    chief = cluster.set_log(NS, "mnist-tf-distributed-chief-new22", ["c1", "c2"], pause_after=1)
    cluster.set_log(NS, "mnist-tf-distributed-worker-0", ["w1"])
    cluster.set_log(NS, "mnist-tf-distributed-ps-0", ["p1"])
    out = Releasing("[pod/mnist-tf-distributed-worker-0/worker] w1", chief)
    logs.stream(cluster.api(), "mnist", NS, None, 0, True, None, out, io.StringIO(), all_roles=True)
    lines = out.getvalue().splitlines()
    assert sorted(lines) == ["[pod/mnist-tf-distributed-chief-new22/chief] c1",
                             "[pod/mnist-tf-distributed-chief-new22/chief] c2",
                             "[pod/mnist-tf-distributed-ps-0/ps] p1",
                             "[pod/mnist-tf-distributed-worker-0/worker] w1"]  # fmt: skip
    # c2 was held until w1 was written: the chief's stream did not block the worker's
    assert lines.index("[pod/mnist-tf-distributed-worker-0/worker] w1") < lines.index(
        "[pod/mnist-tf-distributed-chief-new22/chief] c2")


def test_cli_passes_since_as_seconds_and_refuses_all_roles_with_a_role(
    cluster: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    release(cluster)
    cluster.set_log(NS, "mnist-tf-distributed-chief-new22", ["chief here"])
    command = ("logs", "mnist", "--since", "1m30s")
    assert kf.tfchart_in_process(cluster, capsys, NS, *command)[:2] == (0, "chief here\n")
    assert cluster.calls[-1].params == (("container", "chief"), ("sinceSeconds", "90"))
    code, _, err = kf.tfchart_in_process(cluster, capsys, NS, *command, "--all-roles", "--role", "ps")
    assert code == 2
    assert err.startswith("error: --all-roles shows every pod: it takes no --role or --index")
