"""A real OCI registry on loopback for push/pull round trips: Docker distribution's `docker-registry serve`.

`start` writes a configuration under a directory of the caller (filesystem storage there,
`http.addr` 127.0.0.1:<free port>), starts the server and waits until `GET /v2/` answers; `stop`
ends it, waits until its port is closed and removes its storage; `running` does both around a block.
`Registry` reads tags and manifests over the distribution v2 API (plain HTTP) and `put_image` writes a
tiny image through it. With `users`, the registry asks for them (htpasswd auth, bcrypt lines from
libcrypt, the library behind crypt(3)) and `Registry` logs in as the first; with `token`, it asks for
a token of that service (auth: token:, tests/images/tokenserver.py), reading the images of `storage`.

`helm_env` confines helm's cache, configuration, data and registry credentials (and HOME) to a
directory, so an OCI push or pull leaves nothing in the user's helm set-up.

A missing `docker-registry` (Debian package docker-registry, installed by
scripts/install_containers.sh) raises MissingTool: the tests fail, they never skip.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

import yaml

from tests.chartlib import MissingTool

REGISTRY_BINARY = "docker-registry"
HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)


class RegistryError(RuntimeError):
    """The registry did not start, answer or stop as it should."""


def registry_binary() -> Path:
    """The distribution registry binary: $TFD_DOCKER_REGISTRY, else docker-registry on PATH."""
    override = os.environ.get("TFD_DOCKER_REGISTRY")
    found = override or shutil.which(REGISTRY_BINARY)
    if not found or not os.access(found, os.X_OK):
        raise MissingTool(
            f"{override or REGISTRY_BINARY} not found: the registry round trip needs Docker distribution's registry "
            "(Debian package docker-registry; scripts/install_containers.sh installs it)"
        )
    return Path(found)


def free_port(host: str = HOST) -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def port_open(port: int, host: str = HOST) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Registry:
    """A running `docker-registry serve`."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes]
    host: str = HOST
    login: tuple[str, str] | None = None  # user, password: sent as Basic auth when set

    @property
    def address(self) -> str:
        """host:port, as image references and oci:// URLs name the registry."""
        return f"{self.host}:{self.port}"

    @property
    def storage(self) -> Path:
        return self.workdir / "storage"

    @property
    def config(self) -> Path:
        return self.workdir / "config.yml"

    @property
    def log(self) -> Path:
        return self.workdir / "registry.log"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def log_size(self) -> int:
        return self.log.stat().st_size

    def requests(self, since: int = 0) -> list[tuple[str, str, int]]:
        """(method, path, status) of the requests served, from the access log (from byte offset `since`)."""
        with self.log.open("rb") as log:
            log.seek(since)
            text = log.read().decode("utf-8", errors="replace")
        return [
            (method, path, int(status))
            for method, path, status in re.findall(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3}) ', text)
        ]

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
             ) -> tuple[bytes, Message]:  # fmt: skip
        """method http://<address><path> (path or an absolute URL): the body and the headers; raises
        urllib.error.HTTPError on 4xx/5xx."""
        headers = dict(headers or {})
        if self.login:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(self.login).encode()).decode()
        url = path if path.startswith("http") else f"http://{self.address}{path}"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: bytes = response.read()
            return answer, response.headers

    def get(self, path: str, accept: Sequence[str] = ()) -> tuple[bytes, Message]:
        """GET http://<address><path>: the body and the headers; raises urllib.error.HTTPError on 4xx/5xx."""
        return self.send("GET", path, headers={"Accept": ", ".join(accept)} if accept else {})

    def put_image(self, repository: str, tag: str) -> str:
        """A tiny image (a config blob, no layers) pushed as repository:tag over the API; its manifest digest."""
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
                             "config": {}}).encode()  # fmt: skip
        config_digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
        _, started = self.send("POST", f"/v2/{repository}/blobs/uploads/")
        location = started["Location"]
        separator = "&" if "?" in location else "?"
        self.send("PUT", f"{location}{separator}digest={config_digest}", config,
                  {"Content-Type": "application/octet-stream"})  # fmt: skip
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": MANIFEST_TYPES[0],
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config),
                       "digest": config_digest},
            "layers": [],
        }).encode()  # fmt: skip
        self.send("PUT", f"/v2/{repository}/manifests/{tag}", manifest, {"Content-Type": MANIFEST_TYPES[0]})
        return f"sha256:{hashlib.sha256(manifest).hexdigest()}"

    def tags(self, repository: str) -> list[str]:
        """The tags of a repository (`GET /v2/<repository>/tags/list`), sorted."""
        body, _ = self.get(f"/v2/{repository}/tags/list")
        listed: dict[str, Any] = json.loads(body)
        return sorted(listed.get("tags") or [])

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, Any]]:
        """The manifest of repository:reference and its digest (checked against the bytes served)."""
        body, headers = self.get(f"/v2/{repository}/manifests/{reference}", MANIFEST_TYPES)
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
        served = headers.get("Docker-Content-Digest")
        if served != digest:
            raise RegistryError(f"{repository}:{reference}: served as {served}, but its bytes hash to {digest}")
        manifest: dict[str, Any] = json.loads(body)
        return digest, manifest

    def blob_digests(self, repository: str, digest: str, media_type: str) -> tuple[str, str]:
        """Stream blob `digest` of repository: the sha256 of its bytes and of its uncompressed content.

        Layers are gzip-compressed tars (docker v2 and OCI media types) or plain tars; the second
        digest is the layer's diff ID, which an image's config lists in rootfs.diff_ids.
        """
        compressed = hashlib.sha256()
        uncompressed = hashlib.sha256()
        gzipped = media_type.endswith(("gzip", ".gz"))
        if not gzipped and not media_type.endswith(("tar", "json")):
            raise RegistryError(f"{repository}@{digest}: cannot read a blob of media type {media_type}")
        inflate = zlib.decompressobj(wbits=31)
        request = urllib.request.Request(f"http://{self.address}/v2/{repository}/blobs/{digest}")
        with urllib.request.urlopen(request, timeout=60) as response:
            while chunk := response.read(1 << 20):
                compressed.update(chunk)
                while gzipped and chunk:
                    uncompressed.update(inflate.decompress(chunk))
                    # a gzip stream may hold several members: go on with a fresh inflater
                    chunk = inflate.unused_data if inflate.eof else b""
                    if inflate.eof:
                        inflate = zlib.decompressobj(wbits=31)
                if not gzipped:
                    uncompressed.update(chunk)
        if gzipped:
            uncompressed.update(inflate.flush())
        return f"sha256:{compressed.hexdigest()}", f"sha256:{uncompressed.hexdigest()}"


def bcrypt_line(user: str, password: str) -> str:
    """An htpasswd line `user:$2b$...` (the registry reads bcrypt only), hashed by libcrypt."""
    libcrypt = ctypes.CDLL("libcrypt.so.1")
    libcrypt.crypt_gensalt.restype = libcrypt.crypt.restype = ctypes.c_char_p
    salt = libcrypt.crypt_gensalt(b"$2b$", 5, None, 0)
    hashed: bytes | None = libcrypt.crypt(password.encode(), salt)
    if not hashed or not hashed.startswith(b"$2b$"):
        raise RegistryError("libcrypt could not make a bcrypt hash for the registry's htpasswd file")
    return f"{user}:{hashed.decode()}"


def _write_config(workdir: Path, port: int, users: dict[str, str] | None = None, token: dict[str, str] | None = None,
                  storage: Path | None = None) -> None:  # fmt: skip
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "warn"},  # and an access log line per request, which `requests` reads
        "storage": {"filesystem": {"rootdirectory": str(storage or workdir / "storage")}, "delete": {"enabled": True}},
        # a fixed secret: the registry warns about a random one
        "http": {"addr": f"{HOST}:{port}", "secret": secrets.token_hex(16)},
    }
    if users:
        htpasswd = workdir / "htpasswd"
        htpasswd.write_text("".join(f"{bcrypt_line(user, password)}\n" for user, password in users.items()))
        config["auth"] = {"htpasswd": {"realm": "tf-distributed-tests", "path": str(htpasswd)}}
    if token:
        config["auth"] = {"token": token}
    (workdir / "config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def answers(registry: Registry) -> bool:
    """Whether `GET /v2/` answers as a distribution v2 registry (200, or 401 from one that asks for a token)."""
    try:
        _, headers = registry.get("/v2/")
    except urllib.error.HTTPError as error:
        headers = error.headers if error.code == 401 else Message()
    except (urllib.error.URLError, OSError):
        return False
    return headers.get("Docker-Distribution-Api-Version") == "registry/2.0"


def start(workdir: Path, timeout: float = START_TIMEOUT_S, attempts: int = 3, users: dict[str, str] | None = None,
          token: dict[str, str] | None = None, storage: Path | None = None) -> Registry:  # fmt: skip
    """Start a registry with its storage and configuration under workdir; returns once `GET /v2/` answers.

    A port taken between picking and binding it (another process was quicker) is retried with a
    new port; any other failure raises RegistryError with the registry's log.
    """
    binary = registry_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    # REGISTRY_* variables override the configuration file: none of the caller's may leak in
    env = {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_")}
    for _ in range(attempts):
        port = free_port()
        (workdir / "storage").mkdir(exist_ok=True)
        _write_config(workdir, port, users, token, storage)
        with (workdir / "registry.log").open("wb") as log:
            process = subprocess.Popen(
                [str(binary), "serve", str(workdir / "config.yml")],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        registry = Registry(port, workdir, process, login=next(iter(users.items())) if users else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            if answers(registry):
                return registry
            time.sleep(0.1)
        exited = process.poll()
        log_tail = registry.log_tail()
        stop(registry)
        if "address already in use" not in log_tail:
            state = f"did not answer in {timeout:.0f} s" if exited is None else f"exited with code {exited}"
            raise RegistryError(f"{binary} serve on {registry.address} {state}:\n{log_tail}")
    raise RegistryError(f"{binary} found no free port in {attempts} attempts")


def stop(registry: Registry, timeout: float = STOP_TIMEOUT_S) -> None:
    """End the registry (SIGTERM, then SIGKILL), wait until its port is closed, remove its storage."""
    process = registry.process
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    deadline = time.monotonic() + timeout
    while port_open(registry.port, registry.host):
        if time.monotonic() > deadline:
            raise RegistryError(f"port {registry.port} still open after the registry (pid {process.pid}) ended")
        time.sleep(0.1)
    if registry.storage.exists():
        shutil.rmtree(registry.storage)


@contextmanager
def running(workdir: Path, users: dict[str, str] | None = None, token: dict[str, str] | None = None,
            storage: Path | None = None) -> Iterator[Registry]:  # fmt: skip
    """A registry for the duration of a with-block; always stopped, its storage removed."""
    registry = start(workdir, users=users, token=token, storage=storage)
    try:
        yield registry
    finally:
        stop(registry)


def helm_env(root: Path) -> dict[str, str]:
    """os.environ with every place helm writes (cache, config, data, registry credentials, HOME) under root."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HELM_", "XDG_"))}
    places = {
        "HOME": root / "home",
        "HELM_CACHE_HOME": root / "cache",
        "HELM_CONFIG_HOME": root / "config",
        "HELM_DATA_HOME": root / "data",
    }
    for path in places.values():
        path.mkdir(parents=True, exist_ok=True)
    env.update({name: str(path) for name, path in places.items()})
    env["HELM_REGISTRY_CONFIG"] = str(root / "config" / "registry" / "config.json")
    env["HELM_REPOSITORY_CONFIG"] = str(root / "config" / "repositories.yaml")
    env["HELM_REPOSITORY_CACHE"] = str(root / "cache" / "repository")
    return env
