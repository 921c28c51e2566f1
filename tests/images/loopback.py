"""Small HTTP and HTTPS servers on loopback addresses that behave as a hostile or odd registry would
(redirect an authorised request elsewhere, name a foreign token realm, answer a huge token), where
Docker distribution's registry cannot be made to. Each records every request it gets, with the
Authorization header it carried, and answers with what its `answer` says (404 until a test sets one).

127.0.0.1 and 127.0.0.2 are different hosts to a client (Linux routes all of 127.0.0.0/8 to loopback).
`tls` makes a self-signed certificate for both, trusted by urllib in-process once SSL_CERT_FILE names it.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOSTS = ("127.0.0.1", "127.0.0.2")
Answer = Callable[[str, str, str], "tuple[int, dict[str, str], bytes]"]  # (method, path, authorization) -> reply


def not_found(method: str, path: str, authorization: str) -> tuple[int, dict[str, str], bytes]:
    return 404, {}, b""


@dataclass
class Server:
    scheme: str
    host: str
    port: int = 0
    answer: Answer = not_found
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, Authorization or "")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, path: str = "") -> str:
        return f"{self.scheme}://{self.address}{path}"

    def authorizations(self) -> list[str]:
        return [authorization for _, _, authorization in self.seen if authorization]


def tls(workdir: Path) -> ssl.SSLContext:
    """A server context with a self-signed certificate for HOSTS; workdir/cert.pem is the one to trust."""
    key, cert = workdir / "key.pem", workdir / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=tfd-test",
                    "-addext", "subjectAltName=" + ",".join(f"IP:{host}" for host in HOSTS),
                    "-keyout", str(key), "-out", str(cert)], capture_output=True, check=True)  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


@contextmanager
def serving(host: str = HOSTS[0], context: ssl.SSLContext | None = None) -> Iterator[Server]:
    """A server on host:<free port>, HTTPS with context; stopped and its port closed after the block."""
    server = Server("https" if context else "http", host)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            authorization = self.headers.get("Authorization", "")
            server.seen.append((self.command, self.path, authorization))
            status, headers, body = server.answer(self.command, self.path, authorization)
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer((host, 0), Handler)
    if context:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    server.port = httpd.server_address[1]
    # shutdown() waits for the serving loop to see its flag: a short poll keeps that wait short
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
