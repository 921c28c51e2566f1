"""Shared fixtures for the trainer tests: real trainer processes on 127.0.0.1.

Every process is started in its own session (process group) and killed with its
group by a finalizer, also when a test fails. Nothing here talks to any address but
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.kubeapi import KubeServer, Request, kube_server, manifest, rendered, stateful_set
from tfdcontract import PS, WORKER

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

#: Arguments every training test shares (offline digits data, fast logging).
COMMON = [
    "--dataset=digits", "--model-name=mnist", "--batch-size=64", "--learning-rate=0.05",
    "--log-every-steps=20", "--eval-split=0.2",
]


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def trainer_env(tf_config: dict[str, Any] | None = None, **extra: str) -> dict[str, str]:
    """The environment the chart sets on a TF pod, plus one TF thread per pool."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("TF_CONFIG", "KUBERNETES_SERVICE_HOST", "TFD_KUBE_API",
                     "TFD_CLEANUP_STATEFULSETS", "POD_NAMESPACE")
    }
    env.update(
        PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", GRPC_FAIL_FAST="use_caller",
        TF_NUM_INTEROP_THREADS="2", TF_NUM_INTRAOP_THREADS="1", TF_CPP_MIN_LOG_LEVEL="1",
        OMP_NUM_THREADS="1", HOME=env.get("HOME", "/tmp"), POD_NAME="test-pod",
    )
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    env.update(extra)
    return env


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (R, S, T for stopped, Z...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@dataclass
class Proc:
    """A trainer (or tensorboard) process with its combined output in a log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int = signal.SIGTERM) -> float:
        """Send ``sig`` to the process group (as Kubernetes stops a container); returns
        the monotonic time it was sent."""
        os.killpg(self.popen.pid, sig)
        return time.monotonic()

    def kill9(self) -> None:
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout}s; output tail:\n{self.tail()}"
            ) from None

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-n:])

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """Wait until ``pattern`` appears in the output; fail early if the process died."""
        rx = re.compile(pattern, re.M)
        found = rx.search(self.wait_until(f"/{pattern}/", lambda out: rx.search(out) is not None, timeout))
        assert found
        return found

    def wait_until(self, what: str, ready: Callable[[str], bool], timeout: float) -> str:
        """Wait until ``ready(output)`` holds and return that output; fail early if the process died.
        ``timeout`` only catches a hang: it is no guess of how long the event takes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = not self.alive()
            out = self.output()
            if ready(out):
                return out
            if exited:
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}) before {what}:\n{self.tail()}")
            time.sleep(0.1)
        raise AssertionError(f"{what} not seen in {self.name} within {timeout}s:\n{self.tail()}")

    def freeze(self) -> None:
        """SIGSTOP the process group, as a frozen node leaves a pod: it keeps its sockets but answers
        nothing. Returns once the kernel has stopped the process."""
        os.killpg(self.popen.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while process_state(self.popen.pid) not in ("T", "t"):
            assert time.monotonic() < deadline, f"{self.name} did not stop"
            time.sleep(0.01)


class Procs:
    """Starts processes and kills every one of them (whole process group) at teardown."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.all: list[Proc] = []
        self._count = 0

    def start(self, name: str, args: list[str], env: dict[str, str],
              cmd: list[str] | None = None) -> Proc:
        self._count += 1
        log = self.logdir / f"{self._count:02d}-{name}.log"
        with open(log, "wb") as f:
            popen = subprocess.Popen(
                cmd or [PYTHON, "-m", "trainer", *args], stdout=f, stderr=subprocess.STDOUT,
                env=env, cwd=REPO, start_new_session=True,
            )
        p = Proc(name, popen, log)
        self.all.append(p)
        return p

    def trainer(self, name: str, args: list[str], tf_config: dict[str, Any] | None = None,
                **env: str) -> Proc:
        return self.start(name, args, trainer_env(tf_config, **env))

    def close(self) -> None:
        for p in self.all:
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.popen.pid, signal.SIGKILL)
        for p in self.all:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=30)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    """Per-test process registry; every process is killed at teardown."""
    registry = Procs(tmp_path)
    try:
        yield registry
    finally:
        registry.close()


RELEASE_STATEFUL_SETS = ("mnist-tf-distributed-ps", "mnist-tf-distributed-worker")  # the chief's cleanup scales them


def release_stateful_sets(namespace: str = "ml-team") -> list[dict[str, Any]]:
    """The ps and worker StatefulSets of release mnist (the chart's defaults: 1 ps, 2 workers) in `namespace`, as the
    API server holds them while they run."""
    docs = rendered(namespace=namespace)
    return [stateful_set(manifest(docs, "StatefulSet", role)) for role in (PS, WORKER)]


def replicas(server: KubeServer, namespace: str = "ml-team") -> dict[str, int]:
    """The replicas of the release's StatefulSets as `server` holds them now."""
    found = {name: server.get("StatefulSet", namespace, name) for name in RELEASE_STATEFUL_SETS}
    return {name: int(sts["spec"]["replicas"]) for name, sts in found.items() if sts is not None}


@pytest.fixture
def kube_api() -> Iterator[KubeServer]:
    """A loopback Kubernetes API server holding the release's ps and worker StatefulSets in ml-team."""
    with kube_server() as server:
        yield server.add(*release_stateful_sets())


def service_account_dir(path: Path, namespace: str = "ml-team") -> Path:
    """A fake service-account directory (token + namespace) for cleanup tests."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "token").write_text("test-token\n")
    (path / "namespace").write_text(namespace + "\n")
    return path


def read_status(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "status.json").read_text())
    return doc


def ps_cluster(n_workers: int = 2) -> dict[str, list[str]]:
    ports = free_ports(2 + n_workers)
    return {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "ps": [f"127.0.0.1:{ports[1]}"],
        "worker": [f"127.0.0.1:{p}" for p in ports[2:]],
    }


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int = 0) -> dict[str, Any]:
    return {"cluster": cluster, "task": {"type": task_type, "index": index}}


@dataclass
class PsRun:
    """A completed parameter-server training run shared by several tests."""

    root: Path
    chief: Proc
    evaluator: Proc
    servers: list[Proc]
    kube_requests: list[Request]  # what the chief's cleanup asked the API server
    replicas_after: dict[str, int]  # the release's StatefulSets once the run ended
    args: list[str]
    cluster: dict[str, list[str]]


PS_STEPS = 400


@pytest.fixture(scope="session")
def ps_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PsRun]:
    """One async parameter-server run (1 ps, 2 workers, chief, evaluator) on digits.

    The chief cleans up with --cleanup=scale-down against a loopback API server holding the release's
    StatefulSets.
    """
    base = tmp_path_factory.mktemp("ps_run")
    root = base / "data"
    sa = service_account_dir(base / "sa")
    stateful_sets = release_stateful_sets()
    registry = Procs(base)
    api = KubeServer().add(*stateful_sets)
    cluster = ps_cluster(2)
    args = [
        "--strategy=parameter_server", *COMMON, f"--storage-root={root}",
        f"--train-steps={PS_STEPS}", "--checkpoint-every-steps=100", "--cleanup=scale-down",
        "--eval-poll-secs=1",
    ]
    kube = {
        "TFD_KUBE_API": api.url, "TFD_SERVICEACCOUNT_DIR": str(sa), "POD_NAMESPACE": "ml-team",
        "TFD_CLEANUP_STATEFULSETS": ",".join(RELEASE_STATEFUL_SETS),
    }
    try:
        servers = [registry.trainer("ps0", args, tf_config(cluster, "ps", 0))]
        servers += [registry.trainer(f"worker{i}", args, tf_config(cluster, "worker", i))
                    for i in range(2)]
        chief = registry.trainer("chief", args, tf_config(cluster, "chief", 0), **kube)
        evaluator = registry.trainer("evaluator", args,
                                     {"cluster": cluster, "task": {"type": "evaluator",
                                                                   "index": 0}})
        chief.wait(240)
        evaluator.wait(120)
        yield PsRun(root, chief, evaluator, servers, list(api.requests), replicas(api), args, cluster)
    finally:
        registry.close()
        api.close()
