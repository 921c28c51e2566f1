"""Fixtures the upgrade tests share (test_release.py, test_upgrade_guard.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.chartlib import CHART


@pytest.fixture
def old_chart(tmp_path: Path) -> Path:
    """A copy of the chart as an older version might have shipped it: OrderedReady and another serviceName (both
    immutable), the same selector (the new StatefulSets can adopt the old pods)."""
    copy = tmp_path / "tf-distributed"
    shutil.copytree(CHART, copy)
    workloads = copy / "templates" / "_tf_workloads.tpl"
    text = workloads.read_text()
    text, policies = re.subn(r"podManagementPolicy: Parallel\b", "podManagementPolicy: OrderedReady", text)
    # `serviceName: {{ $name }}` or `serviceName: {{ $name | quote }}`, whichever the chart has now.
    text, names = re.subn(r"serviceName: \{\{ \$name( \| quote)? \}\}", 'serviceName: "{{ $name }}-headless"', text)
    assert (policies, names) == (1, 1), "the chart's StatefulSet template changed: update this fixture"
    workloads.write_text(text)
    return copy
