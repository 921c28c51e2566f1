"""Test-wide fixtures. Tools are never skipped: a missing helm, checkov or node tool is a failure."""

from __future__ import annotations

import pytest

from tests.chartlib import HELM_MAJORS, helm_path


@pytest.fixture(params=HELM_MAJORS, ids=[f"helm{m}" for m in HELM_MAJORS])
def helm_major(request: pytest.FixtureRequest) -> str:
    """Runs the test once with helm 3.17 and once with helm 4.1 (both must be installed)."""
    major: str = request.param
    helm_path(major)
    return major
