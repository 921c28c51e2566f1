"""`tfchart stop` and the status warning it answers, against the fake API server on the loopback.

The real CLI runs as a subprocess with a kubeconfig whose context namespace is `team-a` (no -n),
so the kubernetes client's URL building, merge patches and the /scale subresource all run. The
server (tests/kubeapi.py) keeps the release's rendered objects, applies each PATCH as the API
server does and records every request, so the tests assert exactly what was changed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console

from tests import kubeapi as kf
from tests.chartlib import REPO
from tests.kubeapi import KubeServer, kube_server
from tfchart.cluster import status, suspend
from tfdcontract.lifecycle import STOPPED_WANTED, WANTED_ANNOTATION, WANTED_SEEN_ANNOTATION
from trainer.kube import KubeTarget
from trainer.supervisor import Settings, Supervisor

NS = "team-a"
PREFIX = "mnist-tf-distributed"
GPU_VALUES = ("values/gpu.yaml",)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as running:
        yield running


def tfchart(server: KubeServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfchart", *args, "--kubeconfig", str(server.kubeconfig(NS))],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip


def condition(kind: str, reason: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": reason, "message": "", "lastTransitionTime": kf.ago(minutes=1)}


def deploy(server: KubeServer, chief: str, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The release's StatefulSets, chief (and evaluator) Job and supervisor as the API server keeps them."""
    docs = kf.rendered(GPU_VALUES, sets, namespace=NS)
    for doc in docs:
        if doc["kind"] not in ("StatefulSet", "Deployment", "Job"):
            continue
        component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
        if doc["kind"] == "Job":
            conditions = {"complete": [condition("Complete")], "failed": [condition("Failed", "BackoffLimitExceeded")]}
            doc["status"] = {"conditions": conditions.get(chief, []), "active": 1 if chief == "running" else 0}
            if component == "evaluator":
                doc["status"] = {"active": 1}
        server.add(doc)
    return docs


def replicas(server: KubeServer, kind: str, name: str) -> int:
    found = server.get(kind, NS, name)
    assert found is not None
    return int(found["spec"].get("replicas", 1))


def test_stop_after_success_frees_ps_and_workers_in_the_context_namespace(server: KubeServer) -> None:
    deploy(server, "complete")
    result = tfchart(server, "stop", "mnist")
    assert result.returncode == 0, result.stderr
    # no supervisor Ready: tfchart asks (the wanted state) and carries the plan out itself
    assert [(method, path) for method, path, _ in server.writes()] == [
        ("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/{PREFIX}-chief"),  # wanted: stopped
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/{PREFIX}-ps/scale"),
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/{PREFIX}-worker/scale"),
        ("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/{PREFIX}-chief"),  # the record
        ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/{PREFIX}-supervisor/scale"),  # last, as it does itself
    ]
    assert server.writes()[0][2] == {"metadata": {"annotations": {WANTED_ANNOTATION: STOPPED_WANTED}}}
    for name in (f"{PREFIX}-ps", f"{PREFIX}-worker"):
        assert replicas(server, "StatefulSet", name) == 0
    # on the run's Job, as the supervisor writes it: `helm upgrade` of this run keeps it stopped (the lookup)
    annotations = server.get("Job", NS, f"{PREFIX}-chief")["metadata"]["annotations"]  # type: ignore[index]
    # the Job controller's ending, a success kept (as the supervisor records it), not `stopped`
    assert annotations["tf-distributed.io/ending"] == "succeeded"
    assert annotations["tf-distributed.io/end-reason"] == f"Succeeded: Job {PREFIX}-chief completed"
    assert f"recorded the ending on Job {PREFIX}-chief" in result.stdout
    assert replicas(server, "Deployment", f"{PREFIX}-supervisor") == 0
    assert f"scaled StatefulSet {PREFIX}-worker from 4 to 0 replicas" in result.stdout
    assert server.get("Job", NS, f"{PREFIX}-chief")["spec"].get("suspend") is not True  # type: ignore[index]


def test_stop_with_the_run_s_job_gone_frees_what_is_left(server: KubeServer) -> None:
    """Its Job deleted by hand (or by ttlSecondsAfterFinished under keep): no object carries the wanted state, so
    tfchart writes none and frees the servers itself."""
    deploy(server, "complete")
    server.delete("Job", NS, f"{PREFIX}-chief")
    result = tfchart(server, "stop", "mnist")
    assert result.returncode == 0, result.stderr
    assert all(not path.endswith(f"/jobs/{PREFIX}-chief") for _, path, _ in server.writes())
    assert [replicas(server, "StatefulSet", f"{PREFIX}-{role}") for role in ("ps", "worker")] == [0, 0]


def test_stop_twice_changes_nothing_the_second_time(server: KubeServer) -> None:
    deploy(server, "failed")
    assert tfchart(server, "stop", "mnist").returncode == 0
    before = len(server.writes())
    again = tfchart(server, "stop", "mnist")
    assert again.returncode == 0, again.stderr
    assert len(server.writes()) == before
    assert "nothing to stop" in again.stdout and f"StatefulSet {PREFIX}-ps is already at 0 replicas" in again.stdout


def test_a_chief_still_training_is_only_ended_with_end_run(server: KubeServer) -> None:
    deploy(server, "running", ("evaluator.enabled=true",))
    refused = tfchart(server, "stop", "mnist")
    assert refused.returncode == 1
    assert f"the chief Job {PREFIX}-chief of release mnist has not ended" in refused.stderr
    assert "tfchart stop mnist -n team-a --end-run" in refused.stderr
    assert "Traceback" not in refused.stderr and server.writes() == []

    ended = tfchart(server, "stop", "mnist", "--end-run")
    assert ended.returncode == 0, ended.stderr
    changed = [(path.rsplit("/", 2)[-2:], body) for _, path, body in server.writes()]
    assert changed[:2] == [(["jobs", f"{PREFIX}-chief"], {"metadata": {"annotations": {WANTED_ANNOTATION: "stopped"}}}),
                           (["jobs", f"{PREFIX}-chief"], {"spec": {"suspend": True}})]
    assert (["jobs", f"{PREFIX}-evaluator"], {"spec": {"suspend": True}}) in changed
    assert replicas(server, "StatefulSet", f"{PREFIX}-ps") == replicas(server, "StatefulSet", f"{PREFIX}-worker") == 0
    annotations = server.get("Job", NS, f"{PREFIX}-chief")["metadata"]["annotations"]  # type: ignore[index]
    assert annotations["tf-distributed.io/end-reason"] == "stopped by tfchart stop (training ended early)"


def test_the_watching_supervisor_hears_stop_at_once_and_carries_it_out_alone(server: KubeServer) -> None:
    """With the supervisor Ready, `tfchart stop` only asks (the wanted state on the chief Job); the rendered
    supervisor, watching the chief Job with a poll of 60 s, hears it at once and carries the plan out: the chief
    Job suspended, ps/worker to 0, the record, itself to 0 last (tests/trainer/test_supervisor_wanted.py: suspend,
    resume and stop with its Role enforced)."""
    docs = deploy(server, "running")
    container = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == f"{PREFIX}-supervisor"
                     )["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item.get("value", NS) for item in container["env"]}
    settings = replace(Settings.from_env(env), poll_seconds=60)
    outcome: list[int] = []
    watching = threading.Thread(target=lambda: outcome.append(
        Supervisor(settings, KubeTarget(server.url, NS, "sa", None)).run()), daemon=True)
    watching.start()
    with server.answered_one:
        assert server.answered_one.wait_for(lambda: any(r.call.verb == "watch" for r in server.requests), 30)
    server.update("Deployment", NS, f"{PREFIX}-supervisor", {"status": {"replicas": 1, "readyReplicas": 1}})
    assert tfchart(server, "stop", "mnist", "--end-run").returncode == 0
    watching.join(30)
    assert outcome == [0]
    job, apps = f"/apis/batch/v1/namespaces/{NS}/jobs/{PREFIX}-chief", f"/apis/apps/v1/namespaces/{NS}"
    writes = [(r.headers.get("authorization") == "Bearer sa", r.path, r.body) for r in server.requests if r.writes
              and list((r.body.get("metadata") or {}).get("annotations") or {}) != ["tf-distributed.io/progress"]]
    assert [(own, path, list(body["metadata"]["annotations"]) if "metadata" in body else body)
            for own, path, body in writes] == [
        (False, job, [WANTED_ANNOTATION]), (True, job, [WANTED_SEEN_ANNOTATION]),  # asked; taken up
        (True, job, {"spec": {"suspend": True}}),
        (True, f"{apps}/statefulsets/{PREFIX}-ps/scale", {"spec": {"replicas": 0}}),
        (True, f"{apps}/statefulsets/{PREFIX}-worker/scale", {"spec": {"replicas": 0}}),
        (True, job, ["tf-distributed.io/ending", "tf-distributed.io/end-reason", "tf-distributed.io/ended-at"]),
        (True, f"{apps}/deployments/{PREFIX}-supervisor/scale", {"spec": {"replicas": 0}})]


def test_a_ready_supervisor_that_does_nothing_times_out_naming_what_is_pending_and_force_finishes(
    server: KubeServer,
) -> None:
    """With a Ready supervisor, stop only asks and waits: one that does not act (crash-looping, hung) leaves the
    command to time out naming each step not done; --force carries the same plan out from there."""
    deploy(server, "complete")
    server.update("Deployment", NS, f"{PREFIX}-supervisor", {"status": {"replicas": 1, "readyReplicas": 1}})
    waited = tfchart(server, "stop", "mnist", "--timeout", "1s")
    assert waited.returncode == 124, waited.stderr
    assert [path for _, path, _ in server.writes()] == [f"/apis/batch/v1/namespaces/{NS}/jobs/{PREFIX}-chief"]
    assert "the run supervisor has not reached it" in waited.stderr
    assert f"  not done yet: scaled StatefulSet {PREFIX}-ps from 2 to 0 replicas" in waited.stderr.splitlines()
    assert "`tfchart stop mnist -n team-a --force` carries it out from here" in waited.stderr
    forced = tfchart(server, "stop", "mnist", "--force")
    assert forced.returncode == 0, forced.stderr
    supervisor = replicas(server, "Deployment", f"{PREFIX}-supervisor")
    assert replicas(server, "StatefulSet", f"{PREFIX}-ps") == supervisor == 0
    annotations = server.get("Job", NS, f"{PREFIX}-chief")["metadata"]["annotations"]  # type: ignore[index]
    assert (annotations["tf-distributed.io/ending"], annotations[WANTED_ANNOTATION]) == ("succeeded", STOPPED_WANTED)
    assert len(server.writes()) == 5  # wanted once, then ps, worker, the record, the supervisor


@pytest.mark.parametrize("seen", ["", "stopped: scaled StatefulSet x from 2 to 0 replicas: HTTP 403 Forbidden"])
def test_a_ready_supervisor_that_does_not_take_the_stop_up_is_named_at_once_not_after_the_timeout(
    server: KubeServer, seen: str
) -> None:
    """An older supervisor image ignores the wanted state, one whose Role refuses a step says so on the run's Job
    (WANTED_SEEN_ANNOTATION): tfchart tells which within SEEN_SECONDS of its 60 s, suggesting --force."""
    deploy(server, "complete")
    server.update("Deployment", NS, f"{PREFIX}-supervisor", {"status": {"replicas": 1, "readyReplicas": 1}})
    chief = f"{PREFIX}-chief"
    if seen:  # a refusal of an earlier `stop` (its Role fixed since): asking again clears it, the first look ignores it
        server.update("Job", NS, chief, {"metadata": {"annotations": {WANTED_ANNOTATION: "stopped",
                                                                     WANTED_SEEN_ANNOTATION: seen}}})
    now = [0.0]

    def sleep(seconds: float) -> None:  # while tfchart waits, the supervisor refuses again (or says nothing)
        assert not seen or server.get("Job", NS, chief)["metadata"]["annotations"].get(WANTED_SEEN_ANNOTATION) is None
        if seen:
            server.update("Job", NS, chief, {"metadata": {"annotations": {WANTED_SEEN_ANNOTATION: seen}}})
        now.append(now.pop() + seconds)

    with pytest.raises(suspend.TimedOut) as timed_out:
        suspend.stop(server.api(), "mnist", NS, None, now=lambda: now[0], sleep=sleep)
    said = str(timed_out.value)
    assert now[0] == (suspend.POLL_SECONDS if seen else suspend.SEEN_SECONDS) and \
        f"tfchart stop mnist -n {NS} --force" in timed_out.value.hint  # fmt: skip
    assert ("cannot carry it out: scaled StatefulSet x from 2 to 0 replicas: HTTP 403 Forbidden" if seen else
            f"has not taken it up in 15s: an older supervisor image ignores {WANTED_ANNOTATION}") in said


def test_an_unknown_release_is_one_line_with_the_fix(server: KubeServer) -> None:
    result = tfchart(server, "stop", "nosuch")
    assert result.returncode == 1
    assert "no release nosuch in namespace team-a" in result.stderr and "helm list -n team-a" in result.stderr
    assert "Traceback" not in result.stderr and server.writes() == []


# -- the status warning ---------------------------------------------------------------------------


def held_release(cluster: KubeServer, chief: str, ending: str = "") -> None:
    docs = kf.rendered(GPU_VALUES)
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            obj = kf.stateful_set(doc)
            cluster.add(obj)
            for index in range(obj["spec"]["replicas"]):
                cluster.add(kf.pod(doc, index=index))
    job = kf.job(kf.manifest(docs, "Job", "chief"), chief)
    if ending:  # the run record the supervisor writes
        job["metadata"].setdefault("annotations", {})["tf-distributed.io/ending"] = ending
    cluster.add(job)


def warnings_of(cluster: KubeServer) -> list[str]:
    return status.collect(cluster.api(), "mnist", "ml-training", now=kf.NOW)["warnings"]


def test_status_warns_when_gpus_are_held_after_the_chief_ended(server: KubeServer) -> None:
    held_release(server, "failed")
    [warning] = warnings_of(server)
    assert warning.startswith("the chief Job ended (Failed) but 6 pod(s) still run and hold 4 nvidia.com/gpu (")
    assert "nothing freed them (supervisor.enabled=false, or the supervisor is not running)" in warning
    assert warning.endswith("free them with `tfchart stop mnist -n ml-training`")
    console = Console(record=True, width=400)
    status.render(status.collect(server.api(), "mnist", "ml-training", now=kf.NOW), console)
    assert "warning: the chief Job ended (Failed)" in console.export_text()
    assert server.writes() == []  # status only reads


def test_status_names_the_keep_policy_and_is_quiet_while_training(server: KubeServer) -> None:
    held_release(server, "complete", ending="succeeded")
    [warning] = warnings_of(server)
    assert "kept by the cleanup policy (training.cleanup.onSuccess=keep)" in warning
    server.reset()
    held_release(server, "running")
    assert warnings_of(server) == []
    assert server.writes() == []  # status only reads


def test_status_shows_the_ending_recorded_on_this_runs_job_only(server: KubeServer) -> None:
    def shown() -> tuple[str, str]:
        found = status.collect(server.api(), "mnist", "ml-training", now=kf.NOW)
        console = Console(record=True, width=400)
        status.render(found, console)
        rows = [line.strip("│ ") for line in console.export_text().splitlines() if "Run ended" in line]
        return found["chief"]["ending"], " ".join(rows[0].split()) if rows else ""

    held_release(server, "complete", ending="succeeded")
    ending, line = shown()
    assert (ending, line) == ("succeeded", "Run ended succeeded")
    server.reset()
    held_release(server, "running")  # the chief Job created again: a new run, with no ending of its own
    assert shown() == ("", "")


def test_a_release_installed_with_name_override_is_found_by_stop_and_status(server: KubeServer) -> None:
    """Objects are selected by the release (instance and part-of), not by app.kubernetes.io/name, which
    nameOverride changes."""
    docs = deploy(server, "complete", ("nameOverride=vision",))
    prefix = "mnist-vision"
    assert {d["metadata"]["labels"]["app.kubernetes.io/name"] for d in docs if d["kind"] == "StatefulSet"} == {
        "vision"}
    result = tfchart(server, "stop", "mnist")
    assert result.returncode == 0, result.stderr
    assert replicas(server, "StatefulSet", f"{prefix}-worker") == replicas(server, "StatefulSet", f"{prefix}-ps") == 0
    found = status.collect(server.api(), "mnist", NS, now=kf.NOW)
    assert found["chief"]["name"] == f"{prefix}-chief" and found["chief"]["ending"] == "succeeded"
    assert {s["name"] for s in found["stateful_sets"]} == {f"{prefix}-ps", f"{prefix}-worker"}
