"""End-to-end fixtures: the chart rendered, its pods run in network namespaces, always torn down."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.chartlib import CHART, REPO, helm_path
from tests.e2e.netns import NetnsCluster, available
from tfchart import render
from tfchart.local import LocalCluster, LocalPod, pods_from_manifests, python_bin_dir

E2E_VALUES = REPO / "tests" / "fixtures" / "e2e-values.yaml"
NAMESPACE = "ml-training"
RELEASE = "mnist"


@pytest.fixture(scope="session")
def namespaces_available() -> None:
    reason = available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"end-to-end tests must run in CI but cannot: {reason}")
        pytest.skip(reason)


@dataclass
class Run:
    """A rendered release running in network namespaces."""

    root: Path
    pods: list[LocalPod]
    net: NetnsCluster
    cluster: LocalCluster
    logs: dict[str, list[str]] = field(default_factory=dict)

    def pod(self, role: str, index: int = 0) -> LocalPod:
        return next(p for p in self.pods if p.role == role and p.index == index)

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
        return self.cluster.wait_for(self.pod("chief").name, timeout)


def render_pods(root: Path, sets: list[str]) -> list[LocalPod]:
    ordered = [("--set", item) for item in sets] + [("--set-string", f"storage.mountPath={root}")]
    text = render.template(
        str(helm_path("4")), CHART, RELEASE, [REPO / "values" / "cpu.yaml", E2E_VALUES], ordered, NAMESPACE
    )
    return pods_from_manifests(render.manifests(text), NAMESPACE)


@pytest.fixture
def launch(namespaces_available: None, tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def start(sets: list[str], client: bool = False) -> Run:
        root = tmp_path / f"data{len(runs)}"
        root.mkdir()
        pods = render_pods(root, sets)
        net = NetnsCluster()
        logs: dict[str, list[str]] = {}

        def on_line(pod: LocalPod, line: str) -> None:
            logs.setdefault(pod.name, []).append(line)

        cluster = LocalCluster(on_line, extra_path=[python_bin_dir()], wrap=net.wrap)
        run = Run(root, pods, net, cluster, logs)
        runs.append(run)
        net.build(pods, extra_hosts=["client"] if client else [])
        cluster.start(pods)
        return run

    try:
        yield start
    finally:
        for run in runs:
            run.cluster.stop(grace=5)
            run.net.close()
