"""The fake API server's HTTP side, for tests/kubeapi.py: how a request is read and its answer written, as Go's
net/http and kube-apiserver do it (tests/kubeapi_wire.py has the rules: framing, negotiation, Status bodies).

HTTP/1.1 with keep-alive unless the client asks to close (`Connection: close` is then answered, as Go does);
request bodies by Content-Length or chunked; a JSON answer in the writes the API server makes (one for an
object, item by item for a list) through Go's 2,048-byte buffer; a 204 with no body and no Content-Type; a log
text/plain and chunked, followed line by line; a watch chunked, one event per chunk, until its end, a cut (no 0
chunk) or the server closing. An HTTP/1.0 client gets Content-Length bodies and a closed connection (a stream is
chunked whatever the version: no client here speaks 1.0).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from tests.kubeapi_wire import FAIRNESS, audit_headers, encoded, go_chunks, writes_of

if TYPE_CHECKING:
    from tests.kubeapi import KubeServer, LogStream, WatchStream


@dataclass(frozen=True)
class Raw:
    """An answer that is not a JSON document framed like an object: its content type (None: none, as for a 204),
    body and extra headers (a Warning)."""

    content_type: str | None
    payload: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Undecodable:
    """A request body that is not JSON, and why."""

    raw: bytes
    error: str


def decoded(raw: bytes) -> Any:
    """A request's body: None when empty, the JSON it holds, or Undecodable."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as error:
        return Undecodable(raw, str(error))


def handler(server: KubeServer) -> type[BaseHTTPRequestHandler]:
    from tests.kubeapi import LogStream, WatchStream  # here: tests.kubeapi imports this module

    class Handler(BaseHTTPRequestHandler):
        """HTTP/1.1 as Go's net/http speaks it: keep-alive unless the client asks to close, bodies framed by
        go_chunks (Content-Length up to 2,048 bytes, else chunked), streams chunked with a flush per write."""

        protocol_version = "HTTP/1.1"
        # Go sets TCP_NODELAY on every connection; without it, an answer written in parts waits for the client's
        # delayed ACK (~40 ms a request on a kept-alive connection)
        disable_nagle_algorithm = True

        def answer(self) -> None:
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            raw = self.read_body()
            status, answer = server.answer(self.command, self.path, raw, content_type, dict(self.headers.items()))
            if isinstance(answer, LogStream):
                self.stream(answer)
            elif isinstance(answer, WatchStream):
                self.watch(answer)
            elif isinstance(answer, Raw):
                self.reply(status, answer.content_type, [answer.payload] if answer.payload else [], answer.headers)
            elif isinstance(answer, tuple):  # a proxy's: whole, with a Content-Length
                self.start(status, answer[1], (("Content-Length", str(len(answer[2]))),))
                self.wfile.write(answer[2])
            else:
                self.reply(status, "application/json", writes_of(answer))

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = answer

        def read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(parts)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def start(self, status: int, content_type: str | None, framing: Sequence[tuple[str, str]],
                  extra: Sequence[tuple[str, str]] = ()) -> None:  # fmt: skip
            """The status line and headers in the API server's order."""
            self.send_response_only(status)
            headers = [*audit_headers(), *([("Content-Type", content_type)] if content_type else []), *extra,
                       *FAIRNESS, ("Date", self.date_time_string())]
            asked_close = self.headers.get("Connection", "").lower() == "close" or self.request_version < "HTTP/1.1"
            closing = [("Connection", "close")] if asked_close else []
            ordered = [*framing[:1], *closing] if framing and framing[0][0] == "Content-Length" else [*closing,
                                                                                                     *framing]
            for name, value in [*headers, *ordered]:
                self.send_header(name, value)
            self.close_connection = self.close_connection or asked_close
            self.end_headers()

        def reply(self, status: int, content_type: str | None, writes: list[bytes],
                  extra: Sequence[tuple[str, str]] = ()) -> None:  # fmt: skip
            chunks = go_chunks(writes) if status != 204 else None
            if status == 204:
                self.start(status, None, ())
            elif chunks is None or self.request_version < "HTTP/1.1":
                payload = b"".join(writes)
                self.start(status, content_type, (("Content-Length", str(len(payload))),), extra)
                self.wfile.write(payload)
            else:
                self.start(status, content_type, (("Transfer-Encoding", "chunked"),), extra)
                for data in [*chunks, b""]:
                    self.chunk(data)

        def stream(self, answer: LogStream) -> None:
            """A log, text/plain and chunked whatever its size (the API server flushes what the kubelet sends);
            followed, line by line as the container writes them, while it runs."""
            log, lines = answer.log, answer.lines
            self.start(200, "text/plain", (("Transfer-Encoding", "chunked"),))
            if not answer.follow:
                text = "".join(lines).encode()
                for data in [text[at:at + 32768] for at in range(0, len(text), 32768)] + [b""]:
                    self.chunk(data)
                return
            self.close_connection = True  # the kubelet's stream ends with the connection
            try:
                for index, line in enumerate(lines):
                    if index == log.pause_after and not log.resume.wait(10):
                        break  # the client never got the lines before: it gets no more
                    self.chunk(line.encode())
                else:
                    if log.running:  # until the client hangs up (Ctrl-C)
                        self.connection.settimeout(30)
                        while self.connection.recv(1024):
                            pass
                        log.hung_up.set()
                self.chunk(b"")
            except TimeoutError:
                pass
            except OSError:  # written to a connection the client closed
                log.hung_up.set()

        def watch(self, answer: WatchStream) -> None:
            """Events, one JSON document a line, one per chunk, until timeoutSeconds (then a clean end), a cut (the
            connection dropped without the closing chunk) or the server closing."""
            self.start(200, "application/json", (("Transfer-Encoding", "chunked"),))
            try:
                for event in answer.events():
                    self.chunk(encoded(event))
                if answer.cut:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.chunk(b"")
            except OSError:  # the client hung up
                self.close_connection = True

        def chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
