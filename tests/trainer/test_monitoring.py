"""Prometheus metrics of the trainer (trainer/monitoring.py): served by a bounded HTTP server,
scraped over real HTTP and parsed with prometheus_client's own parser; the environment's errors; the
restart counter on the shared volume; `tfchart local`'s per-pod metrics ports; and, with real trainer
processes, the chief's linger after success that a SIGTERM cuts short and that a stop never starts."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.trainer.conftest import COMMON, REPO, Procs, free_ports, trainer_env
from tfchart.local.pods import LocalPod
from tfchart.local.processes import localise
from tfdcontract import (
    CHIEF,
    FAILED,
    INTERRUPTED,
    METRICS_LINGER_ENV,
    METRICS_PORT_ENV,
    PS,
    RUNNING,
    SUCCEEDED,
    WORKER,
)
from trainer import monitoring
from trainer.cluster import Task
from trainer.config import parse_config
from trainer.errors import ConfigError

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """Every sample of http://127.0.0.1:<port>/metrics: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    matches = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(matches) == 1, (name, labels, sorted(samples))
    return matches[0]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[monitoring.PrometheusMonitor]:
    cfg = parse_config([f"--storage-root={tmp_path}", "--train-steps=500", "--dataset=digits"])
    monitor = monitoring.PrometheusMonitor(cfg, Task(CHIEF, 0), linger_seconds=0.5)
    monitor.serve(0)
    try:
        yield monitor
    finally:
        monitor.close()


def test_the_chief_metrics_over_http(served: monitoring.PrometheusMonitor) -> None:
    assert served.port
    chief = {"role": CHIEF, "index": "0"}
    first = scrape(served.port)
    assert value(first, "tfd_server_up", **chief) == 0
    assert value(first, "tfd_process_restarts", **chief) == 0
    assert value(first, "tfd_run_info", dataset="digits", **chief) == 1
    assert not [n for n, _ in first if n == "tfd_training_step"], "no training metrics before training"

    served.training_started(0, 500, None)
    served.server_up(True)
    served.training_step(120, loss=0.25, examples_per_second=900.0)
    time.sleep(0.3)
    during = scrape(served.port)
    assert value(during, "tfd_training_step", **chief) == 120
    assert value(during, "tfd_training_target_steps", **chief) == 500
    assert value(during, "tfd_training_loss", **chief) == 0.25
    assert value(during, "tfd_examples_per_second", **chief) == 900
    assert value(during, "tfd_server_up", **chief) == 1
    assert value(during, "tfd_training_state", state=RUNNING, **chief) == 1
    assert value(during, "tfd_training_state", state=SUCCEEDED, **chief) == 0
    assert value(during, "tfd_seconds_since_checkpoint", **chief) >= 0.3  # computed at scrape time

    checkpointed = time.monotonic()
    served.checkpointed()
    served.heldout_accuracy(0.9)
    served.training_step(500)
    served.state(SUCCEEDED)
    after = scrape(served.port)
    assert value(after, "tfd_seconds_since_checkpoint", **chief) <= time.monotonic() - checkpointed
    assert value(after, "tfd_heldout_accuracy", **chief) == 0.9
    assert value(after, "tfd_training_step", **chief) == 500
    states = {state: value(after, "tfd_training_state", state=state, **chief)
              for state in (RUNNING, SUCCEEDED, FAILED, INTERRUPTED)}
    assert states == {RUNNING: 0, SUCCEEDED: 1, FAILED: 0, INTERRUPTED: 0}


def test_a_resumed_chief_counts_from_its_checkpoint(served: monitoring.PrometheusMonitor) -> None:
    assert served.port
    served.training_started(300, 500, time.time() - 100)
    assert value(scrape(served.port), "tfd_seconds_since_checkpoint", role=CHIEF) >= 100


def test_linger_waits_unless_a_stop_ends_it(served: monitoring.PrometheusMonitor) -> None:
    """The linger is one wait for the linger time: a stop (the wait returning True) ends it, and
    nothing else waits."""
    waited: list[float] = []
    served.linger(lambda seconds: waited.append(seconds) or False)  # the linger time passed
    served.linger(lambda seconds: waited.append(seconds) or True)  # SIGTERM ended the wait
    assert waited == [0.5, 0.5]


def test_a_ps_exports_liveness_only(tmp_path: Path) -> None:
    cfg = parse_config([f"--storage-root={tmp_path}", "--strategy=parameter_server"])
    monitor = monitoring.PrometheusMonitor(cfg, Task(PS, 1))
    port = monitor.serve(0)
    try:
        monitor.server_up(True)
        samples = scrape(port)
        assert value(samples, "tfd_server_up", role=PS, index="1") == 1
        assert {name for name, _ in samples if name.startswith("tfd_")} == {
            "tfd_server_up", "tfd_process_restarts", "tfd_run_info"}
    finally:
        monitor.close()


@pytest.mark.parametrize(("env", "message"), [
    ({METRICS_PORT_ENV: "http"}, "TFD_METRICS_PORT='http' is not a port number"),
    ({METRICS_PORT_ENV: "70000"}, "TFD_METRICS_PORT='70000' is not a port number"),
    ({METRICS_PORT_ENV: "-1"}, "is not a port number"),
    ({METRICS_PORT_ENV: "9464", METRICS_LINGER_ENV: "soon"}, "TFD_METRICS_LINGER_SECONDS='soon' is not a number"),
    ({METRICS_PORT_ENV: "9464", METRICS_LINGER_ENV: "-3"}, "is not a number of seconds >= 0"),
    ({METRICS_PORT_ENV: "9464", METRICS_LINGER_ENV: "inf"}, "is not a number of seconds >= 0"),
])
def test_bad_environment_is_a_config_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        monitoring.metrics_settings(env)


def test_settings() -> None:
    assert monitoring.metrics_settings({}) == (0, 0.0)
    assert monitoring.metrics_settings({METRICS_PORT_ENV: "0"}) == (0, 0.0)
    assert monitoring.metrics_settings({METRICS_PORT_ENV: " 9464 ", METRICS_LINGER_ENV: "2.5"}) == (9464, 2.5)


def test_bad_port_exits_2_with_one_line(tmp_path: Path) -> None:
    env = trainer_env(**{METRICS_PORT_ENV: "nine"})
    result = subprocess.run([sys.executable, "-m", "trainer", f"--storage-root={tmp_path}", *COMMON],
                            env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "trainer: error: TFD_METRICS_PORT='nine' is not a port number: use 1-65535 to serve Prometheus metrics on "
        "that port, or 0 (or leave it unset) for no metrics server (the chart sets it from metrics.port)"]


def test_a_port_in_use_is_a_config_error(tmp_path: Path) -> None:
    with socket.create_server(("", 0)) as taken:
        port = taken.getsockname()[1]
        cfg = parse_config([f"--storage-root={tmp_path}"])
        with pytest.raises(ConfigError, match=f"cannot serve Prometheus metrics on 0.0.0.0:{port}"):
            monitoring.PrometheusMonitor(cfg, Task(CHIEF, 0)).serve(port)


def test_idle_connections_hold_neither_threads_nor_the_scrape_for_long(tmp_path: Path) -> None:
    """A client that connects and never sends (or 60 of them) gets no thread beyond the limit, is closed after
    the connection timeout, and the next scrape is answered."""
    cfg = parse_config([f"--storage-root={tmp_path}"])
    monitor = monitoring.PrometheusMonitor(cfg, Task(CHIEF, 0))
    registry = monitor.registry
    server = monitoring.MetricsServer(("127.0.0.1", 0), registry, max_connections=4, timeout=1.0)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    port = server.server_port
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
    try:
        deadline = time.monotonic() + 5
        while server.slots._value > 0 and time.monotonic() < deadline:  # the first 4 took every slot
            time.sleep(0.01)
        assert threading.active_count() <= before + 4
        # the 56 others were closed at once; the 4 within the limit once their second has passed
        for client in idle:
            client.settimeout(30)
            assert client.recv(1) == b""
        samples = scrape(port)
        assert value(samples, "tfd_server_up", role="chief", index="0") == 0
    finally:
        for client in idle:
            client.close()
        server.shutdown()
        server.server_close()


def test_the_metrics_address_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFD_METRICS_ADDRESS", "127.0.0.1")
    monitor = monitoring.PrometheusMonitor(parse_config([f"--storage-root={tmp_path}"]), Task(PS, 0))
    monitor.serve(0)
    try:
        assert monitor._server.server_address[0] == "127.0.0.1"
        assert value(scrape(monitor.port), "tfd_server_up", role="ps", index="0") == 0
    finally:
        monitor.close()


def test_restart_counter_per_task_and_run(tmp_path: Path) -> None:
    cfg = parse_config([f"--storage-root={tmp_path}", "--run-id=a"])
    path = monitoring.restarts_file(cfg, Task(WORKER, 1))
    assert path == tmp_path / "restarts" / "worker-1.json"
    assert [monitoring.record_start(path, "a") for _ in range(3)] == [0, 1, 2]
    assert monitoring.record_start(path, "b") == 0  # another run starts the count again
    path.write_text("not json")
    assert monitoring.record_start(path, "b") == 0
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_install_serves_only_with_a_port(tmp_path: Path) -> None:
    cfg = parse_config([f"--storage-root={tmp_path}", "--run-id=r"])
    task = Task(CHIEF, 0)
    try:
        assert monitoring.install(cfg, task, {}) is monitoring.current()
        assert monitoring.current().port is None and not (tmp_path / "restarts").exists()
        monitoring.current().training_step(3)  # the no-op monitor takes every call
        (port,) = free_ports(1)
        monitor = monitoring.install(cfg, task, {METRICS_PORT_ENV: str(port)})
        assert monitor is monitoring.current() and monitor.port == port
        assert value(scrape(port), "tfd_process_restarts", role=CHIEF) == 0
        assert (tmp_path / "restarts" / "chief-0.json").is_file()
    finally:
        monitoring.reset()
    monitoring.reset()
    cfg2 = parse_config([f"--storage-root={tmp_path}", "--run-id=r"])
    try:
        monitor = monitoring.install(cfg2, task, {METRICS_PORT_ENV: str(free_ports(1)[0])})
        assert monitor.port is not None
        assert value(scrape(monitor.port), "tfd_process_restarts", role=CHIEF) == 1
    finally:
        monitoring.reset()


def _pod(name: str, role: str, index: int, port: str | None) -> LocalPod:
    env = {"TFD_CLUSTER": '{"chief":["a:1"]}'}
    if port is not None:
        env[METRICS_PORT_ENV] = port
    return LocalPod(name, role, index, ["true"], env)


def test_tfchart_local_gives_every_pod_its_own_metrics_port() -> None:
    (wanted,) = free_ports(1)
    pods = [_pod("ps-0", PS, 0, str(wanted)), _pod("worker-0", WORKER, 0, str(wanted)),
            _pod("chief", CHIEF, 0, str(wanted)), _pod("tensorboard-0", "tensorboard", 0, None)]
    ports = localise(pods, ["127.0.0.1:1234"])[1]
    assert ports["chief"] == wanted  # the rendered metrics.port, free: kept
    assert set(ports) == {"ps-0", "worker-0", "chief"}
    assert len(set(ports.values())) == 3 and 1234 not in ports.values()
    assert {pod.name: pod.env.get(METRICS_PORT_ENV) for pod in pods} == {
        **{name: str(port) for name, port in ports.items()}, "tensorboard-0": None}


def test_tfchart_local_moves_the_chief_off_a_taken_port() -> None:
    with socket.create_server(("", 0)) as taken:
        port = taken.getsockname()[1]
        pods = [_pod("chief", CHIEF, 0, str(port))]
        assert localise(pods)[1]["chief"] != port
    assert localise([_pod("chief", CHIEF, 0, "0")])[1] == {}  # 0: no metrics server


# -- real trainer processes -------------------------------------------------------------------------


@pytest.mark.slow
def test_the_chief_lingers_after_success_until_sigterm(procs: Procs, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    chief = procs.trainer("chief", [*COMMON, f"--storage-root={tmp_path}", "--train-steps=100",
                                    "--checkpoint-every-steps=50"],
                          **{METRICS_PORT_ENV: str(port), METRICS_LINGER_ENV: "3600"})
    chief.wait_for(r"serving the final metrics on :\d+ for 3600s", 180)
    samples = scrape(port)
    assert value(samples, "tfd_training_step", role=CHIEF) == 100
    assert value(samples, "tfd_training_state", role=CHIEF, state=SUCCEEDED) == 1
    assert value(samples, "tfd_heldout_accuracy", role=CHIEF) > 0.5
    chief.signal()
    # the stop ends the hour-long linger; the run succeeded: a stop while lingering is still a success
    assert chief.wait(120) == 0
    assert "stop requested: no longer serving the final metrics" in chief.output()


@pytest.mark.slow
def test_a_stopped_chief_does_not_linger(procs: Procs, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    chief = procs.trainer("chief", [*COMMON, f"--storage-root={tmp_path}", "--train-steps=1000000",
                                    "--shutdown-grace-seconds=20"],
                          **{METRICS_PORT_ENV: str(port), METRICS_LINGER_ENV: "120"})
    chief.wait_for(r"^step \d+, loss", 180)
    assert value(scrape(port), "tfd_training_state", role=CHIEF, state=RUNNING) == 1
    chief.signal()
    assert chief.wait(120) == 143
    out = chief.output()
    assert re.search(r"SIGTERM at step \d+: checkpoint saved, exiting$", out, re.M), out[-2000:]
    assert "serving the final metrics" not in out and "ran out while" not in out
