"""Serving health: GET /healthz for the supervisor Deployment's liveness probe."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def serve_health(alive: Callable[[], bool], port: int) -> ThreadingHTTPServer:
    """GET /healthz: 200 while `alive()` (the supervisor's loop goes round), 503 once it is stuck."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?")[0] == "/healthz"
            code = (200 if alive() else 503) if found else 404
            body = {200: b"ok\n", 503: b"stuck\n", 404: b"not found\n"}[code]
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would drown the log

    server = ThreadingHTTPServer(("", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
    return server
