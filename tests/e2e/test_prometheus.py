"""A real Prometheus scrapes a `tfchart local` run (issue 14): Debian's /usr/bin/prometheus on a free
loopback port, a temporary TSDB, a scrape every 0.5 s of the chief's metrics port (static config,
`--set metrics.port=<that port>`) and of the ps and workers (file service discovery, written once
`tfchart local --follow-logs` prints their rewritten ports). Asserted through the HTTP API
(/api/v1/query): the step increases between two queries while training (paced by freezing the workers,
not by how fast this machine trains), the last recorded step is the final one (the chief lingers until
then), the chief reached Succeeded, the ps and worker servers were up, and nothing restarted.
Prometheus is required, never skipped: scripts/install_prometheus.sh (make setup) installs it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO
from tests.e2e.test_local import assert_none_left, pod_process
from tfchart.local.pods import free_port
from tfdcontract import PS, RUNNING, SUCCEEDED, WORKER

pytestmark = pytest.mark.slow

PROMETHEUS = Path("/usr/bin/prometheus")
SCRAPE_INTERVAL = 0.5
TRAIN_STEPS = 600
LINGER_SECONDS = 3600  # the test ends the linger (SIGTERM) once a scrape recorded the final step
CHIEF_POD = "local-tf-distributed-chief"


class Prometheus:
    """The real server, with a scrape config of this test's own; stopped (its group) at teardown."""

    def __init__(self, workdir: Path, chief_port: int) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.targets = workdir / "tasks.json"
        self.targets.write_text("[]")
        config = {  # JSON is YAML
            "global": {"scrape_interval": f"{int(SCRAPE_INTERVAL * 1000)}ms",
                       "scrape_timeout": f"{int(SCRAPE_INTERVAL * 800)}ms"},
            "scrape_configs": [
                {"job_name": "tfd-chief", "static_configs": [{"targets": [f"127.0.0.1:{chief_port}"]}]},
                {"job_name": "tfd-tasks",
                 "file_sd_configs": [{"files": [str(self.targets)], "refresh_interval": "1s"}]},
            ],
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config, indent=2))
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.popen = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.popen.poll() is None, f"prometheus exited {self.popen.returncode}:\n{self.log.read_text()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {timeout}s:\n{self.log.read_text()}")

    def set_targets(self, targets: dict[str, int]) -> None:
        """The file service discovery's targets (pod name -> port), replaced atomically."""
        doc = [{"targets": [f"127.0.0.1:{port}"], "labels": {"pod": name}} for name, port in targets.items()]
        tmp = self.targets.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.targets)

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as answer:
            doc = json.load(answer)
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def values(self, expr: str) -> list[float]:
        return [float(sample["value"][1]) for sample in self.query(expr)]

    def scraped_after(self, moment: float) -> bool:
        """Whether the chief's latest scrape started after `moment` (time.time())."""
        return any(stamp > moment for stamp in self.values('timestamp(up{job="tfd-chief"})'))

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=15)


@pytest.fixture
def chief_port() -> int:
    return free_port()


@pytest.fixture
def prometheus(tmp_path: Path, chief_port: int) -> Iterator[Prometheus]:
    if not PROMETHEUS.is_file():
        pytest.fail(f"{PROMETHEUS} is missing: the Prometheus test must run; install it with "
                    f"scripts/install_prometheus.sh (part of `make setup`)")
    home = tmp_path / "prometheus"
    home.mkdir()
    server = Prometheus(home, chief_port)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


class LocalRun:
    """`tfchart local --follow-logs` as a subprocess, its output read line by line."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)  # fmt: skip
        self.lines: list[str] = []
        self.ports: dict[str, int] = {}  # pod name -> its metrics port, as tfchart prints them
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            found = re.match(r"^  (\S+) metrics -> http://127\.0\.0\.1:(\d+)/metrics$", line.rstrip())
            if found:
                self.ports[found[1]] = int(found[2])

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def chief_steps(self) -> list[int]:
        return [int(n) for n in re.findall(rf"^{CHIEF_POD}\s+\| step (\d+), loss", self.output, re.MULTILINE)]

    def wait(self, what: str, ready: Callable[[], bool], timeout: float = 600) -> None:
        """Until `ready()`; fails at once if tfchart exited first (the timeout only catches a hang)."""
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"tfchart exited ({self.proc.returncode}) before {what}:\n" + \
                "".join(self.lines[-60:])
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n" + "".join(self.lines[-60:])
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def freeze(pids: list[int], frozen: bool) -> None:
    """SIGSTOP (or SIGCONT) the workers: the parameter-server training waits for their steps, so the
    chief's step holds still while its metrics are still served and scraped."""
    for pid in pids:
        os.killpg(pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def scrape_while_frozen(run: LocalRun, prometheus: Prometheus, workers: list[int], past: float) -> float:
    """The step a scrape reads once the chief logged a step past `past` and the workers are frozen."""
    run.wait(f"a chief step line past step {past:.0f}", lambda: any(n > past for n in run.chief_steps()))
    freeze(workers, True)
    frozen_at = time.time()

    def scraped() -> bool:
        return prometheus.scraped_after(frozen_at) and any(v > past for v in prometheus.values("tfd_training_step"))

    run.wait(f"a scrape after the freeze, past step {past:.0f}", scraped, timeout=240)
    assert prometheus.values(f'tfd_training_state{{state="{RUNNING}"}}') == [1.0]  # still training
    [step] = prometheus.values("tfd_training_step")
    freeze(workers, False)
    return step


def recorded(prometheus: Prometheus) -> bool:
    """Prometheus holds the final step of the Succeeded chief, and has seen the ps and both workers up."""
    final = f'tfd_training_step and on() tfd_training_state{{state="{SUCCEEDED}"}} == 1'
    return (prometheus.values(final) == [TRAIN_STEPS]
            and prometheus.values(f'max_over_time(tfd_server_up{{role="{PS}"}}[5m])') == [1.0]
            and prometheus.values(f'max_over_time(tfd_server_up{{role="{WORKER}"}}[5m])') == [1.0, 1.0])


def test_prometheus_scrapes_a_local_run(tmp_path: Path, prometheus: Prometheus, chief_port: int) -> None:
    workdir = tmp_path / "run"
    command = [
        str(REPO / ".venv" / "bin" / "tfchart"), "local",
        "-f", "values/cpu.yaml", "-f", "tests/fixtures/e2e-values.yaml",
        "--set", "tensorboard.enabled=false", "--set", f"training.trainSteps={TRAIN_STEPS}",
        "--set", "metrics.enabled=true", "--set", f"metrics.port={chief_port}",
        "--set", f"metrics.lingerSeconds={LINGER_SECONDS}", "--workdir", str(workdir), "--follow-logs",
    ]  # fmt: skip
    started = time.monotonic()
    run = LocalRun(command)
    workers: list[int] = []
    try:
        run.wait("the metrics ports of the ps and the workers", lambda: len(run.ports) == 4)
        prometheus.set_targets({name: port for name, port in run.ports.items() if name != CHIEF_POD})
        run.wait("the chief's first step line", lambda: bool(run.chief_steps()))
        workers = [pod_process(workdir, f"local-tf-distributed-worker-{index}") for index in (0, 1)]

        # The step increases between two scrapes while training, paced by events (however fast this
        # machine trains): the workers are frozen at a chief step line and a scrape after that reads step
        # A; thawed until the chief logs a step past A, frozen again, a scrape reads B > A. Not at the
        # first step line: the chief's first summary registers its functions with every worker, which a
        # frozen worker would hold up before the step reaches the metrics.
        seen = [float(run.chief_steps()[0])]
        for _ in range(2):
            seen.append(scrape_while_frozen(run, prometheus, workers, past=seen[-1]))
        assert seen[0] < seen[1] < seen[2] < TRAIN_STEPS, seen

        # The chief lingers with its final metrics (for an hour) until a scrape recorded them and every
        # task was scraped up; then SIGTERM ends the linger, a success still, and tfchart ends with it.
        run.wait("a scrape of the final step, and of every task's server up", lambda: recorded(prometheus))
        os.killpg(pod_process(workdir, CHIEF_POD), signal.SIGTERM)
        run.proc.wait(timeout=300)
        run.reader.join(timeout=10)
        elapsed = time.monotonic() - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            freeze(workers, False)
        run.stop()
    output = run.output
    assert run.proc.returncode == 0, output[-4000:]
    assert f"  metrics: http://127.0.0.1:{chief_port}/metrics\n" in output  # the rendered port, kept
    assert re.search(r"trainer ps:0: Prometheus metrics on http://0\.0\.0\.0:\d+/metrics", output)
    assert "stop requested: no longer serving the final metrics" in output

    # after the run: the last step Prometheus recorded is the final one, and the chief reached Succeeded
    assert prometheus.values("last_over_time(tfd_training_step[5m])") == [TRAIN_STEPS]
    assert prometheus.values("max_over_time(tfd_training_target_steps[5m])") == [TRAIN_STEPS]
    assert prometheus.values(f'max_over_time(tfd_training_state{{state="{SUCCEEDED}"}}[5m])') == [1.0]
    assert prometheus.values("max_over_time(tfd_heldout_accuracy[5m])")[0] > 0.5
    # the ps and both workers were scraped with their servers up; no task restarted
    assert prometheus.values(f'max_over_time(tfd_server_up{{role="{PS}"}}[5m])') == [1.0]
    assert prometheus.values(f'max_over_time(tfd_server_up{{role="{WORKER}"}}[5m])') == [1.0, 1.0]
    restarts = prometheus.values("max_over_time(tfd_process_restarts[5m])")
    assert restarts == [0.0] * 4, restarts
    print(f"tfchart local + Prometheus: {elapsed:.1f} s, steps scraped while training: {seen[1:]}")
    assert_none_left(workdir)
