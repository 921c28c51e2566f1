"""`tfchart local`: the rendered cluster as local processes, one per pod (`--engine podman|docker`: as
containers, containers.py); session.py runs either to its end. The chart is rendered with the same inputs
as `tfchart install`, plus two of its own values that place the run on this machine (storage.mountPath
-> a local run directory, the TensorBoard port -> a free local port). Every pod's command, args and env
come from the rendered manifests unchanged, including the /bin/sh prelude that writes TF_CONFIG; only
what the cluster contract (docs/architecture.md, section 2) reserves for it is rewritten: TFD_CLUSTER
(the cluster map) points each task's address at a free 127.0.0.1 port, TFD_METRICS_PORT (metrics.enabled)
gives every pod a port of its own (the chief keeps the rendered metrics.port when it is free), and
HOSTNAME names the pod as Kubernetes would. TensorFlow Serving's model server cannot run here (no
tensorflow_model_server binary on these machines): tfchart prints how the export is served instead.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfchart.errors import TfchartError
from tfchart.local.pods import LocalPod, free_port, rendered_pods, workload_of
from tfdcontract import METRICS_ADDRESS_ENV, METRICS_PORT_ENV, TENSORBOARD
from tfdcontract.env import CLUSTER_ENV

PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta", "bright_green")


def listening(table: str, port: int) -> bool:
    """Whether /proc/net/tcp or tcp6 text lists a socket listening on `port` (state 0A): what a connection to it
    needs, as the kubelet's tcpSocket probe makes one."""
    rows = (line.split() for line in table.splitlines()[1:])
    return any(len(row) > 3 and row[3] == "0A" and int(row[1].rsplit(":", 1)[1], 16) == port for row in rows)


def localise(pods: list[LocalPod], taken: Sequence[str] = ()) -> tuple[dict[str, str], dict[str, int]]:
    """Rewrites the pods for one machine, what the cluster contract reserves for it: every TensorFlow address of the
    cluster map (TFD_CLUSTER) -> a free local port, a probe of the pod's TensorFlow port following it; every pod
    whose TFD_METRICS_PORT is > 0 a port of its own (pods share this machine), none of `taken` (host:port addresses
    already handed out): the chief keeps the rendered port when it is free, so `--set metrics.port=P` gives a known
    URL. TensorBoard and the metrics servers listen on 127.0.0.1 only: in a cluster they serve the pod's network (the
    chart's --bind_all, 0.0.0.0), here they would serve every network this machine is on. Returns every cluster-map
    address -> where it is reached here, and pod name -> its metrics port."""
    cluster: dict[str, list[str]] = json.loads(next((pod.env[CLUSTER_ENV] for pod in pods if CLUSTER_ENV in pod.env),
                                                    "{}"))  # fmt: skip
    mapping = {address: f"127.0.0.1:{free_port()}" for addresses in cluster.values() for address in addresses}
    local = json.dumps({job: [mapping[a] for a in addresses] for job, addresses in cluster.items()},
                       separators=(",", ":"))  # fmt: skip
    used = {int(address.rsplit(":", 1)[1]) for address in [*taken, *mapping.values()]}
    ports: dict[str, int] = {}
    for pod in sorted(pods, key=lambda p: not p.is_chief):  # the chief first: its metrics port
        if CLUSTER_ENV in pod.env:
            pod.env[CLUSTER_ENV] = local
        own = {address.rsplit(":", 1)[1]: here for address, here in mapping.items()
               if address.split(".", 1)[0].rsplit(":", 1)[0] == pod.name}  # fmt: skip
        if str(pod.probe_port) in own:
            pod.probe_port = int(own[str(pod.probe_port)].rsplit(":", 1)[1])
        if pod.role == TENSORBOARD:
            argv = [arg for arg in pod.argv if arg != "--bind_all" and not arg.startswith("--host=")]
            if "--host" in argv:  # --host ADDRESS
                del argv[argv.index("--host"):argv.index("--host") + 2]
            pod.argv[:] = [*argv, "--host=127.0.0.1"]
        if METRICS_PORT_ENV not in pod.env:
            continue
        pod.env[METRICS_ADDRESS_ENV] = "127.0.0.1"
        if (rendered := pod.env[METRICS_PORT_ENV].strip()) in ("", "0"):
            continue
        keep = pod.is_chief and rendered.isdigit() and 0 < int(rendered) < 65536 and int(rendered) not in used
        port = free_port(int(rendered) if keep else 0)
        while port in used:
            port = free_port()
        used.add(port)
        ports[pod.name] = port
        pod.env[METRICS_PORT_ENV] = str(port)
    return mapping, ports


@dataclass
class Process:
    pod: LocalPod
    popen: subprocess.Popen[bytes]  # the pod's program (containers: its `<engine> run` client)
    reader: threading.Thread

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self.popen.poll()


class LocalCluster:
    """Starts pods as process groups, streams their output, and always stops every one of them (what starts them
    again is their controller's business: jobsetrun.py). containers.ContainerCluster runs them as containers."""

    def __init__(self, on_line: Callable[[LocalPod, str], None], wrap: Callable[[LocalPod], list[str]] | None = None,
                 stopped: Callable[[], object] | None = None) -> None:  # fmt: skip
        self.on_line = on_line
        self.wrap = wrap  # e.g. `ip netns exec <ns>` in front of the pod's argv (tests/e2e), or nsenter (netns.py)
        self.stopped = stopped  # called once every process has ended
        self.processes: dict[str, Process] = {}

    def command(self, pod: LocalPod) -> tuple[list[str], dict[str, str] | None]:
        """The pod's argv and environment (this Python's scripts first on its PATH: the "image" is this machine)."""
        path = os.pathsep.join([python_bin_dir(), os.environ.get("PATH", "/usr/bin:/bin")])
        # HOME: the chart leaves it to the image (<role>.home sets it); here the "image" is this machine.
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ", "TMPDIR", "HOME")}
        argv = [*self.wrap(pod), *pod.argv] if self.wrap else pod.argv
        return argv, {**keep, **pod.env, "PATH": path, "HOSTNAME": pod.name}

    def start(self, pods: Sequence[LocalPod]) -> None:
        """Starts every pod at once (no pod waits for another: TensorFlow tasks wait for peers); a pod started
        before starts again under the same name and address, as a StatefulSet or Job would start it."""
        for pod in pods:
            argv, env = self.command(pod)  # in a session of its own: Ctrl-C reaches tfchart only
            popen = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
            reader = threading.Thread(target=self.relay, args=(pod, popen), daemon=True, name=f"log-{pod.name}")
            self.processes[pod.name] = Process(pod, popen, reader)
            reader.start()

    def relay(self, pod: LocalPod, popen: subprocess.Popen[bytes]) -> None:
        """Hands every line the pod writes to `on_line`."""
        for raw in popen.stdout or ():
            self.on_line(pod, raw.decode(errors="replace").rstrip())

    def send(self, process: Process, sig: int) -> None:
        """Signals a pod's whole process group (the /bin/sh prelude execs, so this is the program)."""
        with suppress(ProcessLookupError):
            os.killpg(process.popen.pid, sig)

    def end(self, processes: Sequence[Process], sig: int, grace: float | None) -> None:
        """Signals every one of `processes` that runs, all at once, then SIGKILL to those left after `grace` seconds
        (None: none), and waits for them and their output."""
        for process in [p for p in processes if p.running]:
            self.send(process, sig)
        deadline = None if grace is None else time.monotonic() + grace
        for process in processes:
            with suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
        for process in processes:
            if process.running:
                self.send(process, signal.SIGKILL)
            with suppress(subprocess.TimeoutExpired):  # an unkillable process: nothing more to do
                process.popen.wait(timeout=5)
            process.reader.join(timeout=5)

    def kill(self, name: str, sig: int = signal.SIGKILL, grace: float | None = None) -> None:
        """Signals a pod and waits for it; SIGKILL after `grace` seconds (if given)."""
        self.end([self.processes[name]], sig, grace)

    def probe(self, name: str) -> bool:
        """The pod's readiness probe: something listens on its probe port in the pod's network; without a probe,
        it runs."""
        process = self.processes.get(name)
        if process is None or not process.running or process.pod.probe_port is None:
            return process is not None and process.running
        return self.listens(process, process.pod.probe_port)

    def listens(self, process: Process, port: int) -> bool:
        """Its process's /proc/<pid>/net lists `port` listening; where there is no /proc, it accepts on 127.0.0.1."""
        tables = [Path(f"/proc/{process.popen.pid}/net/{table}") for table in ("tcp", "tcp6")]
        if tables[0].exists():
            with suppress(OSError):
                return any(listening(table.read_text(), port) for table in tables if table.exists())
            return False
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        return False

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every pod, then SIGKILL whatever is left after `grace` seconds."""
        self.end(list(self.processes.values()), signal.SIGTERM, grace)
        if self.stopped:
            self.stopped()


@contextmanager
def running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """Guarantees every pod is stopped: on success, failure, Ctrl-C and SIGTERM to tfchart (either engine; SIGTERM
    raises KeyboardInterrupt as Ctrl-C does). Both are ignored while the pods stop: a second Ctrl-C must not leak
    one."""
    handled = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    previous = {sig: signal.getsignal(sig) for sig in handled}
    if handled:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield cluster
    finally:
        for sig in handled:
            signal.signal(sig, signal.SIG_IGN)
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class LocalPlan:
    """The release as this machine runs it (either engine): what session.py starts, and how its summary reads it."""

    workdir: Path
    pods: Sequence[LocalPod]
    addresses: dict[str, str]  # every cluster-map address -> where it is reached here
    tensorboard_url: str | None
    values: dict[str, Any]
    #: the controllers its pods start (again) under, as jobsetrun.py runs them: the JobSet, or the Jobs and
    #: StatefulSets of a native release (workload_of)
    workload: dict[str, Any]
    headline: str
    #: the pods' cluster, given what hears their lines: processes, or containers (containers.ContainerCluster)
    cluster: Callable[[Callable[[LocalPod, str], None]], LocalCluster]
    #: pod name -> the port its Prometheus metrics are served on (metrics.enabled; processes only)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    engine: str | None = None  # podman or docker (None: processes)
    mount_path: str | None = None  # containers: where the pods see the shared volume (the run directory)

    def host_path(self, path: object) -> object:
        """A path the pods wrote (status.json's export_path) as seen from this machine: the same for processes; for
        containers, one inside the shared volume is in the run directory."""
        mount = self.mount_path
        if mount is None or not isinstance(path, str) or not (path == mount or path.startswith(mount + "/")):
            return path
        return str(self.workdir / path[len(mount) :].lstrip("/"))


def plan(render: Callable[[list[tuple[str, str]]], list[dict[str, Any]]], values: dict[str, Any], workdir: Path,
         namespace: str, host_network: bool = False) -> LocalPlan:  # fmt: skip
    """Renders the release for this machine and turns it into local pods."""
    if not shutil.which("sh"):
        raise TfchartError("/bin/sh is needed to run the chart's TF_CONFIG prelude", "install a POSIX shell")
    tensorboard_port = free_port()
    # chart values that place the release on this machine (applied after the user's)
    docs = render([("--set-string", f"storage.mountPath={workdir}"),
                   ("--set", f"tensorboard.service.port={tensorboard_port}")])  # fmt: skip
    workload = workload_of(docs, namespace, pods := rendered_pods(docs, namespace))
    addresses, metrics_ports = localise(pods, [f"127.0.0.1:{tensorboard_port}"])
    url = f"http://127.0.0.1:{tensorboard_port}/" if any(pod.role == TENSORBOARD for pod in pods) else None

    def cluster(on_line: Callable[[LocalPod, str], None]) -> LocalCluster:
        """The pods as processes; the TensorFlow ones in a private network (netns.py), the metrics ports forwarded
        (--host-network: they share this machine's network, where there are no user namespaces, e.g. macOS)."""
        from tfchart.local.netns import PrivateNetwork

        if host_network:
            return LocalCluster(on_line)
        network = PrivateNetwork(sorted(set(metrics_ports.values())))
        return LocalCluster(on_line, wrap=network.wrap, stopped=network.close)

    return LocalPlan(workdir, pods, addresses, url, values, workload, f"{len(pods)} processes, run directory {workdir}",
                     cluster, metrics_ports)


def require_tensorflow() -> None:
    """The pods run this interpreter's TensorFlow: say so once, before anything starts, when it has none."""
    from importlib.util import find_spec

    missing = [shown for shown in ("tensorflow", "TensorBoard") if find_spec(shown.lower()) is None]  # the trainer's
    if missing:
        raise TfchartError(
            f"{' and '.join(missing)} not installed for {sys.executable}: the pods run as processes of this Python",
            "pip install 'tf-distributed[trainer]' (TensorFlow 2.21 has wheels for Linux x86_64 and aarch64 and "
            "macOS arm64), or run the pods as containers: --engine podman",
        )


def python_bin_dir() -> str:
    return str(Path(sys.executable).parent)
