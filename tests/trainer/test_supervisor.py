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

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, named, render
from tests.kubeapi import PATH, JobController, KubeServer, Request, kube_server
from tests.kubeapi_rbac import allows, named_by_selector, request_verb
from tests.trainer.conftest import free_ports, service_account_dir
from tfchart.cluster.upgrade import UpgradePlan, delete_to_recreate
from tfchart.local.pods import LocalPod, rendered_pods
from tfchart.local.processes import LocalCluster, localise, python_bin_dir
from tfdcontract import COMPONENT_LABEL, JobProgress, parse_job_progress, parse_step_line
from tfdcontract import ENDED_AT_ANNOTATION as ENDED_AT
from tfdcontract import PROGRESS_ANNOTATION as PROGRESS
from tfdcontract import RECREATING_ANNOTATION as RECREATING
from tfdcontract.runstate import parse_time
from trainer.kube import KubeTarget
from trainer.supervisor import Settings, Supervisor, main, now_text, serve_health

NAMESPACE = "ml-team"
PREFIX = "mnist-tf-distributed"
E2E_VALUES = REPO / "tests" / "fixtures" / "e2e-values.yaml"
STS = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
SELF_SCALE = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{PREFIX}-supervisor/scale"


def recorded(kind: str, reason: str) -> tuple[str, str, Any]:
    """The run record: the annotation PATCH of the chief Job for this ending."""
    annotations = {"tf-distributed.io/ending": kind, "tf-distributed.io/end-reason": reason, ENDED_AT: "<now>"}
    return ("PATCH", f"{JOBS}/{PREFIX}-chief", {"metadata": {"annotations": annotations}})


def scaled(role: str) -> tuple[str, str, Any]:
    return ("PATCH", f"{STS}/{PREFIX}-{role}/scale", {"spec": {"replicas": 0}})


SELF_DOWN = ("PATCH", SELF_SCALE, {"spec": {"replicas": 0}})


def scale_down(kind: str, reason: str) -> list[tuple[str, str, Any]]:
    return [scaled("ps"), scaled("worker"), recorded(kind, reason), SELF_DOWN]


def container_env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            env[item["name"]] = NAMESPACE
    return env


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


def start_supervisor(server: KubeServer, docs: list[dict[str, Any]], sa: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The rendered supervisor Deployment's container as a process against `server` (its ServiceAccount's files in
    `sa`), and the port of its health endpoint."""
    container = named(docs, "Deployment", f"{PREFIX}-supervisor")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "trainer.supervisor"]
    assert container["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
    [port] = free_ports(1)
    env = {**container_env(container), "TFD_KUBE_API": server.url, "TFD_SERVICEACCOUNT_DIR": str(sa),
           "PATH": f"{python_bin_dir()}:/usr/bin:/bin", "TFD_HEALTH_PORT": str(port)}
    process = subprocess.Popen([sys.executable, "-m", "trainer.supervisor"], env=env, cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    return process, port


@dataclass
class Release:
    """A rendered release in the loopback API: its TensorFlow pods as local processes, the chief Job
    under a Job controller, and the rendered supervisor Deployment's container as a process; once run to its
    ending, the API's requests, the Job controller and the logs tell how it went."""

    server: KubeServer
    cluster: LocalCluster
    sa: Path
    pods: list[LocalPod]
    sets: list[str]
    lines: list[str] = field(default_factory=list)
    hooks: list[Callable[[LocalPod, str], None]] = field(default_factory=list)  # called on each line of a pod
    supervisors: list[subprocess.Popen[bytes]] = field(default_factory=list)
    docs: list[dict[str, Any]] = field(default_factory=list)  # the release as rendered
    controller: JobController | None = None  # the chief Job's, once run to its ending
    supervisor_log: str = ""

    def heard(self, pod: LocalPod, line: str) -> None:
        self.lines.append(f"{pod.name}: {line}")
        for hook in self.hooks:
            hook(pod, line)

    @property
    def chief(self) -> LocalPod:
        return next(p for p in self.pods if p.role == "chief")

    def start_servers(self) -> None:
        self.cluster.start([p for p in self.pods if p.role in ("ps", "worker")])

    def start_chief(self, docs: list[dict[str, Any]]) -> JobController:
        controller = JobController(self.server, named(docs, "Job", f"{PREFIX}-chief"), self.chief, self.cluster)
        self.hooks.append(controller.log_line)  # what the chief prints is its Pod's log in the API
        return controller.start()

    def supervise(self, docs: list[dict[str, Any]], during: Any = None, timeout: float = 150) -> str:
        """Runs the rendered supervisor until it scaled its Deployment to 0; its log."""
        supervisor, port = start_supervisor(self.server, docs, self.sa)
        self.supervisors.append(supervisor)
        if during:
            during(self)
        deadline = time.monotonic() + timeout
        healthy = False
        while (self.server.get("Deployment", NAMESPACE, f"{PREFIX}-supervisor") or {})["spec"]["replicas"] != 0:
            assert supervisor.poll() is None, supervisor.communicate()[0].decode()
            assert time.monotonic() < deadline, "\n".join(self.lines[-30:])
            healthy = healthy or health(port) == 200
            time.sleep(0.2)
        assert healthy or health(port) == 200  # the rendered liveness probe's endpoint
        supervisor.send_signal(signal.SIGTERM)  # what Kubernetes does once the Deployment is at 0
        output = supervisor.communicate(timeout=60)[0].decode()  # its exit; the timeout only catches a hang
        assert supervisor.returncode == 0, output
        return output

    def writes(self) -> list[tuple[str, str, Any]]:
        """The requests that changed something, with the ended-at time (a clock reading) blanked; the
        progress records (the chief's log as it went, see progress_written) left out."""
        out = []
        for method, path, body in self.server.writes():
            annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
            if set(annotations) == {PROGRESS} and set(body) == {"metadata"}:
                continue
            if ENDED_AT in annotations:
                assert time.time() - 120 < parse_time(annotations[ENDED_AT]) <= time.time() + 1
                annotations[ENDED_AT] = "<now>"
            out.append((method, path, body))
        return out

    def replicas(self, role: str) -> int:
        sts = self.server.get("StatefulSet", NAMESPACE, f"{PREFIX}-{role}")
        assert sts is not None
        return int(sts["spec"]["replicas"])

    def progress_written(self) -> list[JobProgress | None]:
        """Each progress record the supervisor wrote on the chief Job, in order."""
        return [parse_job_progress(body["metadata"]["annotations"][PROGRESS]) for method, path, body
                in self.server.writes() if path == f"{JOBS}/{PREFIX}-chief"
                and PROGRESS in ((body or {}).get("metadata") or {}).get("annotations", {})]

    @classmethod
    def rendered(cls, sets: list[str], sa: Path) -> Release:
        """The release rendered with `sets` (the e2e values) into a new API: its StatefulSets, Jobs and Deployments
        as `helm install` leaves them, its TensorFlow pods localised, none started."""
        docs = render(values=[E2E_VALUES], sets=sets, namespace=NAMESPACE)
        server = KubeServer()
        server.add(*[helm_owned(d) for d in docs if d["kind"] in ("StatefulSet", "Job", "Deployment")])
        pods = rendered_pods(docs, NAMESPACE)
        localise(pods)
        stage = cls(server, LocalCluster(lambda pod, line: stage.heard(pod, line)), service_account_dir(sa, NAMESPACE),
                    pods, sets, docs=docs)
        return stage

    def apply(self, docs: list[dict[str, Any]], uid: str) -> None:
        """What `helm upgrade` writes for this test: the replicas of the rendered StatefulSets and
        Deployments, and the chief Job created again (a new object: a new uid) where it is gone."""
        for doc in docs:
            if doc["kind"] in ("StatefulSet", "Deployment"):
                self.server.update(doc["kind"], NAMESPACE, doc["metadata"]["name"],
                                   {"spec": {"replicas": doc["spec"]["replicas"]}})
        job = helm_owned(named(docs, "Job", f"{PREFIX}-chief"))
        assert self.server.get("Job", NAMESPACE, job["metadata"]["name"]) is None
        job["metadata"]["uid"] = uid
        self.server.add(job)


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Any]:
    """Runs a rendered release with `sets` until its supervisor scaled itself down; yields it, run."""
    releases: list[Release] = []

    def run(sets: list[str], start_servers: bool = False, during: Any = None, timeout: float = 150) -> Release:
        sets = [f"storage.mountPath={tmp_path / 'data'}", "tensorboard.enabled=false", "serving.enabled=false",
                "supervisor.pollSeconds=1", "supervisor.chiefMissingSeconds=5", "ps.replicas=1",
                "worker.replicas=1", "training.trainSteps=60", "training.checkpointEverySteps=30", *sets]
        stage = Release.rendered(sets, tmp_path / f"sa{len(releases)}")
        releases.append(stage)
        if start_servers:
            stage.start_servers()
        stage.controller = stage.start_chief(stage.docs)
        stage.supervisor_log = stage.supervise(stage.docs, during, timeout)
        stage.controller.join(30)
        return stage

    yield run
    for stage in releases:
        for supervisor in stage.supervisors:
            if supervisor.poll() is None:
                supervisor.kill()
                supervisor.wait()
        stage.cluster.stop(grace=5)
        stage.server.close()


# -- the rendered release, each ending ----------------------------------------------------------


def test_project_trainer_success_scales_ps_and_workers_down(release: Any) -> None:
    run = release([], start_servers=True, timeout=240)
    job = run.server.get("Job", NAMESPACE, f"{PREFIX}-chief")
    assert job is not None and job["status"]["conditions"][0]["type"] == "Complete", run.lines[-20:]
    assert run.writes() == scale_down("succeeded", f"Succeeded: Job {PREFIX}-chief completed")
    assert run.replicas("ps") == 0 and run.replicas("worker") == 0
    assert "run ended (succeeded)" in run.supervisor_log


BACKOFF = "Failed: BackoffLimitExceeded: Job has reached the specified backoff limit"


@pytest.mark.parametrize(("sets", "pods", "writes"), [
    # the trainer's exit code 2: podFailurePolicy FailJob, no retry
    (["training.extraArgs={--learning-rate=-1}", "chief.backoffLimit=3"], 1, scale_down("failed", (
        f"Failed: PodFailurePolicy: Container chief for pod {NAMESPACE}/{PREFIX}-chief failed with exit code 2 "
        "matching FailJob rule"))),
    (["chief.command={sh,-c,exit 1}", "chief.backoffLimit=2"], 3, scale_down("failed", BACKOFF)),
    # onFailure=keep: the run is recorded, the pods are left
    (["chief.command={sh,-c,exit 1}", "chief.backoffLimit=0", "training.cleanup.onFailure=keep"], 1,
     [recorded("failed", BACKOFF), SELF_DOWN]),
], ids=["configuration-error", "last-retry-failed", "keep-policy"])
def test_a_failed_chief_ends_the_run_as_its_policy_says(release: Any, sets: list[str], pods: int,
                                                       writes: list[Any]) -> None:
    run = release(sets)
    assert run.controller.pods_started == pods
    assert run.writes() == writes
    kept = 1 if writes[0] != scaled("ps") else 0
    assert run.replicas("ps") == kept and run.replicas("worker") == kept


def test_deleted_chief_frees_everything(release: Any) -> None:
    def delete_once_seen(stage: Release) -> None:
        server = stage.server
        with server.answered_one:
            assert server.answered_one.wait_for(
                lambda: any(r.path == f"{JOBS}/{PREFIX}-chief" for r in server.requests), 30)
        server.delete("Job", NAMESPACE, f"{PREFIX}-chief")

    run = release(["chief.command={sh,-c,sleep 300}"], during=delete_once_seen)
    assert run.writes() == [scaled("ps"), scaled("worker"), SELF_DOWN]  # no Job left to record it on
    assert f"run ended (deleted): chief Job {PREFIX}-chief was deleted before it finished" in run.supervisor_log


def servers_running(stage: Release) -> None:
    """The API's ps and worker pods, Running (the harness's, whatever the processes do)."""
    for role in ("ps", "worker"):
        template = named(stage.docs, "StatefulSet", f"{PREFIX}-{role}")["spec"]["template"]
        stage.server.add({"kind": "Pod", "metadata": {"name": f"{PREFIX}-{role}-0", "namespace": NAMESPACE,
                                                      "labels": template["metadata"]["labels"]},
                          "spec": {"nodeName": "node-1", "containers": [{"name": role}]},
                          "status": {"phase": "Running"}})


def test_a_bring_your_own_chief_reports_its_progress_with_one_line(release: Any) -> None:
    """docs/images.md: a chief that only prints the step line gets the progress record on its Job."""
    line = "step 40, loss = 0.2500 (640.0 examples/sec; 0.100 sec/batch)"
    escaped = line.replace(",", "\\,")  # --set reads a comma as the list's separator
    run = release([f"chief.command={{sh,-c,echo starting; echo '{escaped}'; exit 0}}"])
    assert run.writes() == scale_down("succeeded", f"Succeeded: Job {PREFIX}-chief completed")
    last = run.progress_written()[-1]  # written before the run's record, from the pod's log in the API
    assert last is not None and (last.state, last.step, last.loss, last.target, last.eta) == (
        "Succeeded", 40, 0.25, None, None)


def test_a_bring_your_own_chief_whose_step_stops_rising_is_ended_as_stalled(release: Any) -> None:
    """The stall as the rendered supervisor meets it, without TensorFlow: the chief prints one step line and hangs.
    Its step is read from its pod's log (asked as the API server accepts it), the progress record holds the stall
    clock, and the run is ended as Stalled, ps/workers at 0. The API's ps and worker pods are the harness's, Running,
    so the run has started."""
    line = "step 40, loss = 0.2500 (640.0 examples/sec; 0.100 sec/batch)"
    escaped = line.replace(",", "\\,")

    run = release([f"chief.command={{sh,-c,echo '{escaped}'; exec sleep 300}}", "training.stallTimeoutSeconds=3",
                   "chief.terminationGracePeriodSeconds=6"], during=servers_running, timeout=90)
    reason = "Stalled: step 40 has not risen for 3 s"
    started, *rest = run.writes()
    assert "tf-distributed.io/started-at" in str(started[2])
    assert rest == [("PATCH", f"{JOBS}/{PREFIX}-chief", {"metadata": {"annotations": {
        "tf-distributed.io/end-reason": reason}}, "spec": {"activeDeadlineSeconds": 1}}),
        *scale_down("stalled", reason)]
    assert run.progress_written()[0].step == 40  # type: ignore[union-attr]


def test_evaluator_is_suspended_when_training_ends(release: Any) -> None:
    run = release(["chief.command={sh,-c,exit 0}", "evaluator.enabled=true"])
    assert run.writes() == [scaled("ps"), scaled("worker"),
                            ("PATCH", f"{JOBS}/{PREFIX}-evaluator", {"spec": {"suspend": True}}),
                            recorded("succeeded", f"Succeeded: Job {PREFIX}-chief completed"), SELF_DOWN]


# -- endings as they happen: the supervisor's watch ---------------------------------------------------------


def allowed(rules: list[dict[str, Any]], request: Request) -> bool:
    """Whether the Role's rules allow this request, as the loopback API's RBAC reads them (tests/kubeapi_rbac.py: a
    list or watch is restricted by resourceNames only through its metadata.name field selector)."""
    match = PATH.fullmatch(request.path)
    assert match is not None and match["resource"], request.path
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    verb = request_verb(request.method, match["name"], request.call.verb == "watch")
    name = match["name"] or named_by_selector(request.call.field_selector)
    return any(allows(rule, verb, match["group"] or "", resource, name) for rule in rules)


def wait_until(server: KubeServer, reached: Callable[[], bool], timeout: float = 60) -> None:
    """Blocks until `reached` holds, looked at after each write to the API's objects."""
    with server.changed:
        assert server.changed.wait_for(reached, timeout), "not reached"


def watched_jobs(server: KubeServer) -> list[Request]:
    return [r for r in server.requests if r.call.verb == "watch" and r.call.resource == "jobs"]


@pytest.mark.parametrize("cut", ["none", "cut", "expired"])
def test_an_ending_is_acted_on_at_once_not_at_the_next_poll(release: Any, tmp_path: Path, cut: str) -> None:
    """The poll is 60 s and the whole run must be over in 30: the chief fails once the supervisor watches its Job,
    and the ps/workers go to 0 from the watch's event. `cut`: the watch is cut and refused while the chief fails, so
    the failure happens with no watch open; the watch made again from the last resourceVersion gets it from the
    API's history. `expired`: that history is gone too (410 Expired): the supervisor lists the Job again and acts."""
    go = tmp_path / "go"

    def fail_the_chief_while_watched(stage: Release) -> None:
        server = stage.server
        with server.answered_one:
            assert server.answered_one.wait_for(lambda: watched_jobs(server), 30)
        if cut != "none":
            server.fail("watch", "jobs", 500, "the API server restarts")
            server.cut_watches(expire=cut == "expired")
        go.touch()
        if cut != "none":
            wait_until(server, lambda: record(server)[1] == "Failed")  # the ending, while no watch is open
            server.failures.clear()

    run = release([f"chief.command={{sh,-c,while [ ! -e {go} ]; do sleep 0.1; done; exit 1}}", "chief.backoffLimit=0",
                   "supervisor.pollSeconds=60"], during=fail_the_chief_while_watched, timeout=30)
    reason = "Failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert run.writes() == scale_down("failed", reason)
    watches = watched_jobs(run.server)
    rules = named(run.docs, "Role", f"{PREFIX}-supervisor")["rules"]
    assert watches and all(allowed(rules, r) for r in run.server.requests)  # the Role allows every request
    lists = [r for r in run.server.requests if r.call.verb == "list" and r.call.resource == "jobs"]
    # the first list; after a 410 the Jobs' watcher lists again, unless the pods' watcher, listing again too, brought
    # the chief's failure first and the run (acted on within the 30 s, not at the 60 s poll) ended before it
    assert len(lists) in ({1, 2} if cut == "expired" else {1}), lists
    if cut != "none":  # every watch cut: each watcher resumes from the last resourceVersion it saw, never "0"; the
        # pods' watch (not refused) may bring the chief's failure first, and the run ends before the Jobs' resumes
        answered = [r for r in run.server.requests if r.call.verb == "watch" and r.status == 200]
        resumed = [dict(r.call.params)["resourceVersion"] for r in answered]
        assert len(answered) > len({r.call.resource for r in answered}) and "0" not in resumed, resumed


# -- upgrading a finished release --------------------------------------------------------------


def render_against(run: Release, major: str, *more_sets: str) -> list[dict[str, Any]]:
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
    # (stopped) worker pods, the stall timeout
    same_run = render_against(run, major, "tensorboard.enabled=true", "serving.enabled=true",
                              "tensorboard.podLabels.team=vision", "worker.podLabels.team=vision",
                              "training.stallTimeoutSeconds=600")  # the supervisor's setting, not the run's
    assert spec_replicas(same_run) == {
        f"{PREFIX}-ps": 0, f"{PREFIX}-worker": 0, f"{PREFIX}-supervisor": 0,
        f"{PREFIX}-tensorboard": 1, f"{PREFIX}-serving": 1,
    }
    api = run.server.api()  # the guard asks it for dry runs, which change nothing
    assert UpgradePlan(api, NAMESPACE).compare(run.docs, same_run) == []  # helm patches the finished chief Job as it is
    # labels of every pod (commonLabels) change the chief Job's pod template, which Kubernetes forbids:
    # `tfchart upgrade` says so before helm runs (docs/lifecycle.md: "A finished release")
    relabelled = render_against(run, major, "commonLabels.team=vision")
    assert spec_replicas(relabelled)[f"{PREFIX}-worker"] == 0
    assert [(c.kind, c.field) for c in UpgradePlan(api, NAMESPACE).compare(run.docs, relabelled)] == [
        ("Job", "spec.template.metadata.labels.team")]
    # a changed training spec is a new run: everything starts again, and the chief Job must be recreated
    new_run = render_against(run, major, "training.trainSteps=120")
    assert spec_replicas(new_run) == {f"{PREFIX}-ps": 1, f"{PREFIX}-worker": 1, f"{PREFIX}-supervisor": 1}
    refused = UpgradePlan(api, NAMESPACE).compare(run.docs, new_run)
    assert [(c.kind, c.name) for c in refused] == [("Job", f"{PREFIX}-chief")]
    assert not any(r.writes for r in run.server.requests[before:])  # rendering only reads


def delete_as_recreate_does(server: KubeServer) -> None:
    """`tfchart upgrade --recreate`'s deletion of the chief Job: marked for re-creation, deleted Foreground (its
    pod goes first), then read until the API answers 404, through tfchart's own Kubernetes client."""
    api = server.api()
    assert delete_to_recreate(api, "Job", f"{PREFIX}-chief", NAMESPACE, "Foreground") in ("deleted", "terminating")
    deadline = time.monotonic() + 30
    while api.read_object("Job", f"{PREFIX}-chief", NAMESPACE) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)


RECREATED = [("PATCH", f"{JOBS}/{PREFIX}-chief", {"metadata": {"annotations": {RECREATING: "true"}}}),
             ("DELETE", f"{JOBS}/{PREFIX}-chief", None)]  # what --recreate writes


def record(server: KubeServer) -> tuple[str, str, str]:
    """The chief Job's uid, its condition and the run's ending recorded on it."""
    job = server.get("Job", NAMESPACE, f"{PREFIX}-chief")
    assert job is not None
    conditions = [c["type"] for c in job.get("status", {}).get("conditions", [])]
    return job["metadata"]["uid"], ",".join(conditions), job["metadata"].get("annotations", {}).get(
        "tf-distributed.io/ending", "")


def test_recreating_a_failed_runs_chief_is_a_new_run_that_trains_to_the_end(release: Any) -> None:
    """The start-timeout message's way forward: fix the chief, `tfchart upgrade --recreate`. The new
    chief Job is a new run: helm's lookup finds no ended Job, so ps, workers and the supervisor come
    back for it, and it trains to Succeeded. The first run: ps and workers never start, so the chief waits for
    them until the Job's deadline, which fails the run and frees everything."""
    run = release(["chief.activeDeadlineSeconds=4"])
    assert record(run.server)[1:] == ("Failed", "failed")
    deadline = "Failed: DeadlineExceeded: Job was active longer than specified deadline"
    assert run.writes() == scale_down("failed", deadline)
    assert run.replicas("ps") == run.replicas("worker") == 0
    delete_as_recreate_does(run.server)
    docs = render_against(run, "4", "chief.activeDeadlineSeconds=null", "chief.podAnnotations.fixed=yes")
    assert spec_replicas(docs) == {f"{PREFIX}-ps": 1, f"{PREFIX}-worker": 1, f"{PREFIX}-supervisor": 1}
    run.apply(docs, uid="uid-the-recreated-chief")
    run.start_servers()
    controller = run.start_chief(docs)
    log = run.supervise(docs, timeout=240)
    controller.join(30)
    assert record(run.server) == ("uid-the-recreated-chief", "Complete", "succeeded"), run.lines[-20:]
    assert run.replicas("ps") == run.replicas("worker") == 0
    assert "run ended (succeeded)" in log


def test_recreating_a_running_chief_goes_on_with_the_same_servers_to_the_end(release: Any) -> None:
    """`tfchart upgrade --recreate --set chief.podAnnotations.x=y` while the chief trains: the supervisor
    waits through the deletion, follows the new chief Job, which resumes from the checkpoint its
    predecessor saved on SIGTERM and trains to Succeeded; nothing is scaled down before that."""
    first_step = threading.Event()

    def freeze_at_the_first_step(pod: LocalPod, line: str) -> None:
        if pod.role == "chief" and not first_step.is_set() and parse_step_line(line):
            os.kill(stage_of[0].cluster.processes[pod.name].popen.pid, signal.SIGSTOP)
            first_step.set()

    stage_of: list[Release] = []
    controllers: list[JobController] = []

    def recreate(stage: Release) -> None:
        stage_of.append(stage)
        stage.hooks.append(freeze_at_the_first_step)
        assert first_step.wait(180), stage.lines[-20:]
        chief = stage.cluster.processes[stage.chief.name].popen
        writes = len(stage.server.writes())
        delete_as_recreate_does(stage.server)  # the Job controller sends the frozen chief SIGTERM
        os.kill(chief.pid, signal.SIGCONT)
        assert chief.wait(60) == 143, stage.lines[-20:]  # stopped at a step boundary, checkpoint saved
        docs = render_against(stage, "4", "chief.podAnnotations.x=y")
        assert spec_replicas(docs) == {f"{PREFIX}-ps": 1, f"{PREFIX}-worker": 1, f"{PREFIX}-supervisor": 1}
        stage.apply(docs, uid="uid-the-recreated-chief")
        assert stage.server.writes()[writes:] == RECREATED  # the supervisor changed nothing meanwhile
        controllers.append(stage.start_chief(docs))

    run = release(["supervisor.chiefMissingSeconds=120", "training.trainSteps=120"], start_servers=True,
                  during=recreate, timeout=300)
    controllers[0].join(30)
    assert record(run.server) == ("uid-the-recreated-chief", "Complete", "succeeded"), run.lines[-20:]
    assert run.writes() == [*RECREATED, *scale_down("succeeded", f"Succeeded: Job {PREFIX}-chief completed")]
    assert "was created again: a new run" in run.supervisor_log
    chief = "\n".join(line for line in run.lines if line.startswith(f"{PREFIX}-chief"))
    saved = re.search(r"SIGTERM at step (\d+): checkpoint saved", chief)
    resumed = re.search(r"resumed from checkpoint at step (\d+)", chief)
    assert saved and resumed and saved.group(1) == resumed.group(1), chief[-3000:]


# -- a stalled run ---------------------------------------------------------------------------------


def test_a_run_whose_step_stops_rising_is_ended_as_stalled(release: Any) -> None:
    """The worker frozen (SIGSTOP) once training runs: the chief's closures wait for it and its step stops
    rising, no process fails. The supervisor ends the run as Stalled within stallTimeoutSeconds plus one
    poll of the last step it saw, ps and workers at 0. The API's ps and worker pods are the harness's: they
    are Running from the chief's first step, so the run starts then and the short timeout never races
    TensorFlow's start-up on a busy machine."""
    stall, lines, frozen = 10, [], []
    first_step = threading.Event()

    def note_steps(pod: LocalPod, line: str) -> None:
        step = parse_step_line(line) if pod.role == "chief" else None
        if step is not None:
            lines.append((time.monotonic(), step.step))
            first_step.set()

    def freeze_a_worker(stage: Release) -> None:
        stage.hooks.append(note_steps)
        assert first_step.wait(240), stage.lines[-20:]
        servers_running(stage)  # every TensorFlow pod runs: the run started
        worker = stage.cluster.processes[f"{PREFIX}-worker-0"].popen
        os.kill(worker.pid, signal.SIGSTOP)
        frozen.append(worker.pid)
        with stage.server.answered_one:  # the supervisor ends the chief Job
            assert stage.server.answered_one.wait_for(lambda: any(
                (w[2] or {}).get("spec", {}).get("activeDeadlineSeconds") == 1 for w in stage.server.writes()), 120)
        lines.append((time.monotonic(), -1))

    try:
        # the chief gets SIGTERM at the 1 s deadline: it waits for the frozen worker's steps as long as its grace
        run = release([f"training.stallTimeoutSeconds={stall}", "training.trainSteps=1000000",
                       "training.checkpointEverySteps=1000000", "training.logEverySteps=10",
                       "chief.terminationGracePeriodSeconds=6"],
                      start_servers=True, during=freeze_a_worker, timeout=300)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)  # so the cleanup's SIGTERM reaches it
    (ended, _), steps = lines[-1], [entry for entry in lines if entry[1] >= 0]
    last_time, last_step = next(entry for entry in reversed(steps) if entry[0] < ended)
    reason = f"Stalled: step {last_step} has not risen for {stall} s"
    started, *rest = run.writes()
    assert started[:2] == ("PATCH", f"{JOBS}/{PREFIX}-chief") and "tf-distributed.io/started-at" in str(started[2])
    assert rest == [("PATCH", f"{JOBS}/{PREFIX}-chief", {"metadata": {"annotations": {
        "tf-distributed.io/end-reason": reason}}, "spec": {"activeDeadlineSeconds": 1}}),
        *scale_down("stalled", reason)]
    assert run.replicas("ps") == 0 and run.replicas("worker") == 0
    assert run.controller.exit_codes == [] and run.server.get("Job", NAMESPACE, f"{PREFIX}-chief")["status"][
        "conditions"][0]["reason"] == "DeadlineExceeded"  # type: ignore[index]
    # Seen at the supervisor's next poll after it was printed, ended at its first poll after the timeout: a
    # poll is pollSeconds (1 s) plus its requests, which a machine shared with other work stretches; measured.
    polls = [r.at for r in run.server.requests if (r.method, r.path) == ("GET", f"{JOBS}/{PREFIX}-chief")]
    poll = max(b - a for a, b in itertools.pairwise(polls) if last_time - 2 < a < ended)
    # the record's times are whole seconds (kubectl-readable): the clock may start up to 1 s before the last step
    assert stall - 1 <= ended - last_time <= stall + 2 * poll + 0.5, (ended - last_time, poll, steps[-5:])
    assert f"run ended (stalled): {reason}" in run.supervisor_log


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
        {"kind": "StatefulSet", "metadata": {**meta, "name": "r-ps", "labels": {COMPONENT_LABEL: "ps"}},
         "spec": {"replicas": 2}},
        {"kind": "StatefulSet", "metadata": {**meta, "name": "r-worker", "labels": {COMPONENT_LABEL: "worker"}},
         "spec": {"replicas": 3}},
        {"kind": "Deployment", "metadata": {"name": "r-sup", "namespace": NAMESPACE}, "spec": {"replicas": 1}},
    ]


def watching(server: KubeServer, during: Callable[[], None] = lambda: None, **settings: Any) -> list[int]:
    """The supervisor's loop as it runs (watching, no injected sleep, a poll of 60 s), given 30 s to end once
    `during` returned: its exit code, or nothing."""
    sup = Supervisor(Settings("r-chief", ("r-ps", "r-worker"), deployment="r-sup", poll_seconds=60, **settings),
                     KubeTarget(server.url, NAMESPACE, "token", None))
    outcome: list[int] = []
    thread = threading.Thread(target=lambda: outcome.append(sup.run()), daemon=True)
    thread.start()
    during()
    thread.join(30)
    return outcome


def old_run(server: KubeServer, *more: dict[str, Any]) -> None:
    """The run's objects, its chief Job created long ago (any start timeout is over), and `more`."""
    server.add(*objects())
    server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}})
    server.add(*more)


def job_annotations(server: KubeServer) -> dict[str, str]:
    job = server.get("Job", NAMESPACE, "r-chief")
    assert job is not None
    return dict(job["metadata"].get("annotations") or {})


def test_a_restarted_supervisor_of_an_ended_run_only_scales_itself_down() -> None:
    with kube_server() as server:
        server.add(*objects(conditions=[{"type": "Complete", "status": "True"}]))
        assert supervisor(server).run() == 0
        first = len(server.writes())
        assert first == 4  # ps, worker, the record on the Job, itself
        assert job_annotations(server)["tf-distributed.io/ending"] == "succeeded"
        server.update("Deployment", NAMESPACE, "r-sup", {"spec": {"replicas": 1}})
        server.update("StatefulSet", NAMESPACE, "r-ps", {"spec": {"replicas": 2}})  # someone scaled it up by hand
        assert supervisor(server, on_success="scaleDown").run() == 0
        assert server.writes()[first:] == [("PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/r-sup/scale",
                                            {"spec": {"replicas": 0}})]


def test_the_supervisor_touches_only_scales_and_the_runs_job() -> None:
    """What the Role allows (templates/rbac/role.yaml): the run's Job, and the scale of the rest; it reads the
    StatefulSets, the TensorFlow pods and its own scale (the plan's view)."""
    with kube_server() as server:
        server.add(*objects(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]))
        supervisor(server).run()
        touched = {(r.method, r.path.split("?")[0]) for r in server.requests}
        own = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/r-sup/scale"
        assert touched == {
            ("GET", f"{JOBS_OF_R}/r-chief"), ("PATCH", f"{JOBS_OF_R}/r-chief"),
            ("GET", f"{STS}/r-ps"), ("PATCH", f"{STS}/r-ps/scale"),
            ("GET", f"{STS}/r-worker"), ("PATCH", f"{STS}/r-worker/scale"),
            ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods"), ("GET", own), ("PATCH", own),
        }


def test_a_job_created_again_is_a_new_run() -> None:
    """`tfchart upgrade --recreate`: the Job is deleted (its pod terminating), gone, then created again;
    none of it ends the run, and the new Job's ending is recorded on the new Job."""
    with kube_server() as server:
        server.add(*objects())
        sup = supervisor(server, chief_missing_seconds=3600)
        assert sup.observe() is None
        marked = {"deletionTimestamp": now_text(time.time()), "annotations": {RECREATING: "true"}}
        server.update("Job", NAMESPACE, "r-chief", {"metadata": marked})
        assert sup.observe() is None  # being deleted by --recreate: waited for
        server.delete("Job", NAMESPACE, "r-chief")
        assert sup.observe() is None  # gone, for less than chief_missing_seconds
        job = objects(conditions=[{"type": "Complete", "status": "True"}])[0]
        job["metadata"]["uid"] = "uid-of-the-new-job"
        server.add(job)
        ending = sup.observe()
        assert ending is not None and ending.kind == "succeeded"
        sup.conclude(sup.seen, ending)
        assert job_annotations(server)["tf-distributed.io/ending"] == "succeeded"
        assert server.get("StatefulSet", NAMESPACE, "r-worker")["spec"]["replicas"] == 0  # type: ignore[index]


STUCK = "2026-11-28T10:00:00Z"


def test_a_marked_job_that_stays_terminating_is_waited_for_from_its_deletion_only() -> None:
    """`tfchart upgrade --recreate` marked the Job and deleted it, but it stays terminating (a finalizer never
    removed, an upgrade that timed out before helm ran): the wait counts from its deletionTimestamp, which a
    restarted supervisor reads again, and ends after chiefMissingSeconds; the ending is recorded on that Job."""
    with kube_server() as server:
        server.add(*objects())
        marked = {"deletionTimestamp": STUCK, "finalizers": ["example.com/never-removed"],
                  "annotations": {RECREATING: "true"}}
        server.update("Job", NAMESPACE, "r-chief", {"metadata": marked})
        now = [parse_time(STUCK) + 30]
        first = supervisor(server, chief_missing_seconds=60)
        first.clock = lambda: now[0]
        assert first.observe() is None and first.due == parse_time(STUCK) + 60
        now[0] += 29  # 59 s: a supervisor restarted meanwhile goes on counting from the deletion
        restarted = supervisor(server, chief_missing_seconds=60)
        restarted.clock = lambda: now[0]
        assert restarted.observe() is None
        now[0] += 1
        ending = restarted.observe()
        reason = ("chief Job r-chief was marked for re-creation (tfchart upgrade --recreate) but has been terminating "
                  "for 60 s, over the 60 s allowed (supervisor.chiefMissingSeconds; finalizers: "
                  "example.com/never-removed)")
        assert ending is not None and (ending.kind, ending.reason) == ("deleted", reason)
        restarted.conclude(restarted.seen, ending)
        assert job_annotations(server)["tf-distributed.io/ending"] == "deleted"
        assert job_annotations(server)["tf-distributed.io/end-reason"] == reason
        assert server.get("StatefulSet", NAMESPACE, "r-ps")["spec"]["replicas"] == 0  # type: ignore[index]
        ended = supervisor(server, chief_missing_seconds=60)  # restarted after the record: it stands
        again = ended.observe()
        assert again is not None and again.recorded


def test_a_marked_job_stuck_terminating_ends_the_run_within_the_grace_and_a_poll() -> None:
    """The loop as it runs (watching, a poll of 60 s): ended when chiefMissingSeconds from the deletion is due."""
    with kube_server() as server:
        server.add(*objects())
        deleted_at = time.time()
        marked = {"deletionTimestamp": now_text(deleted_at), "finalizers": ["example.com/never-removed"],
                  "annotations": {RECREATING: "true"}}
        server.update("Job", NAMESPACE, "r-chief", {"metadata": marked})
        assert watching(server, chief_missing_seconds=2) == [0], "it still waits for a Job that stays terminating"
        assert time.time() - parse_time(now_text(deleted_at)) < 2 + 5  # the grace, and a busy machine's slack
        assert job_annotations(server)["tf-distributed.io/ending"] == "deleted"
        assert server.get("StatefulSet", NAMESPACE, "r-worker")["spec"]["replicas"] == 0  # type: ignore[index]


@pytest.mark.parametrize("how", ["foreground", "background"])
def test_a_job_deleted_by_hand_ends_the_run_at_once(how: str) -> None:
    """Deleted without --recreate's mark: being deleted (Foreground, its pods terminating) is seen on the Job itself;
    a deletion that removes it at once (kubectl's default) by the watch's DELETED event, the Job's last state."""
    with kube_server() as server:
        server.add(*objects())
        sup = supervisor(server, chief_missing_seconds=3600)
        assert sup.observe() is None
        job = server.get("Job", NAMESPACE, "r-chief")
        assert job is not None
        if how == "foreground":
            server.update("Job", NAMESPACE, "r-chief", {"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}})
        else:
            server.delete("Job", NAMESPACE, "r-chief")
            sup.heard("DELETED", job)
        ending = sup.observe()
        assert ending is not None and (ending.kind, ending.reason) == (
            "deleted", "chief Job r-chief was deleted before it finished")


def test_a_job_gone_for_good_frees_the_pods_once_the_grace_has_passed() -> None:
    """A supervisor that did not see the deletion (restarted since) waits the grace: it may be created again."""
    with kube_server() as server:
        server.add(*objects())
        now = [1000.0]
        sup = supervisor(server, chief_missing_seconds=60)
        sup.clock = lambda: now[0]
        assert sup.observe() is None
        server.delete("Job", NAMESPACE, "r-chief")
        assert sup.observe() is None
        now[0] += 59
        assert sup.observe() is None
        now[0] += 1
        ending = sup.observe()
        assert ending is not None and (ending.kind, ending.reason) == (
            "deleted", "chief Job r-chief was deleted before it finished")


JOBS_OF_R = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"


class Killed(Exception):
    """The supervisor's pod killed (node drain, eviction, an upgrade of its template)."""


def dies_before_write(sup: Supervisor, writes: int) -> Supervisor:
    """`sup`, its pod killed (Killed raised) just before its `writes`+1-th change to the cluster."""
    done, api = [0], sup.api

    def dying_api(method: str, path: str, body: Any = None) -> Any:
        if method != "GET":
            if done[0] == writes:
                raise Killed
            done[0] += 1
        return api(method, path, body)

    sup.api = dying_api  # type: ignore[method-assign]
    return sup


def runs(sup: Supervisor) -> None:
    assert sup.run() == 0


def killed_at_each_write(server: KubeServer, arrange: Callable[[], None], make: Callable[[], Supervisor],
                         act: Callable[[Supervisor], None], state: Callable[[], Any]) -> Any:
    """The state an uninterrupted supervisor (`make`) leaves once it acted on the cluster `arrange` sets up; for each
    of its writes, the cluster set up again, a supervisor killed just before that write and a restarted one leave the
    same state."""
    arrange()
    before = len(server.writes())
    act(make())
    expected, writes = state(), len(server.writes()) - before
    for killed_at in range(writes):
        arrange()
        with pytest.raises(Killed):
            act(dies_before_write(make(), killed_at))
        act(make())
        assert state() == expected, f"killed before write {killed_at + 1}"
    return expected


def final_state(server: KubeServer) -> dict[str, Any]:
    job = server.get("Job", NAMESPACE, "r-chief") or {}
    annotations = {k: v for k, v in (job.get("metadata") or {}).get("annotations", {}).items()
                   if k not in (ENDED_AT, "tf-distributed.io/started-at")}
    return {"job": annotations, "deadline": (job.get("spec") or {}).get("activeDeadlineSeconds"),
            **{name: server.get(kind, NAMESPACE, name)["spec"]["replicas"]  # type: ignore[index]
               for kind, name in (("StatefulSet", "r-ps"), ("StatefulSet", "r-worker"), ("Deployment", "r-sup"))}}


PHASES: dict[str, tuple[dict[str, Any], list[tuple[str, str]], dict[str, Any]]] = {
    "succeeded": ({"conditions": [{"type": "Complete", "status": "True"}]}, [], {}),
    "failed, keep": ({"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}, [],
                     {"on_failure": "keep"}),
    "start timeout": ({}, [("r-ps-0", "Pending")],
                      {"start_timeout_seconds": 60, "pod_selector": "tf=yes", "expected_pods": 2}),
}


@pytest.mark.parametrize("phase", PHASES)
def test_a_supervisor_killed_at_any_write_decides_as_the_uninterrupted_one(phase: str) -> None:
    job_status, pods, settings = PHASES[phase]

    def cluster(server: KubeServer) -> None:
        server.reset()
        server.add(*objects(**job_status), *(pod(name, state) for name, state in pods))

    with kube_server() as server:
        expected = killed_at_each_write(server, lambda: cluster(server), lambda: supervisor(server, **settings), runs,
                                        lambda: final_state(server))
        assert expected["r-sup"] == 0


def pod(name: str, phase: str, **status: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"tf": "yes"}},
            "spec": {}, "status": {"phase": phase, **status}}


def test_start_timeout_names_the_pod_and_its_reason_and_ends_the_chief() -> None:
    with kube_server() as server:
        pulling = {"containerStatuses": [{"name": "worker", "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": 'Back-off pulling image "registry.invalid/trainer:1"'}}}]}
        old_run(server, pod("r-ps-0", "Running"), pod("r-worker-0", "Pending", **pulling),
                pod("r-chief-abc", "Pending"))
        sup = supervisor(server, start_timeout_seconds=600, pod_selector="tf=yes", expected_pods=3)
        assert sup.run() == 0
        reason = ('start timeout (600 s): pod r-worker-0 is not running: ImagePullBackOff: Back-off pulling image '
                  '"registry.invalid/trainer:1" (and 1 more pod not running)')
        job = server.get("Job", NAMESPACE, "r-chief")
        assert job is not None and job["spec"]["activeDeadlineSeconds"] == 1
        assert job["metadata"]["annotations"]["tf-distributed.io/end-reason"] == reason
        assert job["metadata"]["annotations"]["tf-distributed.io/ending"] == "start-timeout"
        ps = server.get("StatefulSet", NAMESPACE, "r-ps")
        assert ps is not None and ps["spec"]["replicas"] == 0


def test_a_start_timeout_is_looked_at_when_due_with_the_pods_watched_until_then() -> None:
    """Watching (no injected sleep), with a poll of 60 s: the TensorFlow pods are watched while the run has not
    started, and the start timeout is looked at the moment it is due, not at the next poll."""
    with kube_server() as server:
        server.add(*objects(), pod("r-ps-0", "Pending"))
        server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": now_text(time.time() + 3600)}})

        def created_once_the_pods_are_watched() -> None:  # the timeout is due 2 s from then
            with server.answered_one:
                assert server.answered_one.wait_for(lambda: [r for r in server.requests if r.call.verb == "watch"
                                                             and r.call.resource == "pods"], 30)
            server.update("Job", NAMESPACE, "r-chief", {"metadata": {"creationTimestamp": now_text(time.time())}})

        assert watching(server, created_once_the_pods_are_watched, start_timeout_seconds=2, pod_selector="tf=yes",
                        expected_pods=2) == [0]
        assert job_annotations(server)["tf-distributed.io/ending"] == "start-timeout"
        pods = [r.call for r in server.requests if r.call.verb == "watch" and r.call.resource == "pods"]
        assert pods[0].label_selector == "tf=yes"


UNSCHEDULABLE = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}
MOUNT_FAILED = {"kind": "Event", "metadata": {"name": "e1", "namespace": NAMESPACE}, "type": "Warning",
                "reason": "FailedMount", "message": 'MountVolume.SetUp failed for volume "data"',
                "involvedObject": {"kind": "Pod", "name": "r-ps-0"}, "lastTimestamp": "2020-01-01T00:01:00Z"}


@pytest.mark.parametrize(("more", "expected_pods", "why"), [
    ([pod("r-ps-0", "Pending", **UNSCHEDULABLE)], 2,
     "Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
    ([pod("r-ps-0", "Pending"), MOUNT_FAILED], 1, 'FailedMount: MountVolume.SetUp failed for volume "data"'),
], ids=["from-the-pod", "from-its-events"])
def test_start_timeout_reasons_come_from_the_pod_then_its_events(more: list[dict[str, Any]], expected_pods: int,
                                                                 why: str) -> None:
    with kube_server() as server:
        old_run(server, *more)
        supervisor(server, start_timeout_seconds=60, pod_selector="tf=yes", expected_pods=expected_pods).run()
        assert job_annotations(server)["tf-distributed.io/end-reason"] == (
            f"start timeout (60 s): pod r-ps-0 is not running: {why}")


def test_running_pods_switch_the_start_timeout_off() -> None:
    with kube_server() as server:
        old_run(server, pod("r-ps-0", "Running"), pod("r-chief-x", "Running"))
        settings = {"start_timeout_seconds": 60, "pod_selector": "tf=yes", "expected_pods": 2}
        sup = supervisor(server, **settings)
        assert sup.observe() is None
        started = [(method, path) for method, path, _ in server.writes()]
        assert started == [("PATCH", f"{JOBS_OF_R}/r-chief")]
        assert "tf-distributed.io/started-at" in job_annotations(server)
        server.update("Pod", NAMESPACE, "r-ps-0", {"status": {"phase": "Pending"}})  # restarted later: no timeout
        assert sup.observe() is None
        # the supervisor itself restarted (node drain) while that pod is Pending: the run had started
        assert supervisor(server, **settings).observe() is None and len(server.writes()) == 1


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
    [port] = free_ports(1)
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
                        "evaluator.enabled=true", "worker.replicas=3", "training.stallTimeoutSeconds=1800"],
                  namespace=NAMESPACE)
    container = named(docs, "Deployment", f"{PREFIX}-supervisor")["spec"]["template"]["spec"]["containers"][0]
    settings = Settings.from_env(container_env(container))
    assert settings == Settings(
        chief_job=f"{PREFIX}-chief", statefulsets=(f"{PREFIX}-ps", f"{PREFIX}-worker"),
        evaluator_job=f"{PREFIX}-evaluator", deployment=f"{PREFIX}-supervisor", on_success="keep",
        on_failure="scaleDown", start_timeout_seconds=900.0,
        pod_selector=("app.kubernetes.io/name=tf-distributed,app.kubernetes.io/instance=mnist,"
                      "app.kubernetes.io/component in (ps,worker,chief,evaluator)"),
        expected_pods=6, poll_seconds=10.0, chief_missing_seconds=120.0,
        progress=True, stall_timeout_seconds=1800.0, progress_job=f"{PREFIX}-chief", progress_container="chief",
        run_kind="Job", run_name=f"{PREFIX}-chief",
    )


def test_no_trainer_module_talks_to_the_api_with_the_standard_library() -> None:
    """One Kubernetes client: the pinned `kubernetes` client (trainer/kube.py). The standard library's HTTP clients
    stay only where no Kubernetes API is asked: the MNIST download and the helm test's endpoint probe."""
    clients = re.compile(r"^\s*(?:import|from)\s+(?:urllib\.request|urllib\.error|http\.client)\b", re.M)
    users = sorted(p.name for p in (REPO / "trainer").glob("*.py") if clients.search(p.read_text()))
    assert users == ["data.py", "endpoint_probe.py"]
    kube = re.compile(r"^\s*(?:import|from)\s+kubernetes\b", re.M)
    assert sorted(p.name for p in (REPO / "trainer").glob("*.py") if kube.search(p.read_text())) == [
        "kube.py", "supervisor_watch.py"]
