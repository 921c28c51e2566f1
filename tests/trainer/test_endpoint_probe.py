"""trainer.endpoint_probe, the `helm test` pod's program, against real TCP and HTTP servers on 127.0.0.1.

In-process (``run`` with a short poll interval) for each rule: every task and web component
answering, a closed port failing once the timeout has passed (not before), a check that passes on
a later try, the skips once status.json says Succeeded, and a status.json missing or unreadable
(nothing skipped). Then the rendered test Job's own command and environment, as a process.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.chartlib import REPO, pod_spec, render
from trainer import endpoint_probe

FAST = 0.05  # poll interval of the in-process runs (the pod's is endpoint_probe.POLL_SECONDS)


class _Handler(BaseHTTPRequestHandler):
    """TensorBoard-like 200 on /, Serving-like 404 (no export yet) anywhere else."""

    def do_GET(self) -> None:
        code = 200 if self.path == "/" else 404
        body = b"ok" if code == 200 else b'{"error": "Could not find any versions of model mnist"}'
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    """Base URL (http://127.0.0.1:<port>) of a running HTTP server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Ports:
    """TCP ports on 127.0.0.1, closed when the test ends."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []
        self.timers: list[threading.Timer] = []

    def _bound(self) -> socket.socket:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.sockets.append(s)
        return s

    @staticmethod
    def address(s: socket.socket) -> str:
        return f"127.0.0.1:{s.getsockname()[1]}"

    def listening(self, n: int) -> list[str]:
        """n addresses that accept connections."""
        addresses = []
        for _ in range(n):
            s = self._bound()
            s.listen(16)
            addresses.append(self.address(s))
        return addresses

    def closed(self, n: int) -> list[str]:
        """n addresses that refuse connections: bound, never listening (no other process can take them)."""
        return [self.address(self._bound()) for _ in range(n)]

    def late(self, delay: float) -> str:
        """An address that refuses connections for `delay` seconds, then accepts them."""
        s = self._bound()
        timer = threading.Timer(delay, s.listen, (16,))
        timer.start()
        self.timers.append(timer)
        return self.address(s)

    def close(self) -> None:
        for timer in self.timers:
            timer.cancel()
            timer.join(5)
        for s in self.sockets:
            s.close()


@pytest.fixture
def ports() -> Iterator[Ports]:
    ports = Ports()
    try:
        yield ports
    finally:
        ports.close()


def environ(storage: Path, cluster: dict[str, list[str]], urls: dict[str, str], timeout: int) -> dict[str, str]:
    return {
        "TFD_CLUSTER": json.dumps(cluster, separators=(",", ":")),
        "TFD_TEST_URLS": json.dumps(urls, separators=(",", ":")),
        "TFD_TEST_TIMEOUT": str(timeout),
        "TFD_STORAGE_ROOT": str(storage),
    }


def probe(env: dict[str, str]) -> tuple[int, list[str], float]:
    out = io.StringIO()
    started = time.monotonic()
    code = endpoint_probe.run(env, out=out, poll_seconds=FAST)
    return code, out.getvalue().splitlines(), time.monotonic() - started


def write_status(storage: Path, state: str) -> None:
    (storage / "status.json").write_text(json.dumps({"run_id": "r1", "state": state, "step": 100}))


def test_every_task_and_web_component_answering_passes(tmp_path: Path, ports: Ports, http_server: str) -> None:
    """The storage not mounted (no status.json, nothing to skip): every task is checked, and answers."""
    chief, ps, w0, w1 = ports.listening(4)
    cluster = {"chief": [chief], "ps": [ps], "worker": [w0, w1]}
    urls = {"tensorboard": f"{http_server}/", "serving": f"{http_server}/v1/models/mnist"}
    code, lines, _ = probe(environ(tmp_path / "not-mounted", cluster, urls, timeout=30))
    assert code == 0
    assert lines == [
        f"ok    chief:0 {chief}: accepts connections",
        f"ok    ps:0 {ps}: accepts connections",
        f"ok    worker:0 {w0}: accepts connections",
        f"ok    worker:1 {w1}: accepts connections",
        f"ok    tensorboard {http_server}/: HTTP 200",
        f"ok    serving {http_server}/v1/models/mnist: HTTP 404",  # no export yet is an answer
    ]


def test_closed_ports_fail_once_the_one_timeout_of_every_check_has_passed(tmp_path: Path, ports: Ports) -> None:
    chief, w0 = ports.listening(2)
    closed = ports.closed(3)
    code, lines, elapsed = probe(environ(tmp_path, {"chief": [chief], "worker": [w0, *closed]}, {}, timeout=1))
    assert code == 1
    assert lines == [
        f"ok    chief:0 {chief}: accepts connections",
        f"ok    worker:0 {w0}: accepts connections",
        *(f"FAIL  worker:{i} {address}: [Errno 111] Connection refused" for i, address in enumerate(closed, 1)),
    ]
    # retried until the deadline, then given up; one deadline for all: one second each would take 3 s at least
    assert 1.0 <= elapsed < 3.0


def test_the_pods_poll_interval_is_three_seconds(tmp_path: Path, ports: Ports) -> None:
    [closed] = ports.closed(1)
    out = io.StringIO()
    started = time.monotonic()
    assert endpoint_probe.run(environ(tmp_path, {"ps": [closed]}, {}, timeout=1), out=out) == 1
    assert 3.0 <= time.monotonic() - started < 10.0  # tried at once, once more 3 s later, then given up
    assert out.getvalue() == f"FAIL  ps:0 {closed}: [Errno 111] Connection refused\n"


def test_a_web_component_that_never_answers_fails_and_the_others_still_run(
    tmp_path: Path, ports: Ports, http_server: str
) -> None:
    [chief] = ports.listening(1)
    [closed] = ports.closed(1)
    urls = {"tensorboard": f"http://{closed}/", "serving": f"{http_server}/v1/models/mnist"}
    code, lines, _ = probe(environ(tmp_path, {"chief": [chief]}, urls, timeout=0))
    assert code == 1
    assert lines == [
        f"ok    chief:0 {chief}: accepts connections",
        f"FAIL  tensorboard http://{closed}/: <urlopen error [Errno 111] Connection refused>",
        f"ok    serving {http_server}/v1/models/mnist: HTTP 404",
    ]


def test_a_task_that_starts_listening_late_passes_on_a_later_try(tmp_path: Path, ports: Ports) -> None:
    late = ports.late(0.4)
    code, lines, elapsed = probe(environ(tmp_path, {"worker": [late]}, {}, timeout=30))
    assert code == 0
    assert lines == [f"ok    worker:0 {late}: accepts connections"]
    assert elapsed >= 0.3


def test_after_training_succeeded_the_tasks_are_skipped_and_the_web_components_still_checked(
    tmp_path: Path, ports: Ports, http_server: str
) -> None:
    write_status(tmp_path, "Succeeded")
    chief, ps, w0, w1 = ports.closed(4)
    cluster = {"chief": [chief], "ps": [ps], "worker": [w0, w1]}
    code, lines, elapsed = probe(environ(tmp_path, cluster, {"tensorboard": f"{http_server}/"}, timeout=30))
    assert code == 0
    assert lines == [
        "skip  chief:0: training Succeeded, the chief Job has completed",
        "skip  ps:0: training Succeeded, task may be scaled down",
        "skip  worker:0: training Succeeded, task may be scaled down",
        "skip  worker:1: training Succeeded, task may be scaled down",
        f"ok    tensorboard {http_server}/: HTTP 200",
    ]
    assert elapsed < 30  # skipped: a check of a closed port would have waited for the 30 s timeout


@pytest.mark.parametrize(
    "status", [None, "Running", "Failed", "not json {"], ids=["missing", "running", "failed", "not-json"]
)
def test_unless_status_json_says_succeeded_every_task_is_checked(
    tmp_path: Path, ports: Ports, status: str | None
) -> None:
    if status == "not json {":
        (tmp_path / "status.json").write_text(status)
    elif status is not None:
        write_status(tmp_path, status)
    chief, ps = ports.closed(2)
    code, lines, _ = probe(environ(tmp_path, {"chief": [chief], "ps": [ps]}, {}, timeout=0))
    assert code == 1
    assert lines == [
        f"FAIL  chief:0 {chief}: [Errno 111] Connection refused",
        f"FAIL  ps:0 {ps}: [Errno 111] Connection refused",
    ]


def test_nothing_to_check_passes(tmp_path: Path) -> None:
    assert probe(environ(tmp_path, {}, {}, timeout=0))[:2] == (0, [])


# -- the chart's helm test Job runs it ----------------------------------------------------------------


def of_component(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    [doc] = [
        d for d in docs
        if d["kind"] in ("Job", "Deployment") and d["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return doc


@pytest.mark.parametrize("values", ["charts/tf-distributed/ci/byo-image-values.yaml", "values/gpu.yaml"])
def test_the_rendered_helm_test_job_runs_the_probe_from_the_project_trainer_image(
    tmp_path: Path, ports: Ports, http_server: str, values: str
) -> None:
    """Its command and environment as rendered, the cluster's addresses moved to 127.0.0.1, as a process."""
    docs = render(values=[REPO / values])
    job, chief, supervisor = (pod_spec(of_component(docs, name)) for name in ("test", "chief", "supervisor"))
    [container] = job["containers"]
    # The project's CPU trainer image (the supervisor's), not the chief's bring-your-own or GPU image,
    # under the chief's security context.
    assert container["image"] == supervisor["containers"][0]["image"]
    assert container["image"] != chief["containers"][0]["image"]
    assert container["securityContext"] == chief["containers"][0]["securityContext"]
    assert job["securityContext"] == chief["securityContext"]
    assert container["command"] == ["python", "-m", "trainer.endpoint_probe"]
    assert "args" not in container
    env = {e["name"]: e["value"] for e in container["env"]}
    assert set(env) == {"TFD_CLUSTER", "TFD_TEST_URLS", "TFD_TEST_TIMEOUT", "TFD_STORAGE_ROOT", "HOME"}
    rendered = json.loads(env["TFD_CLUSTER"])
    local = {task: ports.listening(len(addresses)) for task, addresses in rendered.items()}
    # The rendered URLs (Serving's /v1/models/<model>: 404 before an export) on the local server.
    urls = {name: http_server + urlsplit(url).path for name, url in json.loads(env["TFD_TEST_URLS"]).items()}
    env.update(
        TFD_CLUSTER=json.dumps(local), TFD_TEST_URLS=json.dumps(urls), TFD_STORAGE_ROOT=str(tmp_path),
        HOME=str(tmp_path), PATH=os.environ["PATH"], PYTHONPATH=str(REPO),
    )
    argv = [sys.executable, *container["command"][1:]]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = [f"ok    {task}:{i} {a}: accepts connections" for task, ts in local.items() for i, a in enumerate(ts)]
    assert set(urls) == {"tensorboard", "serving"}
    expected += [f"ok    tensorboard {http_server}/: HTTP 200", f"ok    serving {urls['serving']}: HTTP 404"]
    assert proc.stdout.splitlines() == expected
    assert proc.stderr == ""
