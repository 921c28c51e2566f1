"""Does an image resolve in its registry? `HEAD /v2/<repository>/manifests/<tag or digest>` over the distribution
API (OCI and Docker manifests and indexes accepted), with the user's credentials (tfchart.images.credentials) when
the registry asks: a Bearer token from the challenge's realm, or Basic. HTTPS always, except for the registries named
as insecure (plain HTTP). Docker Hub is registry-1.docker.io and a one-part name is library/<name>, as docker and
podman pull them. Credentials go to the registry only: a redirect is followed without them, a 401 from where it led
is not answered, a token realm gets them over HTTPS or plain HTTP to an insecure host only (never file://).
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
MANIFEST_TYPES = ", ".join(("application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))  # fmt: skip
TOKEN_LIMIT = 1 << 20  # bytes of a token service's answer read at most
PRESENT, MISSING, UNAUTHORISED = "present", "missing", "unauthorised"
PLAIN_HTTP, UNREACHABLE = "plain-http", "unreachable"
CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Access:
    """How to reach registries: the plain-HTTP ones (host[:port]), one request's time, credentials' environ."""

    insecure: frozenset[str] = frozenset()
    timeout: float = TIMEOUT_S
    environ: Mapping[str, str] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Verdict:
    state: str  # present | missing | unauthorised | plain-http | unreachable
    registry: str  # host[:port] as the reference names it (docker.io for Docker Hub)
    detail: str = ""  # why (unauthorised: which credentials were tried; unreachable: the error)


class Refused(Exception):
    """The credentials (or a token) withheld from where the registry pointed: the message says where and why."""


def resolve(registry: str, repository: str, reference: str, access: Access) -> Verdict:
    """Whether registry/repository:reference (a tag or a digest) exists, as a node's pull would find it."""
    registry = registry or DOCKER_HUB
    host = DOCKER_HUB_ENDPOINT if registry in credentials.DOCKER_HUB_KEYS else registry
    repository = f"library/{repository}" if host == DOCKER_HUB_ENDPOINT and "/" not in repository else repository
    scheme = "http" if registry in access.insecure else "https"
    url = f"{scheme}://{host}/v2/{repository}/manifests/{reference}"
    try:
        status, headers, answered = head(url, {}, access.timeout)
        tried = "no credentials"
        if status == 401 and not answered.startswith(f"{scheme}://{host}/"):
            raise Refused(f"HTTP 401 from {answered}, where the registry redirected: no credentials sent there")
        if status == 401:
            found = credentials.find(registry, repository, access.environ)
            authorization = authorize(headers.get("WWW-Authenticate", ""), found.credentials, repository, access)
            tried = (f"the credentials from {found.credentials.source}" if found.credentials else
                     f"no credentials ({'; '.join(found.problems)})" if found.problems else tried)  # fmt: skip
            if authorization:
                status, headers, _ = head(url, {"Authorization": authorization}, access.timeout)
    except Refused as refused:
        return Verdict(UNAUTHORISED, registry, str(refused))
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


def head(url: str, authorization: Mapping[str, str], timeout: float) -> tuple[int, Message, str]:
    """The status, headers and URL that answered (after redirects) of HEAD url (4xx and 5xx are answers)."""
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    request.unredirected_hdrs.update(authorization)  # urllib sends these to url only, never after a redirect
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.headers, str(response.url)
    except urllib.error.HTTPError as error:
        return error.code, error.headers, str(error.filename)


def authorize(challenge: str, found: credentials.Credentials | None, repository: str, access: Access) -> str:
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
    if parts.scheme != "https" and (parts.scheme != "http" or parts.netloc not in access.insecure):
        raise Refused(f"HTTP 401; no credentials sent to its token realm {realm}: not https, nor --insecure-registry")
    query = {"scope": fields.get("scope") or f"repository:{repository}:pull"} | (
        {"service": fields["service"]} if fields.get("service") else {})  # fmt: skip
    request = urllib.request.Request(f"{realm}{'&' if parts.query else '?'}{urllib.parse.urlencode(query)}")
    request.unredirected_hdrs.update({"Authorization": basic} if basic else {})
    try:
        with urllib.request.urlopen(request, timeout=access.timeout) as response:
            body = response.read(TOKEN_LIMIT + 1)
    except urllib.error.HTTPError:
        return ""  # the token service refused these credentials: the manifest request stays unauthorised
    if len(body) > TOKEN_LIMIT:
        raise Refused(f"HTTP 401; its token realm {realm} answered more than {TOKEN_LIMIT >> 20} MiB: no token")
    answer = json.loads(body)
    token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
    return f"Bearer {token}" if token else ""


def speaks_plain_http(host: str, timeout: float) -> bool:
    """Whether host answers `HEAD /v2/` over plain HTTP as a registry does (200, or 401 asking for credentials)."""
    try:
        return head(f"http://{host}/v2/", {}, timeout)[0] in (200, 401)
    except (urllib.error.URLError, OSError, ValueError):
        return False
