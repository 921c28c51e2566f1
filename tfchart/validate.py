"""`tfchart validate`: values merged like helm, checked against the chart's schema and cross-field rules.

Imports neither TensorFlow nor the Kubernetes client, and in the common case (valid values) not even
jsonschema: it must feel instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfchart import rules, schema
from tfchart.errors import Problem
from tfchart.values import Values, compute


@dataclass
class Report:
    """The outcome of validating one set of inputs."""

    inputs: list[str]
    values: dict[str, Any]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "inputs": self.inputs,
            "problems": [
                {
                    "path": p.path,
                    "message": p.message,
                    "value": p.value,
                    "fix": p.fix,
                    "file": p.file or None,
                    "line": p.line,
                }
                for p in self.problems
            ],
            "warnings": self.warnings,
        }


def _keys(path: str) -> tuple[str, ...]:
    return () if path == "(root)" else tuple(path.split("."))


def _locate(problem: Problem, values: Values) -> Problem:
    if problem.file:
        return problem
    keys = _keys(problem.path)
    if problem.message.startswith("is required"):
        keys = keys[:-1]  # a missing key lives where its parent was written
    origin = values.origin(keys)
    if origin is None:
        return problem
    return replace(problem, file=origin.source, line=origin.line)


def validate(chart: Path, files: Sequence[Path] = (), sets: Sequence[tuple[str, str]] = ()) -> Report:
    """Validates the values helm would compute from `files` and `sets` for `chart`."""
    values = compute(chart / "values.yaml", files, sets)
    inputs = [str(f) for f in files] + [f"{flag} {arg}" for flag, arg in sets]
    report = Report(inputs, values.data, list(values.load_problems))
    for file in values.empty_files:
        report.warnings.append(f"{file}: the file is empty, it sets nothing (helm accepts it as {{}})")
    schema_path = chart / "values.schema.json"
    if not schema.is_valid(schema_path, values.data):
        report.problems += schema.problems(schema_path, values.data, values.defaults)
    report.problems += rules.check(values.data)
    report.problems = [_locate(problem, values) for problem in report.problems]
    return report
