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
from tfchart.errors import Problem, ValidationFailed
from tfchart.goyaml import HelmMajor
from tfchart.inputs import Inputs, Source
from tfchart.values import Values, compute

# The chart's schema is a few levels deep; values nested deeper than this (helm accepts up to
# 10,000 levels where the schema allows anything) are checked on a copy cut at this depth, so no
# validator or message recurses through them.
CHECK_DEPTH = 200
# Problems are listed for the first items of a list only: a --set list[60000] of nulls is one mistake,
# not 60,000 lines (and listing them all took seconds). If those items hold no problem, all are checked.
EXPLAINED_ITEMS = 1000


@dataclass
class Report:
    """The outcome of validating one set of inputs."""

    inputs: list[str]
    values: dict[str, Any]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what valid values ask of the cluster (storage access mode)
    located: Values | None = field(default=None, repr=False)  # where each value was set, for later checks
    policy_file: str = ""  # --policy FILE, when one was given (tfchart.policy)
    policy_checked: bool = False  # the values were valid, so the policy's rules ran on them
    violations: list[Problem] = field(default_factory=list)  # tfchart.policy.Violation, each with its rule
    policy_problems: list[Problem] = field(default_factory=list)  # the policy file itself is broken

    @property
    def valid(self) -> bool:
        return not self.problems and not self.violations and not self.policy_problems

    def failure(self) -> ValidationFailed:
        """The error that lists what is wrong: a broken policy file, else the values' problems, else
        the policy's violations."""
        from tfchart.policy import PolicyFileInvalid, PolicyViolations

        if self.policy_problems:
            return PolicyFileInvalid(self.policy_problems, self.policy_file)
        if self.problems:
            return ValidationFailed(self.problems)
        return PolicyViolations(self.violations, self.policy_file)

    def as_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "inputs": self.inputs,
            "problems": [problem_dict(p) for p in self.problems],
            "warnings": self.warnings,
            "notes": self.notes,
            **({"policy": self.policy_dict()} if self.policy_file else {}),
        }

    def policy_dict(self) -> dict[str, Any]:
        """The `policy` section of the JSON report: each violation with its rule, key, file:line and fix."""
        return {
            "file": self.policy_file,
            "checked": self.policy_checked,
            "problems": [problem_dict(p) for p in self.policy_problems],  # of the policy file itself
            "violations": [{"rule": getattr(v, "rule", ""), **problem_dict(v)} for v in self.violations],
        }


def problem_dict(problem: Problem) -> dict[str, Any]:
    """A problem in `--output json`: key path, what is wrong, the value, the fix, file and line."""
    return {"path": problem.path, "message": problem.message, "value": problem.value, "fix": problem.fix,
            "file": problem.file or None, "line": problem.line}


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


def validate(
    chart: Path,
    files: Sequence[Path | Source] = (),
    sets: Sequence[tuple[str, str]] = (),
    helm_major: HelmMajor | None = None,
    inputs: Inputs | None = None,
) -> Report:
    """Validates the values helm would compute from `files` and `sets` for `chart`.

    `helm_major` is asked only for inputs helm 3 and helm 4 read differently.
    """
    values = compute(chart / "values.yaml", files, sets, helm_major, inputs)
    inputs_shown = values.user_files + [f"{flag} {arg}" for flag, arg in sets]
    report = Report(inputs_shown, values.data, list(values.load_problems), located=values)
    for file in values.empty_files:
        report.warnings.append(f"{file}: the file is empty, it sets nothing (helm accepts it as {{}})")
    checked = bounded(values.data, CHECK_DEPTH)
    schema_path = chart / "values.schema.json"
    if not schema.is_valid(schema_path, checked):
        shortened = bounded(checked, CHECK_DEPTH, EXPLAINED_ITEMS)
        found = schema.problems(schema_path, shortened, values.defaults)
        if not found and shortened is not checked:
            found = schema.problems(schema_path, checked, values.defaults)
        report.problems += found
    report.problems += rules.check(checked)
    report.problems = [_locate(problem, values) for problem in report.problems]
    if report.valid:
        need = rules.storage_need(checked)
        if need is not None:
            report.notes.append(need.line)
    return report


def bounded(value: Any, depth: int, items: int | None = None) -> Any:
    """`value` itself when it is at most `depth` levels deep (and no list has more than `items`), else a
    copy whose deeper maps and lists are empty (and whose lists keep their first `items`)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, level = pending.pop()
        if level > depth or (items is not None and isinstance(node, list) and len(node) > items):
            break
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        pending.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    else:
        return value
    root: Any = {} if isinstance(value, dict) else []
    copies: list[tuple[Any, Any, int]] = [(root, value, 1)]
    while copies:
        target, source, level = copies.pop()
        entries = source.items() if isinstance(source, dict) else enumerate(source[:items] if items else source)
        for key, child in entries:
            if isinstance(child, (dict, list)):
                copied: Any = {} if isinstance(child, dict) else []
                if level < depth:
                    copies.append((copied, child, level + 1))
                child = copied
            if isinstance(target, dict):
                target[key] = child
            else:
                target.append(child)
    return root
