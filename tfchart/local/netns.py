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


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies `source` to `sink` until `source` is done, then tells `sink` no more is coming."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def connect(one: socket.socket, target: str | tuple[str, int] | None) -> socket.socket:
    """A new connection to `target` (a Unix socket's path, or host and port). None: the pods' way out, to the
    host:port named by the HTTP CONNECT request `one` starts with (what urllib and gRPC send to an HTTPS_PROXY),
    answered 200, else 502: nothing else is served."""
    if target is not None:
        upstream = socket.socket(socket.AF_UNIX if isinstance(target, str) else socket.AF_INET)
        upstream.connect(target)
        return upstream
    head = b""
    while b"\r\n\r\n" not in head and (data := one.recv(4096)):  # CONNECT host:port HTTP/1.1, headers, a blank line
        head += data
    try:
        method, where, _ = head.decode().split(" ", 2)
        if method != "CONNECT":
            raise ValueError(f"{method}: only CONNECT is served")
        host, _, port = where.rpartition(":")
        upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
    except (OSError, ValueError, OverflowError) as error:  # OverflowError: a port past 65535
        one.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
        raise ConnectionError(error) from None
    one.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    return upstream


def forward(address: str | tuple[str, int], target: str | tuple[str, int] | None) -> socketserver.BaseServer:
    """Serves `address` (a Unix socket's path, or host and port) until shut down: each connection, in a thread of
    its own, copied both ways with a new one to `target` (`connect`) until both sides are done."""

    class Splice(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError), connect(self.request, target) as other:
                back = threading.Thread(target=pump, args=(other, self.request), daemon=True)
                back.start()
                pump(self.request, other)
                back.join()

    kind = socketserver.ThreadingUnixStreamServer if isinstance(address, str) else socketserver.ThreadingTCPServer
    server = kind(address, Splice)  # type: ignore[arg-type]  # a TCP port: one free_port found free
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
    return server


def hold(folder: Path, ports: Sequence[int]) -> None:
    """Inside the namespace: loopback up, `<folder>/<port>.sock` relayed to 127.0.0.1:<port>, and 127.0.0.1:PROXY_PORT
    relayed out to `<folder>/proxy.sock`, until stdin closes."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # lo up: a new namespace starts with it down
        flags = struct.unpack(IFREQ, fcntl.ioctl(probe, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))
    forward(("127.0.0.1", PROXY_PORT), str(folder / "proxy.sock"))
    for port in ports:
        forward(str(folder / f"{port}.sock"), ("127.0.0.1", port))
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
        self.servers = [forward(str(self.folder / "proxy.sock"), None)]  # the pods' way out (downloads)
        argv = ["unshare", "--user", "--map-root-user", "--net", "--", sys.executable, "-m", "tfchart.local.netns",
                str(self.folder), *map(str, ports)]  # fmt: skip
        self.holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)  # fmt: skip
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != "ready":
            why = (self.close().strip().splitlines() or ["no answer"])[-1]  # its last line
            raise TfchartError(f"cannot make a private network for the TensorFlow pods: {why}",
                               "enable unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
                               "kernel.unprivileged_userns_clone=1; Ubuntu 24.04+: "
                               "kernel.apparmor_restrict_unprivileged_userns=0), run the pods as containers "
                               "(--engine podman), or on a trusted network: --host-network")
        self.servers += [forward(("127.0.0.1", port), str(self.folder / f"{port}.sock")) for port in ports]

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
