"""Does an image resolve in its registry? `HEAD /v2/<repository>/manifests/<tag or digest>` over the
distribution API (OCI and Docker manifests and indexes accepted), with the user's credentials
(tfchart.images.credentials) when the registry asks: a Bearer token from the challenge's realm, or Basic.

HTTPS always, except for the registries named as insecure (plain HTTP). Docker Hub is
registry-1.docker.io and a one-part name is library/<name>, as docker and podman pull them.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import Message

from tfchart.images import credentials

TIMEOUT_S = 10.0
DOCKER_HUB = "docker.io"
DOCKER_HUB_ENDPOINT = "registry-1.docker.io"
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))  # fmt: skip
PRESENT, MISSING, UNAUTHORISED = "present", "missing", "unauthorised"
PLAIN_HTTP, UNREACHABLE = "plain-http", "unreachable"
CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Access:
    """How to reach registries: which speak plain HTTP (host[:port]), the time one request may take, and
    the environment credentials are looked up in (None: os.environ)."""

    insecure: frozenset[str] = frozenset()
    timeout: float = TIMEOUT_S
    environ: Mapping[str, str] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Verdict:
    state: str  # present | missing | unauthorised | plain-http | unreachable
    registry: str  # host[:port] as the reference names it (docker.io for Docker Hub)
    detail: str = ""  # why (unauthorised: which credentials were tried; unreachable: the error)


def resolve(registry: str, repository: str, reference: str, access: Access) -> Verdict:
    """Whether registry/repository:reference (a tag or a digest) exists, as a node's pull would find it."""
    registry = registry or DOCKER_HUB
    host = DOCKER_HUB_ENDPOINT if registry in credentials.DOCKER_HUB_KEYS else registry
    if host == DOCKER_HUB_ENDPOINT and "/" not in repository:
        repository = f"library/{repository}"
    scheme = "http" if registry in access.insecure else "https"
    url = f"{scheme}://{host}/v2/{repository}/manifests/{reference}"
    try:
        status, headers = head(url, {}, access.timeout)
        tried = "no credentials"
        if status == 401:
            found = credentials.find(registry, repository, access.environ)
            authorization = authorize(headers.get("WWW-Authenticate", ""), found.credentials, repository, access)
            if found.credentials is not None:
                tried = f"the credentials from {found.credentials.source}"
            elif found.problems:
                tried = f"no credentials ({'; '.join(found.problems)})"
            if authorization:
                status, headers = head(url, {"Authorization": authorization}, access.timeout)
    except ssl.SSLCertVerificationError as error:
        return Verdict(UNREACHABLE, registry, f"its TLS certificate is not trusted here ({error.verify_message})")
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        if scheme == "https" and isinstance(reason, ssl.SSLError) and speaks_plain_http(host, access.timeout):
            return Verdict(PLAIN_HTTP, registry, "it answers plain HTTP, not HTTPS")
        return Verdict(UNREACHABLE, registry, str(reason))
    if status == 200:
        return Verdict(PRESENT, registry)
    if status == 404:
        return Verdict(MISSING, registry)
    if status in (401, 403):
        return Verdict(UNAUTHORISED, registry, f"HTTP {status} with {tried}")
    return Verdict(UNREACHABLE, registry, f"it answered HTTP {status}")


def head(url: str, headers: Mapping[str, str], timeout: float) -> tuple[int, Message]:
    """The status and headers of HEAD url (4xx and 5xx are answers, not errors)."""
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES, **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers


def authorize(challenge: str, found: credentials.Credentials | None, repository: str, access: Access) -> str:
    """The Authorization header that answers a 401's challenge ("" when there is nothing to answer with)."""
    scheme, _, params = challenge.partition(" ")
    basic = "Basic " + base64.b64encode(f"{found.username}:{found.password}".encode()).decode() if found else ""
    if scheme.lower() == "basic":
        return basic
    if scheme.lower() != "bearer":
        return ""
    fields = dict(CHALLENGE_PARAM.findall(params))
    if not fields.get("realm"):
        return ""
    query = {"scope": fields.get("scope") or f"repository:{repository}:pull"}
    if fields.get("service"):
        query["service"] = fields["service"]
    request = urllib.request.Request(f"{fields['realm']}?{urllib.parse.urlencode(query)}",
                                     headers={"Authorization": basic} if basic else {})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=access.timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError:
        return ""  # the token service refused these credentials: the manifest request stays unauthorised
    token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
    return f"Bearer {token}" if token else ""


def speaks_plain_http(host: str, timeout: float) -> bool:
    """Whether host answers `GET /v2/` over plain HTTP as a registry does (200, or 401 asking for credentials)."""
    try:
        urllib.request.urlopen(f"http://{host}/v2/", timeout=timeout).close()
    except urllib.error.HTTPError as error:
        return error.code == 401
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True
