"""`tfchart validate`, and the render every other command starts from: every problem of a refused render is a
report line with the file:line of its key (or the --set argument, or "chart default") and a fix. After schema
errors the chart's rules run in a second render without the schema check, each refused value replaced by its
fix (else the default), and a fix they refuse is dropped; --policy is checked on that render (or one without
the rules where they refuse).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfchart.errors import HelmError, Problem, ValidationFailed, plural
from tfchart.helm import chart as render
from tfchart.helm.chart import Chart, Inputs
from tfchart.helm.runner import Helm
from tfdcontract import NO_RULES_API_VERSION

if TYPE_CHECKING:
    from tfchart.values.fixes import Edit, Fixes
    from tfchart.values.origins import Origins

# comments the chart renders for tfchart: a warning above an object (values that may not work), validate.yaml's notes
CHART_SAYS = {"# WARNING: ": "warnings", "# NOTE: ": "notes"}
NO_SCHEMA = ("--skip-schema-validation",)  # helm 3.17 and 4: the rules' pass
SLOW_HELM_S = 0.4  # CPU seconds of helm so far past which the rules' pass is left out (3 times a plain render)


@dataclass
class Report:
    """The outcome of validating one set of inputs (and, with --policy, its policy's verdict)."""

    inputs: list[str]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rules_checked: bool = True  # False: helm refused the schema; the rules ran with the refused values replaced
    manifests: list[dict[str, Any]] = field(default_factory=list, repr=False)  # the render (the rules' pass's)
    policy_file: str = ""
    policy_checked: bool = False
    violations: list[Problem] = field(default_factory=list)  # Problem, kind policy
    policy_problems: list[Problem] = field(default_factory=list)  # the policy file itself is broken
    note: str = ""
    rendered_with: tuple[str, Inputs, str | None] | None = field(default=None, repr=False)  # release, inputs, ns
    text: str = field(default="", repr=False)  # helm's render of valid inputs

    @property
    def valid(self) -> bool:
        return not self.problems and not self.violations and not self.policy_problems

    def failures(self) -> list[ValidationFailed]:
        """Each kind of problem found, as the error that lists them: the policy file, the values, the policy."""
        found = [ValidationFailed(self.policy_problems, where=f"in policy file {self.policy_file}"),
                 ValidationFailed(self.problems, self.note),
                 ValidationFailed(self.violations, what="policy violation", where=f"(policy {self.policy_file})")]
        return [failure for failure in found if failure.problems]

    def as_dict(self) -> dict[str, Any]:
        policy = {"file": self.policy_file, "checked": self.policy_checked,
                  "problems": [{**problem_dict(p), "kind": "policy-file"} for p in self.policy_problems],
                  "violations": [{"rule": v.rule, **problem_dict(v)} for v in self.violations]}
        return {"valid": self.valid, "inputs": self.inputs, "problems": [problem_dict(p) for p in self.problems],
                "rulesChecked": self.rules_checked, "warnings": self.warnings, "notes": self.notes,
                **({"policy": policy} if self.policy_file else {})}  # fmt: skip


def problem_dict(problem: Problem) -> dict[str, Any]:
    """A problem in `--output json`: its kind (schema, rule, file, set; policy, policy-file), key path, what is wrong,
    the value as written, the fix (as words and as edits: a line rewritten, or a --set argument), file and line."""
    return {"kind": problem.kind, "path": problem.path, "message": problem.message,
            "value": problem.value, "fix": problem.fix, "edits": [e.as_dict() for e in problem.edits],
            "file": problem.file or None, "line": problem.line}  # fmt: skip


def check(helm: Helm, chart: Chart, inputs: Inputs, release: str, namespace: str | None = None) -> Report:
    """The report for `inputs`: helm's verdict on the chart, every problem located; the render when valid."""
    report = Report([file.name for file in inputs.files] + [f"{flag} {argument}" for flag, argument in inputs.sets])
    rendering, since = render.start(helm, chart, release, inputs, namespace), _helm_seconds()
    import yaml  # noqa: F401  (loaded while helm renders)

    try:
        text = render.result(rendering)
    except render.RenderFailed as failed:
        refused = refusal(failed.stderr, helm, chart, inputs, release, namespace, _helm_seconds() - since)
        report.problems, report.rules_checked, report.note, report.manifests, checked = refused
        report.rendered_with = (release, checked, namespace)
        return report
    report.text, report.manifests = text, render.manifests(text)
    for line in text.splitlines():
        for prefix, kind in CHART_SAYS.items():
            if line.startswith(prefix):
                getattr(report, kind).append(line.removeprefix(prefix))
    return report


def rendered(helm: Helm, chart: Chart, inputs: Inputs, release: str, namespace: str | None) -> str:
    """`helm template` of valid inputs; ValidationFailed with every problem located otherwise."""
    if (report := check(helm, chart, inputs, release, namespace)).problems:
        raise ValidationFailed(report.problems, report.note)
    return report.text


def refusal(stderr: str, helm: Helm, chart: Chart, inputs: Inputs, release: str, namespace: str | None,
            spent: float) -> tuple[list[Problem], bool, str, list[dict[str, Any]], Inputs]:  # fmt: skip
    """The problems of a refused render (that took helm `spent` CPU seconds), located; whether the rules ran on the
    values as given (not after schema errors: then they run again without the schema check, on the values fixed,
    unless helm is slow on them); a note; that render and its inputs."""
    from tfchart.values.fixes import Fixes
    from tfchart.values.helm_errors import read
    from tfchart.values.origins import Origins, file_error_key

    schema = json.loads(chart.file("values.schema.json") or b"{}")
    meanings = schema.get("x-pattern-meanings") or {}
    found, origins, problems = read(stderr, meanings), Origins(helm, chart, inputs), list[Problem]()
    fixes = Fixes(origins, schema)
    for item, more in _grouped(found):
        if item.kind == "file":
            name = next((file.name for file in inputs.files if file.path == item.file), item.file)
            documents = next((documents for file, documents in origins.files if file == name), [])
            located = file_error_key(documents, item.message)
            path, line = located or ("(root)", item.line or _line_of(name, item.message))
            problems.append(Problem(path, item.message, None, "fix the YAML of this file", name, line, kind="file"))
        elif item.kind == "set":
            problems.append(Problem("(root)", item.message, None, "fix the argument", _broken_set(origins, item),
                                    kind="set"))  # fmt: skip
        else:
            problems.append(_located(item, origins, fixes))
        if more:
            problems[-1] = replace(problems[-1], message=f"{problems[-1].message} ({more})")
    if all(item.kind in ("rule", "file", "set") for item in found):
        return [fixes.whole(problem) for problem in problems], True, "", [], inputs  # the rules in the chart's order
    names = [file.name for file in inputs.files]  # helm 4 lists schema errors in no fixed order: the inputs' order

    def place(problem: Problem) -> tuple[int, int, str]:  # each -f file by line, then --set arguments, then defaults
        if problem.file in names:
            return names.index(problem.file), problem.line or 0, problem.path
        return len(names) + (not problem.file), 0, problem.path

    problems.sort(key=place)
    if spent > SLOW_HELM_S:
        return [fixes.whole(p) for p in problems], False, (f"the chart's rules run once these are fixed (helm took "
                f"{spent:.1f} s on these inputs: not twice)"), [], inputs  # fmt: skip
    checked, defaults = _fixed(problems, fixes, inputs)
    docs, rules = [], []
    try:
        docs = render.manifests(render.template(helm, chart, release, checked, namespace, NO_SCHEMA))
    except render.RenderFailed as failed:
        try:
            rules = [_located(item, origins, fixes) for item in read(failed.stderr, meanings) if item.kind == "rule"]
        except HelmError as error:  # a template the replaced values still break
            rules = [Problem("(rules)", f"the chart's rules could not run: {_last(error.message)}", kind="rule")]
    by_key, refused = {rule.path: rule for rule in rules}, list(defaults)
    for index, problem in enumerate(problems):  # a fix the rules refuse is no fix
        if broken := next((by_key[e.key] for e in problem.edits if e.key in by_key), None):
            refused.append(broken.path)
            problems[index] = replace(problem, fix="", edits=(), message=f"{problem.message} ({problem.fix} would "
                                      f"break the chart's rule: {broken.message})")  # fmt: skip
    rules = [rule for rule in rules if rule.path not in refused]
    note = f"the chart's rules ran with the chart default (or no value) for {', '.join(defaults)}" if defaults else ""
    return [fixes.whole(problem) for problem in problems + rules], False, note, docs, checked


def _fixed(problems: list[Problem], fixes: Fixes, inputs: Inputs) -> tuple[Inputs, list[str]]:
    """`inputs` with each fix made (a --set argument it replaces taken out), a refused value without one set to
    the chart default (or taken out); and the keys so defaulted."""
    from tfchart.values.fixes import set_argument
    from tfchart.values.helm_errors import UNKNOWN

    sets, defaults = list(inputs.sets), []
    for problem in problems:
        for edit in problem.edits:
            sets = [pair for pair in sets if " ".join(pair) != edit.replaces]
            sets.append((edit.flag, edit.argument))
        if not problem.edits and problem.path != "(root)" and problem.message != UNKNOWN and not \
                problem.message.startswith("key ") and not re.search(r"\.\d+(\.|$)", problem.path):  # fmt: skip
            sets.append(set_argument(fixes.origins.set_path(problem.path), fixes.origins.default(problem.path)))
            defaults.append(problem.path)
    return Inputs(inputs.files, sets), defaults


def _helm_seconds() -> float:
    """CPU seconds of the processes this one has waited for (helm's)."""
    import resource

    return (spent := resource.getrusage(resource.RUSAGE_CHILDREN)).ru_utime + spent.ru_stime


def _last(text: str) -> str:
    """helm's template error, its last cause only (one line)."""
    return text.splitlines()[-1].rpartition("error calling ")[2][:300] if text else "helm failed"


def _line_of(name: str, message: str) -> int | None:
    """The line of a values file that helm's message quotes (a document separator followed by text)."""
    separator = message.partition("invalid Yaml document separator: ")[2]
    try:
        lines = Path(name).read_text(errors="replace").splitlines() if separator else []
    except OSError:
        return None
    return next((number for number, text in enumerate(lines, 1) if text.startswith("---") and separator in text), None)


def _grouped(found: list[Problem], shown: int = 3) -> list[tuple[Problem, str]]:
    """The problems, those repeated over many list items (a --set list[60000] of nulls) listed for the
    first items, the last one listed saying how many more there are."""
    numbered = re.compile(r"\.\d+(?=\.|$)")
    groups: dict[tuple[str, str], list[Problem]] = {}
    for item in found:
        groups.setdefault((numbered.sub(".*", item.path), item.message), []).append(item)
    return [(member, f"and {len(members) - shown} more like it, up to {members[-1].path}" if index == shown - 1 and
             len(members) > shown + 2 else "") for members in groups.values()
            for index, member in enumerate(members[: shown if len(members) > shown + 2 else None])]  # fmt: skip


def _located(item: Problem, origins: Origins, fixes: Fixes) -> Problem:
    from tfchart.values.helm_errors import UNKNOWN

    path = item.path or origins.key_named(item.key) or item.key
    origin = origins.nearest(path) if item.kind == "required" else origins.of(path)
    if origin is None and item.kind == "rule":  # the key is a default: the input that set another key it names
        named = re.findall(r"\b[a-z][\w-]*(?:\.[a-zA-Z][\w-]*)+", f"{item.message} {item.fix}")
        origin = next((found for key in named if (found := origins.of(key)) is not None), None)
    parent, message = path.rpartition(".")[0] or "(root)", item.message
    edits: tuple[Edit, ...] = ()
    if item.kind == "rule":
        fix, edits = fixes.of_rule(item.fix)
    elif item.message == UNKNOWN:
        hint = origins.did_you_mean(parent, item.key)
        fix = f"remove it ({hint})" if hint else "remove it"
    elif item.message.startswith("key "):
        fix = "rename the key"
    else:
        fix, edits = fixes.of_value(path, origin, item.choices, null=item.kind == "required")
        message, fix = (f"{message} ({fix})" if fix else message, "") if not edits else (message, fix)
    text, file, line = (origin.text, origin.source, origin.line) if origin else (None, "", None)
    return Problem(path, message, text, fix, file, line, edits, kind="rule" if item.kind == "rule" else "schema")


def _broken_set(origins: Origins, item: Problem) -> str:
    """The argument of `item.file` (a --set flag) that helm cannot parse (Origins asks helm for each); all of them
    where none fails alone (it fails on what the files set before it)."""
    from tfchart.values.origins import shown

    given = [f"{flag} {argument}" for flag, argument in origins.inputs.sets if flag == item.file]
    broken = [source for source, documents in reversed(origins.sets) if source in given and not documents]
    return shown(broken[0] if len(given) > 1 and broken else " ".join(given) or item.file)


def check_policy(report: Report, path: Path, helm: Helm, chart: Chart, inputs: Inputs) -> Report:
    """Adds the policy's verdict to `report`, on its render (invalid values: the rules' pass's, or one without the
    chart's rules where they refuse)."""
    from tfchart.manifests.workloads import running
    from tfchart.values import policy as policies
    from tfchart.values.origins import Origins
    from tfchart.values.policy_rules import CHECKS, Context

    report.policy_file = str(path)
    try:
        rules = policies.load(path)
    except ValidationFailed as broken:  # an error whatever the values; -o json lists it too
        report.policy_problems = list(broken.problems)
        return report
    release, checked, namespace = report.rendered_with or ("", inputs, None)
    try:
        if report.problems and not report.manifests:
            report.manifests = render.manifests(render.template(helm, chart, release, checked, namespace,
                                                                (*NO_SCHEMA, "--api-versions", NO_RULES_API_VERSION)))
        values = render.merged_values(helm, chart, checked)
    except HelmError as error:
        report.warnings.append(f"policy {path} not checked: the chart cannot render these values "
                               f"({_last(error.message)})")  # fmt: skip
        return report
    origins, docs = Origins(helm, chart, inputs), report.manifests
    pods = running(docs)  # walked once for every check; the violations come in the policy's rule order
    report.violations = [found for group, rule in rules.items()
                         for found in CHECKS[group](Context(rule, values, origins, docs, pods))]  # fmt: skip
    report.policy_checked = True
    if not report.violations:
        report.notes.append(f"policy {path}: {plural(len(policies.names(rules)), 'rule')} passed")
    return report
