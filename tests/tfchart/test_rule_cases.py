"""The cross-field rules exist twice (tfchart/rules.py and the chart's _validate.tpl); one case table
holds both to the same verdicts: the fixtures of tests/fixtures/bad-values (tests/tfchart/test_validate.py
runs each through helm and tfchart validate, tests/chart/test_bad_values.py through helm alone) and,
for rules that depend on the release name and namespace, test_validate.NAMED_CASES (rendered with that
release). This test makes the table complete rule by rule: every rule of rules.py refuses a case."""

from __future__ import annotations

from functools import cache

import pytest

from tests.chartlib import CHART, REPO
from tests.tfchart.test_validate import NAMED_CASES
from tfchart import rules
from tfchart.values import compute

FIXTURES = sorted((REPO / "tests" / "fixtures" / "bad-values").glob("*.yaml"))


@cache
def refused_by() -> dict[str, list[str]]:
    """rule name -> the fixtures it refuses."""
    found: dict[str, list[str]] = {name: [] for name in rules.RULES}
    for fixture in FIXTURES:
        values = compute(CHART / "values.yaml", [fixture]).data
        for name, function in rules.RULES.items():
            if list(function(values, rules.Release())):
                found[name].append(fixture.name)
    for case, (release, namespace, sets) in NAMED_CASES.items():
        values = compute(CHART / "values.yaml", sets=[("--set", item) for item in sets]).data
        for name, function in rules.RULES.items():
            if list(function(values, rules.Release(release, namespace))):
                found[name].append(f"NAMED_CASES[{case}]")
    return found


def test_the_case_table_is_there() -> None:
    assert len(FIXTURES) > 30 and len(rules.RULES) > 20


@pytest.mark.parametrize("name", sorted(rules.RULES))
def test_every_rule_has_a_case_in_the_shared_table(name: str) -> None:
    assert refused_by()[name], (
        f"rule {name} refuses no fixture in tests/fixtures/bad-values: add one whose `# expect:` lines are "
        "the chart's message, so helm (_validate.tpl) and tfchart (rules.py) are held to it"
    )


def test_every_fixture_states_what_helm_says() -> None:
    for fixture in FIXTURES:
        assert "\n# expect: " in "\n" + fixture.read_text(), fixture.name
