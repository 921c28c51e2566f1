"""`tfchart validate`, and the render every other command starts from: helm renders the chart with the
user's inputs; when it refuses, every problem it names becomes a report line with the file:line of the
key that set it (or the --set argument, or "chart default") and a fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfchart.errors import Problem, ValidationFailed
from tfchart.helm import render
from tfchart.helm.chart import Chart
from tfchart.helm.inputs import Inputs
from tfchart.helm.runner import Helm

if TYPE_CHECKING:
    from tfchart.values.fixes import Edit, Fixes
    from tfchart.values.helm_errors import Found
    from tfchart.values.origins import Origins

SCHEMA_FIRST = ("helm checks the values against the chart's schema before its templates run: the chart's cross-field "
                "rules are checked once these problems are fixed")  # fmt: skip

CHART_WARNING = "# WARNING: "  # a comment the chart renders above an object it warns about (values that may not work)


@dataclass
class Report:
    """The outcome of validating one set of inputs (and, with --policy, its policy's verdict)."""

    inputs: list[str]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rules_checked: bool = True  # False: helm stopped at schema errors, before the chart's rules ran
    manifests: list[dict[str, Any]] = field(default_factory=list, repr=False)  # the render, when valid
    policy_file: str = ""
    policy_checked: bool = False
    violations: list[Problem] = field(default_factory=list)  # tfchart.values.policy.Violation
    policy_problems: list[Problem] = field(default_factory=list)  # the policy file itself is broken

    @property
    def valid(self) -> bool:
        return not self.problems and not self.violations and not self.policy_problems

    def failure(self) -> ValidationFailed:
        from tfchart.values.policy import PolicyFileInvalid, PolicyViolations

        if self.policy_problems:
            return PolicyFileInvalid(self.policy_problems, policy_file=self.policy_file)
        if self.problems:
            return ValidationFailed(self.problems, "" if self.rules_checked else SCHEMA_FIRST)
        return PolicyViolations(self.violations, policy_file=self.policy_file)

    def as_dict(self) -> dict[str, Any]:
        policy = {"file": self.policy_file, "checked": self.policy_checked,
                  "problems": [problem_dict(p) for p in self.policy_problems],
                  "violations": [{"rule": getattr(v, "rule", ""), **problem_dict(v)} for v in self.violations]}
        return {"valid": self.valid, "inputs": self.inputs, "problems": [problem_dict(p) for p in self.problems],
                "rulesChecked": self.rules_checked, "warnings": self.warnings, "notes": self.notes,
                **({"policy": policy} if self.policy_file else {})}  # fmt: skip


def problem_dict(problem: Problem) -> dict[str, Any]:
    """A problem in `--output json`: key path, what is wrong, the value as written, the fix (as words and as
    edits: a file's line rewritten, or a --set argument), file and line."""
    return {"path": problem.path, "message": problem.message, "value": problem.value, "fix": problem.fix,
            "edits": [edit.as_dict() for edit in getattr(problem, "edits", ())],
            "file": problem.file or None, "line": problem.line}  # fmt: skip


def check(helm: Helm, chart: Chart, inputs: Inputs, release: str, namespace: str | None = None) -> Report:
    """The report for `inputs`: helm's verdict on the chart, every problem located; the render when valid."""
    report = Report([file.name for file in inputs.files] + [f"{flag} {argument}" for flag, argument in inputs.sets])
    rendering = render.start(helm, chart, release, inputs, namespace)
    import yaml  # noqa: F401  (loaded while helm renders)

    from tfchart.values import storage

    try:
        text = rendering.result()
    except render.RenderFailed as failed:
        report.problems, report.rules_checked = located_problems(failed.stderr, helm, chart, inputs)
        return report
    report.manifests = render.manifests(text)
    report.warnings += [line.removeprefix(CHART_WARNING) for line in text.splitlines()
                        if line.startswith(CHART_WARNING)]  # fmt: skip
    if (need := storage.need(report.manifests)) is not None:
        report.notes.append(need.line)
    return report


def rendered(helm: Helm, chart: Chart, inputs: Inputs, release: str, namespace: str | None,
             more: tuple[str, ...] = ()) -> str:  # fmt: skip
    """`helm template` of valid inputs; ValidationFailed with every problem located otherwise."""
    try:
        return render.template(helm, chart, release, inputs, namespace, more)
    except render.RenderFailed as failed:
        found, rules_checked = located_problems(failed.stderr, helm, chart, inputs)
        raise ValidationFailed(found, "" if rules_checked else SCHEMA_FIRST) from None


def located_problems(stderr: str, helm: Helm, chart: Chart, inputs: Inputs) -> tuple[list[Problem], bool]:
    """The problems of a refused render, located; and whether the chart's own rules ran (not when helm
    stopped at schema errors)."""
    from tfchart.values.fixes import Fixes
    from tfchart.values.helm_errors import read
    from tfchart.values.origins import Origins, file_error_key

    schema = json.loads(chart.file("values.schema.json") or b"{}")
    found, origins, problems = read(stderr, schema.get("x-pattern-meanings") or {}), Origins(helm, chart, inputs), []
    fixes = Fixes(origins, schema)
    for item, more in _grouped(found):
        if item.kind == "file":
            name = next((file.name for file in inputs.files if file.path == item.source), item.source)
            documents = next((documents for file, documents in origins.files if file == name), [])
            located = file_error_key(documents, item.message)
            path, line = located or ("(root)", item.line or _line_of(name, item.message))
            problems.append(Problem(path, item.message, None, "fix the YAML of this file", name, line))
        elif item.kind == "set":
            problems.append(Problem("(root)", item.message, None, "fix the argument", _broken_set(helm, inputs, item)))
        else:
            problems.append(_located(item, origins, fixes))
        if more:
            problems[-1] = replace(problems[-1], message=f"{problems[-1].message} ({more})")
    problems = [fixes.whole(problem) for problem in problems]
    if rules_checked := all(item.kind in ("rule", "file", "set") for item in found):
        return problems, rules_checked  # the chart's rules in the chart's order
    names = [file.name for file in inputs.files]  # helm 4 lists schema errors in no fixed order: the inputs' order

    def place(problem: Problem) -> tuple[int, int, str]:  # each -f file by line, then --set arguments, then defaults
        if problem.file in names:
            return names.index(problem.file), problem.line or 0, problem.path
        return len(names) + (not problem.file), 0, problem.path

    return sorted(problems, key=place), rules_checked


def _shown(argument: str) -> str:
    return argument if len(argument) <= 120 else f"{argument[:100]}... ({len(argument)} characters)"


def _line_of(name: str, message: str) -> int | None:
    """The line of a values file that helm's message quotes (a document separator followed by text)."""
    separator = message.partition("invalid Yaml document separator: ")[2]
    try:
        lines = Path(name).read_text(errors="replace").splitlines() if separator else []
    except OSError:
        return None
    return next((number for number, text in enumerate(lines, 1) if text.startswith("---") and separator in text), None)


def _grouped(found: list[Found], shown: int = 3) -> list[tuple[Found, str]]:
    """The problems, those repeated over many list items (a --set list[60000] of nulls) listed for the
    first items, the last one listed saying how many more there are."""
    index = re.compile(r"\.\d+(?=\.|$)")
    groups: dict[tuple[str, str], list[Found]] = {}
    for item in found:
        groups.setdefault((index.sub(".*", item.path), item.message), []).append(item)
    out: list[tuple[Found, str]] = []
    for members in groups.values():
        if len(members) <= shown + 2:
            out += [(member, "") for member in members]
        else:
            out += [(member, "") for member in members[: shown - 1]]
            out.append((members[shown - 1], f"and {len(members) - shown} more like it, up to {members[-1].path}"))
    return out


def _located(item: Found, origins: Origins, fixes: Fixes) -> Problem:
    from tfchart.values.fixes import Located
    from tfchart.values.helm_errors import UNKNOWN

    path = item.path or origins.key_named(item.key) or item.key
    origin = origins.nearest(path) if item.kind == "required" else origins.of(path)
    if origin is None and item.kind == "rule":  # the key is a default: the input that set another key it names
        named = re.findall(r"\b[a-z][\w-]*(?:\.[a-zA-Z][\w-]*)+", f"{item.message} {item.fix}")
        origin = next((found for key in named if (found := origins.of(key)) is not None), None)
    parent = path.rpartition(".")[0] or "(root)"
    edits: tuple[Edit, ...] = ()
    if item.kind == "rule":
        fix, edits = fixes.of_rule(item.fix)
    elif item.message == UNKNOWN:
        hint = origins.did_you_mean(parent, item.key)
        fix = f"remove it ({hint})" if hint else "remove it"
    elif item.message.startswith("key "):
        fix = "rename the key"
    else:
        fix, edits = fixes.of_value(path, origin, item.choices)
    problem = Located(path, item.message, origin.text if origin else None, fix, edits=edits)
    return replace(problem, file=origin.source, line=origin.line) if origin else problem


def _broken_set(helm: Helm, inputs: Inputs, item: Found) -> str:
    """The argument of `item.source` (a --set flag) that helm cannot parse, found by asking helm for each;
    all of them where none fails alone (it fails on what the files set before it)."""
    given = [f"{flag} {argument}" for flag, argument in inputs.sets if flag == item.source]
    for flag, argument in inputs.sets if len(given) > 1 else ():
        if flag == item.source:
            try:
                render.merged_values(helm, None, Inputs([], [(flag, argument)]))
            except render.RenderFailed:
                return _shown(f"{flag} {argument}")
    return _shown(" ".join(given) or item.source)


def check_policy(report: Report, path: Path, helm: Helm, chart: Chart, inputs: Inputs) -> Report:
    """Adds the policy's verdict to `report` (on valid values only: the rules read their render)."""
    from tfchart.values import policy as policies
    from tfchart.values.origins import Origins

    try:
        policy = policies.load(path)
    except policies.PolicyFileInvalid as broken:  # an error whatever the values; -o json lists it too
        report.policy_file, report.policy_problems = broken.policy_file, list(broken.problems)
        return report
    report.policy_file = policy.file
    if report.problems:
        report.warnings.append(f"policy {policy.file} not checked: fix the values first")
        return report
    values = render.merged_values(helm, chart, inputs)
    report.violations = list(policies.check_values(policy, values, Origins(helm, chart, inputs), report.manifests))
    report.policy_checked = True
    if not report.violations:
        report.notes.append(f"policy {policy.file}: {policies.plural(len(policy.names), 'rule')} passed")
    return report
