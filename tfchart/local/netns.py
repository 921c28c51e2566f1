"""A private network for the TensorFlow pods of a process-engine run (`tfchart local`).

TensorFlow's gRPC server binds every interface whatever address its cluster map names, and it runs
any graph it is sent: so the TensorFlow pods run in one network namespace of their own, made without
root (`unshare --user --map-root-user --net`, joined with `nsenter`), whose only interface is its own
loopback. Nothing outside this machine, nor another user on it, reaches them. The metrics ports tfchart
prints are forwarded from this machine's 127.0.0.1 into the namespace through Unix sockets (a Unix
socket is a file: both sides see it). TensorBoard stays outside, on 127.0.0.1: it only reads files.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.server
import shutil
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfchart.errors import TfchartError
from tfdcontract import TENSORBOARD

IFREQ = "16sH22x"  # struct ifreq: the interface name, its flags
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PROXY_PORT = 3128  # inside the namespace: the way out for downloads (HTTPS_PROXY), tunnelled to tfchart


def loopback_up() -> None:
    """Brings up `lo` of this network namespace (a new one starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        flags = struct.unpack(IFREQ, fcntl.ioctl(probe, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def splice(one: socket.socket, other: socket.socket) -> None:
    """Copies both ways until both sides are done, then closes both."""

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    back = threading.Thread(target=pump, args=(other, one), daemon=True)
    back.start()
    pump(one, other)
    back.join()
    one.close()
    other.close()


def serve(address: str | tuple[str, int], handler: type[socketserver.BaseRequestHandler]) -> socketserver.BaseServer:
    """`handler` for every connection to `address` (a Unix socket's path, or host and port), each in a thread of
    its own, until the server is shut down."""
    kind = socketserver.ThreadingUnixStreamServer if isinstance(address, str) else socketserver.ThreadingTCPServer
    server = kind(address, handler, bind_and_activate=False)  # type: ignore[arg-type]
    server.allow_reuse_address = server.daemon_threads = True
    server.server_bind()
    server.server_activate()
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
    return server


def relay(address: str | tuple[str, int], target: str | tuple[str, int]) -> socketserver.BaseServer:
    """Each connection to `address` spliced to a new one to `target` (a Unix socket's path, or host and port)."""

    class Relay(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError):
                upstream = socket.socket(socket.AF_UNIX if isinstance(target, str) else socket.AF_INET)
                upstream.connect(target)
                splice(self.request, upstream)

    return serve(address, Relay)


class Tunnel(http.server.BaseHTTPRequestHandler):
    """An HTTP CONNECT request (what urllib sends for HTTPS_PROXY): the tunnel to its host:port; nothing else."""

    protocol_version = "HTTP/1.1"

    def do_CONNECT(self) -> None:
        self.close_connection = True
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
        except (OSError, ValueError):
            self.send_error(502)
            return
        self.send_response_only(200, "Connection established")
        self.end_headers()
        splice(self.connection, upstream)

    def log_message(self, *args: Any) -> None:
        """Quiet: the pods' downloads are theirs to report."""


def hold(folder: Path, ports: Sequence[int]) -> None:
    """Inside the namespace: loopback up, `<folder>/<port>.sock` relayed to 127.0.0.1:<port>, and 127.0.0.1:PROXY_PORT
    relayed out to `<folder>/proxy.sock`, until stdin closes."""
    loopback_up()
    relay(("127.0.0.1", PROXY_PORT), str(folder / "proxy.sock"))
    for port in ports:
        relay(str(folder / f"{port}.sock"), ("127.0.0.1", port))
    print("ready", flush=True)
    sys.stdin.read()  # tfchart closes it, or ends: the namespace goes with this process


class PrivateNetwork:
    """The namespace (its holder process), and this machine's 127.0.0.1 listeners forwarding `ports` into it."""

    def __init__(self, ports: Sequence[int]) -> None:
        missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
        if missing:
            raise TfchartError(f"{' and '.join(missing)} not found: the TensorFlow pods of a local run need a private "
                               "network (TensorFlow's servers listen on every interface)",
                               "install util-linux, run the pods as containers (--engine podman), or accept them on "
                               "every interface on a trusted network: --host-network")  # fmt: skip
        self.folder = Path(tempfile.mkdtemp(prefix="tfd-net-"))
        self.servers = [serve(str(self.folder / "proxy.sock"), Tunnel)]  # the pods' way out (downloads)
        argv = ["unshare", "--user", "--map-root-user", "--net", "--", sys.executable, "-m", "tfchart.local.netns",
                str(self.folder), *map(str, ports)]  # fmt: skip
        self.holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)  # fmt: skip
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != "ready":
            lines = self.close().strip().splitlines()
            why = lines[-1] if lines else "no answer"
            raise TfchartError(f"cannot make a private network for the TensorFlow pods: {why}",
                               "enable unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
                               "kernel.unprivileged_userns_clone=1; Ubuntu 24.04+: "
                               "kernel.apparmor_restrict_unprivileged_userns=0), run the pods as containers "
                               "(--engine podman), or on a trusted network: --host-network")
        self.servers += [relay(("127.0.0.1", port), str(self.folder / f"{port}.sock")) for port in ports]

    def wrap(self, pod: Any) -> list[str]:
        """What runs a pod inside the namespace (TensorBoard stays outside: it serves this machine's 127.0.0.1)."""
        if pod.role == TENSORBOARD:
            return []
        way_out = f"http://127.0.0.1:{PROXY_PORT}"  # urllib (the trainer's --download) follows it
        return ["nsenter", "--preserve-credentials", "--user", "--net", f"--target={self.holder.pid}", "--",
                "env", f"HTTPS_PROXY={way_out}", f"https_proxy={way_out}",
                "NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1"]  # gRPC follows the proxy too

    def close(self) -> str:
        """Ends the forwarding and the holder (its stdin closed: the namespace goes with it); what it said on stderr."""
        for server in self.servers:
            server.shutdown()
            server.server_close()
        try:
            said = self.holder.communicate(timeout=5)[1]
        except subprocess.TimeoutExpired:
            self.holder.kill()
            said = self.holder.communicate()[1]
        shutil.rmtree(self.folder, ignore_errors=True)
        return said


if __name__ == "__main__":
    hold(Path(sys.argv[1]), [int(port) for port in sys.argv[2:]])
