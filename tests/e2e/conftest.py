"""End-to-end fixtures: the chart rendered, its pods run in network namespaces, always torn down.

`launch(sets, supervised=True)` adds the Kubernetes side that the run supervisor needs (issue 12):
a loopback API (tests/kubeapi.py) holding the release's rendered workloads, the chief
Job run by kubeapi's Job controller (each retry a new chief process, after the controller's
back-off), the rendered supervisor container's command and env as a host process pointed at that
API, and a StatefulSet/Deployment/Job controller loop that ends a pod (SIGTERM, SIGKILL after its
terminationGracePeriodSeconds) once the API says it should no longer run: its ordinal is at or
above its StatefulSet's replicas, its Deployment is at 0, its Job is suspended. Nothing is ever
restarted by that loop, and only what it ended is recorded in `Supervision.ended`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, render
from tests.e2e.netns import NetnsCluster, available
from tests.kubeapi import JobController, KubeServer
from tfchart.local.pods import LocalPod, free_port, pod_of, rendered_pods
from tfchart.local.processes import LocalCluster, Process, python_bin_dir

E2E_VALUES = REPO / "tests" / "fixtures" / "e2e-values.yaml"
NAMESPACE = "ml-training"
RELEASE = "mnist"
SUPERVISOR = "supervisor"  # the supervisor's process name in Supervision.ended
POLL_SECONDS = "0.5"  # TFD_POLL_SECONDS of the supervisor (the chart's default is 10)
JOB_BACKOFF_SECONDS = 10.0  # the Job controller's delay before the first replacement pod


@pytest.fixture(scope="session")
def namespaces_available() -> None:
    reason = available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"end-to-end tests must run in CI but cannot: {reason}")
        pytest.skip(reason)


@dataclass
class Supervision:
    """The Kubernetes side of a supervised run: API, chief Job controller, supervisor, pod controllers."""

    api: KubeServer
    job: JobController
    supervisor: subprocess.Popen[bytes]
    owners: dict[str, dict[str, Any]]  # process name -> the rendered workload that owns its pod
    cluster: LocalCluster
    supervisor_log: list[str] = field(default_factory=list)
    # processes ended because the API said so: name -> exit code, in the order they ended
    ended: dict[str, int] = field(default_factory=dict)
    terminating: dict[str, float] = field(default_factory=dict)  # name -> when its grace ends
    error: BaseException | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        assert self.supervisor.stdout is not None
        stdout = self.supervisor.stdout
        for target in (lambda: self.supervisor_log.extend(raw.decode(errors="replace").rstrip() for raw in stdout),
                       self._reconcile):
            self.threads.append(threading.Thread(target=target, daemon=True))
            self.threads[-1].start()

    def get(self, kind: str, name: str) -> dict[str, Any]:
        doc = self.api.get(kind, NAMESPACE, name)
        assert doc is not None, f"{kind} {name} is not in the API"
        return doc

    # -- the StatefulSet, Deployment and Job controllers: end what should no longer run ----------

    def _targets(self) -> dict[str, tuple[subprocess.Popen[bytes], dict[str, Any], int]]:
        processes: list[tuple[str, Process]] = list(self.cluster.processes.items())
        found = {name: (p.popen, self.owners[name], p.pod.index) for name, p in processes if name in self.owners}
        return {**found, SUPERVISOR: (self.supervisor, self.owners[SUPERVISOR], 0)}

    def _should_run(self, owner: dict[str, Any], index: int) -> bool:
        live = self.api.get(owner["kind"], NAMESPACE, owner["metadata"]["name"])
        if live is None:  # the workload was deleted: its pods are garbage-collected
            return False
        if owner["kind"] == "Job":
            return not live["spec"].get("suspend")
        return index < int(live["spec"].get("replicas", 1))

    def _reconcile(self) -> None:
        try:
            while not self.stopped.wait(0.2):
                for name, (popen, owner, index) in self._targets().items():
                    if name in self.ended:
                        continue
                    if name in self.terminating:
                        code = popen.poll()
                        if code is not None:
                            self.ended[name] = code
                        elif time.monotonic() > self.terminating[name]:
                            with suppress(ProcessLookupError):
                                os.killpg(popen.pid, signal.SIGKILL)
                    elif popen.poll() is None and not self._should_run(owner, index):
                        grace = owner["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
                        self.terminating[name] = time.monotonic() + float(grace)
                        with suppress(ProcessLookupError):
                            os.killpg(popen.pid, signal.SIGTERM)
        except BaseException as error:  # surfaced by the waits below instead of a silent thread
            self.error = error

    # -- waiting on the API ---------------------------------------------------------------------

    def _check(self, what: str, deadline: float) -> None:
        if self.error is not None:
            raise AssertionError(f"the pod controllers failed: {self.error!r}") from self.error
        if self.supervisor.poll() is not None and SUPERVISOR not in self.terminating:
            raise AssertionError(f"the supervisor exited ({self.supervisor.returncode}) before it was scaled "
                                 "down:\n" + "\n".join(self.supervisor_log[-30:]))
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen in time; supervisor log:\n"
                                 + "\n".join(self.supervisor_log[-30:]))

    def wait_job(self, timeout: float = 300) -> dict[str, Any]:
        """The condition that ended the chief Job (Complete or Failed)."""
        deadline = time.monotonic() + timeout
        while True:
            conditions = self.get("Job", self.job.name).get("status", {}).get("conditions") or []
            if conditions:
                return dict(conditions[-1])
            self._check("the chief Job's ending", deadline)
            time.sleep(0.2)

    def wait_scaled_down(self, names: list[str], timeout: float = 120) -> None:
        """Until the controllers ended each named process (and the supervisor) on the API's word."""
        deadline = time.monotonic() + timeout
        while not {*names, SUPERVISOR} <= set(self.ended):
            self._check(f"ending {sorted({*names, SUPERVISOR} - set(self.ended))}", deadline)
            time.sleep(0.2)

    def close(self) -> None:
        """Stops the controllers and the supervisor, then deletes the chief Job (its controller ends its pod)."""
        self.stopped.set()
        if self.supervisor.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.supervisor.pid, signal.SIGTERM)
            try:
                self.supervisor.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.supervisor.pid, signal.SIGKILL)
                self.supervisor.wait()
        self.api.delete("Job", NAMESPACE, self.job.name)
        self.job.thread.join(timeout=70)
        for thread in self.threads:
            thread.join(timeout=5)


@dataclass
class Run:
    """A rendered release running in network namespaces."""

    root: Path
    pods: list[LocalPod]
    net: NetnsCluster
    cluster: LocalCluster
    logs: dict[str, list[str]] = field(default_factory=dict)
    supervision: Supervision | None = None

    @property
    def kube(self) -> Supervision:
        assert self.supervision is not None, "launch(..., supervised=True) runs the supervisor"
        return self.supervision

    def pod(self, role: str, index: int = 0) -> LocalPod:
        return next(p for p in self.pods if p.role == role and p.index == index)

    def names(self, *roles: str) -> list[str]:
        return [p.name for p in self.pods if p.role in roles]

    def log(self, name: str) -> str:
        return "\n".join(self.logs.get(name, []))

    def last_step(self) -> int:
        steps = re.findall(r"^step (\d+),", self.log(self.pod("chief").name), re.MULTILINE)
        return int(steps[-1]) if steps else 0

    def wait_for_step(self, step: int, timeout: float = 240) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = self.last_step()
            if current >= step:
                return current
            chief = self.cluster.processes[self.pod("chief").name].popen
            if chief.poll() is not None:
                raise AssertionError(
                    f"chief exited ({chief.returncode}) before step {step}:\n{self.log(self.pod('chief').name)[-3000:]}"
                )
            time.sleep(0.2)
        raise AssertionError(f"no step {step} within {timeout} s:\n{self.log(self.pod('chief').name)[-3000:]}")

    def wait_chief(self, timeout: float = 300) -> int:
        return self.wait_exit(self.pod("chief").name, timeout)

    def wait_exit(self, name: str, timeout: float = 300) -> int:
        """The exit code of pod `name`'s process, once it ended and its output was read to the end."""
        process = self.cluster.processes[name]
        code = process.popen.wait(timeout)
        process.reader.join(timeout=5)
        return code

    def restart(self, name: str) -> None:
        """A new process for pod `name`, under the same name and address (as its StatefulSet or Job would)."""
        self.cluster.start([self.cluster.processes[name].pod])

    def wait_replaced(self, name: str, old: Process, timeout: float = 120) -> Process:
        """The process a controller started in place of `old` (a Job's retry)."""
        deadline = time.monotonic() + timeout
        while self.cluster.processes.get(name, old) is old:
            assert time.monotonic() < deadline, f"{name} was not replaced within {timeout} s"
            time.sleep(0.1)
        return self.cluster.processes[name]

    def wait_for_line(self, name: str, text: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            assert self.cluster.processes[name].popen.poll() is None, f"{name} exited:\n{self.log(name)[-2000:]}"
            assert time.monotonic() < deadline, f"no {text!r} from {name} within {timeout} s:\n{self.log(name)[-2000:]}"
            time.sleep(0.2)


def render_docs(root: Path, sets: list[str]) -> list[dict[str, Any]]:
    """helm 4's render of values/cpu.yaml and the e2e values with `sets`, its storage under `root`."""
    return render("4", [REPO / "values" / "cpu.yaml", E2E_VALUES], sets, RELEASE, NAMESPACE,
                  extra=["--set-string", f"storage.mountPath={root}"])


def supervise(run: Run, docs: list[dict[str, Any]], sa_dir: Path) -> Supervision:
    """Puts the release's workloads into a loopback API, runs the chief Job under the Job controller
    and the rendered supervisor container on the host (it only talks to the API, over loopback)."""
    workloads = [d for d in docs if d["kind"] in ("StatefulSet", "Job", "Deployment")
                 and "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]
    chief = run.pod("chief")
    chief_job = next(d for d in workloads if d["kind"] == "Job" and d["metadata"]["name"] == chief.name)
    deployment = next(d for d in workloads if d["kind"] == "Deployment"
                      and d["metadata"]["labels"]["app.kubernetes.io/component"] == "supervisor")
    container = pod_of(f"{deployment['metadata']['name']}-0", "supervisor", 0, deployment, {}, NAMESPACE)
    api = KubeServer()
    api.add(*workloads)
    job = JobController(api, chief_job, chief, run.cluster, backoff_seconds=JOB_BACKOFF_SECONDS)
    sa_dir.mkdir()
    (sa_dir / "token").write_text("e2e-token\n")
    (sa_dir / "namespace").write_text(NAMESPACE + "\n")
    env = {**container.env, "TFD_KUBE_API": api.url, "TFD_SERVICEACCOUNT_DIR": str(sa_dir),
           "TFD_POLL_SECONDS": POLL_SECONDS, "TFD_HEALTH_PORT": str(free_port()),
           "PATH": f"{python_bin_dir()}:/usr/bin:/bin", "HOSTNAME": container.name}
    supervisor = subprocess.Popen(container.argv, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    owners = {pod.name: pod.controller for pod in rendered_pods(workloads) if pod.role != "chief"}
    supervision = Supervision(api, job, supervisor, {**owners, SUPERVISOR: deployment}, run.cluster)
    run.supervision = supervision
    supervision.start()
    job.start()
    deadline = time.monotonic() + 30
    while chief.name not in run.cluster.processes:  # the Job controller's first pod
        assert time.monotonic() < deadline, "the Job controller did not start the chief"
        time.sleep(0.05)
    return supervision


@pytest.fixture
def launch(namespaces_available: None, tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def start(sets: list[str], client: bool = False, supervised: bool = False) -> Run:
        root = tmp_path / f"data{len(runs)}"
        root.mkdir()
        docs = render_docs(root, sets)
        pods = rendered_pods(docs, NAMESPACE)
        net = NetnsCluster()
        logs: dict[str, list[str]] = {}

        def on_line(pod: LocalPod, line: str) -> None:
            logs.setdefault(pod.name, []).append(line)

        cluster = LocalCluster(on_line, wrap=net.wrap)
        run = Run(root, pods, net, cluster, logs)
        runs.append(run)
        net.build(pods, extra_hosts=["client"] if client else [])
        if supervised:
            cluster.start([p for p in pods if p.role != "chief"])
            supervise(run, docs, tmp_path / f"sa{len(runs) - 1}")
        else:
            cluster.start(pods)
        return run

    try:
        yield start
    finally:
        for run in runs:
            try:
                if run.supervision is not None:
                    run.supervision.close()
            finally:
                run.cluster.stop(grace=5)
                run.net.close()
                if run.supervision is not None:
                    run.supervision.api.close()
