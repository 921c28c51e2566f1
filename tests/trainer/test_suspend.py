"""Suspend and resume with real TensorFlow processes: no step lost, every pod released while suspended, and
training continued from the checkpoint of the step it reached, to Succeeded.

* On a cluster: the rendered release in the loopback API (tests/kubeapi.py) as tests/trainer/test_supervisor.py
  runs it: the chief Job under the emulated Job controller, each ps/worker StatefulSet under the emulated
  StatefulSet controller (scaled to 0 its processes end, scaled back they start again), and the rendered
  supervisor as a process throughout. `tfchart suspend` and `tfchart resume` are the real CLI.
* On this machine: `tfchart local` (the process engine), `tfchart suspend NAME --local` and
  `tfchart resume NAME --local`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, named
from tests.kubeapi import Call, JobController, StatefulSetController
from tests.trainer.test_supervisor import E2E_VALUES, NAMESPACE, PREFIX, Release
from tfchart.local.pods import LocalPod
from tfdcontract import CHIEF, PS, STATUS_FILE, SUSPENDED_ANNOTATION, WORKER, parse_step_line

pytestmark = pytest.mark.slow

LOG_EVERY = 10
TRAINING = ["ps.replicas=1", "worker.replicas=1", "training.trainSteps=160", f"training.logEverySteps={LOG_EVERY}",
            "training.checkpointEverySteps=160", "tensorboard.enabled=false", "serving.enabled=false"]  # fmt: skip
SAVED = re.compile(r"SIGTERM at step (\d+): checkpoint saved")
RESUMED = re.compile(r"resumed from checkpoint at step (\d+)")


def steps(lines: list[str]) -> list[int]:
    return [found.step for found in map(parse_step_line, lines) if found]


def status_of(storage: Path) -> dict[str, Any]:
    return dict(json.loads((storage / STATUS_FILE).read_text()))


def assert_no_step_lost(before: list[str], storage: Path) -> int:
    """The chief saved the step it reached on SIGTERM and status.json says Interrupted there; that step."""
    saved = [int(m.group(1)) for m in map(SAVED.search, before) if m]
    assert saved, "\n".join(before[-25:])
    status = status_of(storage)
    assert (status["state"], status["step"]) == ("Interrupted", saved[-1]), status
    assert steps(before) and steps(before)[-1] == saved[-1], before[-30:]  # the step line of the exact step reached
    return saved[-1]


def assert_resumed_at(saved: int, after: list[str], storage: Path) -> None:
    """Training continued from `saved` (its first step line follows it) and Succeeded."""
    resumed = [int(m.group(1)) for m in map(RESUMED.search, after) if m]
    assert resumed[:1] == [saved], after[:40]
    first = steps(after)[0]
    assert saved < first <= saved + LOG_EVERY, (saved, steps(after))
    assert status_of(storage)["state"] == "Succeeded"


def tfchart(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfchart", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def test_a_suspended_release_frees_every_pod_and_resumes_at_its_checkpoint(tmp_path: Path) -> None:
    storage = tmp_path / "data"
    sets = [f"storage.mountPath={storage}", "supervisor.pollSeconds=1", *TRAINING]
    stage = Release.rendered(sets, tmp_path / "sa")
    server, docs, pods = stage.server, stage.docs, stage.pods
    servers = [StatefulSetController(server, named(docs, "StatefulSet", f"{PREFIX}-{role}"),
                                     [p for p in pods if p.role == role], stage.cluster).start()
               for role in (PS, WORKER)]  # fmt: skip
    job = JobController(server, named(docs, "Job", f"{PREFIX}-chief"), stage.chief, stage.cluster)
    kubeconfig = ["--kubeconfig", str(server.kubeconfig(NAMESPACE))]
    chief: dict[str, list[str]] = {"before": [], "after": []}
    stepped, saved = threading.Event(), []

    def chief_line(pod: LocalPod, line: str) -> None:
        if pod.role == CHIEF:
            chief["after" if job.suspensions else "before"].append(line)
            if parse_step_line(line) and not stepped.is_set():  # held there until the suspension is asked for
                os.kill(stage.cluster.processes[pod.name].popen.pid, signal.SIGSTOP)
                stepped.set()

    def suspend_and_resume(stage: Release) -> None:
        assert stepped.wait(300), stage.lines[-30:]
        suspending = subprocess.Popen([sys.executable, "-m", "tfchart", "suspend", "mnist", *kubeconfig], cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        with server.answered_one:  # the supervisor suspended the chief Job: SIGTERM is on its way
            chief_job = Call("patch", "jobs", NAMESPACE, f"{PREFIX}-chief")
            assert server.answered_one.wait_for(lambda: any(
                r.call == chief_job and "suspend" in (r.body.get("spec") or {}) for r in server.requests), 120)
        os.kill(stage.cluster.processes[stage.chief.name].popen.pid, signal.SIGCONT)  # mid-run
        out, err = suspending.communicate(timeout=300)
        assert suspending.returncode == 0, err
        # every pod released: no pod object left, the StatefulSets at 0, no process of them running
        assert [p["metadata"]["name"] for (kind, _, _), p in server.objects.items() if kind == "pods"] == []
        assert [stage.cluster.processes[p.name].running for p in pods] == [False] * len(pods)
        assert [s.running() for s in servers] == [[], []]
        saved.append(assert_no_step_lost(chief["before"], storage))
        assert "mnist is suspended (since " in out and "tfchart resume mnist -n" in out
        resumed = tfchart("resume", "mnist", *kubeconfig)
        assert resumed.returncode == 0, resumed.stderr

    stage.hooks.append(chief_line)
    # the supervisor's Deployment Ready (the Deployment controller's report): tfchart asks it and waits
    server.update("Deployment", NAMESPACE, f"{PREFIX}-supervisor", {"status": {"replicas": 1, "readyReplicas": 1}})
    try:
        job.start()
        log = stage.supervise(docs, during=suspend_and_resume, timeout=600)
        job.join(60)
        finished = server.get("Job", NAMESPACE, f"{PREFIX}-chief")
        assert finished is not None and finished["status"]["conditions"][0]["type"] == "Complete"
        annotations = finished["metadata"].get("annotations", {})
        assert SUSPENDED_ANNOTATION not in annotations
        assert_resumed_at(saved[0], chief["after"], storage)
        assert job.suspensions == 1 and job.exit_codes == [0]
        # the suspension was no ending: the run's is its success (the order of the supervisor's writes for a
        # suspension and a resume: test_supervisor_wanted.py, the same plan without TensorFlow)
        assert annotations["tf-distributed.io/ending"] == "succeeded"
        assert [(server.get("StatefulSet", NAMESPACE, f"{PREFIX}-{role}") or {})["spec"]["replicas"]
                for role in (PS, WORKER)] == [0, 0] and "run ended (succeeded)" in log  # fmt: skip
    finally:
        for each in servers:
            each.stop()
        for supervisor in stage.supervisors:
            if supervisor.poll() is None:
                supervisor.kill()
                supervisor.wait()
        stage.cluster.stop(grace=5)
        server.close()


# -- on this machine ----------------------------------------------------------------------------------


def processes_of(run_dir: Path, pod: str = "") -> dict[int, str]:
    """pid -> command line of every process whose environment names the run directory (the pods'
    TFD_STORAGE_ROOT), or only `pod`'s (its HOSTNAME)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline, environ = (entry / "cmdline").read_bytes(), (entry / "environ").read_bytes()
            except OSError:
                continue
            if str(run_dir).encode() in cmdline + environ and (not pod or f"HOSTNAME={pod}\0".encode() in environ):
                found[int(entry.name)] = cmdline[:160].decode(errors="replace")
    return found


@pytest.mark.parametrize("kind, chief_pod", [("native", CHIEF), ("jobset", f"{CHIEF}-0-0")])
def test_a_suspended_local_run_leaves_no_process_and_resumes_at_its_checkpoint(tmp_path: Path, kind: str,
                                                                              chief_pod: str) -> None:  # fmt: skip
    sets = [arg for value in [*TRAINING, f"workload.kind={kind}"] for arg in ("--set", value)]
    running = subprocess.Popen([sys.executable, "-m", "tfchart", "local", "susp", "-f", str(E2E_VALUES), *sets],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    printed: list[str] = []
    suspending = threading.Event()

    def read() -> None:
        assert running.stdout is not None
        for line in running.stdout:
            printed.append(line)
            suspending.set() if line.startswith("suspending:") else None

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    chief = f"susp-tf-distributed-{chief_pod}"  # a JobSet's: <jobset>-chief-<jobIndex>-<completionIndex>
    try:
        chief_log = None
        deadline = time.monotonic() + 300
        while not (chief_log and steps(chief_log.read_text().splitlines())):
            assert running.poll() is None and time.monotonic() < deadline, "".join(printed[-40:])
            chief_log = next(iter(tmp_path.glob(f"runs/susp-*/pod-logs/{chief}.log")), None)
            time.sleep(0.2)
        run_dir = chief_log.parent.parent
        held = processes_of(run_dir, chief)
        for pid in held:  # mid-run until the suspension is asked for
            os.kill(pid, signal.SIGSTOP)
        asking = subprocess.Popen([sys.executable, "-m", "tfchart", "suspend", "susp", "--local"], cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert suspending.wait(120), "".join(printed[-40:])
        for pid in held:
            os.kill(pid, signal.SIGCONT)
        out, err = asking.communicate(timeout=300)
        assert asking.returncode == 0, err
        assert running.wait(60) == 75, "".join(printed[-40:])  # suspended: not finished, to be continued
        reader.join(10)
        assert f"Continue with: tfchart resume susp --local --workdir {run_dir}" in "".join(printed)
        assert processes_of(run_dir) == {}
        before = chief_log.read_text().splitlines()
        saved = assert_no_step_lost(before, run_dir)
        assert f"checkpoint saved at step {saved}" in out, out
        assert json.loads((run_dir / "local-run.json").read_text())["state"] == "Suspended"
        again = tfchart("suspend", "susp", "--local", cwd=tmp_path)
        assert again.returncode == 0 and "is already suspended" in again.stdout, again.stderr

        resumed = tfchart("resume", "susp", "--local", cwd=tmp_path, timeout=600)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr
        assert f"resuming the local run of susp in {run_dir} from its last checkpoint (step {saved})" in resumed.stdout
        assert "✓ training Succeeded" in resumed.stdout
        assert_resumed_at(saved, chief_log.read_text().splitlines()[len(before):], run_dir)
        assert processes_of(run_dir) == {}
        refused = tfchart("resume", "susp", "--local", cwd=tmp_path)
        assert refused.returncode == 1 and "has ended (Succeeded): there is nothing to resume" in refused.stderr
    finally:
        if running.poll() is None:
            running.send_signal(signal.SIGINT)
            running.wait(60)
