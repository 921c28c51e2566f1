"""Prometheus metrics of every TensorFlow task, served on ``TFD_METRICS_PORT`` (docs/trainer.md, "Metrics").

With ``TFD_METRICS_PORT`` unset or 0 nothing here runs: :func:`current` answers a :class:`Monitor`
whose methods do nothing. With a port, :func:`install` (called by ``trainer.roles.dispatch``, before
TensorFlow is imported) counts this start in the task's restart file on the shared volume and
serves ``/metrics`` on ``0.0.0.0:<port>`` (``TFD_METRICS_ADDRESS`` overrides the address: ``tfchart
local`` serves on 127.0.0.1) for the whole life of the process, from a bounded server: at most
:data:`MAX_CONNECTIONS` connections at once (more are closed at once), each given
:data:`CONNECTION_TIMEOUT_S` to send its request. Every task exports ``tfd_server_up``, ``tfd_process_restarts`` and
``tfd_run_info``; the chief (through :class:`trainer.metrics.ChiefReporter`) also the training
metrics: step, loss, held-out accuracy, examples/sec, seconds since the last checkpoint (computed
at scrape time), the target step and the training state. Every ``tfd_`` metric carries the labels
``role`` and ``index`` (the TensorFlow task).

After a successful run the chief keeps serving for ``TFD_METRICS_LINGER_SECONDS`` (:meth:`linger`),
so a scrape records the final step; a SIGTERM/SIGINT ends that wait at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Info, generate_latest

from tfdcontract import METRICS_ADDRESS_ENV, METRICS_LINGER_ENV, METRICS_PORT_ENV, METRICS_PREFIX, RUNNING, STATES
from trainer.cluster import Task
from trainer.config import TrainConfig
from trainer.errors import ConfigError

log = logging.getLogger("trainer.monitoring")

#: Where every task serves: all interfaces (the pod's network namespace; Prometheus scrapes the pod IP).
LISTEN_ADDRESS = "0.0.0.0"
#: A scraper needs one connection; these bound what idle or slow clients can hold (threads, sockets).
MAX_CONNECTIONS = 16
CONNECTION_TIMEOUT_S = 10.0


class MetricsServer(ThreadingHTTPServer):
    """/metrics of one registry: a thread per connection, at most `max_connections` of them; a connection
    that does not send its request within `timeout` seconds is closed."""

    daemon_threads = True
    request_queue_size = 64  # connections the kernel holds until accepted (and, past the limit, closed)

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 max_connections: int = MAX_CONNECTIONS, timeout: float = CONNECTION_TIMEOUT_S) -> None:  # fmt: skip
        self.registry, self.connection_timeout = registry, timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, MetricsHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the limit: closed, no thread started
            return
        request.settimeout(self.connection_timeout)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        found = self.path.split("?", 1)[0] in ("/metrics", "/")
        body = generate_latest(self.server.registry) if found else b"not found\n"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST if found else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds would drown the training log


def metrics_settings(env: Mapping[str, str]) -> tuple[int, float]:
    """(port, linger seconds) from the environment; port 0 = no metrics server. Raises ConfigError."""
    raw = env.get(METRICS_PORT_ENV, "").strip()
    try:
        port = int(raw) if raw else 0
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(
            f"{METRICS_PORT_ENV}={raw!r} is not a port number: use 1-65535 to serve Prometheus metrics "
            f"on that port, or 0 (or leave it unset) for no metrics server (the chart sets it from metrics.port)"
        )
    raw_linger = env.get(METRICS_LINGER_ENV, "").strip()
    try:
        linger = float(raw_linger) if raw_linger else 0.0
    except ValueError:
        linger = -1.0
    if not (linger >= 0 and math.isfinite(linger)):
        raise ConfigError(
            f"{METRICS_LINGER_ENV}={raw_linger!r} is not a number of seconds >= 0: how long a finished chief "
            f"keeps serving its final metrics (the chart sets it from metrics.lingerSeconds)"
        )
    return port, linger


def restarts_file(cfg: TrainConfig, task: Task) -> Path:
    """``<storage-root>/restarts/<role>-<index>.json``: how often this task started in this run."""
    return cfg.layout.restarts / f"{task.task_type}-{task.task_index}.json"


def record_start(path: Path, run_id: str) -> int:
    """Count one more start of the task in ``path`` ({"run_id", "starts"}, written atomically);
    returns the restarts (starts - 1) of this run. Another run id starts the count again."""
    starts = 0
    with contextlib.suppress(OSError, ValueError, TypeError):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("run_id") == run_id:
            starts = max(0, int(doc.get("starts", 0)))
    starts += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"run_id": run_id, "starts": starts}, f)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return starts - 1


class Monitor:
    """The metrics of this process. This base class is the one without a metrics server: every
    method does nothing (TFD_METRICS_PORT unset or 0)."""

    port: int | None = None

    def server_up(self, up: bool) -> None:
        """This task serves its role (its TensorFlow server runs) or stopped serving."""

    def training_started(self, step: int, train_steps: int, last_checkpoint: float | None) -> None:
        """The chief's training (re)starts at ``step``; ``last_checkpoint``: the wall time of the
        checkpoint it resumed from (None: none; the clock then counts from now)."""

    def training_step(self, step: int, loss: float | None = None, examples_per_second: float | None = None) -> None:
        """The chief reached ``step``."""

    def heldout_accuracy(self, accuracy: float) -> None:
        """The chief evaluated a checkpoint on the held-out split."""

    def checkpointed(self) -> None:
        """The chief saved a checkpoint now."""

    def state(self, state: str) -> None:
        """The training state (tfdcontract.STATES) changed."""

    def linger(self, wait: Callable[[float], bool]) -> None:
        """After success: keep serving for the linger time; ``wait(seconds)`` returns True when a
        stop (SIGTERM/SIGINT) ends the wait early."""

    def close(self) -> None:
        """Stop serving (tests; a process simply exits)."""


class PrometheusMonitor(Monitor):
    """The metrics of one task in a registry of its own, served on ``port`` (0 in tests: any free one)."""

    def __init__(self, cfg: TrainConfig, task: Task, linger_seconds: float = 0.0) -> None:
        self.linger_seconds = linger_seconds
        self.registry = CollectorRegistry()
        labels = {"role": task.task_type, "index": str(task.task_index)}
        self._labels = labels
        names = list(labels)
        r = self.registry
        p = METRICS_PREFIX
        self._up = Gauge(f"{p}server_up", "1 while this task serves its role (ps/worker: its TensorFlow server)",
                         names, registry=r).labels(**labels)
        self._restarts = Gauge(f"{p}process_restarts", "Restarts of this task in this run (its starts minus one)",
                               names, registry=r).labels(**labels)
        Info(f"{p}run", "The training run this task belongs to", names, registry=r).labels(**labels).info(
            {"run_id": cfg.run_id, "strategy": cfg.strategy, "model_name": cfg.model_name, "dataset": cfg.dataset})
        self._step = Gauge(f"{p}training_step", "Global training step the chief reached", names, registry=r)
        self._target = Gauge(f"{p}training_target_steps", "The step training ends at (--train-steps)", names,
                             registry=r)
        self._loss = Gauge(f"{p}training_loss", "Training loss of the latest logged step", names, registry=r)
        self._accuracy = Gauge(f"{p}heldout_accuracy", "Accuracy on the held-out split at the latest checkpoint",
                               names, registry=r)
        self._throughput = Gauge(f"{p}examples_per_second", "Training examples per second between two log steps",
                                 names, registry=r)
        self._since = Gauge(f"{p}seconds_since_checkpoint",
                            "Seconds since the latest checkpoint (since training started before any)", names,
                            registry=r)
        self._state = Gauge(f"{p}training_state", "1 for the training state the chief is in, 0 for the others",
                            [*names, "state"], registry=r)
        self._last_checkpoint = time.time()
        self._server: Any = None
        self._thread: Any = None

    def serve(self, port: int, address: str | None = None) -> int:
        """Serve /metrics on ``address`` (TFD_METRICS_ADDRESS, else 0.0.0.0) and ``port`` (a daemon thread);
        returns the bound port."""
        address = address or os.environ.get(METRICS_ADDRESS_ENV, "").strip() or LISTEN_ADDRESS
        try:
            self._server = MetricsServer((address, port), self.registry)
        except OSError as e:
            raise ConfigError(
                f"cannot serve Prometheus metrics on {address}:{port} ({METRICS_PORT_ENV}): "
                f"{e.strerror or e}; choose a free port (metrics.port)"
            ) from None
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="metrics")
        self._thread.start()
        self.port = int(self._server.server_port)
        return self.port

    def restarts(self, count: int) -> None:
        self._restarts.set(count)

    def server_up(self, up: bool) -> None:
        self._up.set(1 if up else 0)

    def training_started(self, step: int, train_steps: int, last_checkpoint: float | None) -> None:
        self._target.labels(**self._labels).set(train_steps)
        self._step.labels(**self._labels).set(step)
        self._last_checkpoint = last_checkpoint if last_checkpoint is not None else time.time()
        self._since.labels(**self._labels).set_function(lambda: max(0.0, time.time() - self._last_checkpoint))
        self.state(RUNNING)

    def training_step(self, step: int, loss: float | None = None, examples_per_second: float | None = None) -> None:
        self._step.labels(**self._labels).set(step)
        if loss is not None:
            self._loss.labels(**self._labels).set(loss)
        if examples_per_second is not None:
            self._throughput.labels(**self._labels).set(examples_per_second)

    def heldout_accuracy(self, accuracy: float) -> None:
        self._accuracy.labels(**self._labels).set(accuracy)

    def checkpointed(self) -> None:
        self._last_checkpoint = time.time()

    def state(self, state: str) -> None:
        for name in STATES:
            self._state.labels(**self._labels, state=name).set(1 if name == state else 0)

    def linger(self, wait: Callable[[float], bool]) -> None:
        if self._server is None or self.linger_seconds <= 0:
            return
        log.info("serving the final metrics on :%d for %gs (%s)", self.port, self.linger_seconds, METRICS_LINGER_ENV)
        if wait(self.linger_seconds):
            log.info("stop requested: no longer serving the final metrics")

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


_NONE = Monitor()
_current: Monitor = _NONE


def current() -> Monitor:
    """This process's monitor (one that does nothing unless :func:`install` served metrics)."""
    return _current


def install(cfg: TrainConfig, task: Task, env: Mapping[str, str]) -> Monitor:
    """Serve this task's metrics when ``TFD_METRICS_PORT`` asks for it (once per process)."""
    global _current
    port, linger = metrics_settings(env)
    if not port or _current is not _NONE:
        return _current
    monitor = PrometheusMonitor(cfg, task, linger)
    try:
        monitor.restarts(record_start(restarts_file(cfg, task), cfg.run_id))
    except OSError as e:
        log.warning("cannot count this start in %s (%s): tfd_process_restarts stays 0",
                    restarts_file(cfg, task), e.strerror or e)
    monitor.serve(port)
    log.info("Prometheus metrics on http://%s:%d/metrics", LISTEN_ADDRESS, monitor.port)
    _current = monitor
    return monitor


def reset() -> None:
    """Stop serving and forget the monitor (tests)."""
    global _current
    _current.close()
    _current = _NONE
