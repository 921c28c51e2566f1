"""The image-resolution check against real registries: Docker distribution's `docker-registry` on loopback
(tests/images/registrylib.py), one open, one behind htpasswd auth and one that asks for a Bearer token of a
token service (tests/images/tokenserver.py), as Docker Hub and ghcr.io do.

Each image is written through the registry's API (a config blob and a manifest), then asked for as
`tfchart preflight` and `tfchart install` ask: present, absent (named with the command that builds and
pushes it), refused without credentials (named with the login) and found with the credentials of an
auth file or a credential helper, plain HTTP refused unless named by --insecure-registry, and a
registry nobody listens on a warning. Credentials come only from the files each test writes: HOME,
XDG_RUNTIME_DIR, DOCKER_CONFIG and REGISTRY_AUTH_FILE point into its temporary directory.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import pytest

from tests import kubeapi as kf
from tests.chartlib import REPO, helm_path, render
from tests.images import registrylib, tokenserver
from tests.images.registrylib import Registry
from tests.kubeapi import KubeServer, kube_server
from tfchart.cluster.preflight import FAIL, OK, WARN, check_images
from tfchart.images.registry import MISSING, PLAIN_HTTP, PRESENT, UNAUTHORISED, UNREACHABLE, resolve
from tfchart.manifests.images import pulled_images

Environ = MutableMapping[str, str]  # os.environ, as the fixture `home` sets it

PROJECT = "tf-distributed/trainer"
VERSION = "0.1.0"
PRIVATE = "team/private-model"
USER, PASSWORD = "trainer", "pull-secret-123"
NS = "ml-training"


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registrylib.running(tmp_path_factory.mktemp("open-registry")) as registry:
        registry.put_image(PROJECT, VERSION)
        yield registry


@pytest.fixture(scope="module")
def private_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registrylib.running(tmp_path_factory.mktemp("private-registry"), users={USER: PASSWORD}) as registry:
        registry.put_image(PRIVATE, "v1")
        yield registry


@pytest.fixture(scope="module")
def token_registry(open_registry: Registry, tmp_path_factory: pytest.TempPathFactory,
                   ) -> Iterator[tuple[Registry, tokenserver.TokenService]]:  # fmt: skip
    """A registry serving the open one's images to holders of a token from a token service."""
    workdir = tmp_path_factory.mktemp("token-registry")
    with tokenserver.serving(workdir, {USER: PASSWORD}) as service:
        token = {"realm": service.realm, "service": tokenserver.SERVICE, "issuer": tokenserver.ISSUER,
                 "rootcertbundle": str(service.certificate)}  # fmt: skip
        with registrylib.running(workdir / "registry", token=token, storage=open_registry.storage) as registry:
            yield registry, service


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Environ:
    """This process's environment (the image check reads it), with every credential file under tmp_path (none
    written yet); what a test sets in it is undone after."""
    for key in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after a test that puts a credential helper on it
    return os.environ


def access(registry: Registry, insecure: bool = True) -> frozenset[str]:
    """The registries asked over plain HTTP: this one, unless `insecure` is False."""
    return frozenset({registry.address} if insecure else ())


def auth_json(registry: Registry, password: str) -> dict[str, object]:
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    return {"auths": {registry.address: {"auth": token}}}


def test_a_pushed_image_is_present_by_tag_and_by_digest(open_registry: Registry, home: Environ) -> None:
    digest, _ = open_registry.manifest(PROJECT, VERSION)
    for reference in (VERSION, digest):
        verdict = resolve(open_registry.address, PROJECT, reference, access(open_registry))
        assert verdict[0] == PRESENT, verdict
    served = open_registry.requests()
    assert ("HEAD", f"/v2/{PROJECT}/manifests/{VERSION}", 200) in served


def test_an_absent_tag_or_repository_is_missing(open_registry: Registry, home: Environ) -> None:
    for repository, reference in ((PROJECT, "9.9.9"), ("nobody/pushed-this", "1")):
        verdict = resolve(open_registry.address, repository, reference, access(open_registry))
        assert verdict[0] == MISSING, verdict


def test_a_private_registry_refuses_without_credentials(private_registry: Registry, home: Environ) -> None:
    verdict = resolve(private_registry.address, PRIVATE, "v1", access(private_registry))
    assert verdict == (UNAUTHORISED, "HTTP 401 with no credentials")


def test_registry_auth_file_credentials_are_sent(private_registry: Registry, home: Environ,
                                                 tmp_path: Path) -> None:  # fmt: skip
    auth_file = tmp_path / "auth.json"
    home["REGISTRY_AUTH_FILE"] = str(auth_file)
    auth_file.write_text(json.dumps(auth_json(private_registry, PASSWORD)))
    assert resolve(private_registry.address, PRIVATE, "v1", access(private_registry))[0] == PRESENT
    assert resolve(private_registry.address, PRIVATE, "v2", access(private_registry))[0] == MISSING
    auth_file.write_text(json.dumps(auth_json(private_registry, "wrong")))
    verdict = resolve(private_registry.address, PRIVATE, "v1", access(private_registry))
    assert verdict == (UNAUTHORISED, f"HTTP 401 with the credentials from {auth_file}")


def test_podman_and_docker_default_files_are_read(private_registry: Registry, home: Environ) -> None:
    for place in (Path(home["XDG_RUNTIME_DIR"]) / "containers" / "auth.json",
                  Path(home["HOME"]) / ".config" / "containers" / "auth.json",
                  Path(home["HOME"]) / ".docker" / "config.json"):  # fmt: skip
        place.parent.mkdir(parents=True, exist_ok=True)
        place.write_text(json.dumps(auth_json(private_registry, PASSWORD)))
        assert resolve(private_registry.address, PRIVATE, "v1", access(private_registry))[0] == PRESENT
        place.unlink()


def test_a_docker_credential_helper_answers(private_registry: Registry, home: Environ, tmp_path: Path) -> None:
    """credHelpers.<host> runs `docker-credential-<name> get` with the server on standard input."""
    helpers = tmp_path / "bin"
    helpers.mkdir()
    asked = tmp_path / "asked"
    helper = helpers / "docker-credential-tfdtest"
    helper.write_text(f'#!/bin/sh\ncat > {asked}\necho \'{{"Username": "{USER}", "Secret": "{PASSWORD}"}}\'\n')
    helper.chmod(0o755)
    config = Path(home["HOME"]) / "docker-config"
    config.mkdir(parents=True)
    (config / "config.json").write_text(json.dumps({"credHelpers": {private_registry.address: "tfdtest"}}))
    home |= {"DOCKER_CONFIG": str(config), "PATH": f"{helpers}:{home['PATH']}"}  # the helper is looked up on PATH
    verdict = resolve(private_registry.address, PRIVATE, "v1", access(private_registry))
    assert verdict[0] == PRESENT, verdict
    assert asked.read_text() == private_registry.address


def test_a_bearer_token_is_fetched_from_the_challenge_realm_with_the_credentials(
    token_registry: tuple[Registry, tokenserver.TokenService], home: Environ, tmp_path: Path
) -> None:
    """The token service speaks plain HTTP: it too must be named by --insecure-registry to get credentials."""
    registry, service = token_registry
    scope = f"repository:{PROJECT}:pull"
    both = frozenset({registry.address, service.address})
    anonymous = resolve(registry.address, PROJECT, VERSION, both)
    assert anonymous == (UNAUTHORISED, "HTTP 401 with no credentials")
    assert service.requests[-1] == (scope, "")  # an anonymous token, which grants nothing
    auth_file = tmp_path / "auth.json"
    home["REGISTRY_AUTH_FILE"] = str(auth_file)
    auth_file.write_text(json.dumps(auth_json(registry, PASSWORD)))
    asked = len(service.requests)
    unnamed = resolve(registry.address, PROJECT, VERSION, access(registry))
    assert unnamed == (UNAUTHORISED, "HTTP 401; no credentials sent to its token realm "
                                               f"{service.realm}: not https, nor --insecure-registry")  # fmt: skip
    assert len(service.requests) == asked
    assert resolve(registry.address, PROJECT, VERSION, both)[0] == PRESENT
    assert service.requests[-1] == (scope, USER)
    assert resolve(registry.address, PROJECT, "9.9.9", both)[0] == MISSING
    auth_file.write_text(json.dumps(auth_json(registry, "wrong")))
    refused = resolve(registry.address, PROJECT, VERSION, both)
    assert refused == (UNAUTHORISED, f"HTTP 401 with the credentials from {auth_file}")


def test_a_credential_helper_that_is_not_installed_is_named(private_registry: Registry, home: Environ) -> None:
    config = Path(home["HOME"]) / ".docker" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"credsStore": "tfd-not-installed"}))
    verdict = resolve(private_registry.address, PRIVATE, "v1", access(private_registry))
    assert verdict == (UNAUTHORISED, "HTTP 401 with no credentials (docker-credential-"
                                               "tfd-not-installed (the credential helper your configuration names) "
                                               "is not on PATH)")  # fmt: skip


def test_plain_http_is_refused_unless_named_insecure(open_registry: Registry, home: Environ) -> None:
    verdict = resolve(open_registry.address, PROJECT, VERSION, access(open_registry, insecure=False))
    assert verdict == (PLAIN_HTTP, "it answers plain HTTP, not HTTPS")


def test_a_registry_nobody_listens_on_is_unreachable(home: Environ) -> None:
    address = f"127.0.0.1:{registrylib.free_port()}"
    verdict = resolve(address, PROJECT, VERSION, frozenset({address}))
    assert verdict[0] == UNREACHABLE and "Connection refused" in verdict[1], verdict


# -- the preflight check and the command line ----------------------------------------------------------


def docs(*sets: str) -> list[dict[str, object]]:
    """The release values/cpu.yaml makes (without TF Serving, whose image is Docker Hub's), with these --set."""
    return render(values=[REPO / "values" / "cpu.yaml"], sets=["serving.enabled=false", *sets], namespace=NS)


def test_preflight_names_a_missing_project_image_with_the_build_that_pushes_it(
    open_registry: Registry, home: Environ
) -> None:
    address = open_registry.address
    rendered = docs(f"image.registry={address}", "image.tag=0.2.0-gpu")
    assert {image["image"] for image in pulled_images(rendered)} == {f"{address}/{PROJECT}:0.2.0-gpu",
                                                                   f"{address}/{PROJECT}:{VERSION}"}  # fmt: skip
    findings = {finding.message.split()[0]: finding for finding in check_images(rendered, access(open_registry))}
    present = findings[f"{address}/{PROJECT}:{VERSION}"]
    assert (present.check, present.severity) == ("images", OK)
    missing = findings[f"{address}/{PROJECT}:0.2.0-gpu"]
    assert missing.severity == FAIL
    assert missing.message == (f"{address}/{PROJECT}:0.2.0-gpu is not in {address} "
                               "(pulled by chief, ps, tensorboard, worker)")
    assert missing.hint == (f"build and push it from a tf-distributed checkout: tfchart build --gpu --push --registry "
                            f"{address} --repository {PROJECT} --tag 0.2.0 --no-tls-verify")  # fmt: skip


def test_preflight_tells_a_users_own_missing_image_to_be_pushed(open_registry: Registry, home: Environ) -> None:
    address = open_registry.address
    rendered = docs(f"image.registry={address}", "worker.image.repository=team/own")
    [missing] = [f for f in check_images(rendered, access(open_registry)) if f.severity != OK]
    assert missing.message == f"{address}/team/own:{VERSION} is not in {address} (pulled by worker)"
    assert missing.hint.startswith(f"push it (podman push {address}/team/own:{VERSION}, or docker push)")


def test_preflight_names_the_registry_that_refuses_and_the_login(
    open_registry: Registry, private_registry: Registry, home: Environ
) -> None:
    private = private_registry.address
    rendered = docs(f"image.registry={open_registry.address}", f"worker.image.registry={private}",
                    f"worker.image.repository={PRIVATE}", "worker.image.tag=v1")  # fmt: skip
    both = frozenset({open_registry.address, private})
    [refused] = [f for f in check_images(rendered, both) if f.severity != OK]
    assert refused.severity == FAIL
    assert refused.message == (f"{private} refused {private}/{PRIVATE}:v1 (pulled by worker): HTTP 401 with no "
                               "credentials; it is private, or does not exist")  # fmt: skip
    assert refused.hint.startswith(f"podman login {private} (or docker login {private})")


def test_an_unreachable_registry_is_a_warning(home: Environ) -> None:
    address = f"127.0.0.1:{registrylib.free_port()}"
    [finding] = check_images(docs(f"image.registry={address}"), frozenset({address}))
    assert finding.severity == WARN and finding.message.startswith(f"could not check {address}/{PROJECT}:{VERSION}")


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    """A one-node kind-like cluster every other preflight check passes on."""
    with kube_server(read_only=True) as server:
        server.add(kf.node("kind-control-plane", cpu="4", memory="8Gi"),
                   kf.storage_class("standard", "rancher.io/local-path", default=True), kf.daemon_set("kindnet"))
        yield server


def tfchart(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tfchart", "--helm", str(helm_path("4")), *args]
    return subprocess.run(argv, capture_output=True, text=True, env={**environ, "COLUMNS": "400"}, cwd=REPO,
                          timeout=300, check=False)  # fmt: skip


def test_preflight_command_passes_present_and_fails_absent_images(
    open_registry: Registry, cluster: KubeServer, home: Environ
) -> None:
    address = open_registry.address
    common = ["preflight", "-f", "values/cpu.yaml", "--set", "serving.enabled=false", "-n", NS,
              "--kubeconfig", str(cluster.kubeconfig()), "--set", f"image.registry={address}"]  # fmt: skip
    present = tfchart(home, *common, "--insecure-registry", address)
    assert present.returncode == 0, present.stderr
    assert "✓ preflight passed" in present.stdout
    absent = tfchart(home, *common, "--insecure-registry", f"http://{address}/", "--set", "image.tag=0.3.0")
    assert absent.returncode == 1, absent.stderr
    assert "Traceback" not in absent.stderr
    assert (f"error: preflight checks failed: {address}/{PROJECT}:0.3.0 is not in {address} (pulled by chief, "
            "ps, tensorboard, worker)") in absent.stderr  # fmt: skip
    build = f"tfchart build --cpu --push --registry {address} --repository {PROJECT} --tag 0.3.0 --no-tls-verify"
    assert f"hint: build and push it from a tf-distributed checkout: {build} (or pass --skip" in absent.stderr
    plain = tfchart(home, *common)
    assert plain.returncode == 1
    assert f"error: preflight checks failed: {address} ({address}/{PROJECT}:{VERSION}): it answers plain HTTP" in (
        plain.stderr)
    assert f"hint: --insecure-registry {address} if it is meant to serve plain HTTP" in plain.stderr
    skipped = tfchart(home, *common, "--set", "image.tag=0.3.0", "--skip-image-check")
    assert skipped.returncode == 0, skipped.stderr
    assert "images" not in skipped.stderr


def test_install_refuses_an_image_it_may_not_pull_before_helm_runs(
    open_registry: Registry, private_registry: Registry, cluster: KubeServer, home: Environ, tmp_path: Path
) -> None:
    private = private_registry.address
    args = ["install", "mnist", "--skip-preflight", "-f", "values/cpu.yaml", "-n", NS,
            "--kubeconfig", str(cluster.kubeconfig()), "--set", "serving.enabled=false",
            "--set", f"image.registry={open_registry.address}", "--set", f"worker.image.registry={private}",
            "--set", f"worker.image.repository={PRIVATE}", "--set", "worker.image.tag=v1",
            "--insecure-registry", open_registry.address, "--insecure-registry", private]  # fmt: skip
    refused = tfchart(home, *args)
    assert refused.returncode == 1, refused.stderr
    assert f"error: preflight checks failed: {private} refused {private}/{PRIVATE}:v1 (pulled by worker)" in (
        refused.stderr)
    assert f"hint: podman login {private} (or docker login {private})" in refused.stderr
    assert cluster.calls == [], "helm ran although an image would not pull"
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps(auth_json(private_registry, PASSWORD)))
    allowed = tfchart({**home, "REGISTRY_AUTH_FILE": str(auth_file)}, "preflight", *args[3:])
    assert allowed.returncode == 0, allowed.stderr
