"""helm lint --strict and strict Kubernetes OpenAPI validation of every values file (custom resources,
such as the Prometheus Operator's ServiceMonitor, against their vendored CRDs: tests/crds)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate.utils import latest_version

from tests.chart import test_jobset as jobset
from tests.chart import test_metrics as metrics
from tests.chart import test_prometheusrule as prometheusrule
from tests.chartlib import CHART, file_id, helm, openapi_problems, render, template, values_files
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
    problems += openapi_problems([doc for doc in docs if doc not in custom], kubernetes_versions())
    assert not problems, "\n".join(problems)


# every values file, and the --set cases that reach branches none of them does: each JobSet branch (order, gang,
# Kueue, no chief, metrics Services), every monitor setting, the PrometheusRule's
SAME_RENDER: dict[str, tuple[list[Path], list[str]]] = {
    **{file_id(path): ([path], []) for path in FILES},
    **{f"jobset-{case}": (jobset.CASES[case][0], jobset.jobset_sets(case))
       for case in ("evaluator", "workers-only", "volcano", "kueue", "metrics")},
    "monitors": ([], [*metrics.MONITOR_CASES["custom"], metrics.MONITORS["ServiceMonitor"]]),
    "prometheusrule": ([], list(prometheusrule.CUSTOM)),
}


@pytest.mark.parametrize("case", SAME_RENDER)
def test_helm3_and_helm4_render_identically_and_deterministically(case: str) -> None:
    values, sets = SAME_RENDER[case]
    first, again = template("4", values, sets), template("4", values, sets, fresh=True)
    helm3 = template("3", values, sets)
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
