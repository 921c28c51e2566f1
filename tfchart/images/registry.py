"""Does an image resolve in its registry? `HEAD /v2/<repository>/manifests/<tag or digest>` over the distribution
API (OCI and Docker manifests and indexes accepted), with the user's credentials when the registry asks: a Bearer
token from the challenge's realm, or Basic. HTTPS always, except for the registries named as insecure (plain HTTP).
Docker Hub is registry-1.docker.io and a one-part name is library/<name>, as docker and podman pull them.
Credentials go to the registry only: a redirect is followed without them, a 401 from where it led is not answered,
a token realm gets them over HTTPS or plain HTTP to an insecure host only (never file://).

Credentials are read where podman and docker keep them: $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
~/.config/containers/auth.json, then $DOCKER_CONFIG/config.json (~/.docker/config.json). In each file:
`credHelpers.<host>`, an `auths` entry (base64 user:password in `auth`, or username/password), else `credsStore`;
a helper runs as `docker-credential-<name> get`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from contextlib import suppress
from email.message import Message
from pathlib import Path
from typing import Any, NamedTuple

TIMEOUT_S = 10.0  # a registry's (or token service's) answer, a credential helper's
DOCKER_HUB = "docker.io"
DOCKER_HUB_ENDPOINT = "registry-1.docker.io"
DOCKER_HUB_KEYS = ("docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/")
DOCKER_HUB_SERVER = "https://index.docker.io/v1/"  # the name docker's credential helpers store Hub logins under
MANIFEST_TYPES = ", ".join(("application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))  # fmt: skip
TOKEN_LIMIT = 1 << 20  # bytes of a token service's answer read at most
PRESENT, MISSING, UNAUTHORISED = "present", "missing", "unauthorised"
PLAIN_HTTP, UNREACHABLE = "plain-http", "unreachable"
CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class Credentials(NamedTuple):
    username: str
    password: str
    source: str  # the file or helper they came from


class Refused(Exception):
    """The credentials (or a token) withheld from where the registry pointed: the message says where and why."""


def resolve(registry: str, repository: str, reference: str, insecure: frozenset[str]) -> tuple[str, str]:
    """Whether registry/repository:reference (a tag or a digest) exists, as a node's pull would find it, asking the
    `insecure` registries (host[:port]) over plain HTTP: the state (present | missing | unauthorised | plain-http |
    unreachable) and why (unauthorised: which credentials were tried; unreachable: the error)."""
    registry = registry or DOCKER_HUB
    host = DOCKER_HUB_ENDPOINT if registry in DOCKER_HUB_KEYS else registry
    repository = f"library/{repository}" if host == DOCKER_HUB_ENDPOINT and "/" not in repository else repository
    scheme = "http" if registry in insecure else "https"
    url = f"{scheme}://{host}/v2/{repository}/manifests/{reference}"
    try:
        status, headers, answered = head(url, {})
        tried = "no credentials"
        if status == 401 and not answered.startswith(f"{scheme}://{host}/"):
            raise Refused(f"HTTP 401 from {answered}, where the registry redirected: no credentials sent there")
        if status == 401:
            found, problems = find_credentials(registry, repository)
            authorization = authorize(headers.get("WWW-Authenticate", ""), found, repository, insecure)
            tried = (f"the credentials from {found.source}" if found else
                     f"no credentials ({'; '.join(problems)})" if problems else tried)  # fmt: skip
            if authorization:
                status, headers, _ = head(url, {"Authorization": authorization})
    except Refused as refused:
        return UNAUTHORISED, str(refused)
    except ssl.SSLCertVerificationError as error:
        return UNREACHABLE, f"its TLS certificate is not trusted here ({error.verify_message})"
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        if scheme == "https" and isinstance(reason, ssl.SSLError):  # a registry answers `HEAD /v2/` 200, or 401
            with suppress(urllib.error.URLError, OSError, ValueError):
                if head(f"http://{host}/v2/", {})[0] in (200, 401):
                    return PLAIN_HTTP, "it answers plain HTTP, not HTTPS"
        return UNREACHABLE, str(reason)
    answers = {200: (PRESENT, ""), 404: (MISSING, ""), 401: (UNAUTHORISED, f"HTTP 401 with {tried}"),
               403: (UNAUTHORISED, f"HTTP 403 with {tried}")}  # fmt: skip
    return answers.get(status, (UNREACHABLE, f"it answered HTTP {status}"))


def head(url: str, authorization: Mapping[str, str]) -> tuple[int, Message, str]:
    """The status, headers and URL that answered (after redirects) of HEAD url (4xx and 5xx are answers)."""
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    request.unredirected_hdrs.update(authorization)  # urllib sends these to url only, never after a redirect
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.status), response.headers, str(response.url)
    except urllib.error.HTTPError as error:
        return error.code, error.headers, str(error.filename)


def authorize(challenge: str, found: Credentials | None, repository: str, insecure: frozenset[str]) -> str:
    """The Authorization header that answers a 401's challenge ("" when there is nothing to answer with)."""
    scheme, _, params = challenge.partition(" ")
    basic = "Basic " + base64.b64encode(f"{found.username}:{found.password}".encode()).decode() if found else ""
    if scheme.lower() == "basic":
        return basic
    fields = dict(CHALLENGE_PARAM.findall(params))
    realm = fields.get("realm", "")
    if scheme.lower() != "bearer" or not realm:
        return ""
    parts = urllib.parse.urlsplit(realm)
    if parts.scheme != "https" and (parts.scheme != "http" or parts.netloc not in insecure):
        raise Refused(f"HTTP 401; no credentials sent to its token realm {realm}: not https, nor --insecure-registry")
    query = {"scope": fields.get("scope") or f"repository:{repository}:pull"} | (
        {"service": fields["service"]} if fields.get("service") else {})  # fmt: skip
    request = urllib.request.Request(f"{realm}{'&' if parts.query else '?'}{urllib.parse.urlencode(query)}")
    request.unredirected_hdrs.update({"Authorization": basic} if basic else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read(TOKEN_LIMIT + 1)
    except urllib.error.HTTPError:
        return ""  # the token service refused these credentials: the manifest request stays unauthorised
    if len(body) > TOKEN_LIMIT:
        raise Refused(f"HTTP 401; its token realm {realm} answered more than {TOKEN_LIMIT >> 20} MiB: no token")
    answer = json.loads(body)
    token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
    return f"Bearer {token}" if token else ""


def matching(table: Mapping[str, Any], registry: str, repository: str) -> Any:
    """The entry for registry (or, as podman allows, for registry/namespace...), the most specific first; a key is
    read as host[/path], `https://host/v1/` and `host` alike."""
    def scope(key: str) -> str:
        return key.split("://", 1)[-1].rstrip("/").removesuffix("/v1").removesuffix("/v2")

    hosts = {scope(name) for name in (DOCKER_HUB_KEYS if registry in DOCKER_HUB_KEYS else (registry,))}
    fits = [key for key in table if (parts := scope(key).partition("/"))[0] in hosts
            and (not parts[2] or f"{repository}/".startswith(f"{parts[2]}/"))]  # fmt: skip
    return table[max(fits, key=lambda key: len(scope(key)))] if fits else None


def find_credentials(registry: str, repository: str) -> tuple[Credentials | None, list[str]]:
    """The credentials for registry (host[:port]; docker.io for Docker Hub) from the first file that has some, and
    what could not be read on the way."""
    home, runtime = Path(os.environ.get("HOME") or Path.home()), os.environ.get("XDG_RUNTIME_DIR")
    places = (os.environ.get("REGISTRY_AUTH_FILE"), runtime and f"{runtime}/containers/auth.json",
              home / ".config" / "containers" / "auth.json",
              Path(os.environ.get("DOCKER_CONFIG") or home / ".docker") / "config.json")  # fmt: skip
    problems: list[str] = []
    for path in [Path(place) for place in places if place]:
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as error:
            problems.append(f"cannot read {path}: {error}")
            continue
        config = config if isinstance(config, dict) else {}
        helper = matching(config.get("credHelpers") or {}, registry, repository)
        entry = matching(config.get("auths") or {}, registry, repository)
        found = None
        if isinstance(helper, str) and helper:
            found = from_helper(helper, registry, problems)
        elif isinstance(entry, dict) and entry.get("username"):
            found = Credentials(str(entry["username"]), str(entry.get("password") or ""), str(path))
        elif isinstance(entry, dict) and entry.get("auth"):
            try:
                username, _, password = base64.b64decode(str(entry["auth"]), validate=True).decode().partition(":")
                found = Credentials(username, password, str(path))
            except (binascii.Error, UnicodeDecodeError):
                problems.append(f"{path}: an `auth` that is not base64 of user:password")
        elif config.get("credsStore"):
            found = from_helper(str(config["credsStore"]), registry, problems)
        if found is not None:
            return found, problems
    return None, problems


def from_helper(helper: str, registry: str, problems: list[str]) -> Credentials | None:
    program = f"docker-credential-{helper}"
    server = DOCKER_HUB_SERVER if registry in DOCKER_HUB_KEYS else registry
    try:
        answer = subprocess.run([program, "get"], input=server, capture_output=True, text=True,
                                timeout=TIMEOUT_S, check=False)  # fmt: skip
        secret = json.loads(answer.stdout) if answer.returncode == 0 else None
    except FileNotFoundError:
        problems.append(f"{program} (the credential helper your configuration names) is not on PATH")
        return None
    except subprocess.TimeoutExpired:
        problems.append(f"{program} get did not answer in {TIMEOUT_S:.0f} s")
        return None
    except ValueError:
        secret = None
    if not isinstance(secret, dict) or not secret.get("Secret"):
        said = answer.stderr.strip() or answer.stdout.strip()
        problems.append(f"{program} get has no credentials for {server}: {said}")
        return None
    return Credentials(str(secret.get("Username") or ""), str(secret["Secret"]), program)
