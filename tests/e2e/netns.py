"""One network namespace per pod, with the chart's exact DNS names: a cluster without Kubernetes.

Layout (nothing touches the host's own network): a "switch" namespace holds a bridge; every pod
namespace is joined to it by a veth pair and gets an address on a private /24 that exists only
inside these namespaces. /etc/netns/<pod-ns>/hosts maps every pod's cluster DNS name
(<sts>-<k>.<headless-svc>.<ns>.svc.<domain>) to its address; `ip netns exec` bind-mounts it over
/etc/hosts. Each process starts with its rendered command, args and env unchanged (TFD_CLUSTER
keeps the real DNS names and port); HOSTNAME is the pod name, as in Kubernetes.

Needs root and iproute2. Everything is torn down by `close()`, also when a test fails.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tfchart.local.pods import LocalPod


class NamespacesUnavailable(RuntimeError):
    pass


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise NamespacesUnavailable(f"ip {' '.join(args)}: {result.stderr.strip()}")


def available() -> str | None:
    """None when network namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    probe = f"tfd-probe-{secrets.token_hex(3)}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode != 0:
        return f"`ip netns add` failed: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


@dataclass
class PodHost:
    pod: LocalPod
    namespace: str
    address: str
    names: list[str]


@dataclass
class NetnsCluster:
    """Network namespaces for a set of pods; `wrap(pod)` is the argv prefix that runs in its own."""

    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    subnet: str = "10.213.77"
    hosts: dict[str, PodHost] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"tfd{self.tag}-sw"

    def build(self, pods: list[LocalPod], extra_hosts: list[str] = ()) -> None:  # type: ignore[assignment]
        cluster = json.loads(next(p.env["TFD_CLUSTER"] for p in pods if "TFD_CLUSTER" in p.env))
        dns_names = {address.rsplit(":", 1)[0] for addresses in cluster.values() for address in addresses}
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        names = [pod.name for pod in pods] + list(extra_hosts)
        for number, name in enumerate(names, start=2):
            pod = next((p for p in pods if p.name == name), None)
            namespace = f"tfd{self.tag}-{number}"
            self._add_namespace(namespace)
            inner, outer = f"t{self.tag}{number}a", f"t{self.tag}{number}b"
            _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
            self.links.append(inner)
            _ip("link", "set", inner, "netns", namespace)
            _ip("link", "set", outer, "netns", self.switch)
            _ip("-n", self.switch, "link", "set", outer, "master", "br0")
            _ip("-n", self.switch, "link", "set", outer, "up")
            address = f"{self.subnet}.{number}"
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inner)
            _ip("-n", namespace, "link", "set", inner, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            aliases = [*sorted(n for n in dns_names if n.split(".")[0] == name), name]
            self.hosts[name] = PodHost(pod, namespace, address, aliases)  # type: ignore[arg-type]
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{h.address} {' '.join(h.names)}\n" for h in self.hosts.values()
        )
        for host in self.hosts.values():
            directory = Path("/etc/netns") / host.namespace
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "hosts").write_text(hosts_file)

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self.created.append(name)

    def wrap(self, pod: LocalPod) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[pod.name].namespace]

    def exec_in(self, name: str, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.hosts[name].namespace, *argv], capture_output=True, text=True, timeout=timeout
        )

    def close(self) -> None:
        for namespace in reversed(self.created):
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / namespace, ignore_errors=True)
        self.created.clear()
