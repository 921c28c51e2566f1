"""The chart's rendered pods, in network namespaces with the chart's own DNS names (issue 5).

Every process starts with its rendered command, args and env; TF_CONFIG is written by the chart's
prelude from the real cluster map (…svc.cluster.local:2222), and peers are found through
/etc/hosts of each namespace, exactly the names the headless Services would give.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Callable

import pytest

from tests.e2e.conftest import Run

pytestmark = pytest.mark.slow


def status(run: Run) -> dict[str, object]:
    return json.loads((run.root / "status.json").read_text())


def test_parameter_server_with_chart_dns_names_and_tensorboard(launch: Callable[..., Run]) -> None:
    run = launch(["ps.replicas=1", "worker.replicas=2"], client=True)
    chief = run.pod("chief")
    tf_config_source = chief.env["TFD_CLUSTER"]
    assert ".svc.cluster.local:2222" in tf_config_source, "the cluster map must keep the chart's DNS names"
    assert run.wait_chief(timeout=300) == 0, run.log(chief.name)[-3000:]
    result = status(run)
    assert result["state"] == "Succeeded" and float(result["accuracy"]) >= 0.95, result  # type: ignore[arg-type]
    # Peers were reached by name: the workers' servers listened on the chart's address.
    assert "mnist-tf-distributed-worker-1.mnist-tf-distributed-worker.ml-training.svc.cluster.local:2222" in run.log(
        "mnist-tf-distributed-worker-1"
    )

    tensorboard = run.net.hosts["mnist-tf-distributed-tensorboard-0"]
    port = next(a.split("=")[1] for a in run.pod("tensorboard").argv if a.startswith("--port="))
    query = (
        "import json, time, urllib.request\n"
        f"base = 'http://{tensorboard.address}:{port}'\n"
        "deadline = time.time() + 90\n"
        "while True:\n"
        "    try:\n"
        "        tags = json.load(urllib.request.urlopen(base + '/data/plugin/scalars/tags', timeout=5))\n"
        "        if any('loss' in t and 'examples_per_sec' in t for t in tags.values()):\n"
        "            break\n"
        "    except OSError:\n"
        "        pass\n"
        "    if time.time() > deadline:\n"
        "        raise SystemExit('no scalars')\n"
        "    time.sleep(2)\n"
        "run = next(r for r, t in tags.items() if 'loss' in t)\n"
        "url = base + '/data/plugin/scalars/scalars?run=' + run + '&tag=loss'\n"
        "points = json.load(urllib.request.urlopen(url, timeout=5))\n"
        "print(json.dumps({'tags': tags, 'loss_points': len(points)}))\n"
    )
    answer = run.net.exec_in("client", [sys.executable, "-c", query], timeout=120)
    assert answer.returncode == 0, answer.stderr
    served = json.loads(answer.stdout)
    assert served["loss_points"] >= 5
    assert any({"loss", "examples_per_sec"} <= set(tags) for tags in served["tags"].values())


def test_sync_all_reduce_with_chart_dns_names(launch: Callable[..., Run]) -> None:
    run = launch(["training.strategy=multi_worker_mirrored", "worker.replicas=1", "training.trainSteps=300"])
    assert {p.role for p in run.pods} == {"chief", "worker", "tensorboard"}
    assert run.wait_chief(timeout=300) == 0, run.log(run.pod("chief").name)[-3000:]
    result = status(run)
    assert result["state"] == "Succeeded" and float(result["accuracy"]) >= 0.95, result  # type: ignore[arg-type]


def resumed_at(log: str) -> int:
    found = re.findall(r"resumed from checkpoint at step (\d+)", log)
    assert found, log[-2000:]
    return int(found[-1])


def test_faults_worker_chief_and_ps(launch: Callable[..., Run], capsys: pytest.CaptureFixture[str]) -> None:
    run = launch(["ps.replicas=1", "worker.replicas=2", "training.trainSteps=900", "tensorboard.enabled=false"])
    chief, ps, worker = run.pod("chief").name, run.pod("ps").name, run.pod("worker", 1).name
    report: dict[str, int] = {}

    # 1. kill -9 a worker and restart it under the same name and address, as its StatefulSet would.
    at_worker_kill = run.wait_for_step(150)
    lines_before = len(run.logs[chief])
    run.cluster.kill(worker)
    run.cluster.restart(worker)
    run.wait_for_step(at_worker_kill + 100)
    after = [int(s) for s in re.findall(r"^step (\d+),", "\n".join(run.logs[chief][lines_before:]), re.MULTILINE)]
    # The coordinator re-runs the lost worker's closures elsewhere: the global step keeps growing.
    report["worker kill -9 (steps lost)"] = max(0, at_worker_kill - min(after))

    # 2. kill -9 the chief; the Job's restart resumes from the last checkpoint.
    at_kill = run.wait_for_step(350)
    run.cluster.kill(chief)
    run.logs[chief] = []
    run.cluster.restart(chief)
    resumed = run.wait_for_step(at_kill + 1) and resumed_at(run.log(chief))
    assert 0 < resumed <= at_kill
    report["chief kill -9 (steps lost)"] = at_kill - resumed

    # 3. kill -9 the ps: the chief fails with a clear message; restarted (ps first), it resumes.
    at_ps_kill = run.wait_for_step(resumed + 200)
    run.cluster.kill(ps, signal.SIGKILL)
    code = run.wait_chief(timeout=120)
    assert code == 3, run.log(chief)[-2000:]
    failure = [line for line in run.log(chief).splitlines() if "error" in line.lower() and "ps" in line]
    assert failure, run.log(chief)[-2000:]
    assert "Traceback" not in run.log(chief)
    run.cluster.restart(ps)
    run.logs[chief] = []
    run.cluster.restart(chief)
    run.wait_for_step(at_ps_kill + 1)
    resumed_after_ps = resumed_at(run.log(chief))
    assert 0 < resumed_after_ps <= at_ps_kill
    report["ps kill -9 (steps lost)"] = at_ps_kill - resumed_after_ps

    assert run.wait_chief(timeout=300) == 0, run.log(chief)[-3000:]
    result = status(run)
    assert result["state"] == "Succeeded" and float(result["accuracy"]) >= 0.95, result  # type: ignore[arg-type]
    with capsys.disabled():
        print("\nsteps lost per fault:", json.dumps(report))


def test_chief_sigterm_loses_no_steps(launch: Callable[..., Run], capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM (Kubernetes stopping the pod) instead of kill -9: the chief stops at a step boundary,
    saves that exact step and exits 143; the Job's restart resumes there and completes: 0 steps lost."""
    run = launch(["ps.replicas=1", "worker.replicas=2", "training.trainSteps=600", "tensorboard.enabled=false"])
    chief = run.pod("chief").name
    run.wait_for_step(140)
    started = time.monotonic()
    run.cluster.kill(chief, signal.SIGTERM)  # the whole process group, then waits for the exit
    took = time.monotonic() - started
    code = run.cluster.processes[chief].popen.returncode
    log = run.log(chief)
    assert code == 143, log[-3000:]
    stops = re.findall(r"SIGTERM at step (\d+): checkpoint saved, exiting$", log, re.MULTILINE)
    assert len(stops) == 1, log[-3000:]
    stopped = int(stops[0])
    assert stopped == run.last_step() >= 140  # the step line of the exact step reached
    assert status(run)["state"] == "Interrupted" and status(run)["step"] == stopped, status(run)
    assert "Traceback" not in log
    run.logs[chief] = []
    run.cluster.restart(chief)
    run.wait_for_step(stopped + 1)
    resumed = resumed_at(run.log(chief))
    assert run.wait_chief(timeout=300) == 0, run.log(chief)[-3000:]
    result = status(run)
    assert result["state"] == "Succeeded" and float(result["accuracy"]) >= 0.95, result  # type: ignore[arg-type]
    assert resumed == stopped
    with capsys.disabled():
        print(
            "\nchief SIGTERM:",
            json.dumps({"stopped at": stopped, "resumed at": resumed, "steps lost": stopped - resumed,
                        "exit code": code, "seconds to exit": round(took, 2)}),
        )


def test_sync_workers_restarted_after_success_never_train_again(launch: Callable[..., Run]) -> None:
    """A StatefulSet restarts a worker whatever happened (node failure, eviction) after the chief
    succeeded: the restarted worker must not start a second training that blocks for good waiting for
    a chief that is gone; it idles with its port answering probes and exits 0 on SIGTERM."""
    run = launch(["training.strategy=multi_worker_mirrored", "worker.replicas=2", "training.trainSteps=200",
                  "training.batchSize=63", "tensorboard.enabled=false"])
    assert run.wait_chief(timeout=300) == 0, run.log(run.pod("chief").name)[-3000:]
    assert status(run)["state"] == "Succeeded"
    for index in (0, 1):
        worker = run.pod("worker", index).name
        run.cluster.kill(worker)
        run.logs[worker] = []
        run.cluster.restart(worker)
    deadline = time.monotonic() + 120
    names = [run.pod("worker", index).name for index in (0, 1)]
    while not all("already Succeeded" in run.log(name) for name in names):
        assert time.monotonic() < deadline, {name: run.log(name)[-2000:] for name in names}
        for name in names:
            assert run.cluster.processes[name].popen.poll() is None, f"{name} exited:\n{run.log(name)[-2000:]}"
        time.sleep(0.5)
    time.sleep(3)  # long enough for a second training to have started and logged
    for name in names:
        log = run.log(name)
        assert "does not train" in log and not re.search(r"^step \d+,|Traceback", log, re.MULTILINE), log[-2000:]
        assert run.cluster.processes[name].popen.poll() is None, log[-2000:]
        run.cluster.kill(name, signal.SIGTERM)
        assert run.cluster.processes[name].popen.returncode == 0, run.log(name)[-2000:]
