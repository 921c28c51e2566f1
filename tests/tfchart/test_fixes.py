"""The fix corpus: every case of tests/fixtures/fixes/ is refused by helm, and the fix tfchart suggests,
applied as a tool would apply it (the edit's line written into the values file, or the --set argument in
place of the one it replaces), makes the values valid and keeps what the user meant: the values helm merges
afterwards are the ones before, with each key listed under `intent` at the value the case says was meant.

A case: `shipped` (files of the chart given as -f first, through a `values` link to the chart's folder as in a
checkout), `files` (name: text, given as -f in this order), `sets` (`--set...` arguments), `policy` (a policy
file's text, given as --policy), `fixes` (each problem's fix as shown; '' where no fix keeps what was meant:
then `says` lists what its message must say instead), `violations` (the policy's fixes) and `intent` (dotted
key: the value meant).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chartlib import CHART, HELM_MAJORS, REPO, helm_path
from tests.tfchart.hostile import helm_env
from tfchart.helm.chart import merged_values, read
from tfchart.helm.runner import Helm

CASES = sorted((REPO / "tests" / "fixtures" / "fixes").glob("*.yaml"))


def validate(major: str, args: list[str], folder: Path) -> tuple[int, dict[str, Any]]:
    argv = [sys.executable, "-m", "tfchart", "--helm", str(helm_path(major)), "validate", "-o", "json", *args]
    environment = {**helm_env(), "PYTHONPATH": str(REPO)}  # the case's files are named relative to its folder
    result = subprocess.run(argv, capture_output=True, text=True, cwd=folder, env=environment)
    assert "Traceback" not in result.stderr and result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def applied(edit: dict[str, Any], args: list[str], folder: Path) -> list[str]:
    """`args` with the edit made: line `line` of a values file rewritten, or the --set argument put in."""
    if "file" in edit:
        path = folder / edit["file"]
        lines = path.read_text().splitlines(keepends=True)
        lines[edit["line"] - 1] = edit["text"] + "\n"
        path.write_text("".join(lines))
        return args
    pairs = [args[index : index + 2] for index in range(0, len(args), 2)]
    replaced = [edit["set"] if " ".join(pair) == edit["replaces"] else pair for pair in pairs]
    return [arg for pair in replaced + ([] if edit["replaces"] else [edit["set"]]) for arg in pair]


def user_values(major: str, args: list[str], folder: Path) -> dict[str, Any]:
    """The values helm merges from the case's inputs alone (no chart defaults)."""
    pairs = list(zip(args[::2], args[1::2], strict=True))
    files = [str(folder / name) for flag, name in pairs if flag == "-f"]
    sets = [(flag, argument) for flag, argument in pairs if flag != "-f"]
    values: dict[str, Any] = merged_values(Helm(str(helm_path(major))), None, read(files, sets))
    return values


def with_value(values: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(values))
    node = copy
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return copy


@pytest.mark.parametrize("major", HELM_MAJORS)
@pytest.mark.parametrize("case", CASES, ids=lambda path: path.stem)
def test_the_suggested_fix_makes_the_values_valid_and_keeps_what_was_meant(case: Path, major: str,
                                                                           tmp_path: Path) -> None:  # fmt: skip
    spec = yaml.safe_load(case.read_text())
    (tmp_path / "values").symlink_to(CHART / "values")
    for name, text in spec.get("files", {}).items():
        (tmp_path / name).write_text(text)
    (tmp_path / "policy.yaml").write_text(spec.get("policy", ""))
    args = [*(arg for name in [*spec.get("shipped", []), *spec.get("files", {})] for arg in ("-f", name)),
            *(arg for item in spec.get("sets", []) for arg in item.split(" ", 1))]  # fmt: skip
    shipped = {path: path.read_bytes() for path in (CHART / "values").iterdir()}
    before = user_values(major, args, tmp_path)
    code, report = validate(major, [*args, *(["--policy", "policy.yaml"] if "policy" in spec else [])], tmp_path)
    assert code == 1 and [problem["fix"] for problem in report["problems"]] == spec["fixes"], report
    violations = report["policy"]["violations"] if "policy" in spec else []
    assert sorted(violation["fix"] for violation in violations) == sorted(spec.get("violations", [])), violations
    assert all(set(violation["fix"].split()).isdisjoint({"--set", "--set-string"}) for violation in violations)
    for problem in report["problems"]:
        assert bool(problem["edits"]) == bool(problem["fix"]), problem  # no fix: no edit, and what is allowed
        assert problem["fix"] or any(words in problem["message"] for words in spec["says"]), problem
        for edit in problem["edits"]:
            assert not edit.get("file", "").startswith("values/"), edit  # never the chart's own file
            args = applied(edit, args, tmp_path)
    assert shipped == {path: path.read_bytes() for path in (CHART / "values").iterdir()}
    if "intent" not in spec:
        return  # no fix offered: nothing to apply
    code, report = validate(major, args, tmp_path)
    assert code == 0 and report["valid"], report
    meant = before
    for key, value in spec["intent"].items():
        meant = with_value(meant, key, value)
    assert user_values(major, args, tmp_path) == meant


def test_a_choice_helm_names_is_offered_where_the_schema_is_not_walked(helm_major: str, tmp_path: Path) -> None:
    """A chart of one's own whose enum sits behind a $ref: the nearest of the choices helm's message names."""
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: own\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("mode: fast\n")
    (chart / "values.schema.json").write_text(json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"mode": {"enum": ["fast", "thorough"]}},
        "properties": {"mode": {"$ref": "#/definitions/mode"}}}))  # fmt: skip
    (chart / "templates" / "cm.yaml").write_text("kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\n")
    code, report = validate(helm_major, ["--chart", str(chart), "--set", "mode=Thorough"], tmp_path)
    assert code == 1 and [problem["fix"] for problem in report["problems"]] == ["--set mode=thorough"], report


def test_a_bare_number_for_a_quantity_takes_the_schemas_unit_only(helm_major: str, tmp_path: Path) -> None:
    """A chart of one's own whose size says its unit (x-unit: Gi): 20 is 20Gi; without x-unit, no fix (20 bytes)."""
    quantity = "^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$"
    for unit, fix in (({"x-unit": "Gi"}, "--set size=20Gi"), ({}, "")):
        chart = tmp_path / f"chart{len(unit)}"
        (chart / "templates").mkdir(parents=True)
        (chart / "Chart.yaml").write_text("apiVersion: v2\nname: own\nversion: 0.1.0\n")
        (chart / "values.yaml").write_text("size: 1Gi\n")
        (chart / "values.schema.json").write_text(json.dumps({
            "x-pattern-meanings": {quantity: "a Kubernetes quantity, e.g. 4Gi"},
            "properties": {"size": {"type": "string", "pattern": quantity, **unit}}}))  # fmt: skip
        (chart / "templates" / "cm.yaml").write_text("kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\n")
        code, report = validate(helm_major, ["--chart", str(chart), "--set", "size=20"], tmp_path)
        assert code == 1 and [problem["fix"] for problem in report["problems"]] == [fix], report
