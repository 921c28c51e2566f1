"""A real Prometheus scrapes a `tfchart local` run (issue 14): Debian's /usr/bin/prometheus on a free
loopback port, a temporary TSDB, a scrape every 0.5 s of the chief's metrics port (static config,
`--set metrics.port=<that port>`) and of the ps and workers (file service discovery, written once
`tfchart local --follow-logs` prints their rewritten ports). Asserted through the HTTP API
(/api/v1/query): the step increases between two queries while training, the last recorded step is the
final one, the chief reached Succeeded, the ps and worker servers were up, and nothing restarted.
Prometheus is required, never skipped: scripts/install_prometheus.sh (make setup) installs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO
from tests.e2e.test_local import processes_mentioning
from tfchart.local import free_port
from tfdcontract import PS, SUCCEEDED, WORKER

pytestmark = pytest.mark.slow

PROMETHEUS = Path("/usr/bin/prometheus")
SCRAPE_INTERVAL = 0.5
TRAIN_STEPS = 600
LINGER_SECONDS = 4  # >= 2 scrape intervals: the final step is scraped before the chief exits


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
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    lines: list[str] = []
    ports: dict[str, int] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            found = re.match(r"^  (\S+) metrics -> http://127\.0\.0\.1:(\d+)/metrics$", line.rstrip())
            if found:
                ports[found[1]] = int(found[2])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[float] = []  # tfd_training_step as Prometheus answers it, query after query, while training
    try:
        deadline = time.monotonic() + 600
        targets_written = False
        while proc.poll() is None:
            assert time.monotonic() < deadline, "".join(lines[-60:])
            others = {name: port for name, port in ports.items() if not name.endswith("-chief")}
            if not targets_written and len(others) == 3:  # ps-0, worker-0, worker-1
                prometheus.set_targets(others)
                targets_written = True
            running = prometheus.values('tfd_training_state{state="Running"}')
            step = prometheus.values("tfd_training_step")
            if running == [1.0] and step:
                seen.append(step[0])
            time.sleep(SCRAPE_INTERVAL)
        reader.join(timeout=10)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    output = "".join(lines)
    assert proc.returncode == 0, output[-4000:]
    assert f"  metrics: http://127.0.0.1:{chief_port}/metrics\n" in output  # the rendered port, kept
    assert re.search(r"trainer ps:0: Prometheus metrics on http://0\.0\.0\.0:\d+/metrics", output)

    # two queries at different times while training: the step increased
    assert len(set(seen)) >= 2, seen
    assert seen == sorted(seen) and seen[0] < seen[-1], seen
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
    print(f"tfchart local + Prometheus: {elapsed:.1f} s, {len(seen)} step queries while training: {seen}")
    time.sleep(0.5)
    assert processes_mentioning(str(workdir)) == []
