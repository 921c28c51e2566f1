"""Registry credentials where podman and docker keep them: $REGISTRY_AUTH_FILE,
$XDG_RUNTIME_DIR/containers/auth.json, ~/.config/containers/auth.json, then $DOCKER_CONFIG/config.json
(~/.docker/config.json). In each file: `credHelpers.<host>`, an `auths` entry (base64 user:password in
`auth`, or username/password), else `credsStore`; a helper runs as `docker-credential-<name> get`."""

from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HELPER_TIMEOUT_S = 10.0
DOCKER_HUB_KEYS = ("docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/")
DOCKER_HUB_SERVER = "https://index.docker.io/v1/"  # the name docker's credential helpers store Hub logins under


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    source: str  # the file or helper they came from


@dataclass
class Lookup:
    """What a search found: the credentials (or None) and what could not be read on the way."""

    credentials: Credentials | None = None
    problems: list[str] = field(default_factory=list)


def auth_files(environ: Mapping[str, str]) -> list[Path]:
    home, runtime = Path(environ.get("HOME") or Path.home()), environ.get("XDG_RUNTIME_DIR")
    places = (environ.get("REGISTRY_AUTH_FILE"), runtime and f"{runtime}/containers/auth.json",
              home / ".config" / "containers" / "auth.json",
              Path(environ.get("DOCKER_CONFIG") or home / ".docker") / "config.json")  # fmt: skip
    return [Path(place) for place in places if place]


def host_of(key: str) -> str:
    """An auths key as a host[/path]: `https://host/v1/` and `host` alike."""
    return key.split("://", 1)[-1].rstrip("/").removesuffix("/v1").removesuffix("/v2")


def matching(table: Mapping[str, Any], registry: str, repository: str) -> Any:
    """The entry for registry (or, as podman allows, for registry/namespace...), the most specific first."""
    names = DOCKER_HUB_KEYS if registry in DOCKER_HUB_KEYS else (registry,)
    hosts = {host_of(name) for name in names}
    best, best_length = None, -1
    for key, entry in table.items():
        scope = host_of(key)
        host, _, path = scope.partition("/")
        if host in hosts and (not path or f"{repository}/".startswith(f"{path}/")) and len(scope) > best_length:
            best, best_length = entry, len(scope)
    return best


def find(registry: str, repository: str, environ: Mapping[str, str] | None = None) -> Lookup:
    """The credentials for registry (host[:port]; docker.io for Docker Hub) from the first file that has some."""
    environ = os.environ if environ is None else environ
    found = Lookup()
    for path in auth_files(environ):
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as error:
            found.problems.append(f"cannot read {path}: {error}")
            continue
        config = config if isinstance(config, dict) else {}
        helper = matching(config.get("credHelpers") or {}, registry, repository)
        entry = matching(config.get("auths") or {}, registry, repository)
        if isinstance(helper, str) and helper:
            found.credentials = from_helper(helper, registry, found.problems)
        elif isinstance(entry, dict) and (entry.get("auth") or entry.get("username")):
            found.credentials = from_entry(entry, str(path), found.problems)
        elif config.get("credsStore"):
            found.credentials = from_helper(str(config["credsStore"]), registry, found.problems)
        if found.credentials is not None:
            return found
    return found


def from_entry(entry: Mapping[str, Any], source: str, problems: list[str]) -> Credentials | None:
    if entry.get("username"):
        return Credentials(str(entry["username"]), str(entry.get("password") or ""), source)
    try:
        username, _, password = base64.b64decode(str(entry["auth"]), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        problems.append(f"{source}: an `auth` that is not base64 of user:password")
        return None
    return Credentials(username, password, source)


def from_helper(helper: str, registry: str, problems: list[str]) -> Credentials | None:
    program = f"docker-credential-{helper}"
    server = DOCKER_HUB_SERVER if registry in DOCKER_HUB_KEYS else registry
    try:
        answer = subprocess.run([program, "get"], input=server, capture_output=True, text=True,
                                timeout=HELPER_TIMEOUT_S, check=False)  # fmt: skip
        secret = json.loads(answer.stdout) if answer.returncode == 0 else None
    except FileNotFoundError:
        problems.append(f"{program} (the credential helper your configuration names) is not on PATH")
        return None
    except subprocess.TimeoutExpired:
        problems.append(f"{program} get did not answer in {HELPER_TIMEOUT_S:.0f} s")
        return None
    except ValueError:
        secret = None
    if not isinstance(secret, dict) or not secret.get("Secret"):
        said = answer.stderr.strip() or answer.stdout.strip()
        problems.append(f"{program} get has no credentials for {server}: {said}")
        return None
    return Credentials(str(secret.get("Username") or ""), str(secret["Secret"]), program)
