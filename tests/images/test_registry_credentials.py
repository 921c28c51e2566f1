"""The image check's credentials stay with the registry they are for (issue 36).

A registry that asks for them gets them: over HTTPS, or plain HTTP where --insecure-registry names it.
Nobody else does: a redirect is followed without them (to another scheme, host or port, as docker and
podman do, and within the registry too), a 401 from where it led is not answered, and a Bearer challenge's
token realm gets them only over HTTPS (any host: Docker Hub's is auth.docker.io) or plain HTTP to a
host --insecure-registry names; a file:// realm is never read, and a token answer over 1 MiB is refused.

The hostile registries are small loopback servers (tests/images/loopback.py): 127.0.0.1 and 127.0.0.2
are two hosts, HTTPS with a certificate this process trusts through SSL_CERT_FILE. The well-behaved
cases run against the real registry in tests/images/test_image_check.py.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import pytest

from tests.images import loopback
from tests.images.loopback import Server
from tfchart.images.registry import PRESENT, TOKEN_LIMIT, UNAUTHORISED, matching, resolve

USER, PASSWORD = "trainer", "pull-secret-123"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
REPOSITORY = "team/model"
MANIFEST = f"/v2/{REPOSITORY}/manifests/v1"
GRANTED = "Bearer granted-token"
Reply = tuple[int, dict[str, str], bytes]


def found(*_: str) -> Reply:
    return 200, {"Docker-Distribution-Api-Version": "registry/2.0"}, b""


def redirect(location: str) -> Reply:
    return 307, {"Location": location}, b""


def token(*_: str) -> Reply:
    return 200, {"Content-Type": "application/json"}, json.dumps({"token": GRANTED.split()[1]}).encode()


def asks_basic(then: loopback.Answer) -> loopback.Answer:
    """A registry that answers 401 (Basic) unless it gets USER's credentials, then answers as `then`."""

    def answer(method: str, path: str, authorization: str) -> Reply:
        if authorization != BASIC:
            return 401, {"WWW-Authenticate": 'Basic realm="hostile"'}, b""
        return then(method, path, authorization)

    return answer


def asks_token(realm: str) -> loopback.Answer:
    """A registry that answers 401 (Bearer, this realm) unless it gets the granted token."""

    def answer(method: str, path: str, authorization: str) -> Reply:
        if authorization == GRANTED:
            return found()
        return 401, {"WWW-Authenticate": f'Bearer realm="{realm}",scope="pull"'}, b""

    return answer


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ssl.SSLContext]:
    """The servers' TLS context; this process trusts its certificate (and nothing else) while the module runs."""
    workdir = tmp_path_factory.mktemp("tls")
    context = loopback.tls(workdir)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(workdir / "cert.pem"))
        yield context


@pytest.fixture
def environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MutableMapping[str, str]:
    """This process's environment (the image check reads it), its only credentials REGISTRY_AUTH_FILE's (written by
    `check`); undone after."""
    for key in ("DOCKER_CONFIG", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "auth.json"))
    return os.environ


def check(registry: Server, environ: MutableMapping[str, str], *insecure: str) -> tuple[str, str]:
    """resolve() of registry/team/model:v1 with USER's credentials for that registry in the auth file."""
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    Path(environ["REGISTRY_AUTH_FILE"]).write_text(json.dumps({"auths": {registry.address: {"auth": login}}}))
    hosts = frozenset(insecure) | ({registry.address} if registry.scheme == "http" else set())
    return resolve(registry.address, REPOSITORY, "v1", hosts)


def asked(server: Server) -> list[tuple[str, str]]:
    """The paths a server was asked for, each with its Authorization (a redirected HEAD may arrive as GET)."""
    return [(path, authorization) for _, path, authorization in server.seen]


def no_secret(verdict: tuple[str, str]) -> None:
    assert PASSWORD not in verdict[1] and BASIC.split()[1] not in verdict[1], verdict


# -- redirects ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host, scheme", [("127.0.0.2", "http"), ("127.0.0.2", "https"), ("127.0.0.1", "http"),
                                          ("127.0.0.1", "https")])  # fmt: skip
def test_a_redirect_off_the_registry_is_followed_without_the_credentials(
    host: str, scheme: str, certificate: ssl.SSLContext, environ: MutableMapping[str, str]
) -> None:
    """An HTTPS registry's authorised HEAD redirected to another host, to plain HTTP, or to another port."""
    with loopback.serving(context=certificate) as registry, \
            loopback.serving(host, certificate if scheme == "https" else None) as elsewhere:  # fmt: skip
        elsewhere.answer = found
        registry.answer = asks_basic(lambda method, path, _: redirect(elsewhere.url(path)))
        verdict = check(registry, environ)
    assert registry.authorizations() == [BASIC]
    assert asked(elsewhere) == [(MANIFEST, "")]
    assert verdict[0] == PRESENT, verdict


def test_a_redirect_within_the_registry_is_followed_without_them_too(
    certificate: ssl.SSLContext, environ: MutableMapping[str, str]
) -> None:
    """Stricter than docker, which keeps them within a host: no redirect gets them (docs/cli.md says so)."""
    with loopback.serving(context=certificate) as registry:
        asking = asks_basic(lambda method, path, _: redirect(f"{path}-moved"))
        registry.answer = lambda *request: found() if request[1].endswith("-moved") else asking(*request)
        verdict = check(registry, environ)
    assert verdict[0] == PRESENT, verdict
    assert asked(registry) == [(MANIFEST, ""), (MANIFEST, BASIC), (f"{MANIFEST}-moved", "")]


def test_a_401_from_where_the_registry_redirected_is_not_answered(
    certificate: ssl.SSLContext, environ: MutableMapping[str, str]
) -> None:
    """The 401 names an HTTPS realm (one the registry itself could name): but the registry did not ask."""
    with loopback.serving(context=certificate) as registry, \
            loopback.serving(loopback.HOSTS[1], certificate) as elsewhere:  # fmt: skip
        registry.answer = lambda method, path, _: redirect(elsewhere.url(path))
        asking = asks_token(elsewhere.url("/token"))
        elsewhere.answer = lambda *request: token() if request[1].startswith("/token") else asking(*request)
        verdict = check(registry, environ)
    assert elsewhere.authorizations() == []
    assert [path for _, path, _ in elsewhere.seen] == [MANIFEST]
    assert verdict[0] == UNAUTHORISED, verdict
    assert verdict[1] == (f"HTTP 401 from {elsewhere.url(MANIFEST)}, where the registry redirected: "
                              "no credentials sent there")  # fmt: skip


# -- token realms ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["http on another host", "http on its host, another port", "file"])
def test_a_token_realm_neither_https_nor_named_insecure_gets_nothing(
    where: str, environ: MutableMapping[str, str], tmp_path: Path
) -> None:
    host = loopback.HOSTS[1] if where == "http on another host" else loopback.HOSTS[0]
    with loopback.serving() as registry, loopback.serving(host) as service:
        service.answer = token
        realm = service.url("/token")
        if where == "file":  # what urllib's file handler would open for this realm: a token it reads locally
            (tmp_path / "realm?scope=pull").write_text(token()[2].decode())
            realm = f"file://{tmp_path}/realm"
        registry.answer = asks_token(realm)
        verdict = check(registry, environ)
    assert service.seen == []
    assert registry.authorizations() == []
    assert verdict == (UNAUTHORISED, f"HTTP 401; no credentials sent to its token realm "
                                               f"{realm}: not https, nor --insecure-registry")  # fmt: skip
    no_secret(verdict)


@pytest.mark.parametrize("where", ["https on another host", "http named by --insecure-registry"])
def test_a_token_realm_over_https_or_named_insecure_gets_the_credentials(
    where: str, certificate: ssl.SSLContext, environ: MutableMapping[str, str]
) -> None:
    """Docker Hub's way: registry-1.docker.io names the realm https://auth.docker.io/token."""
    named = where.startswith("http named")
    with loopback.serving() as registry, \
            loopback.serving(loopback.HOSTS[1], None if named else certificate) as service:  # fmt: skip
        service.answer = token
        registry.answer = asks_token(service.url("/token"))
        verdict = check(registry, environ, *([service.address] if named else []))
    assert verdict[0] == PRESENT, verdict
    assert service.seen == [("GET", "/token?scope=pull", BASIC)]
    assert registry.authorizations() == [GRANTED]


def test_a_token_realm_redirect_off_its_host_gets_no_credentials(
    certificate: ssl.SSLContext, environ: MutableMapping[str, str]
) -> None:
    with loopback.serving() as registry, loopback.serving(loopback.HOSTS[1], certificate) as service, \
            loopback.serving(loopback.HOSTS[1], certificate) as elsewhere:  # fmt: skip
        service.answer = lambda method, path, _: redirect(elsewhere.url(path))
        elsewhere.answer = token
        registry.answer = asks_token(service.url("/token"))
        verdict = check(registry, environ)
    assert service.authorizations() == [BASIC]
    assert asked(elsewhere) == [("/token?scope=pull", "")]
    assert verdict[0] == PRESENT, verdict


def test_a_token_answer_over_a_mib_is_refused(certificate: ssl.SSLContext, environ: MutableMapping[str, str]) -> None:
    huge = json.dumps({"token": "x" * TOKEN_LIMIT}).encode()
    with loopback.serving() as registry, loopback.serving(loopback.HOSTS[1], certificate) as service:
        service.answer = lambda *_: (200, {"Content-Type": "application/json"}, huge)
        registry.answer = asks_token(service.url("/token"))
        verdict = check(registry, environ)
    assert registry.authorizations() == []
    assert verdict == (UNAUTHORISED, f"HTTP 401; its token realm {service.url('/token')} "
                                               "answered more than 1 MiB: no token")  # fmt: skip
    no_secret(verdict)


@pytest.mark.parametrize(("registry", "repository", "entry"), [
    ("docker.io", "library/python", "hub"), ("ghcr.io", "org/team/model", "team"), ("ghcr.io", "org/model", "org"),
    ("ghcr.io", "orgs/model", "host"), ("quay.io", "org/model", None),
])  # fmt: skip
def test_the_most_specific_auths_key_answers_as_podman_reads_them(registry: str, repository: str,
                                                                  entry: str | None) -> None:  # fmt: skip
    keys = {"https://index.docker.io/v1/": "hub", "https://ghcr.io/v2/": "host", "ghcr.io/org": "org",
            "ghcr.io/org/team": "team", "ghcr.io/other": "other"}  # fmt: skip
    assert matching(keys, registry, repository) == entry
