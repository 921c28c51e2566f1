"""The chart's rendered pods, in network namespaces with the chart's own DNS names (issue 5).

Every process starts with its rendered command, args and env; TF_CONFIG is written by the chart's
prelude from the real cluster map (…svc.cluster.local:2222), and peers are found through
/etc/hosts of each namespace, exactly the names the headless Services would give.

Supervised runs (issue 12: `launch(..., supervised=True)`, see conftest) add the rendered run
supervisor against a loopback API, the chief Job's controller and the pod controllers: a
bring-your-own chief and the chief's SIGTERM fault must end with ps/worker scaled down by it.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import NAMESPACE, SUPERVISOR, Run
from tfdcontract import END_REASON_ANNOTATION as END_REASON
from tfdcontract import ENDED_AT_ANNOTATION as ENDED_AT
from tfdcontract import ENDING_ANNOTATION as ENDING

pytestmark = pytest.mark.slow

PREFIX = "mnist-tf-distributed"
STS = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
SELF_DOWN = ("PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{PREFIX}-supervisor/scale",
             {"spec": {"replicas": 0}})


def status(run: Run) -> dict[str, object]:
    doc: dict[str, object] = json.loads((run.root / "status.json").read_text())
    return doc


def assert_scaled_down(run: Run, kind: str, reason: str) -> None:
    """The supervisor ended the run: both StatefulSets at 0 in the API, every ps/worker process (and the
    supervisor) ended by the pod controllers on that word, the ending recorded on the chief Job, and
    nothing else written."""
    kube, servers = run.kube, run.names("ps", "worker")
    kube.wait_scaled_down(servers)
    assert kube.ended == {**dict.fromkeys(servers, 0), SUPERVISOR: 0}, kube.ended  # exit 0 on SIGTERM
    running = [name for name, p in run.cluster.processes.items() if p.popen.poll() is None]
    assert running == [] and kube.supervisor.returncode == 0, running
    expected: list[tuple[str, str, Any]] = []
    for role in ("ps", "worker"):
        assert kube.get("StatefulSet", f"{PREFIX}-{role}")["spec"]["replicas"] == 0
        expected.append(("PATCH", f"{STS}/{PREFIX}-{role}/scale", {"spec": {"replicas": 0}}))
    annotations = kube.get("Job", f"{PREFIX}-chief")["metadata"]["annotations"]
    assert (annotations[ENDING], annotations[END_REASON]) == (kind, reason)
    ending = {ENDING: kind, END_REASON: reason, ENDED_AT: "<now>"}
    expected.append(("PATCH", f"{JOBS}/{PREFIX}-chief", {"metadata": {"annotations": ending}}))
    assert kube.get("Deployment", f"{PREFIX}-supervisor")["spec"]["replicas"] == 0
    writes = []
    for method, path, body in kube.api.writes():
        annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
        if ENDED_AT in annotations:
            ended_at = datetime.fromisoformat(annotations[ENDED_AT].replace("Z", "+00:00")).timestamp()
            assert time.time() - 600 < ended_at <= time.time() + 1
            annotations[ENDED_AT] = "<now>"
        writes.append((method, path, body))
    assert writes == [*expected, SELF_DOWN]
    assert f"run ended ({kind}): {reason}" in "\n".join(kube.supervisor_log)


def assert_tensorboard_serves_the_loss(run: Run) -> None:
    """TensorBoard, asked from another pod's network by the chart's names, serves the loss series up to the
    chief's final step."""
    tensorboard = run.net.hosts["mnist-tf-distributed-tensorboard-0"]
    port = next(a.split("=")[1] for a in run.pod("tensorboard").argv if a.startswith("--port="))
    # TensorBoard reads the event files in the background: polled until its loss series reaches the
    # final step (an earlier answer can be a partial one)
    query = (
        "import json, time, urllib.error, urllib.request\n"
        f"base, final = 'http://{tensorboard.address}:{port}', {run.last_step()}\n"
        "deadline = time.time() + 180\n"
        "while True:\n"
        "    try:\n"
        "        tags = json.load(urllib.request.urlopen(base + '/data/plugin/scalars/tags', timeout=5))\n"
        "        run = next((r for r, t in tags.items() if 'loss' in t and 'examples_per_sec' in t), None)\n"
        "        url = base + '/data/plugin/scalars/scalars?run=' + str(run) + '&tag=loss'\n"
        "        points = json.load(urllib.request.urlopen(url, timeout=5)) if run is not None else []\n"
        "        if points and points[-1][1] == final:\n"
        "            break\n"
        "    except (OSError, urllib.error.HTTPError):\n"
        "        pass\n"
        "    if time.time() > deadline:\n"
        "        raise SystemExit('no loss series up to the final step')\n"
        "    time.sleep(0.5)\n"
        "print(json.dumps({'tags': tags, 'loss_points': len(points)}))\n"
    )
    answer = run.net.exec_in("client", [sys.executable, "-c", query], timeout=240)
    assert answer.returncode == 0, answer.stderr
    served = json.loads(answer.stdout)
    assert served["loss_points"] >= 5
    assert any({"loss", "examples_per_sec"} <= set(tags) for tags in served["tags"].values())


def resumed_at(log: str) -> int:
    found = re.findall(r"resumed from checkpoint at step (\d+)", log)
    assert found, log[-2000:]
    return int(found[-1])


def latest_checkpoint_step(run: Run) -> int:
    recorded = (run.root / "checkpoints" / "checkpoint").read_text()
    found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', recorded, re.M)
    assert found, "no checkpoint recorded"
    return int(found.group(1))


def test_faults_worker_chief_and_ps(launch: Callable[..., Run], capsys: pytest.CaptureFixture[str]) -> None:
    """Parameter-server training under the chart's DNS names, with TensorBoard, through kill -9 of a worker,
    the chief and the ps: each fault's steps lost, then Succeeded and TensorBoard serving the loss."""
    run = launch(["ps.replicas=1", "worker.replicas=2", "training.trainSteps=900"], client=True)
    chief, ps, worker = run.pod("chief").name, run.pod("ps").name, run.pod("worker", 1).name
    assert ".svc.cluster.local:2222" in run.pod("chief").env["TFD_CLUSTER"], "the cluster map keeps the chart's names"
    report: dict[str, int] = {}

    # 1. kill -9 a worker and restart it under the same name and address, as its StatefulSet would.
    at_worker_kill = run.wait_for_step(150)
    lines_before = len(run.logs[chief])
    run.cluster.kill(worker)
    run.restart(worker)
    run.wait_for_step(at_worker_kill + 100)
    after = [int(s) for s in re.findall(r"^step (\d+),", "\n".join(run.logs[chief][lines_before:]), re.MULTILINE)]
    # The coordinator re-runs the lost worker's closures elsewhere: the global step keeps growing.
    report["worker kill -9 (steps lost)"] = max(0, at_worker_kill - min(after))

    # 2. kill -9 the chief; the Job's restart resumes from the last checkpoint. The steps lost are
    # counted from the last step the killed chief logged (it may have gone on after step 350).
    run.wait_for_step(350)
    run.cluster.kill(chief)
    at_kill = run.last_step()
    assert status(run)["state"] == "Running"  # a chief killed with -9 records no ending
    checkpoint = latest_checkpoint_step(run)
    run.logs[chief] = []
    run.restart(chief)
    resumed = run.wait_for_step(at_kill + 1) and resumed_at(run.log(chief))
    assert 0 < resumed == checkpoint <= at_kill  # from the last checkpoint, never from step 0
    report["chief kill -9 (steps lost)"] = at_kill - resumed

    # 3. kill -9 the ps: the chief fails with a clear message; restarted (ps first), it resumes.
    run.wait_for_step(resumed + 200)
    run.cluster.kill(ps, signal.SIGKILL)
    code = run.wait_chief(timeout=300)
    assert code == 3, run.log(chief)[-2000:]
    at_ps_kill = run.last_step()
    errors = [line for line in run.log(chief).splitlines() if line.startswith("trainer: error:")]
    assert len(errors) == 1, run.log(chief)[-3000:]  # one line that says what to do, no traceback
    assert "lost ps:0" in errors[0] and "resume from the checkpoint" in errors[0], errors[0]
    assert "Traceback" not in run.log(chief)
    ended = status(run)
    assert ended["state"] == "Failed" and "lost ps:0" in str(ended["message"]), ended
    checkpoint = latest_checkpoint_step(run)
    # ps first, and listening before the chief's retry: a chief that meets a ps still starting fails
    # again with exit 3 and Kubernetes' Job would retry it once more; this harness restarts it once
    run.logs[ps] = []
    run.restart(ps)
    run.wait_for_line(ps, "server listening on")
    run.logs[chief] = []
    run.restart(chief)
    run.wait_for_step(at_ps_kill + 1)
    resumed_after_ps = resumed_at(run.log(chief))
    assert 0 < resumed_after_ps == checkpoint <= at_ps_kill
    report["ps kill -9 (steps lost)"] = at_ps_kill - resumed_after_ps

    assert run.wait_chief(timeout=300) == 0, run.log(chief)[-3000:]
    result = status(run)
    assert result["state"] == "Succeeded" and float(result["accuracy"]) >= 0.95, result  # type: ignore[arg-type]
    # peers were reached by name: the workers' servers listened on the chart's address
    assert f"{worker}.{PREFIX}-worker.{NAMESPACE}.svc.cluster.local:2222" in run.log(worker)
    assert_tensorboard_serves_the_loss(run)
    with capsys.disabled():
        print("\nsteps lost per fault:", json.dumps(report))


def test_chief_sigterm_loses_no_steps(launch: Callable[..., Run], capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM (Kubernetes stopping the pod) instead of kill -9: the chief stops at a step boundary,
    saves that exact step and exits 143; the Job controller's retry (a new chief process) resumes there
    and completes: 0 steps lost. The supervisor then scales ps and workers down (issue 12)."""
    run = launch(["ps.replicas=1", "worker.replicas=2", "training.trainSteps=600", "tensorboard.enabled=false"],
                 supervised=True)
    chief = run.pod("chief").name
    run.wait_for_step(140)
    first = run.cluster.processes[chief]
    started = time.monotonic()
    run.cluster.kill(chief, signal.SIGTERM)  # the whole process group, then waits for the exit
    took = time.monotonic() - started
    code = first.popen.returncode
    log = run.log(chief)
    assert code == 143, log[-3000:]
    stops = re.findall(r"SIGTERM at step (\d+): checkpoint saved, exiting$", log, re.MULTILINE)
    assert len(stops) == 1, log[-3000:]
    stopped = int(stops[0])
    assert stopped == run.last_step() >= 140  # the step line of the exact step reached
    assert latest_checkpoint_step(run) == stopped and (run.root / "checkpoints" / f"ckpt-{stopped}.index").is_file()
    ended = status(run)
    assert (ended["state"], ended["step"], ended["checkpoint_step"]) == ("Interrupted", stopped, stopped), ended
    assert f"SIGTERM at step {stopped}: checkpoint saved" in str(ended["message"]), ended
    assert "Traceback" not in log and "ran out while" not in log and took < 25  # on its own, within the grace
    servers = run.names("ps", "worker")
    assert [run.cluster.processes[name].popen.poll() for name in servers] == [None] * len(servers)  # still serving
    assert run.kube.api.writes() == []  # a failed pod the Job retries is no ending: the supervisor waits
    run.logs[chief] = []  # the retry comes after the Job controller's back-off (10 s)
    run.wait_replaced(chief, first)
    run.wait_for_step(stopped + 1)
    resumed = resumed_at(run.log(chief))
    assert run.wait_chief(timeout=300) == 0, run.log(chief)[-3000:]
    result = status(run)
    assert result["state"] == "Succeeded" and float(result["accuracy"]) >= 0.95, result  # type: ignore[arg-type]
    assert resumed == stopped
    condition = run.kube.wait_job()
    assert condition["type"] == "Complete" and run.kube.job.exit_codes == [143, 0], (condition, run.kube.job.exit_codes)
    assert_scaled_down(run, "succeeded", f"Succeeded: Job {PREFIX}-chief completed")
    with capsys.disabled():
        print(
            "\nchief SIGTERM:",
            json.dumps({"stopped at": stopped, "resumed at": resumed, "steps lost": stopped - resumed,
                        "exit code": code, "seconds to exit": round(took, 2),
                        "ended by scale-down": run.kube.ended}),
        )


def byo_chief(go: Path, exit_code: int) -> str:
    """A bring-your-own chief: a shell command that exits `exit_code` once `go` exists (the test
    creates it when the ps/worker servers listen, so they are up when the run ends)."""
    return f"chief.command={{sh,-c,until [ -e {go} ]; do sleep 0.2; done; exit {exit_code}}}"


def start_byo(launch: Callable[..., Run], go: Path, exit_code: int, *sets: str) -> Run:
    run = launch(["ps.replicas=1", "worker.replicas=2", "tensorboard.enabled=false", byo_chief(go, exit_code), *sets],
                 supervised=True)
    assert run.pod("chief").argv[-3:] == ["sh", "-c", f"until [ -e {go} ]; do sleep 0.2; done; exit {exit_code}"]
    for name in run.names("ps", "worker"):
        run.wait_for_line(name, "server listening on")
    assert run.kube.ended == {} and run.kube.api.writes() == []
    go.touch()
    return run


def test_bring_your_own_chief_success_scales_ps_and_workers_down(launch: Callable[..., Run], tmp_path: Path) -> None:
    run = start_byo(launch, tmp_path / "go", 0)
    condition = run.kube.wait_job()
    assert condition["type"] == "Complete" and run.kube.job.exit_codes == [0], condition
    assert_scaled_down(run, "succeeded", f"Succeeded: Job {PREFIX}-chief completed")


def test_bring_your_own_chief_failing_its_last_retry_scales_ps_and_workers_down(
    launch: Callable[..., Run], tmp_path: Path
) -> None:
    run = start_byo(launch, tmp_path / "go", 1, "chief.backoffLimit=1")
    condition = run.kube.wait_job()
    assert (condition["type"], condition["reason"]) == ("Failed", "BackoffLimitExceeded"), condition
    assert run.kube.job.exit_codes == [1, 1] and run.kube.job.pods_started == 2  # one retry, a new process
    assert_scaled_down(run, "failed", "Failed: BackoffLimitExceeded: Job has reached the specified backoff limit")


def test_sync_workers_restarted_after_success_never_train_again(launch: Callable[..., Run]) -> None:
    """Sync all-reduce under the chart's DNS names trains to Succeeded. A StatefulSet restarts a worker whatever
    happened (node failure, eviction) after the chief succeeded: the restarted worker must not start a second
    training that blocks for good waiting for a chief that is gone; it idles with its port answering probes and
    exits 0 on SIGTERM."""
    run = launch(["training.strategy=multi_worker_mirrored", "worker.replicas=2", "training.trainSteps=300",
                  "training.batchSize=63", "tensorboard.enabled=false"])
    assert {p.role for p in run.pods} == {"chief", "worker"}  # no ps
    assert run.wait_chief(timeout=300) == 0, run.log(run.pod("chief").name)[-3000:]
    result = status(run)
    assert result["state"] == "Succeeded" and float(result["accuracy"]) >= 0.95, result  # type: ignore[arg-type]
    for index in (0, 1):
        worker = run.pod("worker", index).name
        run.cluster.kill(worker)
        run.logs[worker] = []
        run.restart(worker)
    names = [run.pod("worker", index).name for index in (0, 1)]
    for name in names:
        # the decision, logged: a worker that logs it idles until SIGTERM and cannot train any more
        run.wait_for_line(name, "does not train; idling until SIGTERM", timeout=240)
    for name in names:
        assert run.cluster.processes[name].popen.poll() is None, run.log(name)[-2000:]
        run.cluster.kill(name, signal.SIGTERM)
        assert run.cluster.processes[name].popen.returncode == 0, run.log(name)[-2000:]
        log = run.log(name)  # the whole of it: the process has exited
        assert "already Succeeded" in log and not re.search(r"^step \d+,|Traceback", log, re.MULTILINE), log[-2000:]


def test_sync_workers_without_a_chief_all_exit_0_when_training_ends(launch: Callable[..., Run]) -> None:
    """chief.replicas=0: worker 0 is the chief (TensorFlow's convention) and the workers are an
    Indexed Job. Each worker takes its index from the completion-index annotation, trains in lockstep
    under the chart's DNS names, and exits 0 once worker 0 reported success: nothing idles, so nothing
    holds its accelerator, and a Job does not restart a pod that succeeded."""
    run = launch(["training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=3",
                  "training.trainSteps=150", "training.batchSize=63", "tensorboard.enabled=false"])
    assert not [p for p in run.pods if p.role == "chief"]
    names = [run.pod("worker", index).name for index in (0, 1, 2)]
    assert names == [f"mnist-tf-distributed-worker-{index}" for index in (0, 1, 2)]
    codes = {name: run.wait_exit(name, 300) for name in names}
    assert codes == dict.fromkeys(names, 0), {name: run.log(name)[-2000:] for name in names}
    result = status(run)
    assert result["state"] == "Succeeded" and result["step"] == 150, result
    assert float(result["accuracy"]) >= 0.9, result  # type: ignore[arg-type]
    assert list((run.root / "export" / "mnist").glob("*/saved_model.pb"))
    chief_log = run.log(names[0])
    assert "training Succeeded at step 150" in chief_log and re.search(r"^step 150,", chief_log, re.MULTILINE)
    # peers were reached by the chart's names, resolved only through each namespace's hosts file
    assert json.loads(run.pod("worker", 2).env["TFD_CLUSTER"]) == {
        "worker": [f"{name}.mnist-tf-distributed-worker.ml-training.svc.cluster.local:2222" for name in names]
    }
    for name in names[1:]:
        log = run.log(name)
        assert "Succeeded; exiting" in log and "Traceback" not in log, log[-2000:]
        assert not re.search(r"^step \d+,", log, re.MULTILINE), "only the chief (worker 0) prints step lines"
