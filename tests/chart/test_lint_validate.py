"""helm lint --strict and strict Kubernetes OpenAPI validation of every values file (custom resources,
such as the Prometheus Operator's ServiceMonitor, against their vendored CRDs: tests/crds)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version

from tests.chartlib import CHART, file_id, helm, render, values_files
from tests.crds import crdlib

FILES = values_files()


def kubernetes_versions() -> list[str]:
    """Every minor version from 1.29 to the newest schema kubernetes-validate ships."""
    newest = int(latest_version().split(".")[1])
    return [f"1.{minor}.0" for minor in range(29, newest + 1)]


def test_kubernetes_versions_cover_the_supported_range() -> None:
    versions = kubernetes_versions()
    assert versions[0] == "1.29.0" and len(versions) >= 5, versions


@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_helm_lint_strict(helm_major: str, values_file: Path) -> None:
    result = helm(helm_major, "lint", "--strict", str(CHART), "-f", str(values_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_helm_lint_strict_defaults(helm_major: str) -> None:
    result = helm(helm_major, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


def is_custom(doc: dict[str, Any]) -> bool:
    """Whether a vendored CRD (tests/crds) defines the object's kind: kubernetes-validate knows none."""
    try:
        crdlib.crd_for(doc["apiVersion"], doc["kind"])
    except crdlib.CrdNotFound:
        return False
    return True


@cache
def rendered(values_file: Path) -> list[dict[str, Any]]:
    return render("4", [values_file])


@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_manifests_validate_against_every_kubernetes_version(values_file: Path) -> None:
    docs = rendered(values_file)
    problems = []
    custom = [doc for doc in docs if is_custom(doc)]
    for doc in custom:
        problems += [f"{doc['kind']}/{doc['metadata']['name']}: {problem}" for problem in crdlib.validate(doc)]
    for version in kubernetes_versions():
        for doc in docs:
            if doc in custom:
                continue
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                problems.append(
                    f"{version} {doc['kind']}/{doc['metadata']['name']}: {error.message} at {list(error.path)}"
                )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_helm3_and_helm4_render_identically_and_deterministically(values_file: Path) -> None:
    first = helm("4", "template", "mnist", str(CHART), "-n", "ml-training", "-f", str(values_file))
    again = helm("4", "template", "mnist", str(CHART), "-n", "ml-training", "-f", str(values_file))
    helm3 = helm("3", "template", "mnist", str(CHART), "-n", "ml-training", "-f", str(values_file))
    assert first.returncode == again.returncode == helm3.returncode == 0, first.stderr + helm3.stderr
    assert first.stdout == again.stdout
    assert first.stdout == helm3.stdout


def test_helm_package(tmp_path: Path, helm_major: str) -> None:
    result = helm(helm_major, "package", str(CHART), "--destination", str(tmp_path))
    assert result.returncode == 0, result.stderr
    packages = list(tmp_path.glob("tf-distributed-*.tgz"))
    assert len(packages) == 1
    rendered_from_package = helm(helm_major, "template", "mnist", str(packages[0]))
    assert rendered_from_package.returncode == 0, rendered_from_package.stderr
