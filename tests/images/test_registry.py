"""The release round trip for real: images and chart pushed to a real registry, pulled back, rendered.

What .github/workflows/release.yml does against ghcr.io, done here against Docker distribution's
registry on loopback (tests/images/registrylib.py), with podman and both helm majors:

* `tfchart build --all --push --engine podman --registry 127.0.0.1:<port> --no-tls-verify` pushes
  both trainer images (its build steps hit podman's layer cache: the session's images are built by
  tests/containerlib.py first); the registry lists both tags and serves manifests whose config is
  the built image.
* Each pushed tag is untagged (`podman rmi <that exact reference>`; the ghcr.io/... tags other tests
  use stay) and pulled back with `podman pull --tls-verify=false`: the pulled image ID is the built
  one. podman then finds most layers in its own store, so every layer blob the registry serves is
  also read back here and unpacked: each one is the built image's layer (its diff ID), which is what
  a pull on an empty machine downloads. (A pull into a scratch store checks the same but costs a
  minute more: 2.4 GB unpacked to disk.)
* `helm package` + `helm push --plain-http` with helm 3.17 and helm 4.1, each into its own
  repository (oci://<registry>/charts/helm<major>); `helm template` of the pushed chart is
  byte-identical to `helm template` of the directory chart, for the defaults and every values/
  file, and with `--set image.registry=<registry>` it renders exactly the references tfchart pushed.

Nothing is left behind: the registry is stopped, its port closed, its storage removed, the pushed
tags removed from podman's store; helm writes only under a temporary HELM_*/HOME (HOME is checked
empty afterwards).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chartlib import CHART, HELM_MAJORS, REPO, VALUES_DIR, MissingTool, helm_path
from tests.containerlib import ENGINE, built_images, image_exists, require_engine
from tests.images import registrylib
from tests.images.registrylib import Registry
from tfchart.images.build import DEFAULT_REPOSITORY, project_version

pytestmark = pytest.mark.slow

VERSION = project_version(REPO)
CHART_VERSION = str(yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))["version"])
CHART_NAME = "tf-distributed"
RELEASE = "mnist"
NAMESPACE = "ml-training"
VALUES_CASES: list[Path | None] = [None, *sorted(VALUES_DIR.glob("*.yaml"))]
VALUES_IDS = ["defaults", *(path.name for path in VALUES_CASES if path is not None)]
HELM_CONFIG_MEDIA_TYPE = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_MEDIA_TYPE = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


def timed(what: str, started: float) -> None:
    print(f"{what}: {time.monotonic() - started:.1f} s")


# ---------------------------------------------------------------------------------------------
# the registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A real registry on 127.0.0.1:<free port> for this module; stopped and its storage removed after."""
    require_engine()
    try:
        registrylib.registry_binary()
    except MissingTool as error:
        pytest.fail(str(error))
    started = time.monotonic()
    running = registrylib.start(tmp_path_factory.mktemp("registry"))
    timed(f"registry up on {running.address}", started)
    try:
        yield running
    finally:
        registrylib.stop(running)
    assert running.process.returncode is not None, "the registry process still runs"
    assert not registrylib.port_open(running.port), f"port {running.port} still open"
    assert not running.storage.exists(), f"registry storage {running.storage} left behind"


def test_registry_starts_answers_and_stops_without_a_trace(tmp_path: Path) -> None:
    with registrylib.running(tmp_path / "scratch") as scratch:
        assert registrylib.answers(scratch)
        assert scratch.process.poll() is None
        body, _ = scratch.get("/v2/_catalog")
        assert json.loads(body) == {"repositories": []}
        with pytest.raises(urllib.error.HTTPError) as unknown:
            scratch.tags("nothing/here")
        assert unknown.value.code == 404
        assert scratch.requests()[-2:] == [("GET", "/v2/_catalog", 200), ("GET", "/v2/nothing/here/tags/list", 404)]
        assert scratch.storage.is_dir()
    assert scratch.process.returncode is not None
    assert not registrylib.port_open(scratch.port)
    assert not scratch.storage.exists()


# ---------------------------------------------------------------------------------------------
# images: tfchart build --push, podman pull


@dataclass(frozen=True)
class PushedImages:
    cpu: str
    gpu: str
    ids: dict[str, str]  # reference -> image ID (config digest, hex) in podman's store after the build

    def all(self) -> list[str]:
        return [self.cpu, self.gpu]


def image_id(reference: str) -> str:
    answer = subprocess.run(
        [ENGINE, "image", "inspect", "--format", "{{.Id}}", reference], capture_output=True, text=True, check=False
    )
    assert answer.returncode == 0, f"{reference} is not in podman's store: {answer.stderr}"
    return answer.stdout.strip()


@pytest.fixture(scope="module")
def pushed(registry: Registry) -> Iterator[PushedImages]:
    """Both trainer images pushed by `tfchart build --all --push --engine podman` to the registry.

    Afterwards the tags this adds to podman's store (<registry>/tf-distributed/trainer:...) are
    removed, by their exact references; the session's ghcr.io/... images must still be there.
    """
    session = built_images()  # builds once per session: tfchart build below hits the layer cache
    expected = [
        f"{registry.address}/{DEFAULT_REPOSITORY}:{VERSION}",
        f"{registry.address}/{DEFAULT_REPOSITORY}:{VERSION}-gpu",
    ]
    argv = [
        sys.executable, "-m", "tfchart", "build", "--all", "--push", "--engine", ENGINE,
        "--registry", registry.address, "--no-tls-verify",
    ]  # fmt: skip
    argv += ["--base-image", session.base] if session.base else []
    argv += ["--gpu-base-image", session.gpu_base] if session.gpu_base else []
    started = time.monotonic()
    try:
        result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
        timed("tfchart build --all --push", started)
        assert result.returncode == 0, f"tfchart build --push failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        # the references tfchart itself pushed: its echoed `podman push --tls-verify=false REF` lines
        pushed_refs = [line.split()[-1] for line in result.stdout.splitlines() if line.startswith(f"{ENGINE} push ")]
        assert pushed_refs == expected, result.stdout[-4000:]
        yield PushedImages(expected[0], expected[1], {ref: image_id(ref) for ref in expected})
    finally:
        for reference in expected:
            if image_exists(reference):
                subprocess.run([ENGINE, "rmi", reference], capture_output=True, check=True)
        left = [reference for reference in expected if image_exists(reference)]
        assert not left, f"pushed tags left in podman's store: {left}"
        missing = [reference for reference in session.all() if not image_exists(reference)]
        assert not missing, f"the session's images were removed: {missing}"


def test_tfchart_build_pushes_both_images_and_the_registry_serves_the_built_ones(
    registry: Registry, pushed: PushedImages
) -> None:
    assert registry.tags(DEFAULT_REPOSITORY) == sorted([VERSION, f"{VERSION}-gpu"])
    for reference in pushed.all():
        tag = reference.rsplit(":", 1)[1]
        _, manifest = registry.manifest(DEFAULT_REPOSITORY, tag)
        assert manifest["config"]["digest"] == f"sha256:{pushed.ids[reference]}", reference
        assert manifest["layers"], f"{reference}: a manifest without layers"


def test_pushed_images_pull_back_as_the_built_images(registry: Registry, pushed: PushedImages) -> None:
    for reference in pushed.all():
        # untag exactly the pushed reference (the ghcr.io/... tags stay), so that podman must ask the registry
        subprocess.run([ENGINE, "rmi", reference], capture_output=True, check=True)
        assert not image_exists(reference)
        log_offset = registry.log_size()
        started = time.monotonic()
        pull = subprocess.run(
            [ENGINE, "pull", "--quiet", "--tls-verify=false", reference],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        timed(f"podman pull {reference}", started)
        assert pull.returncode == 0, f"podman pull {reference} failed:\n{pull.stderr[-4000:]}"
        tag = reference.rsplit(":", 1)[1]
        served = registry.requests(since=log_offset)
        assert ("GET", f"/v2/{DEFAULT_REPOSITORY}/manifests/{tag}", 200) in served, served
        assert pull.stdout.strip() == pushed.ids[reference]
        assert image_id(reference) == pushed.ids[reference]
        digest, _ = registry.manifest(DEFAULT_REPOSITORY, tag)
        inspect = subprocess.run([ENGINE, "image", "inspect", reference], capture_output=True, text=True, check=True)
        assert f"{registry.address}/{DEFAULT_REPOSITORY}@{digest}" in json.loads(inspect.stdout)[0]["RepoDigests"]


def test_every_blob_the_registry_serves_is_the_built_image(registry: Registry, pushed: PushedImages) -> None:
    """What a pull into an empty store would download: each layer unpacks to the built image's layer."""
    started = time.monotonic()
    checked: dict[str, str] = {}  # layer digest -> diff ID (the two images share their base layers)
    for reference in pushed.all():
        _, manifest = registry.manifest(DEFAULT_REPOSITORY, reference.rsplit(":", 1)[1])
        config_blob = manifest["config"]
        config_digest, _ = registry.blob_digests(DEFAULT_REPOSITORY, config_blob["digest"], config_blob["mediaType"])
        assert config_digest == config_blob["digest"] == f"sha256:{pushed.ids[reference]}"
        inspect = subprocess.run(
            [ENGINE, "image", "inspect", "--format", "{{json .RootFS.Layers}}", reference],
            capture_output=True,
            text=True,
            check=True,
        )
        built_layers: list[str] = json.loads(inspect.stdout)
        served_layers: list[str] = []
        for layer in manifest["layers"]:
            if layer["digest"] not in checked:
                blob_digest, diff_id = registry.blob_digests(DEFAULT_REPOSITORY, layer["digest"], layer["mediaType"])
                assert blob_digest == layer["digest"], f"{reference}: blob {layer['digest']} hashes to {blob_digest}"
                checked[layer["digest"]] = diff_id
            served_layers.append(checked[layer["digest"]])
        assert served_layers == built_layers, reference
    timed(f"{len(checked)} layers read back and unpacked", started)


# ---------------------------------------------------------------------------------------------
# the chart: helm package + helm push, helm template oci://


@dataclass(frozen=True)
class PushedChart:
    major: str
    url: str  # oci://<registry>/charts/helm<major>/tf-distributed
    repository: str  # charts/helm<major>/tf-distributed
    package: Path
    digest: str  # the manifest digest helm push printed


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """helm's environment, every place it writes under a temporary directory; afterwards HOME must be empty."""
    root = tmp_path_factory.mktemp("helm")
    env = registrylib.helm_env(root)
    yield env
    strays = sorted(str(path.relative_to(root)) for path in Path(env["HOME"]).rglob("*"))
    shutil.rmtree(root)
    assert not strays, f"helm wrote outside HELM_CACHE_HOME/HELM_CONFIG_HOME/HELM_DATA_HOME: {strays}"


@pytest.fixture(scope="module")
def chart_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory chart as of now: packaged and rendered from the same files even while it is edited."""
    return Path(shutil.copytree(CHART, tmp_path_factory.mktemp("chart") / CHART_NAME))


def helm(major: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(helm_path(major)), *args], capture_output=True, env=env, timeout=300, check=False)


@pytest.fixture(scope="module")
def charts(
    registry: Registry, helm_home: dict[str, str], chart_snapshot: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PushedChart]:
    """The chart packaged and pushed by each helm major into its own repository of the registry."""
    pushed: dict[str, PushedChart] = {}
    for major in HELM_MAJORS:
        started = time.monotonic()
        destination = tmp_path_factory.mktemp(f"package-helm{major}")
        package = helm(major, helm_home, "package", str(chart_snapshot), "--destination", str(destination))
        assert package.returncode == 0, package.stderr.decode()
        tgz = destination / f"{CHART_NAME}-{CHART_VERSION}.tgz"
        assert tgz.is_file(), sorted(destination.iterdir())
        target = f"oci://{registry.address}/charts/helm{major}"
        push = helm(major, helm_home, "push", "--plain-http", str(tgz), target)
        output = (push.stdout + push.stderr).decode()
        assert push.returncode == 0, output
        reference = f"{registry.address}/charts/helm{major}/{CHART_NAME}:{CHART_VERSION}"
        assert f"Pushed: {reference}" in output, output
        digest = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", output, re.M)
        assert digest, output
        pushed[major] = PushedChart(
            major, f"{target}/{CHART_NAME}", f"charts/helm{major}/{CHART_NAME}", tgz, digest.group(1)
        )
        timed(f"helm {major} package + push", started)
    return pushed


def test_each_helm_pushes_the_packaged_chart_to_its_own_repository(
    registry: Registry, charts: dict[str, PushedChart], helm_major: str
) -> None:
    chart = charts[helm_major]
    assert registry.tags(chart.repository) == [CHART_VERSION]
    digest, manifest = registry.manifest(chart.repository, CHART_VERSION)
    assert digest == chart.digest
    assert manifest["config"]["mediaType"] == HELM_CONFIG_MEDIA_TYPE
    [layer] = manifest["layers"]
    assert layer["mediaType"] == HELM_CHART_MEDIA_TYPE
    assert layer["digest"] == f"sha256:{hashlib.sha256(chart.package.read_bytes()).hexdigest()}"


def template_args(chart: str, values: Path | None, *extra: str) -> list[str]:
    args = ["template", RELEASE, chart, "--namespace", NAMESPACE, *extra]
    return args + (["-f", str(values)] if values is not None else [])


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_chart_from_the_registry_renders_byte_identical_to_the_directory_chart(
    charts: dict[str, PushedChart],
    helm_home: dict[str, str],
    chart_snapshot: Path,
    helm_major: str,
    values: Path | None,
) -> None:
    chart = charts[helm_major]
    pulled = helm(helm_major, helm_home, *template_args(chart.url, values, "--version", CHART_VERSION, "--plain-http"))
    assert pulled.returncode == 0, pulled.stderr.decode()
    local = helm(helm_major, helm_home, *template_args(str(chart_snapshot), values))
    assert local.returncode == 0, local.stderr.decode()
    assert b"\nkind: Job\n" in local.stdout, "the directory chart rendered no chief Job"
    assert pulled.stdout == local.stdout


def rendered_images(manifests: bytes) -> set[str]:
    images: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                for container in node.get(key) or []:
                    images.add(container["image"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for document in yaml.safe_load_all(manifests):
        walk(document)
    return images


@pytest.mark.parametrize("values", VALUES_CASES, ids=VALUES_IDS)
def test_chart_from_the_registry_pulls_exactly_the_pushed_images(
    registry: Registry,
    pushed: PushedImages,
    charts: dict[str, PushedChart],
    helm_home: dict[str, str],
    helm_major: str,
    values: Path | None,
) -> None:
    chart = charts[helm_major]
    extra = ["--version", CHART_VERSION, "--plain-http", "--set", f"image.registry={registry.address}"]
    rendered = helm(helm_major, helm_home, *template_args(chart.url, values, *extra))
    assert rendered.returncode == 0, rendered.stderr.decode()
    images = rendered_images(rendered.stdout)
    # the ready GPU values files pin image.tag <version>-gpu; everything else runs the chart's appVersion
    pinned = ((yaml.safe_load(values.read_text()) or {}).get("image") or {}).get("tag") if values else None
    expected = pushed.gpu if str(pinned or "").endswith("-gpu") else pushed.cpu
    # the run supervisor and the helm test pod (python -m trainer.supervisor / trainer.endpoint_probe,
    # standard library only) run the CPU image on any node, whatever the TensorFlow roles run
    project_pods = any(
        (doc or {}).get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component") in ("supervisor", "test")
        for doc in yaml.safe_load_all(rendered.stdout)
    )
    from_registry = {image for image in images if image.startswith(f"{registry.address}/")}
    assert from_registry == {expected, *([pushed.cpu] if project_pods else [])}, sorted(images)
    assert not [image for image in images - from_registry if "trainer" in image], sorted(images)
