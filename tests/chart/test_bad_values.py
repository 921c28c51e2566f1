"""Bad values: every schema key has negative fixtures, and helm 3 and helm 4 reject each one.

Two sources:
- a corpus generated from values.schema.json (tests/chart/badvalues.py): for every key a wrong
  type, and where the schema constrains it an out-of-range number, a bad enum, a string that
  breaks the pattern (DNS names, quantities, paths, image references), an unknown key, a bad map
  key, a bad list item;
- hand-written files in tests/fixtures/bad-values/ for cross-field conflicts (validateValues) and
  realistic mistakes, each naming the stable part of the message in `# expect:` lines.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.chart.badvalues import SCHEMA, Mutation, corpus, leaf_paths, merged
from tests.chartlib import HELM_MAJORS, REPO, Result, template

CORPUS = corpus()
FIXTURES = sorted((REPO / "tests" / "fixtures" / "bad-values").glob("*.yaml"))
WORK = REPO / ".pytest_cache" / "bad-values"


@cache
def helm_results() -> dict[tuple[str, str], Result]:
    """Runs `helm template` for every mutation with both helms, in parallel (helm is single-threaded)."""
    WORK.mkdir(parents=True, exist_ok=True)
    jobs = []
    for index, mutation in enumerate(CORPUS):
        path = WORK / f"{index:04d}.yaml"
        path.write_text(yaml.safe_dump(mutation.document))
        jobs += [(mutation.id, major, path) for major in HELM_MAJORS]
    with ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 1))) as pool:
        results = pool.map(lambda job: template(job[1], values=[job[2]]), jobs)
        return {(mutation_id, major): result for (mutation_id, major, _), result in zip(jobs, results, strict=True)}


def location(major: str, path: tuple[str, ...]) -> str:
    """How each helm names a key path in its schema errors."""
    if major == "3":
        return ".".join(path) if path else "(root)"
    return "at '" + "".join(f"/{key}" for key in path) + "'"


def test_corpus_covers_every_schema_key() -> None:
    covered = {mutation.path for mutation in CORPUS}
    uncovered = [leaf for leaf in leaf_paths() if not any(path[: len(leaf)] == leaf for path in covered)]
    assert uncovered == []
    assert len(CORPUS) >= 300


@pytest.mark.parametrize("mutation", CORPUS, ids=lambda m: m.id)
def test_helm_rejects_every_mutation(mutation: Mutation) -> None:
    # The fixture must really be invalid: the schema itself (Python jsonschema) rejects it.
    errors = list(jsonschema.Draft7Validator(SCHEMA).iter_errors(merged(mutation.document)))
    assert errors, f"generated fixture is valid: {mutation.document}"
    for major in HELM_MAJORS:
        result = helm_results()[(mutation.id, major)]
        assert result.returncode != 0, f"helm {major} accepted {mutation.document}"
        assert "Traceback" not in result.stderr
        # helm 4 reports a bad map key (propertyNames) at '' instead of the map's path: the key
        # itself is named, which is all helm gives (tfchart validate names the full path).
        if not (major == "4" and mutation.kind == "bad-key"):
            assert location(major, mutation.path) in result.stderr, f"helm {major}: {result.stderr}"
        if mutation.mentions:
            assert mutation.mentions in result.stderr, f"helm {major}: {result.stderr}"


def expectations(path: Path) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("# expect:")]


def test_every_fixture_states_what_it_expects() -> None:
    assert len(FIXTURES) >= 10
    for path in FIXTURES:
        assert expectations(path), f"{path.name} has no '# expect:' line"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_helm_rejects_hand_written_fixture(fixture: Path, helm_major: str) -> None:
    result = template(helm_major, values=[fixture])
    assert result.returncode != 0, f"helm {helm_major} accepted {fixture.name}"
    for expected in expectations(fixture):
        if expected.startswith("helm3 ") or expected.startswith("helm4 "):
            wanted_major, expected = expected[4], expected[6:]
            if wanted_major != helm_major:
                continue
        assert expected in result.stderr, f"helm {helm_major} on {fixture.name}: {result.stderr}"


def test_cross_field_problems_are_collected_and_reported_once() -> None:
    result = template("4", sets=["ps.replicas=0", "worker.replicas=0", "storage.create=false"])
    assert result.returncode != 0
    assert "tf-distributed: 3 problem(s) in values:" in result.stderr
    assert result.stderr.count("Fix: --set") == 3
