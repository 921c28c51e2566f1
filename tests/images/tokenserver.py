"""A registry token service on loopback, as Docker Hub's and ghcr.io's: `GET /token?service=&scope=` answers
`{"token": <JWT>}`, which Docker distribution's `auth: token:` verifies against the certificate it
is given (`rootcertbundle`). The JWT is RS256, signed by `openssl dgst -sha256 -sign` with a key and
self-signed certificate made by `openssl req` (the header carries the certificate as `x5c`).

With the right Basic credentials the token grants `pull` on the scope's repository; without any it is
an anonymous token that grants nothing (the registry then still answers 401, as Docker Hub does for a
private repository); with wrong ones the service answers 401 itself.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from tests.images import loopback
from tests.images.registrylib import HOST

ISSUER = "tfd-test-issuer"
SERVICE = "tfd-test-registry"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenService:
    workdir: Path
    users: dict[str, str]
    port: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)  # (scope, user or "" for anonymous)

    @property
    def key(self) -> Path:
        return self.workdir / "token.key"

    @property
    def certificate(self) -> Path:
        return self.workdir / "token.crt"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def realm(self) -> str:
        return f"http://{self.address}/token"

    def make_key(self) -> None:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        f"/CN={ISSUER}", "-keyout", str(self.key), "-out", str(self.certificate)],
                       capture_output=True, check=True)  # fmt: skip

    def token(self, repository: str, actions: list[str]) -> str:
        der = subprocess.run(["openssl", "x509", "-in", str(self.certificate), "-outform", "DER"],
                             capture_output=True, check=True).stdout  # fmt: skip
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": "tfd", "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": f"{now}-{len(self.requests)}",
                  "access": [{"type": "repository", "name": repository, "actions": actions}] if actions else []}
        signed = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signed.encode(),
                                   capture_output=True, check=True).stdout  # fmt: skip
        return f"{signed}.{b64url(signature)}"

    def answer(self, path: str, authorization: str) -> tuple[int, dict[str, str]]:
        query = parse_qs(urlparse(path).query)
        scope = (query.get("scope") or [""])[0]
        user = ""
        if authorization.startswith("Basic "):
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            if self.users.get(user) != password:
                return 401, {"details": "wrong user or password"}
        self.requests.append((scope, user))
        _, repository, actions = [*scope.split(":"), "", "", ""][:3]
        granted = actions.split(",") if user else []
        return 200, {"token": self.token(repository, granted)}


@contextmanager
def serving(workdir: Path, users: dict[str, str]) -> Iterator[TokenService]:
    """The token service on HOST:<free port> (a tests/images/loopback server); stopped after the block."""
    service = TokenService(workdir, users)
    service.make_key()

    def answer(method: str, path: str, authorization: str) -> tuple[int, dict[str, str], bytes]:
        status, body = service.answer(path, authorization)
        return status, {"Content-Type": "application/json"}, json.dumps(body).encode()

    with loopback.serving(HOST) as server:
        server.answer = answer
        service.port = server.port
        yield service
