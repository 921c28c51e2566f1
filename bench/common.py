"""What the benchmarks share: the repository, a clean environment, the chart's pods as local
processes (the code path of `tfchart local`), steady-state throughput and CPU accounting.

Every benchmark returns a :class:`Result`: its figures in words and one ratio against a baseline
measured in the same run, so that bench/run.py can print them side by side.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tfchart.helm import chart as render  # noqa: E402
from tfchart.helm.chart import Chart  # noqa: E402
from tfchart.helm.runner import Helm  # noqa: E402
from tfchart.local.pods import LocalPod, rendered_pods  # noqa: E402
from tfchart.local.processes import LocalCluster, localise  # noqa: E402
from tfdcontract import (  # noqa: E402
    CHIEF,
    PS,
    WORKER,
    parse_step_line,
)

HELM = str(REPO / ".tools" / "bin" / "helm")
CHART = REPO / "charts" / "tf-distributed"


@dataclass
class Result:
    """One benchmark's outcome. `ratio` is None when it was skipped (`figures` says why)."""

    key: str
    title: str
    figures: str
    ratio: float | None
    goal: str
    met: bool | None
    details: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "skipped"
        if self.met is None:
            return "no goal"
        return "met" if self.met else "MISSED"


def print_rows(rows: Sequence[Result]) -> None:
    """A standalone script's output: each row with its ratio last, then its details."""
    for row in rows:
        ratio = "skipped" if row.ratio is None else f"ratio {row.ratio:.2f}"
        print(f"{row.key} {row.title}: {row.figures} (goal {row.goal}): {ratio}")
        for line in row.details:
            print(f"    {line}")


def bench_env() -> dict[str, str]:
    """The caller's environment with bytecode caching on, as on any user's machine."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def render_pods(
    sets: Sequence[str], root: Path, helm: str = HELM, values_file: str = "values/cpu.yaml",
    env: Mapping[str, str] | None = None,
) -> list[LocalPod]:
    """The rendered release's pods with local addresses; storage under `root`; `env` in every TensorFlow
    container (each role's extraEnv)."""
    pairs = [("--set", s) for s in sets] + [("--set-string", f"storage.mountPath={root}")]
    for role in (PS, WORKER, CHIEF):
        for index, (name, value) in enumerate((env or {}).items()):
            pairs += [("--set-string", f"{role}.extraEnv[{index}].name={name}"),
                      ("--set-string", f"{role}.extraEnv[{index}].value={value}")]
    given = render.read([str(REPO / values_file)], pairs)
    text = render.template(Helm(helm), Chart(CHART, str(CHART)), "bench", given, "default")
    pods = rendered_pods(render.manifests(text), "default")
    localise(pods)
    return pods


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads, and waited-for children) from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@dataclass
class StepSample:
    """A chief step line as it arrived: the step, when, and every pod's CPU time so far."""

    step: int
    at: float
    cpu: dict[str, float]


@dataclass
class TrainingRun:
    """The chief's step lines of one local run, with time and CPU stamps."""

    samples: list[StepSample]
    batch_size: int
    roles: dict[str, str]

    def window(self, from_step: int) -> tuple[StepSample, StepSample]:
        """The first sample at or after `from_step` (warm-up done) and the last one."""
        begin = next((s for s in self.samples if s.step >= from_step), None)
        if begin is None or begin is self.samples[-1]:
            raise RuntimeError(f"too few step lines after step {from_step}: raise the number of steps")
        return begin, self.samples[-1]

    def examples_per_sec(self, from_step: int) -> float:
        begin, end = self.window(from_step)
        return (end.step - begin.step) * self.batch_size / (end.at - begin.at)

    def cpu_per_step(self, from_step: int) -> dict[str, float]:
        """CPU-milliseconds per training step, per role (summed over a role's pods), in the window."""
        begin, end = self.window(from_step)
        steps = end.step - begin.step
        per_role: dict[str, float] = {}
        for name, used in end.cpu.items():
            role = self.roles[name]
            per_role[role] = per_role.get(role, 0.0) + (used - begin.cpu.get(name, 0.0)) * 1000 / steps
        return per_role


def train_locally(pods: Sequence[LocalPod], batch_size: int, timeout: float = 600) -> TrainingRun:
    """Runs the pods to the chief's end; stamps every chief step line with time and CPU."""
    samples: list[StepSample] = []
    tail: list[str] = []
    cluster: LocalCluster

    def on_line(pod: LocalPod, line: str) -> None:
        if not pod.is_chief:
            return
        tail.append(line)
        del tail[:-20]
        progress = parse_step_line(line)
        if progress:
            at = time.perf_counter()
            cpu = {process.pod.name: cpu_seconds(process.popen.pid) for process in cluster.processes.values()}
            samples.append(StepSample(progress.step, at, cpu))

    cluster = LocalCluster(on_line)
    tf_pods = [pod for pod in pods if pod.role in (PS, WORKER, CHIEF)]
    try:
        cluster.start(tf_pods)
        chief = next(pod.name for pod in tf_pods if pod.is_chief)
        process = cluster.processes[chief]
        code = process.popen.wait(timeout=timeout)
        process.reader.join(timeout=5)
    finally:
        cluster.stop(grace=5)
    if code != 0 or not samples:
        raise RuntimeError(f"the chief exited with {code}; its last lines:\n" + "\n".join(tail))
    return TrainingRun(samples, batch_size, {pod.name: pod.role for pod in tf_pods})


def local_training(strategy: str, workers: int, steps: int, batch_size: int, extra: Sequence[str] = (),
                   env: Mapping[str, str] | None = None) -> TrainingRun:
    """The chart's default CPU values with `strategy` and `workers`, trained on the offline set (`env`: more
    environment for every TensorFlow container)."""
    sets = [
        f"training.strategy={strategy}",
        f"worker.replicas={workers}",
        "training.dataset=digits",
        "training.download=false",
        f"training.trainSteps={steps}",
        f"training.batchSize={batch_size}",
        "training.logEverySteps=50",
        f"training.checkpointEverySteps={steps}",
        "tensorboard.enabled=false",
        "evaluator.enabled=false",
        "serving.enabled=false",
        *extra,
    ]
    with tempfile.TemporaryDirectory(prefix="tfd-bench-") as root:
        return train_locally(render_pods(sets, Path(root), env=env), batch_size)


def cores() -> int:
    return len(os.sched_getaffinity(0))

