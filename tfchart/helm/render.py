"""What helm computes from a chart and the user's inputs: the rendered manifests, and the merged values.

The merged values come from a values-dump chart built next to the user's chart: its values.yaml is
the chart's own (or empty), its only template is `{{ toJson .Values }}`; helm merges, types and
coalesces, and this module only reads the JSON back.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfchart.errors import HelmError, UsageError
from tfchart.helm.chart import Chart, private_folder
from tfchart.helm.inputs import Inputs
from tfchart.helm.runner import Helm, failure, finish

DUMP_TEMPLATE = "{{ toJson .Values }}\n"


class RenderFailed(HelmError):
    """`helm template` refused: `stderr` says why (schema errors, the chart's own rules, an unreadable input)."""

    def __init__(self, stderr: str) -> None:
        error = failure(stderr)
        super().__init__(error.message, error.hint)
        self.stderr = stderr


def template(helm: Helm, chart: Chart, release: str, inputs: Inputs, namespace: str | None = None,
             more: Sequence[str] = ()) -> str:  # fmt: skip
    """`helm template` exactly as the user would run it; RenderFailed when helm refuses."""
    return result(start(helm, chart, release, inputs, namespace, more))


def start(helm: Helm, chart: Chart, release: str, inputs: Inputs, namespace: str | None = None,
          more: Sequence[str] = ()) -> subprocess.Popen[bytes]:  # fmt: skip
    """`template`, started: the caller can load what reads its output meanwhile (`result` waits for it)."""
    namespaced = ["--namespace", namespace] if namespace else []
    return helm.start(["template", release, str(chart.path), *namespaced, *inputs.args(), *more])


def result(rendering: subprocess.Popen[bytes]) -> str:
    return finish(rendering, failed=RenderFailed).decode()


def manifests(text: str) -> list[dict[str, Any]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if isinstance(doc, dict)]


def merged_values(helm: Helm, chart: Chart | None, inputs: Inputs) -> Any:
    """The values helm renders `chart` with for `inputs` (chart None: the inputs alone, no defaults)."""
    defaults = (chart.file("values.yaml") or b"") if chart else b""
    text = result(helm.start(["template", "values", str(_dump_chart(defaults)), *inputs.args()]))
    body = text.split("# Source: values/templates/values.json\n", 1)[-1]
    try:
        return json.loads(body)
    except RecursionError:
        raise UsageError("the values are nested too deeply to read back", "flatten the values") from None


@functools.cache
def _dump_chart(defaults: bytes) -> Path:
    """A chart whose values.yaml is `defaults` and whose only template prints .Values as JSON (one per process)."""
    chart = private_folder("tfchart-dump-") / "values"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: values\nversion: 0.0.0\n")
    (chart / "values.yaml").write_bytes(defaults)
    (chart / "templates" / "values.json").write_text(DUMP_TEMPLATE)
    return chart
