"""Where the run supervisor runs, it is the only actor on its run (issue 35, docs/lifecycle.md).

`tfchart suspend`, `resume` and `stop` (the real CLI, in this process) write the wanted state on the run's Job
(`tf-distributed.io/wanted`) and wait; the rendered supervisor, run as `python -m trainer.supervisor` with its
rendered environment against the loopback API (tests/kubeapi.py), with its rendered Role enforced (its token is its
ServiceAccount's, tfchart's the admin's), hears it through its watch and carries tfdcontract.lifecycle's plan out.
The API's request log tells who wrote what: only the supervisor scaled ps/worker and wrote the Job's spec.suspend.
No TensorFlow: the pods are objects that `Controllers` makes and deletes as Kubernetes' Job, StatefulSet and
Deployment controllers would, after every write.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import named, render
from tests.kubeapi import KubeServer, Request
from tests.kubeapi_rbac import service_account
from tests.trainer.conftest import service_account_dir
from tests.trainer.test_supervisor import (
    E2E_VALUES,
    JOBS,
    NAMESPACE,
    PREFIX,
    STS,
    health,
    job_annotations,
    killed_at_each_write,
    objects,
    start_supervisor,
    supervisor,
)
from tfdcontract import PROGRESS_ANNOTATION, SUSPENDED_ANNOTATION, parse_suspension
from tfdcontract.lifecycle import WANTED_ANNOTATION, WANTED_SEEN_ANNOTATION
from trainer.kube import ApiException, KubeTarget
from trainer.supervisor import Settings, Supervisor

SA_TOKEN = "test-token"  # the supervisor's (service_account_dir); tfchart's kubeconfig holds the admin's
CHIEF = f"{PREFIX}-chief"
SETS = ["ps.replicas=1", "worker.replicas=2", "tensorboard.enabled=false", "serving.enabled=false",
        "supervisor.pollSeconds=300"]  # every step must come from a watch event, never from the poll
SELF = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{PREFIX}-supervisor/scale"


class Controllers:
    """The Job, StatefulSet and Deployment controllers of this release, reconciled after every write: the chief
    Job's pod runs unless the Job is suspended (the Job controller deletes it then); each StatefulSet has a Ready pod
    per replica and reports them; the supervisor's Deployment reports a Ready replica while its process runs and
    the Deployment is not at 0."""

    def __init__(self, server: KubeServer, docs: list[dict[str, Any]], process: subprocess.Popen[bytes]) -> None:
        self.server, self.docs, self.process = server, docs, process
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True, name="controllers")

    def run(self) -> None:
        server = self.server
        while not self.stopping.is_set():
            with server.changed:
                revision = server.revision
                self.reconcile()
                if server.revision == revision:  # nothing more to do until the next write
                    server.changed.wait(0.5)

    def reconcile(self) -> None:
        server, pods = self.server, {key[2] for key in self.server.objects if key[0] == "pods"}
        job = server.get("Job", NAMESPACE, CHIEF)
        chief = kf.pod(named(self.docs, "Job", CHIEF), f"{CHIEF}-x7k2p", created=kf.now_text())
        held = job is not None and not job["spec"].get("suspend") and not (job.get("status") or {}).get("conditions")
        if held and chief["metadata"]["name"] not in pods:
            server.add(chief)
        elif not held and chief["metadata"]["name"] in pods:
            server.delete("Pod", NAMESPACE, chief["metadata"]["name"])
        for role in ("ps", "worker"):
            found = server.get("StatefulSet", NAMESPACE, f"{PREFIX}-{role}")
            assert found is not None
            replicas = int(found["spec"].get("replicas", 1))
            for index in range(max(replicas, 4)):
                name = f"{PREFIX}-{role}-{index}"
                if index < replicas and name not in pods:
                    server.add(kf.pod(found, index=index, created=kf.now_text()))
                elif index >= replicas and name in pods:
                    server.delete("Pod", NAMESPACE, name)
            status = {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                      "observedGeneration": found["metadata"].get("generation", 1)}  # fmt: skip
            if {k: (found.get("status") or {}).get(k) for k in status} != status:
                server.update("StatefulSet", NAMESPACE, f"{PREFIX}-{role}", {"status": status})
        deployment = server.get("Deployment", NAMESPACE, f"{PREFIX}-supervisor")
        assert deployment is not None
        ready = 1 if self.process.poll() is None and deployment["spec"].get("replicas", 1) else 0
        if (deployment.get("status") or {}).get("readyReplicas", 0) != ready:
            server.update("Deployment", NAMESPACE, f"{PREFIX}-supervisor", {"status": {
                "replicas": ready, "readyReplicas": ready or None, "availableReplicas": ready or None}})


@pytest.fixture
def release(tmp_path: Path) -> Iterator[tuple[KubeServer, list[dict[str, Any]], subprocess.Popen[bytes]]]:
    """The rendered release in the API (its supervisor's Role and binding enforced), the supervisor running and
    watching its Job, and the controllers."""
    docs = render(values=[E2E_VALUES], sets=SETS, namespace=NAMESPACE)
    server = KubeServer()
    kinds = ("StatefulSet", "Job", "Deployment", "ServiceAccount", "Role", "RoleBinding")
    server.add(*[d for d in docs if d["kind"] in kinds])
    server.authenticate({SA_TOKEN: service_account(NAMESPACE, f"{PREFIX}-supervisor")})
    process, port = start_supervisor(server, docs, service_account_dir(tmp_path / "sa", NAMESPACE))
    controllers = Controllers(server, docs, process)
    controllers.thread.start()
    try:
        with server.answered_one:  # watching the run's Job: from now on it hears the wanted state
            assert server.answered_one.wait_for(lambda: any(
                r.call.verb == "watch" and r.call.resource == "jobs" for r in server.requests), 120)
        assert health(port) == 200
        yield server, docs, process
    finally:
        controllers.stopping.set()
        if process.poll() is None:
            process.kill()
        process.wait()
        controllers.thread.join(10)
        server.close()


def tfchart(server: KubeServer, capsys: pytest.CaptureFixture[str], verb: str, *args: str) -> tuple[int, str, str]:
    """The real CLI, in this process: exit code, stdout, stderr."""
    return kf.tfchart_in_process(server, capsys, NAMESPACE, verb, "mnist", *args, "--timeout", "120s")


def by_supervisor(request: Request) -> bool:
    return request.headers.get("authorization") == f"Bearer {SA_TOKEN}"


def state_writes(server: KubeServer) -> list[tuple[str, str, Any]]:
    """Who changed what: (who, path, body), the supervisor's progress records left out."""
    return [("supervisor" if by_supervisor(r) else "tfchart", r.path, r.body) for r in server.requests if r.writes
            and set(((r.body or {}).get("metadata") or {}).get("annotations") or {}) != {PROGRESS_ANNOTATION}]


def replicas(server: KubeServer, kind: str, name: str) -> int:
    return int((server.get(kind, NAMESPACE, name) or {})["spec"]["replicas"])


def test_suspend_resume_and_stop_are_carried_out_by_the_supervisor_alone(
    release: tuple[KubeServer, list[dict[str, Any]], subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str],
) -> None:
    server, _, process = release
    code, out, err = tfchart(server, capsys, "suspend")
    assert code == 0, err
    assert "asked the run supervisor" in out, out
    job = server.get("Job", NAMESPACE, CHIEF) or {}
    record = parse_suspension(job["metadata"]["annotations"])
    assert job["spec"]["suspend"] is True and record is not None and record.replicas == {"ps": 1, "worker": 2}
    assert [key[2] for key in server.objects if key[0] == "pods"] == []  # every pod released
    assert replicas(server, "StatefulSet", f"{PREFIX}-ps") == replicas(server, "StatefulSet", f"{PREFIX}-worker") == 0

    code, _, err = tfchart(server, capsys, "resume")
    assert code == 0, err
    job = server.get("Job", NAMESPACE, CHIEF) or {}
    assert not job["spec"]["suspend"] and SUSPENDED_ANNOTATION not in job["metadata"]["annotations"]
    assert (replicas(server, "StatefulSet", f"{PREFIX}-ps"), replicas(server, "StatefulSet", f"{PREFIX}-worker")) == (
        1, 2)

    code, _, err = tfchart(server, capsys, "stop", "--end-run")
    assert code == 0, err
    annotations = (server.get("Job", NAMESPACE, CHIEF) or {})["metadata"]["annotations"]
    assert annotations["tf-distributed.io/ending"] == "stopped"
    assert replicas(server, "StatefulSet", f"{PREFIX}-worker") == replicas(server, "Deployment",
                                                                          f"{PREFIX}-supervisor") == 0
    process.send_signal(signal.SIGTERM)  # what Kubernetes does once its Deployment is at 0
    log = process.communicate(timeout=30)[0].decode()
    assert process.returncode == 0, log

    # tfchart wrote the wanted state, and nothing else; the supervisor everything that acted, in the plan's order,
    # each request one its Role allows
    assert [request for request in server.requests if by_supervisor(request) and request.status >= 400] == [], log
    job_path, scale = f"{JOBS}/{CHIEF}", f"{STS}/{PREFIX}-{{}}/scale"
    wanted = [("tfchart", job_path, {"metadata": {"annotations": {WANTED_ANNOTATION: state}}})
              for state in ("suspended", "running", "stopped")]
    writes = state_writes(server)
    assert [w for w in writes if w[0] == "tfchart"] == wanted
    shown = [(path, sorted(body.get("spec") or {}), sorted((body.get("metadata") or {}).get("annotations") or {}))
             for who, path, body in writes if who == "supervisor"]
    ending = ["tf-distributed.io/end-reason", "tf-distributed.io/ended-at", "tf-distributed.io/ending"]
    seen = (job_path, [], [WANTED_SEEN_ANNOTATION])  # taken up, said first: tfchart waits for it, knowing it acts
    assert shown == [
        seen, (job_path, ["suspend"], [SUSPENDED_ANNOTATION]),  # the chief's pod stops (it saves its checkpoint) first
        (scale.format("ps"), ["replicas"], []), (scale.format("worker"), ["replicas"], []),
        seen, (scale.format("ps"), ["replicas"], []), (scale.format("worker"), ["replicas"], []),  # Ready first
        (job_path, ["suspend"], [SUSPENDED_ANNOTATION]),
        seen, (job_path, ["suspend"], []), (scale.format("ps"), ["replicas"], []),
        (scale.format("worker"), ["replicas"], []), (job_path, [], ending), (SELF, ["replicas"], []),
    ], log
    assert "suspended asked for: reached" in log and "stop asked for on chief Job" in log


JOBSET_NS = "ml-jobs"


def test_under_a_jobset_with_kueue_the_supervisor_alone_suspends_resumes_and_stops_through_its_workload(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """workload.kind=jobset with Kueue: the supervisor (in this process, watching, its Role enforced) deactivates and
    activates Kueue's Workload (Kueue, in kubeapi.JobSetController, suspends and resumes the JobSet, which deletes and
    makes its pods) and ends a stopped run through its chief Job's deadline; tfchart (in this process too) only asks."""
    sets = ("workload.kind=jobset", "ps.replicas=1", "worker.replicas=2", "scheduling.kueue.queueName=team-q",
            "supervisor.pollSeconds=300")  # fmt: skip
    docs = kf.rendered(sets=sets, namespace=JOBSET_NS)
    doc = named(docs, "JobSet", PREFIX)
    with kf.kube_server() as server:
        server.add(*kf.crds(*kf.JOBSET_CRDS), *kf.crds(*kf.WORKLOAD_CRDS), kf.jobset(doc, "running"),
                   kf.deployment(named(docs, "Deployment", f"{PREFIX}-supervisor")),
                   *[d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")])  # fmt: skip
        for child in kf.jobset_jobs(doc):
            server.add(kf.job(child), *kf.jobset_pods(kf.job(child)))
        jobset = server.get("JobSet", JOBSET_NS, PREFIX) or {}
        owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": PREFIX,
                 "uid": jobset["metadata"]["uid"], "controller": True}  # fmt: skip
        workload = f"jobset-{PREFIX}-3f1c2"
        server.add({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
            "name": workload, "namespace": JOBSET_NS, "ownerReferences": [owner]},
            "spec": {"queueName": "team-q", "active": True, "podSets": []}})  # fmt: skip
        server.authenticate({SA_TOKEN: service_account(JOBSET_NS, f"{PREFIX}-supervisor")})
        container = named(docs, "Deployment", f"{PREFIX}-supervisor")["spec"]["template"]["spec"]["containers"][0]
        env = {item["name"]: item.get("value", JOBSET_NS) for item in container["env"]}
        supervisor = Supervisor(Settings.from_env(env), KubeTarget(server.url, JOBSET_NS, SA_TOKEN, None))
        outcome: list[int] = []
        thread = threading.Thread(target=lambda: outcome.append(supervisor.run()), daemon=True)
        with kf.JobSetController(server, jobset):
            thread.start()
            with server.answered_one:
                assert server.answered_one.wait_for(lambda: any(
                    r.call.verb == "watch" and r.call.resource == "jobsets" for r in server.requests), 30)
            for verb in ("suspend", "resume"):
                code, _, err = kf.tfchart_in_process(server, capsys, JOBSET_NS, verb, "mnist", "--timeout", "60s")
                assert code == 0, err
                pods = [key for key in server.objects if key[0] == "pods"]
                assert (pods == []) == (verb == "suspend"), pods
            code, _, err = kf.tfchart_in_process(server, capsys, JOBSET_NS, "stop", "mnist", "--end-run",
                                                 "--timeout", "60s")  # fmt: skip
            assert code == 0, err
            thread.join(30)
        assert outcome == [0]
    assert [request for request in server.requests if by_supervisor(request) and request.status >= 400] == []
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{JOBSET_NS}/jobsets/{PREFIX}"
    workload_path = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{JOBSET_NS}/workloads/{workload}"
    writes = state_writes(server)
    assert [w for w in writes if w[0] == "tfchart"] == [
        ("tfchart", path, {"metadata": {"annotations": {WANTED_ANNOTATION: state}}})
        for state in ("suspended", "running", "stopped")]
    ending = ["tf-distributed.io/end-reason", "tf-distributed.io/ended-at", "tf-distributed.io/ending"]
    seen = (path, None, [WANTED_SEEN_ANNOTATION])
    assert [(path, body.get("spec"), sorted((body.get("metadata") or {}).get("annotations") or {}))
            for who, path, body in writes if who == "supervisor"] == [
        seen, (path, None, [SUSPENDED_ANNOTATION]), (workload_path, {"active": False}, []),  # the record first
        seen, (workload_path, {"active": True}, []), (path, None, [SUSPENDED_ANNOTATION]),  # the record last
        seen, (f"/apis/batch/v1/namespaces/{JOBSET_NS}/jobs/{PREFIX}-chief-0", {"activeDeadlineSeconds": 1}, []),
        (path, None, ending), (f"/apis/apps/v1/namespaces/{JOBSET_NS}/deployments/{PREFIX}-supervisor/scale",
                               {"replicas": 0}, [])]  # fmt: skip


# -- a supervisor killed at any write of a step, restarted, finishes it as the uninterrupted one ------------------


def looks_until_reached(sup: Supervisor, server: KubeServer) -> None:
    """The loop's looks (observe, then the plan's next step) until the wanted state is reached; between two, the
    StatefulSet controller reports every replica Ready (no pod here: none to wait for on a suspension)."""
    for _ in range(10):
        assert sup.observe() is None and sup.seen is not None
        sup.pursue(sup.seen)
        if not sup.waiting:
            return
        for name in ("r-ps", "r-worker"):
            count = (server.get("StatefulSet", NAMESPACE, name) or {})["spec"]["replicas"]
            server.update("StatefulSet", NAMESPACE, name, {"status": {"readyReplicas": count, "replicas": count}})
    raise AssertionError("not reached in 10 looks")


def suspension_state(server: KubeServer) -> tuple[Any, ...]:
    job = server.get("Job", NAMESPACE, "r-chief") or {}
    record = parse_suspension(job["metadata"].get("annotations"))
    return (job["spec"].get("suspend"), record.replicas if record else None,
            *[(server.get("StatefulSet", NAMESPACE, n) or {})["spec"]["replicas"] for n in ("r-ps", "r-worker")])


@pytest.mark.parametrize("wanted", ["suspended", "running"])
def test_a_supervisor_killed_at_any_write_of_a_suspension_or_resume_finishes_it_when_restarted(wanted: str) -> None:
    def cluster(server: KubeServer) -> None:
        server.reset()
        server.add(*objects())
        if wanted == "running":  # suspended by an uninterrupted supervisor first
            server.update("Job", NAMESPACE, "r-chief", {"metadata": {"annotations": {WANTED_ANNOTATION: "suspended"}}})
            looks_until_reached(supervisor(server), server)
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"annotations": {WANTED_ANNOTATION: wanted}}})

    with kf.kube_server() as server:
        expected = killed_at_each_write(server, lambda: cluster(server), lambda: supervisor(server),
                                        lambda sup: looks_until_reached(sup, server), lambda: suspension_state(server))
        assert expected == ((True, {"ps": 2, "worker": 3}, 0, 0) if wanted == "suspended" else (False, None, 2, 3))


def test_a_step_something_keeps_undoing_backs_off_and_one_its_role_refuses_is_said_on_the_run() -> None:
    """A GitOps self-heal scaling ps back after each scale: the supervisor, woken by every change, carries the step
    out again only after 1, 2, 4... s (Backoff), not in a write loop; a write its Role refuses (403) is said on the
    run's object (WANTED_SEEN_ANNOTATION), for tfchart to tell the user at once."""
    with kf.kube_server() as server:
        server.add(*objects())
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"annotations": {WANTED_ANNOTATION: "suspended"}}})
        now, sup = [1000.0], supervisor(server)
        sup.clock, api = (lambda: now[0]), sup.api

        def self_heal(method: str, path: str, body: Any = None) -> Any:
            answer = api(method, path, body)
            if method == "PATCH" and path.endswith("/r-ps/scale"):
                server.update("StatefulSet", NAMESPACE, "r-ps", {"spec": {"replicas": 2}})
            return answer

        def looks(count: int) -> int:
            for _ in range(count):  # every write wakes it at once: look after look
                assert sup.observe() is None and sup.seen is not None
                sup.pursue(sup.seen)
            return len([r for r in server.requests if r.writes and r.path.endswith("/r-ps/scale")])

        sup.api = self_heal  # type: ignore[method-assign]
        assert looks(12) == 2 and sup.due == 1001.0  # the record, all three freed, ps again: then it waits
        now[0] += 1
        assert looks(12) == 3 and sup.due == 1003.0
        assert job_annotations(server)[WANTED_SEEN_ANNOTATION] == "suspended"
        server.fail("patch", "statefulsets/scale", 403, "forbidden")
        now[0] += 2
        with pytest.raises(ApiException):
            looks(1)
        assert job_annotations(server)[WANTED_SEEN_ANNOTATION].startswith(
            "suspended: scaled StatefulSet r-ps from 2 to 0 replicas: HTTP 403")
