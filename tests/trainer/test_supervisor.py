"""The run supervisor frees the ps/worker pods on every ending of the chief, whatever runs in it.

Two levels, both against tests/kubeapi.py (a loopback API that keeps objects and records every
request; a real API server cannot run here):

* the rendered release: the chart's objects are loaded into the API, the rendered chief Job runs
  under a Job controller (its container, prelude and env unchanged, as local processes), and the
  rendered supervisor Deployment's container runs as `python -m trainer.supervisor` with its
  rendered environment. Each ending (success, last retry failed, deadline, exit code 2, chief
  deleted) of the project's trainer and of a bring-your-own shell chief must end with exactly the
  requests the policy asks for, and nothing else;
* `Supervisor` in-process, for the start timeout and restarts.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, named, render
from tests.kubeapi import JobController, KubeServer, kube_server
from tests.trainer.conftest import service_account_dir
from tfchart.cluster.upgrade import immutable_changes
from tfchart.local.processes import LocalCluster, localise_cluster, pods_from_manifests, python_bin_dir
from tfdcontract import ENDED_AT_ANNOTATION as ENDED_AT
from trainer.cleanup import KubeTarget
from trainer.supervisor import Settings, Supervisor, main, serve_health

NAMESPACE = "ml-team"
PREFIX = "mnist-tf-distributed"
E2E_VALUES = REPO / "tests" / "fixtures" / "e2e-values.yaml"
STS = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
SELF_SCALE = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{PREFIX}-supervisor/scale"


@dataclass
class Run:
    """One release run to its ending: the API's objects and requests, the Job controller, the logs."""

    server: KubeServer
    docs: list[dict[str, Any]]
    controller: JobController
    supervisor_log: str
    pod_lines: list[str]
    sets: list[str]

    @property
    def run_spec(self) -> str:
        sts = named(self.docs, "StatefulSet", f"{PREFIX}-worker")
        return str(sts["metadata"]["annotations"]["tf-distributed.io/run-spec"])

    def writes(self) -> list[tuple[str, str, Any]]:
        """The requests that changed something, with the ended-at time (a clock reading) blanked."""
        out = []
        for method, path, body in self.server.writes():
            annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
            if ENDED_AT in annotations:
                assert time.time() - 120 < time_of(annotations[ENDED_AT]) <= time.time() + 1
                annotations[ENDED_AT] = "<now>"
            out.append((method, path, body))
        return out

    def replicas(self, role: str) -> int:
        sts = self.server.get("StatefulSet", NAMESPACE, f"{PREFIX}-{role}")
        assert sts is not None
        return int(sts["spec"]["replicas"])


def time_of(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def ended(run: Run, kind: str, reason: str) -> list[tuple[str, str, Any]]:
    """The annotation PATCH of each StatefulSet for this ending."""
    annotations = {
        "tf-distributed.io/ending": kind,
        "tf-distributed.io/end-reason": reason,
        ENDED_AT: "<now>",
        "tf-distributed.io/finished-run-spec": run.run_spec,
    }
    body = {"metadata": {"annotations": annotations}}
    return [("PATCH", f"{STS}/{PREFIX}-{role}", body) for role in ("ps", "worker")]


def scaled(role: str) -> tuple[str, str, Any]:
    return ("PATCH", f"{STS}/{PREFIX}-{role}/scale", {"spec": {"replicas": 0}})


SELF_DOWN = ("PATCH", SELF_SCALE, {"spec": {"replicas": 0}})


def scale_down(run: Run, kind: str, reason: str) -> list[tuple[str, str, Any]]:
    ps, worker = ended(run, kind, reason)
    return [ps, scaled("ps"), worker, scaled("worker"), SELF_DOWN]


def container_env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            env[item["name"]] = NAMESPACE
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def health(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def helm_owned(doc: dict[str, Any]) -> dict[str, Any]:
    """The object as `helm install` leaves it: annotated with its release."""
    doc = json.loads(json.dumps(doc))
    doc["metadata"].setdefault("annotations", {}).update(
        {"meta.helm.sh/release-name": "mnist", "meta.helm.sh/release-namespace": NAMESPACE})
    return doc


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Any]:
    """Runs a rendered release with `sets` until its supervisor scaled itself down; yields a Run."""
    stack: list[tuple[KubeServer, LocalCluster, subprocess.Popen[bytes] | None]] = []

    def run(sets: list[str], start_servers: bool = False, during: Any = None, timeout: float = 150) -> Run:
        server = KubeServer()
        sa = service_account_dir(tmp_path / "sa", NAMESPACE)
        sets = [f"storage.mountPath={tmp_path / 'data'}", "tensorboard.enabled=false", "serving.enabled=false",
                "supervisor.pollSeconds=1", "supervisor.chiefMissingSeconds=5", "ps.replicas=1",
                "worker.replicas=1", "training.trainSteps=60", "training.checkpointEverySteps=30", *sets]
        docs = render(values=[E2E_VALUES], sets=sets, namespace=NAMESPACE)
        server.add(*[helm_owned(d) for d in docs if d["kind"] in ("StatefulSet", "Job", "Deployment")])
        lines: list[str] = []
        cluster = LocalCluster(lambda pod, line: lines.append(f"{pod.name}: {line}"), extra_path=[python_bin_dir()])
        stack.append((server, cluster, None))
        pods = pods_from_manifests(docs, NAMESPACE)
        localise_cluster(pods)
        if start_servers:
            cluster.start([p for p in pods if p.role in ("ps", "worker")])
        chief = next(p for p in pods if p.role == "chief")
        controller = JobController(server, named(docs, "Job", f"{PREFIX}-chief"), chief, cluster).start()
        deployment = named(docs, "Deployment", f"{PREFIX}-supervisor")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "-m", "trainer.supervisor"]
        port = free_port()
        assert container["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
        env = {**container_env(container), "TFD_KUBE_API": server.url, "TFD_SERVICEACCOUNT_DIR": str(sa),
               "PATH": f"{python_bin_dir()}:/usr/bin:/bin", "TFD_HEALTH_PORT": str(port)}
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "trainer.supervisor"], env=env, cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        stack[-1] = (server, cluster, supervisor)
        if during:
            during(server)
        deadline = time.monotonic() + timeout
        healthy = False
        while (server.get("Deployment", NAMESPACE, f"{PREFIX}-supervisor") or {})["spec"]["replicas"] != 0:
            assert supervisor.poll() is None, supervisor.communicate()[0].decode()
            assert time.monotonic() < deadline, "\n".join(lines[-30:])
            healthy = healthy or health(port) == 200
            time.sleep(0.2)
        assert healthy or health(port) == 200  # the rendered liveness probe's endpoint
        supervisor.send_signal(signal.SIGTERM)  # what Kubernetes does once the Deployment is at 0
        output = supervisor.communicate(timeout=15)[0].decode()
        assert supervisor.returncode == 0, output
        controller.join(30)
        return Run(server, docs, controller, output, lines, sets)

    yield run
    for server, cluster, supervisor in stack:
        if supervisor is not None and supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        cluster.stop(grace=5)
        server.close()


# -- the rendered release, each ending ----------------------------------------------------------


def test_project_trainer_success_scales_ps_and_workers_down(release: Any) -> None:
    run = release([], start_servers=True, timeout=240)
    job = run.server.get("Job", NAMESPACE, f"{PREFIX}-chief")
    assert job is not None and job["status"]["conditions"][0]["type"] == "Complete", run.pod_lines[-20:]
    assert run.writes() == scale_down(run, "succeeded", f"Succeeded: Job {PREFIX}-chief completed")
    assert run.replicas("ps") == 0 and run.replicas("worker") == 0
    assert "run ended (succeeded)" in run.supervisor_log


def test_project_trainer_configuration_error_fails_the_job_at_once(release: Any) -> None:
    run = release(["training.extraArgs={--learning-rate=-1}", "chief.backoffLimit=3"])
    assert run.controller.pods_started == 1  # exit code 2: podFailurePolicy FailJob, no retry
    reason = (f"Failed: PodFailurePolicy: Container chief for pod {NAMESPACE}/{PREFIX}-chief failed with exit code 2 "
              "matching FailJob rule")
    assert run.writes() == scale_down(run, "failed", reason)


def test_project_trainer_past_its_deadline_frees_everything(release: Any) -> None:
    # ps and worker never start, so the chief waits for them until the Job's deadline
    run = release(["chief.activeDeadlineSeconds=4"])
    reason = "Failed: DeadlineExceeded: Job was active longer than specified deadline"
    assert run.writes() == scale_down(run, "failed", reason)


def test_bring_your_own_chief_success(release: Any) -> None:
    run = release(["chief.command={sh,-c,exit 0}"])
    assert run.writes() == scale_down(run, "succeeded", f"Succeeded: Job {PREFIX}-chief completed")


def test_bring_your_own_chief_failing_its_last_retry(release: Any) -> None:
    run = release(["chief.command={sh,-c,exit 1}", "chief.backoffLimit=2"])
    assert run.controller.pods_started == 3
    reason = "Failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert run.writes() == scale_down(run, "failed", reason)


def test_keep_policy_annotates_and_leaves_the_pods(release: Any) -> None:
    run = release(["chief.command={sh,-c,exit 1}", "chief.backoffLimit=0", "training.cleanup.onFailure=keep"])
    reason = "Failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert run.writes() == [*ended(run, "failed", reason), SELF_DOWN]
    assert run.replicas("ps") == 1 and run.replicas("worker") == 1


def test_deleted_chief_frees_everything(release: Any) -> None:
    def delete_once_seen(server: KubeServer) -> None:
        deadline = time.monotonic() + 30
        while not any(r.path == f"{JOBS}/{PREFIX}-chief" for r in server.requests):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        server.delete("Job", NAMESPACE, f"{PREFIX}-chief")

    run = release(["chief.command={sh,-c,sleep 300}"], during=delete_once_seen)
    assert run.writes() == scale_down(run, "deleted", f"chief Job {PREFIX}-chief was deleted before it finished")


def test_evaluator_is_suspended_when_training_ends(release: Any) -> None:
    run = release(["chief.command={sh,-c,exit 0}", "evaluator.enabled=true"])
    ps, worker = ended(run, "succeeded", f"Succeeded: Job {PREFIX}-chief completed")
    assert run.writes() == [ps, scaled("ps"), worker, scaled("worker"),
                            ("PATCH", f"{JOBS}/{PREFIX}-evaluator", {"spec": {"suspend": True}}), SELF_DOWN]


# -- upgrading a finished release --------------------------------------------------------------


def render_against(run: Run, major: str, *more_sets: str) -> list[dict[str, Any]]:
    """What `helm upgrade` renders for this release: helm's `lookup` reads the live objects."""
    extra = ["--dry-run=server", "--kube-apiserver", run.server.url, "--kube-token", "test"]
    if major == "4":
        extra.append("--disable-openapi-validation")  # the loopback API serves no OpenAPI document
    return render(major, values=[E2E_VALUES], sets=[*run.sets, *more_sets], namespace=NAMESPACE, extra=extra)


def spec_replicas(docs: list[dict[str, Any]]) -> dict[str, int]:
    return {d["metadata"]["name"]: d["spec"]["replicas"] for d in docs if d["kind"] in ("StatefulSet", "Deployment")}


@pytest.mark.parametrize("major", ["3", "4"])
def test_upgrading_a_finished_release_does_not_start_its_pods_again(release: Any, major: str) -> None:
    run = release(["chief.command={sh,-c,exit 0}"])
    assert run.replicas("ps") == 0 and run.replicas("worker") == 0
    before = len(run.server.requests)
    # values that do not start a new run: TensorBoard, Serving, the labels of their pods and of the
    # (stopped) worker pods
    same_run = render_against(run, major, "tensorboard.enabled=true", "serving.enabled=true",
                              "tensorboard.podLabels.team=vision", "worker.podLabels.team=vision")
    assert spec_replicas(same_run) == {
        f"{PREFIX}-ps": 0, f"{PREFIX}-worker": 0, f"{PREFIX}-supervisor": 0,
        f"{PREFIX}-tensorboard": 1, f"{PREFIX}-serving": 1,
    }
    assert immutable_changes(run.docs, same_run) == []  # helm patches the finished chief Job as it is
    # labels of every pod (commonLabels) change the chief Job's pod template, which Kubernetes forbids:
    # `tfchart upgrade` says so before helm runs (docs/lifecycle.md: "A finished release")
    relabelled = render_against(run, major, "commonLabels.team=vision")
    assert spec_replicas(relabelled)[f"{PREFIX}-worker"] == 0
    assert [(c.kind, c.field) for c in immutable_changes(run.docs, relabelled)] == [
        ("Job", "spec.template.metadata.labels.team")]
    # a changed training spec is a new run: everything starts again, and the chief Job must be recreated
    new_run = render_against(run, major, "training.trainSteps=120")
    assert spec_replicas(new_run) == {f"{PREFIX}-ps": 1, f"{PREFIX}-worker": 1, f"{PREFIX}-supervisor": 1}
    assert [(c.kind, c.name) for c in immutable_changes(run.docs, new_run)] == [("Job", f"{PREFIX}-chief")]
    assert not any(r.writes for r in run.server.requests[before:])  # rendering only reads


# -- Supervisor in-process: restarts, start timeout, configuration --------------------------------


def supervisor(server: KubeServer, **settings: Any) -> Supervisor:
    base: dict[str, Any] = {"chief_job": "r-chief", "statefulsets": ("r-ps", "r-worker"), "deployment": "r-sup",
                            "poll_seconds": 0.1}
    return Supervisor(Settings(**{**base, **settings}), KubeTarget(server.url, NAMESPACE, "token", None),
                      sleep=lambda s: time.sleep(0.01))


def objects(**job_status: Any) -> list[dict[str, Any]]:
    meta = {"namespace": NAMESPACE, "annotations": {"tf-distributed.io/run-spec": "abc"}}
    return [
        {"kind": "Job", "metadata": {"name": "r-chief", "namespace": NAMESPACE}, "spec": {}, "status": job_status},
        {"kind": "StatefulSet", "metadata": {**meta, "name": "r-ps"}, "spec": {"replicas": 2}},
        {"kind": "StatefulSet", "metadata": {**meta, "name": "r-worker"}, "spec": {"replicas": 3}},
        {"kind": "Deployment", "metadata": {"name": "r-sup", "namespace": NAMESPACE}, "spec": {"replicas": 1}},
    ]


def test_a_restarted_supervisor_of_an_ended_run_only_scales_itself_down() -> None:
    with kube_server() as server:
        server.add(*objects(conditions=[{"type": "Complete", "status": "True"}]))
        assert supervisor(server).run() == 0
        first = len(server.writes())
        assert first == 5
        server.update("Deployment", NAMESPACE, "r-sup", {"spec": {"replicas": 1}})
        server.update("StatefulSet", NAMESPACE, "r-ps", {"spec": {"replicas": 2}})  # someone scaled it up by hand
        assert supervisor(server, on_success="scaleDown").run() == 0
        assert server.writes()[first:] == [("PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/r-sup/scale",
                                            {"spec": {"replicas": 0}})]


def test_a_new_run_spec_is_a_new_run() -> None:
    with kube_server() as server:
        server.add(*objects(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]))
        for name in ("r-ps", "r-worker"):  # the previous run ended; helm upgrade set a new run-spec
            server.update("StatefulSet", NAMESPACE, name, {"metadata": {"annotations": {
                "tf-distributed.io/ending": "succeeded", "tf-distributed.io/finished-run-spec": "old"}}})
        supervisor(server).run()
        patched = [body or {} for method, path, body in server.writes() if path.endswith("/r-ps")]
        assert patched[0]["metadata"]["annotations"]["tf-distributed.io/ending"] == "failed"
        assert patched[0]["metadata"]["annotations"]["tf-distributed.io/finished-run-spec"] == "abc"


def pod(name: str, phase: str, **status: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"tf": "yes"}},
            "spec": {}, "status": {"phase": phase, **status}}


def test_start_timeout_names_the_pod_and_its_reason_and_ends_the_chief() -> None:
    with kube_server() as server:
        server.add(*objects())
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}})
        pulling = {"containerStatuses": [{"name": "worker", "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": 'Back-off pulling image "registry.invalid/trainer:1"'}}}]}
        server.add(pod("r-ps-0", "Running"), pod("r-worker-0", "Pending", **pulling), pod("r-chief-abc", "Pending"))
        sup = supervisor(server, start_timeout_seconds=600, pod_selector="tf=yes", expected_pods=3)
        assert sup.run() == 0
        reason = ('start timeout (600 s): pod r-worker-0 is not running: ImagePullBackOff: Back-off pulling image '
                  '"registry.invalid/trainer:1" (and 1 more pod not running)')
        job = server.get("Job", NAMESPACE, "r-chief")
        assert job is not None and job["spec"]["activeDeadlineSeconds"] == 1
        assert job["metadata"]["annotations"]["tf-distributed.io/end-reason"] == reason
        ps = server.get("StatefulSet", NAMESPACE, "r-ps")
        assert ps is not None and ps["metadata"]["annotations"]["tf-distributed.io/ending"] == "start-timeout"
        assert ps["spec"]["replicas"] == 0


def test_start_timeout_reasons_come_from_the_pod_then_its_events() -> None:
    with kube_server() as server:
        server.add(*objects())
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}})
        unschedulable = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}
        server.add(pod("r-ps-0", "Pending", **unschedulable))
        sup = supervisor(server, start_timeout_seconds=60, pod_selector="tf=yes", expected_pods=2)
        sup.run()
        job = server.get("Job", NAMESPACE, "r-chief")
        assert job is not None
        assert job["metadata"]["annotations"]["tf-distributed.io/end-reason"] == (
            "start timeout (60 s): pod r-ps-0 is not running: Unschedulable: 0/4 nodes are available: "
            "4 Insufficient nvidia.com/gpu.")
    with kube_server() as server:
        server.add(*objects())
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}})
        server.add(pod("r-ps-0", "Pending"), {
            "kind": "Event", "metadata": {"name": "e1", "namespace": NAMESPACE}, "type": "Warning",
            "reason": "FailedMount", "message": 'MountVolume.SetUp failed for volume "data"',
            "involvedObject": {"kind": "Pod", "name": "r-ps-0"}, "lastTimestamp": "2020-01-01T00:01:00Z"})
        supervisor(server, start_timeout_seconds=60, pod_selector="tf=yes", expected_pods=1).run()
        job = server.get("Job", NAMESPACE, "r-chief")
        assert job is not None
        assert job["metadata"]["annotations"]["tf-distributed.io/end-reason"] == (
            'start timeout (60 s): pod r-ps-0 is not running: FailedMount: MountVolume.SetUp failed for volume "data"')


def test_running_pods_switch_the_start_timeout_off() -> None:
    with kube_server() as server:
        server.add(*objects())
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}})
        server.add(pod("r-ps-0", "Running"), pod("r-chief-x", "Running"))
        sup = supervisor(server, start_timeout_seconds=60, pod_selector="tf=yes", expected_pods=2)
        assert sup.observe() is None and sup.pods_all_up
        server.update("Pod", NAMESPACE, "r-ps-0", {"status": {"phase": "Pending"}})  # restarted later: no timeout
        assert sup.observe() is None and server.writes() == []


def test_configuration_errors_exit_2(caplog: pytest.LogCaptureFixture) -> None:
    assert main({}) == 2
    assert main({"TFD_CHIEF_JOB": "c", "TFD_ON_FAILURE": "delete"}) == 2
    assert main({"TFD_CHIEF_JOB": "c", "TFD_START_TIMEOUT_SECONDS": "60"}) == 2
    assert main({"TFD_CHIEF_JOB": "c"}) == 2  # no API server, no token: not in a cluster
    out = caplog.text
    assert "TFD_CHIEF_JOB (the chief Job's name) is not set" in out
    assert "TFD_ON_FAILURE='delete': expected one of scaleDown, keep" in out
    assert "no Kubernetes API" in out and "Traceback" not in out


def test_the_api_being_away_is_retried(tmp_path: Path) -> None:
    with kube_server() as server:
        server.add(*objects(conditions=[{"type": "Complete", "status": "True"}]))
        url = server.url
    # nothing listens there any more: every poll fails, the supervisor keeps trying until stopped
    sup = Supervisor(Settings("r-chief", ("r-ps",), poll_seconds=0.01), KubeTarget(url, NAMESPACE, None, None))
    calls = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        sup.stopping = len(calls) >= 3

    sup.sleep = sleep
    assert sup.run() == 0 and len(calls) == 3


def test_health_answers_503_once_the_loop_is_stuck() -> None:
    sup = Supervisor(Settings("r-chief", ("r-ps",), poll_seconds=10), KubeTarget("http://127.0.0.1:9", NAMESPACE,
                                                                                  None, None))
    port = free_port()
    server = serve_health(sup, port)
    try:
        assert health(port) == 200
        sup.heartbeat -= 61  # 3 polls of 10 s, at least 60 s: stuck
        assert health(port) == 503
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=2)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_rendered_supervisor_env_is_what_settings_read() -> None:
    docs = render(sets=["scheduling.startTimeoutSeconds=900", "training.cleanup.onSuccess=keep",
                        "evaluator.enabled=true", "worker.replicas=3"], namespace=NAMESPACE)
    container = named(docs, "Deployment", f"{PREFIX}-supervisor")["spec"]["template"]["spec"]["containers"][0]
    settings = Settings.from_env(container_env(container))
    assert settings == Settings(
        chief_job=f"{PREFIX}-chief", statefulsets=(f"{PREFIX}-ps", f"{PREFIX}-worker"),
        evaluator_job=f"{PREFIX}-evaluator", deployment=f"{PREFIX}-supervisor", on_success="keep",
        on_failure="scaleDown", start_timeout_seconds=900.0,
        pod_selector=("app.kubernetes.io/name=tf-distributed,app.kubernetes.io/instance=mnist,"
                      "app.kubernetes.io/component in (ps,worker,chief,evaluator)"),
        expected_pods=6, poll_seconds=10.0, chief_missing_seconds=120.0,
    )
