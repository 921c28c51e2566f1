"""`tfchart suspend` and `tfchart resume` against the fake API server on the loopback: the real CLI in a
subprocess, each request it makes in order, a command killed after its first write and run again, the
refusals, and what status, list and wait say of a suspended run. The run with real TensorFlow processes is
tests/trainer/test_suspend.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import REPO, render
from tests.kubeapi import Call, KubeServer, kube_server
from tfchart.cluster import releases, status, suspend
from tfdcontract import SUSPENDED_ANNOTATION, Suspension, parse_suspension, suspension_annotations
from tfdcontract.lifecycle import RUNNING_WANTED, SUSPENDED_WANTED, WANTED_ANNOTATION

NS = "team-a"
PREFIX = "mnist-tf-distributed"
CHIEF = f"{PREFIX}-chief"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
STS = f"/apis/apps/v1/namespaces/{NS}/statefulsets"
SELECTOR = "app.kubernetes.io/instance=mnist,app.kubernetes.io/part-of=tf-distributed"
LIST_PODS = Call("list", "pods", NS, label_selector=SELECTOR)
LIST_STS = Call("list", "statefulsets", NS, label_selector=SELECTOR)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as running:
        yield running


def tfchart(server: KubeServer, *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tfchart", *args, "--kubeconfig", str(server.kubeconfig(NS))]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def in_process(server: KubeServer, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process, with a kubeconfig whose context's namespace is NS."""
    return kf.tfchart_in_process(server, capsys, NS, *args)


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


def training(server: KubeServer, evaluator: bool = True, *more: str) -> dict[str, Any]:
    """A release training: ps 1 and workers 2 Ready, the chief Job running its pod, the evaluator's."""
    docs = kf.rendered(sets=("ps.replicas=1", "worker.replicas=2", f"evaluator.enabled={str(evaluator).lower()}",
                             *more), namespace=NS)  # fmt: skip
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            server.add(kf.stateful_set(doc))
        elif doc["kind"] == "Job":
            server.add(kf.job(doc), kf.pod(doc, name=f"{doc['metadata']['name']}-x7k2p"))
    return {doc["metadata"]["name"]: doc for doc in docs}


def record(server: KubeServer) -> dict[str, Any]:
    job = server.get("Job", NS, CHIEF)
    assert job is not None
    return {"suspend": job["spec"].get("suspend"), "record": job["metadata"].get("annotations", {}).get(
        SUSPENDED_ANNOTATION)}


def replicas(server: KubeServer, role: str) -> int:
    found = server.get("StatefulSet", NS, f"{PREFIX}-{role}")
    assert found is not None
    return int(found["spec"]["replicas"])


def wanted(state: str) -> tuple[str, str, dict[str, Any]]:
    """The write that asks for the state on the chief Job (tfdcontract.lifecycle)."""
    return ("PATCH", f"{JOBS}/{CHIEF}", {"metadata": {"annotations": {WANTED_ANNOTATION: state}}})


def pods_go(server: KubeServer, *names: str, after: int = 1) -> None:
    """The kubelet's part: once the CLI has listed the pods `after` times, these are gone."""
    server.wait_for(LIST_PODS, after)
    for name in names:
        server.delete("Pod", NS, name)


def test_suspend_records_then_waits_for_the_chief_then_frees_the_rest(server: KubeServer) -> None:
    training(server)
    suspending = tfchart(server, "suspend", "mnist")
    pods_go(server, f"{CHIEF}-x7k2p", after=2)  # the Job controller deleted it; its SIGTERM saved the checkpoint
    pods_go(server, f"{PREFIX}-evaluator-x7k2p", after=3)
    code, out, err = finished(suspending)
    assert code == 0, err
    asked, *writes = [(method, path, body) for method, path, body in server.writes()]
    assert asked == wanted(SUSPENDED_WANTED)  # no supervisor Ready: tfchart carries the plan out itself
    (method, path, body), *rest = writes
    assert (method, path) == ("PATCH", f"{JOBS}/{CHIEF}") and body["spec"] == {"suspend": True}
    suspension = parse_suspension(body["metadata"]["annotations"])
    assert suspension is not None and dict(suspension.replicas) == {"ps": 1, "worker": 2} and suspension.evaluator
    assert rest == [("PATCH", f"{STS}/{PREFIX}-ps/scale", {"spec": {"replicas": 0}}),
                    ("PATCH", f"{STS}/{PREFIX}-worker/scale", {"spec": {"replicas": 0}}),
                    ("PATCH", f"{JOBS}/{PREFIX}-evaluator", {"spec": {"suspend": True}})]  # fmt: skip
    # nothing is scaled before the chief's pod is gone: its checkpoint needs the parameter servers
    first_scale = next(i for i, r in enumerate(server.requests) if r.path.endswith("/scale"))
    pod_lists = [i for i, r in enumerate(server.requests) if r.call == LIST_PODS]
    assert len([i for i in pod_lists if i < first_scale]) >= 3
    lines = out.splitlines()
    assert lines[0] == f"✓ suspended Job {CHIEF}, recording the replicas to restore (ps 1, worker 2)"
    assert lines[1] == f"✓ waited for pod {CHIEF}-x7k2p to stop (it saves a checkpoint at its step boundary)"
    assert f"✓ scaled StatefulSet {PREFIX}-worker from 2 to 0 replicas" in lines
    assert lines[-1] == f"mnist is suspended (since {suspension.since}): `tfchart resume mnist -n {NS}` continues " \
                        "from the checkpoint"


def test_a_suspend_killed_after_its_first_write_is_finished_by_the_next_one(
    server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    training(server, evaluator=False)
    first = tfchart(server, "suspend", "mnist", "-o", "json")
    server.wait_for(LIST_PODS, 2)  # the record is written: it now waits for the chief's pod
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    assert len(server.writes()) == 2 and record(server)["suspend"] is True
    since = parse_suspension({SUSPENDED_ANNOTATION: record(server)["record"]}).since  # type: ignore[union-attr]
    server.delete("Pod", NS, f"{CHIEF}-x7k2p")
    code, out, err = in_process(server, capsys, "suspend", "mnist", "-o", "json")
    assert code == 0, err
    assert [path for _, path, _ in server.writes()[2:]] == [f"{STS}/{PREFIX}-ps/scale", f"{STS}/{PREFIX}-worker/scale"]
    report = json.loads(out)
    assert report["state"] == "Suspended" and report["since"] == since and report["replicas"] == {"ps": 1, "worker": 2}
    assert report["unchanged"] == [f"Job {CHIEF} is already suspended (since {since})"]
    # and once more: everything is done, nothing is written
    before = len(server.writes())
    assert in_process(server, capsys, "suspend", "mnist")[0] == 0 and len(server.writes()) == before


def test_a_suspend_that_times_out_says_how_to_finish_it(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    training(server, evaluator=False)
    code, _, err = in_process(server, capsys, "suspend", "mnist", "--timeout", "0s")
    assert code == 124
    assert "error: release mnist's run is not suspended after 0s (still pending):" in err
    assert f"  pod {CHIEF}-x7k2p to stop (it saves a checkpoint at its step boundary)" in err.splitlines()
    assert "run `tfchart suspend mnist -n team-a` again to finish (it carries on from here)" in err
    assert replicas(server, "ps") == 1 and record(server)["suspend"] is True


def suspended(server: KubeServer, evaluator: bool = True, *more: str) -> str:
    """A release as `tfchart suspend` leaves it (tests above): the record on the suspended Job, ps/workers at 0,
    the evaluator suspended, no pod left; the time of the record."""
    training(server, evaluator, *more)
    since = "2026-11-22T11:00:00Z"
    annotations = suspension_annotations(Suspension(since, {"ps": 1, "worker": 2}, evaluator))
    server.update("Job", NS, CHIEF, {"spec": {"suspend": True}, "metadata": {"annotations": annotations}})
    if evaluator:
        server.update("Job", NS, f"{PREFIX}-evaluator", {"spec": {"suspend": True}})
    for role in ("ps", "worker"):
        server.update("StatefulSet", NS, f"{PREFIX}-{role}", {"spec": {"replicas": 0}, "status": {
            "replicas": 0, "readyReplicas": 0, "availableReplicas": 0}})  # fmt: skip
    for pod in [f"{CHIEF}-x7k2p", f"{PREFIX}-evaluator-x7k2p"]:
        server.delete("Pod", NS, pod)
    return since


def ready(server: KubeServer) -> None:
    """The StatefulSet controller's part: the pods it created are Ready."""
    for role, count in (("ps", 1), ("worker", 2)):
        server.update("StatefulSet", NS, f"{PREFIX}-{role}", {"status": {"readyReplicas": count}})


def test_resume_brings_the_servers_back_before_the_chief(server: KubeServer) -> None:
    suspended(server)
    resuming = tfchart(server, "resume", "mnist", "-n", NS)
    server.wait_for(LIST_STS, 3)  # scaled, seen not Ready, and waited
    assert record(server)["suspend"] is True  # the chief waits for its servers
    ready(server)
    code, out, err = finished(resuming)
    assert code == 0, err
    assert server.writes() == [
        wanted(RUNNING_WANTED),
        ("PATCH", f"{STS}/{PREFIX}-ps/scale", {"spec": {"replicas": 1}}),
        ("PATCH", f"{STS}/{PREFIX}-worker/scale", {"spec": {"replicas": 2}}),
        ("PATCH", f"{JOBS}/{PREFIX}-evaluator", {"spec": {"suspend": False}}),
        ("PATCH", f"{JOBS}/{CHIEF}", {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}},
                                      "spec": {"suspend": False}}),
    ]  # fmt: skip
    assert record(server) == {"suspend": False, "record": None}
    assert out.splitlines()[-2:] == [
        f"✓ resumed Job {CHIEF} and dropped the suspension record: a new chief pod continues from the last checkpoint",
        f"mnist runs again: follow it with `tfchart logs mnist -n {NS} -f`"]


def test_a_resume_killed_after_its_first_write_is_finished_by_the_next_one(
    server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    suspended(server, evaluator=False)
    first = tfchart(server, "resume", "mnist")
    server.wait_for(LIST_STS, 2)  # scaled: it now waits for them to be Ready
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    assert [path for _, path, _ in server.writes()] == [f"{JOBS}/{CHIEF}", f"{STS}/{PREFIX}-ps/scale",
                                                        f"{STS}/{PREFIX}-worker/scale"]  # fmt: skip
    ready(server)
    code, out, err = in_process(server, capsys, "resume", "mnist")
    assert code == 0, err
    assert [path for _, path, _ in server.writes()[3:]] == [f"{JOBS}/{CHIEF}"]
    assert f"  StatefulSet {PREFIX}-worker is already at 2 replicas" in out.splitlines()
    assert record(server) == {"suspend": False, "record": None}


def test_a_gang_resumes_its_chief_with_its_servers(server: KubeServer) -> None:
    """The gang (here coscheduling's PodGroup) admits no pod before all exist: the chief is let run with the
    servers, their readiness is waited for after, and the record goes last."""
    suspended(server, False, "scheduling.gang.provider=coscheduling")
    resuming = tfchart(server, "resume", "mnist")
    server.wait_for(LIST_STS, 3)  # waiting for the servers ...
    assert record(server)["suspend"] is False  # ... with the chief's Job running, so the gang can form
    ready(server)
    code, out, err = finished(resuming)
    assert code == 0, err
    assert server.writes()[3:] == [("PATCH", f"{JOBS}/{CHIEF}", {"spec": {"suspend": False}}),
                                   ("PATCH", f"{JOBS}/{CHIEF}", {"metadata": {"annotations": {
                                       SUSPENDED_ANNOTATION: None}}})]  # fmt: skip
    assert "as one gang (scheduling.x-k8s.io/pod-group)" in out and record(server) == {"suspend": False,
                                                                                       "record": None}


def test_servers_that_do_not_come_up_keep_the_run_suspended_and_say_why(
    server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    suspended(server, evaluator=False)
    docs = kf.rendered(sets=("ps.replicas=1", "worker.replicas=2"), namespace=NS)
    worker = kf.manifest(docs, "StatefulSet", "worker")
    server.add(kf.pod(worker, index=1, phase="Pending", unschedulable="0/3 nodes are available: 3 Insufficient "
                      "nvidia.com/gpu."))  # fmt: skip
    code, _, err = in_process(server, capsys, "resume", "mnist", "--timeout", "1s")
    assert code == 124
    assert "error: release mnist's run is not running after 1s (still pending):" in err
    assert [line for line in err.splitlines() if line.startswith("  ")][:3] == [
        f"  StatefulSet {PREFIX}-ps to be Ready (0/1 Ready)", f"  StatefulSet {PREFIX}-worker to be Ready (0/2 Ready)",
        f"  pod {PREFIX}-worker-1: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."]
    assert record(server)["suspend"] is True


@pytest.mark.parametrize("case", ["ended", "missing", "running", "by hand", "job gone"])
def test_refusals_are_one_line_with_the_fix(server: KubeServer, capsys: pytest.CaptureFixture[str], case: str) -> None:
    if case == "ended":
        chief = kf.manifest(kf.rendered(namespace=NS), "Job", "chief")
        server.add(kf.job(chief, "complete"))
        for verb in ("suspend", "resume"):
            code, _, err = in_process(server, capsys, verb, "mnist")
            assert code == 1 and f"error: release mnist's run has ended (Succeeded): there is nothing to {verb}" in err
            assert "tfchart stop mnist -n team-a" in err
    elif case == "missing":
        code, _, err = in_process(server, capsys, "suspend", "nosuch")
        assert code == 1 and "no release nosuch in namespace team-a" in err and "helm list -n team-a" in err
    elif case == "running":
        training(server)
        code, _, err = in_process(server, capsys, "resume", "mnist")
        assert code == 1 and f"error: release mnist's run is not suspended: its Job {CHIEF} runs" in err
        assert "suspend it with `tfchart suspend mnist -n team-a`" in err
    elif case == "job gone":  # deleted by hand, or by its TTL: the servers are left
        training(server)
        server.delete("Job", NS, CHIEF)
        code, _, err = in_process(server, capsys, "suspend", "mnist")
        assert code == 1 and "error: release mnist's run cannot be suspended: its run's Job is gone" in err
        assert "start a new run: `tfchart upgrade mnist -n team-a ...` creates it again" in err
    else:
        training(server)
        server.update("Job", NS, CHIEF, {"spec": {"suspend": True}})
        code, _, err = in_process(server, capsys, "resume", "mnist")
        assert code == 1 and f"its Job {CHIEF} is suspended, but not by `tfchart suspend`" in err
        assert f"kubectl -n team-a patch job {CHIEF} --type merge" in err
    assert "Traceback" not in err and server.writes() == []


def test_status_list_and_wait_know_a_suspended_run(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    since = suspended(server, evaluator=False)
    found = status.collect(server.api(), "mnist", NS, now=kf.NOW)
    assert (found["training"]["state"], found["chief"]["state"]) == ("Suspended", "Suspended")
    assert found["chief"]["suspended_since"] == since
    assert found["training"]["detail"].startswith(f"suspended since {since}: its pods are released")
    assert found["warnings"] == []
    [run] = releases.list_runs(server.api(), NS, now=kf.NOW)
    assert (run["state"], run["suspended_since"]) == ("Suspended", since)
    code, out, err = in_process(server, capsys, "status", "mnist")
    assert code == 0 and "Suspended" in out and f"`tfchart resume mnist -n {NS}` continues" in out, err
    code, out, err = in_process(server, capsys, "wait", "mnist", "--timeout", "3s")
    assert code == 124 and out == ""
    assert err.count("note: release mnist's run is suspended") == 1, err
    assert "has not ended after 3s: it is suspended" in err
    # ps/workers back up by hand while the Job is suspended: status says the suspension is not complete
    server.update("StatefulSet", NS, f"{PREFIX}-ps", {"spec": {"replicas": 1}})
    docs = kf.rendered(sets=("ps.replicas=1", "worker.replicas=2"), namespace=NS)
    server.add(kf.pod(kf.manifest(docs, "StatefulSet", "ps"), index=0))
    [warning] = status.collect(server.api(), "mnist", NS, now=kf.NOW)["warnings"]
    assert warning.startswith("the run is suspended but 1 pod(s) still run")
    assert warning.endswith(f"`tfchart suspend mnist -n {NS}` finishes it")


def test_upgrading_a_suspended_release_keeps_its_pods_released(server: KubeServer) -> None:
    """helm's `lookup` finds the suspension record with this run's run-spec: the StatefulSets keep their live 0
    replicas (a helm upgrade of TensorBoard does not start the servers of a suspended run); the supervisor stays."""
    sets = ["ps.replicas=1", "worker.replicas=2", "evaluator.enabled=true"]
    suspended(server)
    owned = {"meta.helm.sh/release-name": "mnist", "meta.helm.sh/release-namespace": NS}  # as helm install left them
    for kind, name in [("StatefulSet", f"{PREFIX}-ps"), ("StatefulSet", f"{PREFIX}-worker"), ("Job", CHIEF),
                       ("Job", f"{PREFIX}-evaluator")]:  # fmt: skip
        server.update(kind, NS, name, {"metadata": {"annotations": owned}})
    extra = ["--dry-run=server", "--kube-apiserver", server.url, "--kube-token", "test", "--disable-openapi-validation"]
    docs = render(sets=[*sets, "tensorboard.podLabels.team=vision"], namespace=NS, extra=extra)
    workloads = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment")]
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in workloads}
    assert replicas == {f"{PREFIX}-ps": 0, f"{PREFIX}-worker": 0, f"{PREFIX}-supervisor": 1,
                        f"{PREFIX}-tensorboard": 1, f"{PREFIX}-serving": 1}  # fmt: skip
    server.update("Job", NS, CHIEF, {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}})  # resumed
    resumed = render(sets=sets, namespace=NS, extra=extra)
    assert {d["metadata"]["name"]: d["spec"]["replicas"] for d in resumed if d["kind"] == "StatefulSet"} == {
        f"{PREFIX}-ps": 1, f"{PREFIX}-worker": 2}


def test_a_supervisor_gone_while_tfchart_waits_for_it_leaves_the_steps_to_tfchart(server: KubeServer) -> None:
    """Asked while the supervisor was Ready, the suspend waits for it; once its Deployment has no Ready replica
    (crashed, evicted), tfchart carries the rest of the plan out itself."""
    docs = training(server, evaluator=False)
    server.add({**docs[f"{PREFIX}-supervisor"], "status": {"replicas": 1, "readyReplicas": 1}})
    server.delete("Pod", NS, f"{CHIEF}-x7k2p")

    def supervisor_crashes(seconds: float) -> None:
        server.update("Deployment", NS, f"{PREFIX}-supervisor", {"status": {"readyReplicas": 0}})

    outcome = suspend.suspend(server.api(), "mnist", NS, 30, sleep=supervisor_crashes)
    assert outcome.actions[0] == f"asked the run supervisor ({PREFIX}-supervisor) for suspended on Job {CHIEF}; it " \
                                 "carries it out"  # fmt: skip
    assert [path for _, path, _ in server.writes()] == [f"{JOBS}/{CHIEF}", f"{JOBS}/{CHIEF}",
                                                        f"{STS}/{PREFIX}-ps/scale", f"{STS}/{PREFIX}-worker/scale"]
    assert record(server)["suspend"] is True and replicas(server, "ps") == replicas(server, "worker") == 0


def test_a_step_something_keeps_undoing_backs_off_within_the_timeout_and_says_what_is_undone(
    server: KubeServer,
) -> None:
    """tfchart acting itself, a GitOps self-heal scaling ps back after each scale: each repeat waits twice as long
    (1, 2, 4, 8 s), the --timeout holds, and the pending line says the step is undone each time."""
    training(server, evaluator=False)
    server.delete("Pod", NS, f"{CHIEF}-x7k2p")
    api, now, sleeps, patch = server.api(), [0.0], list[float](), server.api().patch

    def self_heal(kind: str, name: str, namespace: str, body: dict[str, Any], subresource: str = "") -> None:
        patch(kind, name, namespace, body, subresource)
        if name == f"{PREFIX}-ps" and subresource == "scale":
            assert len(server.writes()) < 20, "a write loop"
            server.update("StatefulSet", NS, name, {"spec": {"replicas": 1}})

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    api.patch = self_heal  # type: ignore[method-assign]
    with pytest.raises(suspend.TimedOut) as timed_out:
        suspend.suspend(api, "mnist", NS, 20, now=lambda: now[0], sleep=sleep)
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 5.0]  # the last one cut short by the timeout
    assert f"not done yet: scaled StatefulSet {PREFIX}-ps from 1 to 0 replicas (carried out 5 times and undone " \
           "each time" in str(timed_out.value)  # fmt: skip


@pytest.mark.parametrize("force", [False, True])
def test_a_chief_pod_stuck_terminating_is_named_and_with_force_counted_as_gone(
    server: KubeServer, capsys: pytest.CaptureFixture[str], force: bool
) -> None:
    training(server, evaluator=False)
    server.update("Pod", NS, f"{CHIEF}-x7k2p", {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                                                             "deletionGracePeriodSeconds": 30}})  # fmt: skip
    code, out, err = in_process(server, capsys, "suspend", "mnist", "--timeout", "0s", *(["--force"] * force))
    scaled = [path for _, path, _ in server.writes() if path.endswith("/scale")]
    assert (code, scaled) == ((0, [f"{STS}/{PREFIX}-ps/scale", f"{STS}/{PREFIX}-worker/scale"]) if force else (124, []))
    stuck = "stuck terminating since 2026-01-01T00:00:00Z, past its grace period, on node gpu-node-1"
    assert (f"  counted pod {CHIEF}-x7k2p as gone: {stuck}" in out if force else
            f"pod {CHIEF}-x7k2p to stop (it saves a checkpoint at its step boundary; {stuck}" in err), (out, err)
