"""--chart as helm takes it: a directory, a packaged .tgz, and an oci:// reference pushed to a real local
registry (Docker distribution), with helm 3.17 and helm 4.1. validate, template, images and preflight
answer the same for all three (template byte for byte), and a bad reference is one clear error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import kubeapi
from tests.chartlib import CHART, HELM_MAJORS, REPO, helm_path
from tests.images import registrylib

VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
GPU = str(REPO / "values" / "gpu.yaml")


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, list[str]]]]:
    """Per helm major: the --chart arguments of the directory chart, its package and its OCI push (helm's
    cache and configuration confined to a temporary directory, for tfchart's pulls too)."""
    root = tmp_path_factory.mktemp("chart-refs")
    env = registrylib.helm_env(root / "helm")
    ISOLATED.update(env)
    chart = Path(shutil.copytree(CHART, root / "tf-distributed"))
    with registrylib.running(root / "registry") as registry:
        found: dict[str, dict[str, list[str]]] = {}
        for major in HELM_MAJORS:
            helm = [str(helm_path(major))]
            packaged = subprocess.run([*helm, "package", str(chart), "-d", str(root / major)], capture_output=True,
                                      env=env, check=True)  # fmt: skip
            package = root / major / f"tf-distributed-{VERSION}.tgz"
            assert package.is_file(), packaged.stdout
            subprocess.run([*helm, "push", str(package), f"oci://{registry.address}/charts{major}", "--plain-http"],
                           capture_output=True, env=env, check=True)  # fmt: skip
            oci = f"oci://{registry.address}/charts{major}/tf-distributed"
            found[major] = {"directory": ["--chart", str(chart)], "package": ["--chart", str(package)],
                            "oci": ["--chart", oci, "--version", VERSION, "--plain-http"]}  # fmt: skip
        yield found


def tfchart(major: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tfchart", "--helm", str(helm_path(major)), *args]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, env=env or ISOLATED or None)
    assert "Traceback" not in result.stderr, result.stderr
    return result


KINDS = ("directory", "package", "oci")
ISOLATED: dict[str, str] = {}


@pytest.mark.parametrize("kind", KINDS)
def test_validate_template_and_images_answer_alike_for_every_kind_of_chart(
    kind: str, helm_major: str, references: dict[str, dict[str, list[str]]]
) -> None:
    chart = references[helm_major][kind]
    valid = tfchart(helm_major, "validate", "-f", GPU, *chart)
    assert valid.returncode == 0 and "needs ReadWriteMany: 10 pods mount the claim" in valid.stdout, valid.stderr
    invalid = tfchart(helm_major, "validate", "-o", "json", "--set", "worker.replica=2", "--set", "ps.replicas=x",
                      *chart)  # fmt: skip
    problems = {p["path"]: p for p in json.loads(invalid.stdout)["problems"]}
    assert problems["worker.replica"]["fix"] == "remove it (did you mean worker.replicas?)"  # the chart's own keys
    # and its own schema: no guessed fix for "x", what is allowed instead
    assert problems["ps.replicas"]["fix"] == "" and "allowed: integer, at least 0" in problems["ps.replicas"]["message"]
    rendered = tfchart(helm_major, "template", "mnist", "-n", "ml-training", "-f", GPU, *chart)
    helm = subprocess.run([str(helm_path(helm_major)), "template", "mnist", str(CHART), "-n", "ml-training", "-f",
                           GPU], capture_output=True, text=True, check=True)  # fmt: skip
    assert rendered.returncode == 0 and rendered.stdout == helm.stdout
    images = tfchart(helm_major, "images", "-f", GPU, *chart)
    directory = tfchart(helm_major, "images", "-f", GPU, "--chart", str(CHART))
    assert images.returncode == 0 and images.stdout == directory.stdout and "tf-distributed/trainer" in images.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_preflight_reads_the_same_release_from_every_kind_of_chart(
    kind: str, references: dict[str, dict[str, list[str]]]
) -> None:
    with kubeapi.kube_server(read_only=True) as cluster:
        cluster.add(kubeapi.node("kind-control-plane", cpu="4", memory="8Gi"),
                    kubeapi.storage_class("standard", "rancher.io/local-path", default=True))  # fmt: skip
        result = tfchart("4", "preflight", "-f", GPU, "-n", "ml-training", "--kubeconfig",
                         str(cluster.kubeconfig()), *references["4"][kind])  # fmt: skip
    assert result.returncode == 1 and "preflight checks failed" in result.stderr
    assert "needs ReadWriteMany: 10 pods mount the claim" in result.stdout  # the findings are preflight's report
    assert "offers ReadWriteOnce only" in result.stdout


def test_a_chart_that_cannot_be_had_is_one_clear_error(tmp_path: Path,
                                                     references: dict[str, dict[str, list[str]]]) -> None:  # fmt: skip
    oci = references["4"]["oci"][1]
    missing = tfchart("4", "validate", "--chart", oci, "--version", "9.9.9", "--plain-http")
    assert missing.returncode == 1 and f"cannot pull chart {oci}" in missing.stderr and "hint:" in missing.stderr
    not_a_package = tmp_path / "chart.tgz"
    not_a_package.write_text("not a tarball")
    broken = tfchart("4", "validate", "--chart", str(not_a_package))
    assert broken.returncode == 2 and "is not a packaged chart" in broken.stderr
    local = tfchart("4", "validate", "--chart", str(CHART), "--version", VERSION)
    assert local.returncode == 2 and "--version picks a version of a remote chart" in local.stderr


def test_a_python_too_old_to_unpack_a_package_safely_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10.0-3.10.11 and 3.11.0-3.11.3 (which pyproject allows) have no extraction filter: one line, no
    traceback and no unfiltered extraction."""
    import tarfile

    from tfchart.errors import UsageError
    from tfchart.helm.chart import resolve

    package = tmp_path / "chart.tgz"
    with tarfile.open(package, "w:gz") as tar:
        tar.add(CHART / "Chart.yaml", "tf-distributed/Chart.yaml")

    def unfiltered(self: tarfile.TarFile, path: str = ".", members: object = None, *, numeric_owner: bool = False,
                   ) -> None:
        raise AssertionError("extracted without a filter")  # 3.11.3's signature: filter= is a TypeError

    monkeypatch.setattr(tarfile.TarFile, "extractall", unfiltered)
    with pytest.raises(UsageError, match=r"cannot unpack .*chart.tgz safely"):
        resolve(str(package), None, lambda args: "")
