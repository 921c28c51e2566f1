"""`tfchart local`: the rendered cluster as local processes, one per pod.

The chart is rendered with the same inputs as `tfchart install`, plus two of its own values that
place the run on this machine (storage.mountPath -> a local run directory, the TensorBoard port ->
a free local port). Every pod's command, args and env come from the rendered manifests unchanged,
including the /bin/sh prelude that writes TF_CONFIG; the only thing rewritten is what the cluster
contract (docs/architecture.md, section 2) reserves for it: TFD_CLUSTER (the cluster map) points
each task's address at a free 127.0.0.1 port, TFD_METRICS_PORT (metrics.enabled) gives every pod a
port of its own (the chief keeps the rendered metrics.port when it is free), and HOSTNAME names the
pod as Kubernetes would.

TensorFlow Serving's model server cannot run here (no tensorflow_model_server binary on these
machines): tfchart prints how the export is served and queried instead.
`tfchart local --engine podman|docker` runs the same pods as containers instead (tfchart/local/containers.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tfchart.errors import TfchartError, UsageError
from tfdcontract import (
    CHIEF,
    METRICS_PORT_ENV,
    SERVING,
    TENSORBOARD,
    TF_ROLES,
    WORKER,
    StepLine,
    parse_step_line,
    read_status_file,
)


@dataclass
class LocalPod:
    """One pod of the rendered release, as a process on this machine."""

    name: str
    role: str
    index: int
    argv: list[str]
    env: dict[str, str]

    @property
    def is_chief(self) -> bool:
        """The chief task, or worker 0 where the cluster map has no chief (TensorFlow's convention)."""
        if self.role == CHIEF:
            return True
        return self.role == WORKER and self.index == 0 and '"chief"' not in self.env.get("TFD_CLUSTER", '"chief"')


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _resolve_env(
    container: dict[str, Any],
    pod_name: str,
    namespace: str,
    labels: dict[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        field_path = (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath", "")
        if field_path == "metadata.name":
            env[item["name"]] = pod_name
        elif field_path == "metadata.namespace":
            env[item["name"]] = namespace
        elif field_path.startswith("metadata.labels["):
            env[item["name"]] = labels.get(field_path[len("metadata.labels['") : -2], "")
        elif field_path.startswith("metadata.annotations["):
            env[item["name"]] = (annotations or {}).get(field_path[len("metadata.annotations['") : -2], "")
        # secretKeyRef/configMapKeyRef cannot be resolved without a cluster: left unset.
    return env


@dataclass(frozen=True)
class RenderedPod:
    """One pod as its controller (StatefulSet, Job, Deployment) would create it from the rendered template."""

    name: str
    role: str
    index: int
    controller: dict[str, Any]  # the workload document
    labels: dict[str, str]  # the pod's labels, apps.kubernetes.io/pod-index included for StatefulSet pods
    annotations: Mapping[str, str] = field(default_factory=dict)  # those the controller adds (completion index)

    @property
    def kind(self) -> str:
        return str(self.controller["kind"])

    @property
    def spec(self) -> dict[str, Any]:
        """The pod template's spec."""
        spec: dict[str, Any] = self.controller["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> dict[str, Any]:
        container: dict[str, Any] = self.spec["containers"][0]
        return container

    @property
    def argv(self) -> list[str]:
        return [*self.container.get("command", []), *self.container.get("args", [])]

    def env(self, namespace: str) -> dict[str, str]:
        return _resolve_env(self.container, self.name, namespace, self.labels, self.annotations)


def rendered_pods(docs: Sequence[dict[str, Any]]) -> list[RenderedPod]:
    """The TensorFlow pods (ps, workers, chief, evaluator) and TensorBoard of a rendered release."""
    pods: list[RenderedPod] = []
    for doc in docs:
        kind = doc.get("kind")
        annotations = doc.get("metadata", {}).get("annotations") or {}
        if kind not in ("StatefulSet", "Job", "Deployment") or "helm.sh/hook" in annotations:
            continue
        template = doc["spec"]["template"]
        labels: dict[str, str] = template["metadata"]["labels"]
        role = labels.get("app.kubernetes.io/component", "")
        if role not in (*TF_ROLES, TENSORBOARD):
            continue
        name = doc["metadata"]["name"]
        if kind == "StatefulSet":
            for ordinal in range(int(doc["spec"].get("replicas", 1))):
                ordinal_labels = {**labels, "apps.kubernetes.io/pod-index": str(ordinal)}
                pods.append(RenderedPod(f"{name}-{ordinal}", role, ordinal, doc, ordinal_labels))
        elif kind == "Job" and doc["spec"].get("completionMode") == "Indexed":
            # Kubernetes names an Indexed Job's pods (hostname) <job>-<index> and annotates the index
            for index in range(int(doc["spec"].get("completions", 1))):
                completion = {"batch.kubernetes.io/job-completion-index": str(index)}
                pods.append(RenderedPod(f"{name}-{index}", role, index, doc, labels, completion))
        elif kind == "Job":
            pods.append(RenderedPod(template["spec"].get("hostname") or name, role, 0, doc, labels))
        elif role == TENSORBOARD:
            pods.append(RenderedPod(f"{name}-0", role, 0, doc, labels))
    return pods


def pods_from_manifests(docs: Sequence[dict[str, Any]], namespace: str) -> list[LocalPod]:
    """The TensorFlow pods (ps, workers, chief, evaluator) and TensorBoard of a rendered release."""
    return [LocalPod(pod.name, pod.role, pod.index, pod.argv, pod.env(namespace)) for pod in rendered_pods(docs)]


def localise_cluster(pods: list[LocalPod], host: str = "127.0.0.1") -> dict[str, str]:
    """Points every TensorFlow address of the cluster map at a free local port (TFD_CLUSTER only)."""
    cluster_json = next((pod.env["TFD_CLUSTER"] for pod in pods if "TFD_CLUSTER" in pod.env), None)
    if cluster_json is None:
        return {}
    cluster: dict[str, list[str]] = json.loads(cluster_json)
    mapping = {address: f"{host}:{free_port()}" for addresses in cluster.values() for address in addresses}
    local = json.dumps(
        {job: [mapping[a] for a in addresses] for job, addresses in cluster.items()}, separators=(",", ":")
    )
    for pod in pods:
        if "TFD_CLUSTER" in pod.env:
            pod.env["TFD_CLUSTER"] = local
    return mapping


def port_is_free(port: int) -> bool:
    """Whether a server can listen on ``port`` on every interface (where the trainer serves metrics)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
        return True


def localise_metrics(pods: list[LocalPod], taken: Sequence[str] = ()) -> dict[str, int]:
    """Every pod whose env sets TFD_METRICS_PORT (> 0) a port of its own on this machine (pods share it
    here): the chief keeps the rendered port when it is free, so `--set metrics.port=P` gives a known
    URL; every other pod gets a free port. ``taken``: host:port addresses already handed out.
    Returns pod name -> port."""
    used = {int(address.rsplit(":", 1)[1]) for address in taken}
    ports: dict[str, int] = {}

    def claim(port: int) -> int:
        used.add(port)
        return port

    def fresh() -> int:
        port = free_port()
        while port in used:
            port = free_port()
        return claim(port)

    serving = [pod for pod in pods if pod.env.get(METRICS_PORT_ENV, "0").strip() not in ("", "0")]
    for pod in sorted(serving, key=lambda p: not p.is_chief):  # the chief first
        rendered = pod.env[METRICS_PORT_ENV].strip()
        keep = pod.is_chief and rendered.isdigit() and 0 < int(rendered) < 65536 and int(rendered) not in used
        ports[pod.name] = claim(int(rendered)) if keep and port_is_free(int(rendered)) else fresh()
        pod.env[METRICS_PORT_ENV] = str(ports[pod.name])
    return ports


@dataclass
class Process:
    pod: LocalPod
    popen: subprocess.Popen[bytes]
    reader: threading.Thread


class LocalCluster:
    """Starts pods as process groups, streams their output, and always stops every one of them."""

    def __init__(
        self,
        on_line: Callable[[LocalPod, str], None],
        extra_path: Sequence[str] = (),
        wrap: Callable[[LocalPod], list[str]] | None = None,
    ) -> None:
        self.on_line = on_line
        self.extra_path = list(extra_path)
        self.wrap = wrap  # e.g. `ip netns exec <ns>` in front of the pod's argv (tests/e2e)
        self.processes: dict[str, Process] = {}
        self.progress: StepLine | None = None  # the chief's latest progress line
        self._lock = threading.Lock()

    def environment(self, pod: LocalPod) -> dict[str, str]:
        path = os.pathsep.join([*self.extra_path, os.environ.get("PATH", "/usr/bin:/bin")])
        # HOME: the chart leaves it to the image (<role>.home sets it); here the "image" is this machine.
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ", "TMPDIR", "HOME")}
        return {**keep, **pod.env, "PATH": path, "HOSTNAME": pod.name}

    def start(self, pods: Sequence[LocalPod]) -> None:
        """Starts every pod at once (no pod waits for another: TensorFlow tasks wait for peers)."""
        for pod in pods:
            popen = subprocess.Popen(
                [*self.wrap(pod), *pod.argv] if self.wrap else pod.argv,
                env=self.environment(pod),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            reader = threading.Thread(target=self._read, args=(pod, popen), daemon=True, name=f"log-{pod.name}")
            self.processes[pod.name] = Process(pod, popen, reader)
            reader.start()

    def _read(self, pod: LocalPod, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdout is not None
        for raw in popen.stdout:
            line = raw.decode(errors="replace").rstrip()
            progress = parse_step_line(line) if pod.is_chief else None
            if progress:
                with self._lock:
                    self.progress = progress
            self.on_line(pod, line)

    def wait_for(self, name: str, timeout: float | None = None, poll: Callable[[], None] | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        process = self.processes[name]
        while True:
            code = process.popen.poll()
            if code is not None:
                process.reader.join(timeout=5)
                return code
            if deadline is not None and time.monotonic() > deadline:
                raise TfchartError(
                    f"{name} did not finish within {timeout:.0f} s", "raise --timeout, or look at the logs above"
                )
            if poll:
                poll()
            time.sleep(0.2)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signals a pod's whole process group (the /bin/sh prelude execs, so this is the program)."""
        process = self.processes[name]
        with suppress(ProcessLookupError):
            os.killpg(process.popen.pid, sig)
        process.popen.wait()
        process.reader.join(timeout=5)

    def restart(self, name: str) -> None:
        """Starts a pod again under the same name and address, as a StatefulSet or Job would."""
        pod = self.processes.pop(name).pod
        self.start([pod])

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every process group, then SIGKILL whatever is left after `grace` seconds."""
        running = [p for p in self.processes.values() if p.popen.poll() is None]
        for process in running:
            with suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in running:
            with suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        for process in self.processes.values():
            with suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGKILL)
            with suppress(subprocess.TimeoutExpired):  # an unkillable process: nothing more to do
                process.popen.wait(timeout=5)
            process.reader.join(timeout=5)

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.processes.values()]


class Cluster(Protocol):
    """What `tfchart local` drives: LocalCluster (processes) or containers.ContainerCluster."""

    progress: StepLine | None

    @property
    def processes(self) -> Mapping[str, Any]: ...  # pod name -> its process, with a `.pod`

    def start(self, pods: Sequence[LocalPod]) -> None: ...

    def wait_for(self, name: str, timeout: float | None = None, poll: Callable[[], None] | None = None) -> int: ...

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None: ...

    def restart(self, name: str) -> None: ...

    def stop(self, grace: float = 10.0) -> None: ...


ClusterT = TypeVar("ClusterT", bound=Cluster)


@contextmanager
def running(cluster: ClusterT) -> Iterator[ClusterT]:
    """Guarantees every pod is stopped: on success, failure, Ctrl-C and SIGTERM to tfchart (either engine)."""

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = (
        signal.signal(signal.SIGTERM, terminate) if threading.current_thread() is threading.main_thread() else None
    )
    try:
        yield cluster
    finally:
        cluster.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


@dataclass
class LocalPlan:
    workdir: Path
    pods: list[LocalPod]
    addresses: dict[str, str]
    tensorboard_url: str | None
    serving_notes: list[str]
    values: dict[str, Any]
    #: pod name -> the port its Prometheus metrics are served on (metrics.enabled; processes only)
    metrics_ports: dict[str, int] = field(default_factory=dict)

    @property
    def headline(self) -> str:
        return f"{len(self.pods)} processes, run directory {self.workdir}"

    @property
    def metrics_url(self) -> str | None:
        """The chief's /metrics on this machine, when it serves them."""
        chief = next((pod.name for pod in self.pods if pod.is_chief), None)
        port = self.metrics_ports.get(chief or "")
        return f"http://127.0.0.1:{port}/metrics" if port else None

    def cluster(self, on_line: Callable[[LocalPod, str], None]) -> Cluster:
        return LocalCluster(on_line, extra_path=[python_bin_dir()])

    def host_path(self, path: object) -> object:
        """A path the pods wrote (status.json's export_path) as seen from this machine: the same here."""
        return path


def local_sets(workdir: Path, tensorboard_port: int) -> list[tuple[str, str]]:
    """Chart values that place the release on this machine (applied after the user's)."""
    return [
        ("--set-string", f"storage.mountPath={workdir}"),
        ("--set", f"tensorboard.service.port={tensorboard_port}"),
    ]


def serving_notes(values: dict[str, Any], workdir: Path) -> list[str]:
    if not values.get(SERVING, {}).get("enabled"):
        return []
    model = values["training"]["modelName"]
    image = values[SERVING]["image"]
    reference = f"{image.get('registry') + '/' if image.get('registry') else ''}{image['repository']}:{image['tag']}"
    return [
        "TensorFlow Serving cannot run on this machine (no tensorflow_model_server binary); on a machine with Docker:",
        f"  docker run --rm -p 8501:8501 -v {workdir}/export/{model}:/models/{model}:ro "
        f"-e MODEL_NAME={model} {reference}",
        f"  curl http://127.0.0.1:8501/v1/models/{model}",
        "  curl -d '{\"instances\": [<images as [H][W][1] floats in 0..1>]}' "
        f"http://127.0.0.1:8501/v1/models/{model}:predict",
        "(signature serving_default: input `images`, outputs `probabilities` and `classes`; see docs/trainer.md)",
    ]


def plan(
    render: Callable[[list[tuple[str, str]]], list[dict[str, Any]]],
    values: dict[str, Any],
    workdir: Path,
    namespace: str,
) -> LocalPlan:
    """Renders the release for this machine and turns it into local pods."""
    if not shutil.which("sh"):
        raise TfchartError("/bin/sh is needed to run the chart's TF_CONFIG prelude", "install a POSIX shell")
    tensorboard_port = free_port()
    docs = render(local_sets(workdir, tensorboard_port))
    pods = pods_from_manifests(docs, namespace)
    if not any(pod.is_chief for pod in pods):
        raise UsageError(
            "the rendered release has no chief",
            "every topology renders a chief Job, or workers whose worker 0 is the chief: check --chart",
        )
    addresses = localise_cluster(pods)
    metrics_ports = localise_metrics(pods, [*addresses.values(), f"127.0.0.1:{tensorboard_port}"])
    tensorboard = any(pod.role == TENSORBOARD for pod in pods)
    url = f"http://127.0.0.1:{tensorboard_port}/" if tensorboard else None
    return LocalPlan(workdir, pods, addresses, url, serving_notes(values, workdir), values, metrics_ports)


def read_status(workdir: Path) -> dict[str, Any]:
    """The run directory's status.json as a dict ({} until the chief wrote one)."""
    status = read_status_file(workdir)
    return asdict(status) if status else {}


def python_bin_dir() -> str:
    return str(Path(sys.executable).parent)


def colour_for(name: str) -> str:
    palette = ["cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta", "bright_green"]
    return palette[sum(map(ord, name)) % len(palette)]


def exit_code_of(process: Any) -> int | None:
    """A pod's exit code while it is not running again (a process, or a container's supervisor)."""
    if hasattr(process, "exit_code"):
        return None if getattr(process, "running", False) else process.exit_code
    return process.popen.poll()  # type: ignore[no-any-return]


def run(plan: Any, timeout: float | None, keep_tensorboard: bool, follow_logs: bool = False,
        console: Any = None) -> int:
    """Runs a plan (processes or containers) to the end; the exit code. Every pod's output goes to
    <run directory>/pod-logs/<pod>.log; the terminal gets a progress bar and a line per pod (on a
    TTY), plain progress lines at most once per tenth of the run (elsewhere), or every pod's output
    prefixed by its name (follow_logs)."""
    from contextlib import nullcontext

    from rich.console import Console
    from rich.live import Live
    from rich.markup import escape

    from tfchart.local.terminal import Board

    console = console or Console(highlight=False)
    width = max(len(pod.name) for pod in plan.pods)
    chief = next(pod for pod in plan.pods if pod.is_chief)
    logs_dir = plan.workdir / "pod-logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    files = {pod.name: (logs_dir / f"{pod.name}.log").open("a", encoding="utf-8", buffering=1) for pod in plan.pods}
    board = Board(int(plan.values["training"]["trainSteps"]))
    for pod in plan.pods:
        board.add(pod.name, pod.role)
    lock = threading.Lock()

    def on_line(pod: Any, line: str) -> None:
        with lock:
            files[pod.name].write(line + "\n")
            board.observe(pod.name, pod.is_chief, line)
        if follow_logs:
            console.print(f"[{colour_for(pod.name)}]{escape(pod.name):<{width}}[/] | {escape(line)}", soft_wrap=True)

    console.print(f"[bold]tfchart local[/]: {plan.headline}")
    console.print(f"  pod logs: {logs_dir}/<pod>.log" + ("" if follow_logs else " (--follow-logs shows them here)"))
    if plan.metrics_url:
        console.print(f"  metrics: {plan.metrics_url}")
    if follow_logs:
        for address, local_address in plan.addresses.items():
            console.print(f"  {address} -> {local_address}")
        for name, port in plan.metrics_ports.items():
            console.print(f"  {name} metrics -> http://127.0.0.1:{port}/metrics")
    live = Live(board.renderable(), console=console, refresh_per_second=4) if console.is_terminal else None
    live = None if follow_logs else live

    def poll() -> None:
        with lock:
            for name, process in list(cluster.processes.items()):
                board.exited(name, exit_code_of(process), getattr(process, "restarts", 0))
            if live is not None:
                live.update(board.renderable())
            elif not follow_logs:
                line = board.plain_update()
                if line:
                    console.print(line)

    cluster = plan.cluster(on_line)
    started = time.monotonic()
    try:
        with running(cluster):
            with live if live is not None else nullcontext():
                cluster.start(plan.pods)
                code = cluster.wait_for(chief.name, timeout, poll=poll)
                if code == 0 and chief.role == WORKER:
                    # worker 0 is the chief: the workers' Job completes when every worker has exited 0
                    workers = [pod for pod in plan.pods if pod.role == WORKER]
                    code = max((cluster.wait_for(pod.name, 120, poll=poll) for pod in workers), default=0)
                poll()
            return _finish(plan, cluster, chief.name, code, time.monotonic() - started, keep_tensorboard, console)
    finally:
        for handle in files.values():
            handle.close()


def _finish(plan: Any, cluster: Any, chief: str, code: int, elapsed: float, keep_tensorboard: bool,
            console: Any) -> int:
    """The final summary (and TensorBoard kept on request, until Ctrl-C)."""
    from rich.markup import escape

    result = read_status(plan.workdir)
    if code != 0:
        console.print(
            f"[bold red]✗ training failed[/]: {chief} exited with {code} after {elapsed:.0f} s; "
            f"{escape(str(result.get('message', '')))} (its log: {plan.workdir / 'pod-logs' / chief}.log)"
        )
        return 1
    console.print(
        f"[bold green]✓ training {result.get('state', 'finished')}[/] in {elapsed:.0f} s: "
        f"step {result.get('step')}, accuracy {result.get('accuracy')}, "
        f"{result.get('examples_per_sec')} examples/sec"
    )
    console.print(f"  export: {plan.host_path(result.get('export_path'))}")
    if plan.tensorboard_url:
        console.print(f"  TensorBoard: {plan.tensorboard_url}  (later: tensorboard --logdir {plan.workdir / 'logs'})")
    for note in plan.serving_notes:
        console.print(escape(note))
    if keep_tensorboard and plan.tensorboard_url:
        console.print("TensorBoard is running; Ctrl-C to stop")
        for process in list(cluster.processes.values()):
            if process.pod.role != TENSORBOARD:
                cluster.kill(process.pod.name, signal.SIGTERM)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0
