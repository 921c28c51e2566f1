"""Every cluster-facing command with workload.kind=jobset, against the fake API server on the loopback
(tests/kubeapi.py: JobSet's vendored CRD served, the rendered JobSet with its child Jobs and pods as JobSet's
controller leaves them, and kubeapi.JobSetController where a command needs the controller to act): status,
list, wait, logs, stop, suspend and resume (plain and through Kueue's Workload), preflight and the upgrade
guard. The run's object is the JobSet. The namespace is never `default`; commands leave -n out where the
kubeconfig context's namespace is meant."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import REPO, render
from tests.kubeapi import Call, KubeServer, kube_server
from tests.tfchart.test_release import RecordingHelm
from tests.tfchart.test_upgrade_guard import as_args, live_cluster, planned, refused, run_upgrade
from tfchart.cluster import preflight
from tfchart.cluster.preflight.controllers import check_kueue
from tfdcontract import (
    ENDING_ANNOTATION,
    PROGRESS_ANNOTATION,
    SUSPENDED_ANNOTATION,
    JobProgress,
    ending_annotations,
    format_job_progress,
    parse_suspension,
)
from tfdcontract.lifecycle import WANTED_ANNOTATION
from tfdcontract.runstate import QUEUE_LABEL

NS = "ml-jobs"
PREFIX = "mnist-tf-distributed"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
WORKLOADS = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads"
JOBSET = ("workload.kind=jobset",)
STATUS_LINE = 'tfd-status: {"state": "Running", "strategy": "parameter_server", "step": 1200, "train_steps": 5000, ' \
              '"loss": 0.25, "accuracy": null, "examples_per_sec": 2000.0, "export_path": null, "started_at": "", ' \
              '"updated_at": "", "message": ""}'  # fmt: skip


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as running:
        yield running


def cli(server: KubeServer, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process, with a kubeconfig whose context's namespace is NS."""
    return kf.tfchart_in_process(server, capsys, NS, *args)


def release(server: KubeServer, *sets: str, state: str = "running", roles: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JobSet release in NS: the JobSet (`state`: running, suspended, completed, failed) and its child Jobs (of
    `roles`, else all) with their pods; running, the chief's log reports step 1200."""
    docs = kf.rendered(sets=(*JOBSET, "ps.replicas=1", "worker.replicas=2", *sets), namespace=NS)
    doc = next(d for d in docs if d["kind"] == "JobSet")
    server.add(*kf.crds(*kf.JOBSET_CRDS), kf.jobset(doc, state))
    for child in kf.jobset_jobs(doc, *roles):
        role = child["metadata"]["labels"]["app.kubernetes.io/component"]
        if state == "completed":
            server.add(kf.job(child, "complete"))
        elif state == "failed":
            server.add(kf.job(child, "failed", "DeadlineExceeded", "Job was active longer than specified deadline"))
        else:
            server.add(kf.job(child), *([] if state == "suspended" else kf.jobset_pods(kf.job(child))))
        if state == "running" and role == "chief":
            server.set_log(NS, f"{child['metadata']['name']}-0-q8z4w", [STATUS_LINE])
    return kf.jobset(doc, state)


def eventually(check: Callable[[], bool], timeout: float = 30) -> bool:
    """Whether `check` holds within `timeout` (a controller thread acting)."""
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


def writes(server: KubeServer) -> list[tuple[str, str, Any]]:
    return [(method, path, body) for method, path, body in server.writes()]


# -- status, list, wait, logs -------------------------------------------------------------------------------------


def test_status_and_list_read_the_run_from_the_jobset(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    release(server)
    code, out, err = cli(server, capsys, "status", "mnist", "-n", NS, "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    chief = report["chief"]
    assert (chief["kind"], chief["name"], chief["role"], chief["state"], chief["restarts"]) == (
        "JobSet", PREFIX, "chief", "Running", 0)  # fmt: skip
    assert report["training"]["state"] == "Running" and report["training"]["progress"]["step"] == 1200
    assert {pod["name"] for pod in report["pods"]} == {f"{PREFIX}-{job}-q8z4w" for job in
                                                        ("ps-0-0", "worker-0-0", "worker-0-1", "chief-0-0")}
    assert report["warnings"] == [] and report["stateful_sets"] == []
    code, out, err = cli(server, capsys, "status", "mnist")  # -n left out: the context's namespace
    assert code == 0 and re.search(rf"JobSet +{PREFIX} Running", out), out + err
    code, out, err = cli(server, capsys, "list", "-o", "json")
    [run] = json.loads(out)
    assert (run["kind"], run["state"], run["step"], run["namespace"]) == ("JobSet", "Running", 1200, NS), err
    assert Call("list", "jobsets", NS, label_selector="app.kubernetes.io/instance=mnist,app.kubernetes.io/part-of="
                "tf-distributed") in server.calls and server.writes() == []  # fmt: skip


@pytest.mark.parametrize(("state", "code", "said"), [
    ("completed", 0, ""),
    ("failed", 1, "error: release mnist's run failed: FailJobSetFailurePolicyAction: applying FailJobSet failure "
                  f"policy action (first failed job: {PREFIX}-chief-0)\n"),
])  # fmt: skip
def test_wait_answers_the_jobset_s_end(server: KubeServer, capsys: pytest.CaptureFixture[str], state: str, code: int,
                                       said: str) -> None:  # fmt: skip
    release(server, state=state, roles=("chief",))
    ended = "Succeeded" if code == 0 else "Failed"
    assert cli(server, capsys, "wait", "mnist", "-n", NS) == (code, f"mnist: {ended}\n", said)


def test_a_stalled_jobset_reads_failed_with_its_reason_and_shows_its_chief_job_s_progress(
    server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The supervisor's records under a JobSet (tests/trainer/test_supervisor_jobset.py): the progress on the chief's
    Job, a stall's ending on the JobSet, read before and after JobSet fails the run through the chief Job's deadline."""
    jobset = release(server)
    record = JobProgress("Running", 1200, 5000, "2026-11-22T13:05:40Z", 0.25, None, 1000, "2026-11-22T12:41:10Z",
                         "2026-11-22T12:11:10Z")  # fmt: skip
    server.update("Job", NS, f"{PREFIX}-chief-0", {"metadata": {"annotations": {
        PROGRESS_ANNOTATION: format_job_progress(record)}}})  # fmt: skip
    reason = "Stalled: step 1200 has not risen for 1800 s"
    server.update("JobSet", NS, PREFIX, {"metadata": {"annotations": ending_annotations(
        "stalled", reason, "2026-11-22T12:41:10Z")}})  # fmt: skip
    code, out, err = cli(server, capsys, "status", "mnist", "-n", NS, "-o", "json")
    report = json.loads(out)
    assert code == 0 and (report["job_progress"]["eta"], report["job_progress"]["checkpoint_step"]) == (
        "2026-11-22T13:05:40Z", 1000), err  # fmt: skip
    assert report["training"]["state"] == "Failed" and reason in report["training"]["detail"]
    code, out, _ = cli(server, capsys, "status", "mnist")
    assert re.search(r"Checkpoint +step 1000", out) and re.search(rf"Run ended +stalled: {reason}", out), out
    assert cli(server, capsys, "wait", "mnist")[:2] == (1, "mnist: Failed\n")
    code, out, _ = cli(server, capsys, "list", "-o", "json")
    assert [(run["state"], run["step"]) for run in json.loads(out)] == [("Failed", 1200)]
    with kf.JobSetController(server, jobset):  # the deadline the supervisor set: DeadlineEndsTheRun fails the run
        server.update("Job", NS, f"{PREFIX}-chief-0", {"spec": {"activeDeadlineSeconds": 1}})
        assert eventually(lambda: "terminalState" in (server.get("JobSet", NS, PREFIX) or {}).get("status", {}))
    code, out, err = cli(server, capsys, "wait", "mnist")
    assert (code, out) == (1, "mnist: Failed\n") and "FailJobSetFailurePolicyAction" in err and reason in err, err
    report = json.loads(cli(server, capsys, "status", "mnist", "-o", "json")[1])
    assert report["job_progress"]["step"] == 1200 and report["warnings"] == []  # JobSet deleted the other Jobs


def test_wait_goes_on_while_suspended_and_answers_3_once_the_jobset_is_deleted(
    server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    release(server, state="suspended")
    code, out, err = cli(server, capsys, "wait", "mnist", "--timeout", "1s")
    assert (code, out) == (124, "") and "note: release mnist's run is suspended" in err, err
    argv = [sys.executable, "-m", "tfchart", "wait", "mnist", "-n", NS, "--kubeconfig", str(server.kubeconfig(NS))]
    waiting = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    listed = Call("list", "jobsets", NS, label_selector="app.kubernetes.io/instance=mnist,app.kubernetes.io/part-of="
                  "tf-distributed")  # fmt: skip
    server.wait_for(listed, server.calls.count(listed) + 1)
    for key in [key for key in server.objects if key[0] in ("jobsets", "jobs")]:
        server.delete(kf.KIND_OF[key[0]], NS, key[2])
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 3 and "release mnist was deleted while waiting" in err, err


def test_wait_goes_on_while_upgrade_recreate_recreates_the_jobset(server: KubeServer) -> None:
    """The JobSet marked for re-creation, deleted with its Jobs, then created anew by helm and completed: the wait
    answers the new run's success, not 3."""
    release(server)
    argv = [sys.executable, "-m", "tfchart", "wait", "mnist", "-n", NS, "--kubeconfig", str(server.kubeconfig(NS))]
    waiting = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    listed = Call("list", "jobsets", NS, label_selector="app.kubernetes.io/instance=mnist,app.kubernetes.io/part-of="
                  "tf-distributed")  # fmt: skip
    server.wait_for(listed)
    server.update("JobSet", NS, PREFIX, {"metadata": {"annotations": {"tf-distributed.io/recreating": "true"}}})
    server.wait_for(listed, server.calls.count(listed) + 1)  # saw the mark
    for key in [key for key in server.objects if key[0] in ("jobsets", "jobs", "pods")]:
        server.delete(kf.KIND_OF[key[0]], NS, key[2])
    server.wait_for(listed, server.calls.count(listed) + 2)  # saw no JobSet at least once
    release(server, state="completed")
    out, err = waiting.communicate(timeout=60)
    assert (waiting.returncode, out) == (0, "mnist: Succeeded\n"), err
    assert "note: release mnist's run is being re-created (`tfchart upgrade --recreate` deletes its JobSet)" in err


def test_logs_default_to_the_chief_s_job_or_worker_0(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    release(server)
    assert cli(server, capsys, "logs", "mnist", "-n", NS) == (0, STATUS_LINE + "\n", "")
    server.set_log(NS, f"{PREFIX}-worker-0-1-q8z4w", ["worker one"])
    assert cli(server, capsys, "logs", "mnist", "--role", "worker", "--index", "1")[1] == "worker one\n"
    server.reset()
    release(server, "training.strategy=multi_worker_mirrored", "chief.replicas=0")
    server.set_log(NS, f"{PREFIX}-worker-0-0-q8z4w", ["worker zero is the chief"])
    assert cli(server, capsys, "logs", "mnist")[1] == "worker zero is the chief\n"


# -- stop, suspend, resume -----------------------------------------------------------------------------------------


def test_stop_ends_a_running_jobset_through_its_chief_job_s_deadline(
    server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    jobset = release(server)
    code, _, err = cli(server, capsys, "stop", "mnist", "-n", NS)
    assert code == 1 and f"the JobSet {PREFIX} of release mnist has not ended" in err and server.writes() == []
    with kf.JobSetController(server, jobset):
        code, out, err = cli(server, capsys, "stop", "mnist", "--end-run")
        assert code == 0, err
        assert [(method, path) for method, path, _ in writes(server)] == [
            ("PATCH", f"{JOBSETS}/{PREFIX}"), ("PATCH", f"{JOBS}/{PREFIX}-chief-0"), ("PATCH", f"{JOBSETS}/{PREFIX}")]
        assert writes(server)[0][2] == {"metadata": {"annotations": {WANTED_ANNOTATION: "stopped"}}}  # asked, then
        assert writes(server)[1][2] == {"spec": {"activeDeadlineSeconds": 1}}  # carried out: no supervisor here
        assert "DeadlineEndsTheRun rule fails the run" in out
        code, out, err = cli(server, capsys, "wait", "mnist", "-n", NS, "--timeout", "60s")
        assert code == 1 and "stopped by tfchart stop (training ended early)" in err
        assert eventually(lambda: "terminalState" in (server.get("JobSet", NS, PREFIX) or {}).get("status", {}))
    code, out, err = cli(server, capsys, "wait", "mnist", "-n", NS)
    assert code == 1 and "FailJobSetFailurePolicyAction" in err and "stopped by tfchart stop" in err
    found = server.get("JobSet", NS, PREFIX)
    assert found is not None and found["metadata"]["annotations"][ENDING_ANNOTATION] == "stopped"
    assert {key[2] for key in server.objects if key[0] == "jobs"} == {f"{PREFIX}-chief-0"}  # JobSet deleted the rest
    before = len(server.writes())
    code, out, _ = cli(server, capsys, "stop", "mnist", "-n", NS)
    assert code == 0 and "nothing to stop" in out and len(server.writes()) == before


def test_suspend_and_resume_a_jobset(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    jobset = release(server)
    with kf.JobSetController(server, jobset):
        code, out, err = cli(server, capsys, "suspend", "mnist", "-n", NS, "--timeout", "60s")
        assert code == 0, err
        asked, (method, path, body) = writes(server)
        assert asked[2] == {"metadata": {"annotations": {WANTED_ANNOTATION: "suspended"}}}
        assert (method, path, body["spec"]) == ("PATCH", f"{JOBSETS}/{PREFIX}", {"suspend": True})
        record = parse_suspension(body["metadata"]["annotations"])
        assert record is not None and record.replicas == {}
        assert not [key for key in server.objects if key[0] == "pods"], "every pod released"
        assert f"suspended JobSet {PREFIX}" in out  # (and "waited for" the pods when it saw them stop: a race)
        assert cli(server, capsys, "suspend", "mnist")[0] == 0 and len(server.writes()) == 2  # nothing to do again
        code, out, _ = cli(server, capsys, "status", "mnist", "-n", NS, "-o", "json")
        assert json.loads(out)["training"]["state"] == "Suspended"
        code, out, err = cli(server, capsys, "resume", "mnist", "-n", NS)
        assert code == 0, err
        assert writes(server)[-1][1:] == (f"{JOBSETS}/{PREFIX}", {
            "metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}, "spec": {"suspend": False}})  # fmt: skip
        assert eventually(lambda: len([key for key in server.objects if key[0] == "pods"]) == 4)  # JobSet's doing
    code, _, err = cli(server, capsys, "resume", "mnist")
    assert code == 1 and f"its JobSet {PREFIX} runs" in err


def test_suspend_and_resume_a_jobset_before_its_controller_made_the_jobs(
    server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The release's only object with its labels is the JobSet (no child Job yet): found through it, as status does."""
    doc = next(d for d in kf.rendered(sets=JOBSET, namespace=NS) if d["kind"] == "JobSet")
    server.add(*kf.crds(*kf.JOBSET_CRDS), kf.jobset(doc, "running"))
    code, out, err = cli(server, capsys, "suspend", "mnist", "--timeout", "60s")
    assert code == 0 and f"suspended JobSet {PREFIX}" in out, err
    assert server.get("JobSet", NS, PREFIX)["spec"]["suspend"] is True  # type: ignore[index]
    code, out, err = cli(server, capsys, "resume", "mnist")
    assert code == 0 and f"resumed JobSet {PREFIX}" in out, err
    assert server.get("JobSet", NS, PREFIX)["spec"]["suspend"] is False  # type: ignore[index]


def test_suspend_and_resume_through_kueue_s_workload(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    jobset = release(server, "scheduling.kueue.queueName=team-q")
    uid = server.get("JobSet", NS, PREFIX)["metadata"]["uid"]  # type: ignore[index]
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": PREFIX, "uid": uid, "controller": True}
    server.add(*kf.crds(*kf.WORKLOAD_CRDS), {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"jobset-{PREFIX}-3f1c2", "namespace": NS, "ownerReferences": [owner]},
        "spec": {"queueName": "team-q", "active": True, "podSets": []}})  # fmt: skip
    workload = f"{WORKLOADS}/jobset-{PREFIX}-3f1c2"
    with kf.JobSetController(server, jobset):
        code, _, err = cli(server, capsys, "suspend", "mnist", "--timeout", "60s")
        assert code == 0, err
        assert [(path, body.get("spec")) for _, path, body in writes(server)] == [
            (f"{JOBSETS}/{PREFIX}", None), (f"{JOBSETS}/{PREFIX}", None), (workload, {"active": False})]
        assert server.get("JobSet", NS, PREFIX)["spec"]["suspend"] is True  # type: ignore[index]  # Kueue's doing
        assert not [key for key in server.objects if key[0] == "pods"]
        code, _out, err = cli(server, capsys, "resume", "mnist", "-n", NS)
        assert code == 0, err
        assert [(path, body) for _, path, body in writes(server)[3:]] == [
            (f"{JOBSETS}/{PREFIX}", {"metadata": {"annotations": {WANTED_ANNOTATION: "running"}}}),
            (workload, {"spec": {"active": True}}),
            (f"{JOBSETS}/{PREFIX}", {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}})]


# -- preflight ------------------------------------------------------------------------------------------------------


def test_preflight_checks_that_jobset_is_served_and_its_controller_runs(server: KubeServer) -> None:
    docs = kf.rendered(sets=JOBSET, namespace=NS)
    planned_release = preflight.Context(server.api(), docs, NS)
    assert (planned_release.adds["count/jobsets.jobset.x-k8s.io"], planned_release.adds["count/jobs.batch"]) \
        == (1, 3)  # one JobSet, a Job per role (ps, worker, chief)  # fmt: skip
    [missing] = [f for f in preflight.run(server.api(), docs, "mnist", NS) if f.check == "jobset"]
    assert (missing.severity, missing.message.split(":")[0]) == ("fail", "workload.kind=jobset but JobSet is not "
                                                                          "installed")  # fmt: skip
    server.add(*kf.crds(*kf.JOBSET_CRDS), *kf.jobset_webhook(ready=0))
    found = [(f.severity, f.message) for f in preflight.run(server.api(), docs, "mnist", NS) if f.check == "jobset"]
    assert found[0] == ("ok", "the API server serves jobsets.jobset.x-k8s.io/v1alpha2")
    assert found[1][0] == "fail" and "webhook Service jobset-system/jobset-webhook-service has no ready endpoint" \
        in found[1][1]  # fmt: skip
    server.add(*kf.jobset_webhook(ready=2))
    found = [(f.severity, f.message) for f in preflight.run(server.api(), docs, "mnist", NS) if f.check == "jobset"]
    assert found[1] == ("ok", "JobSet's controller runs: its webhook Service jobset-system/jobset-webhook-service has "
                              "2 ready endpoint(s)")  # fmt: skip


@pytest.mark.parametrize("frameworks", [["batch/job", "pod"], ["batch/job", "jobset.x-k8s.io/jobset"]])
def test_preflight_reads_kueue_s_queue_from_the_jobset_and_its_jobset_integration(
    server: KubeServer, frameworks: list[str]
) -> None:
    docs = kf.rendered(sets=(*JOBSET, "scheduling.kueue.queueName=team-q"), namespace=NS)
    planned_release = preflight.Context(server.api(), docs, NS)
    assert planned_release.label(QUEUE_LABEL) == "team-q"
    config = {"integrations": {"frameworks": frameworks}}
    server.add(*kf.crds(*kf.KUEUE_CRDS), kf.local_queue("team-q", NS, "team"),
               kf.cluster_queue("team", [{"default": {"cpu": "100", "memory": "200Gi"}}]),
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config",
                                                                     "namespace": "kueue-system"},
                "data": {"controller_manager_config.yaml": json.dumps(config)}})  # fmt: skip
    first, *rest = check_kueue(planned_release)
    if "jobset.x-k8s.io/jobset" in frameworks:
        assert (first.severity, first.message) == ("ok", "Kueue's configuration enables the jobset.x-k8s.io/jobset "
                                                         "integration")  # fmt: skip
    else:
        assert first.severity == "fail" and "does not enable the jobset.x-k8s.io/jobset integration" in first.message
        assert "(integrations.frameworks: batch/job, pod)" in first.message
    assert [f.severity for f in rest] == ["ok", "ok"]  # LocalQueue team-q, ClusterQueue team's quota


# -- upgrade ----------------------------------------------------------------------------------------------------------

DEPLOYED = [*JOBSET, "training.trainSteps=2000"]


def live_jobset(server: KubeServer, state: str, deployed: list[str] = DEPLOYED) -> None:
    helm = RecordingHelm("4", as_args(deployed))
    live_cluster(server, helm, namespace="ml-training")
    doc = next(d for d in kf.rendered(sets=deployed) if d["kind"] == "JobSet")
    server.add(*kf.crds(*kf.JOBSET_CRDS), kf.jobset(doc, state))


def test_upgrade_refuses_a_changed_run_and_recreate_recreates_the_jobset(server: KubeServer) -> None:
    live_jobset(server, "running")
    helm, _, outcome = run_upgrade(server, DEPLOYED, [*JOBSET, "training.trainSteps=4000"])
    message = refused(outcome).message
    assert f"JobSet {PREFIX}: spec.replicatedJobs[name=chief].template.spec.template.spec.containers[name=chief]" \
        in message and not helm.upgraded()  # fmt: skip
    helm, said, outcome = run_upgrade(server, DEPLOYED, [*JOBSET, "training.trainSteps=4000"], recreate=True)
    assert planned(outcome).recreated == [("JobSet", PREFIX)] and helm.upgraded()
    [delete] = [c for c in server.calls if c.verb == "delete"]
    assert (delete.resource, delete.name, delete.params) == ("jobsets", PREFIX, (("propagationPolicy", "Foreground"),))
    assert any("its Jobs and pods are stopped first" in line for line in said)


def test_recreate_after_a_failed_helm_upgrade_recreates_the_jobset(server: KubeServer) -> None:
    """A plain `helm upgrade` to 4000 steps failed on the JobSet (its webhook refused replicatedJobs): helm's newest
    revision (failed) holds the new render, the JobSet still runs the deployed one. --recreate recreates it."""
    live_jobset(server, "running")
    retrain = [*JOBSET, "training.trainSteps=4000"]
    helm, _, outcome = run_upgrade(server, DEPLOYED, retrain, recreate=True, failed=retrain)
    assert planned(outcome).recreated == [("JobSet", PREFIX)] and helm.upgraded()


@pytest.mark.parametrize(("state", "allowed"), [("running", False), ("suspended", True), ("completed", True)])
def test_a_pod_label_may_change_on_a_suspended_or_finished_jobset_only(server: KubeServer, state: str,
                                                                        allowed: bool) -> None:  # fmt: skip
    live_jobset(server, state)
    helm, said, outcome = run_upgrade(server, DEPLOYED, [*DEPLOYED, "worker.podLabels.team=vision"])
    if not allowed:
        assert "metadata.labels.team" in refused(outcome).message
        return
    assert planned(outcome).changes == [] and helm.upgraded()
    assert any(f"JobSet {PREFIX} finished this run (Completed)" in line for line in said) == (state == "completed")


def test_the_chart_keeps_a_finished_jobset_of_the_same_run_as_it_is(server: KubeServer) -> None:
    """helm template --dry-run=server: the chart's lookup finds the JobSet Completed with this render's run-spec and
    renders its live spec (a placement change leaves it alone); another run-spec is a new run, rendered anew."""
    live = kf.jobset(next(d for d in kf.rendered(sets=DEPLOYED) if d["kind"] == "JobSet"), "completed")
    live["metadata"]["annotations"] |= {"meta.helm.sh/release-name": "mnist",
                                        "meta.helm.sh/release-namespace": "ml-training"}  # as helm install left it
    live["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    server.add(*kf.crds(*kf.JOBSET_CRDS), live)  # defaulted as the API server does
    extra = ["--dry-run=server", "--kube-apiserver", server.url, "--kube-token", "test", "--disable-openapi-validation"]
    with kf.discovered("jobset.x-k8s.io/v1alpha2"):
        kept = render(sets=[*DEPLOYED, "worker.podLabels.team=vision"], namespace="ml-training", extra=extra)
        again = render(sets=[*JOBSET, "training.trainSteps=4000"], namespace="ml-training", extra=extra)
    [jobset] = [d for d in kept if d["kind"] == "JobSet"]
    assert jobset["spec"] == server.get("JobSet", "ml-training", PREFIX)["spec"]  # type: ignore[index]
    [jobset] = [d for d in again if d["kind"] == "JobSet"]
    args = jobset["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--train-steps=4000" in args and "schedulerName" not in json.dumps(jobset["spec"])
