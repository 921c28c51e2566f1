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
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.badvalues import SCHEMA, Mutation, corpus, leaf_paths, merged
from tests.chartlib import HELM_MAJORS, REPO, template

CORPUS = corpus()
FIXTURES = sorted((REPO / "tests" / "fixtures" / "bad-values").glob("*.yaml"))
WORK = REPO / ".pytest_cache" / "bad-values"


def written_path(mutation: Mutation) -> tuple[str, ...]:
    """The key path the mutation's document writes (its error is reported there or one level up)."""
    path: tuple[str, ...] = ()
    node: Any = mutation.document
    while isinstance(node, dict) and len(node) == 1 and (len(path) < len(mutation.path) or mutation.kind in KEYED):
        (key,) = node
        path, node = (*path, key), node[key]
        if mutation.kind in KEYED and len(path) > len(mutation.path):
            break
    return path


KEYED = ("unknown-key", "bad-key")  # the document writes one key below the reported path


def batches() -> list[list[Mutation]]:
    """The corpus packed into few values documents, each mutation's error still its own: within a batch no
    mutation writes inside another's key (each merges over the defaults as if alone; the schema has no
    if/then across keys) and no two are reported at the same path (helm lists every schema error, one line
    per path; helm 4 names no path for a bad map key, but its key is unique to its map)."""
    packed: list[tuple[list[Mutation], list[tuple[str, ...]], set[tuple[str, ...]]]] = []
    for mutation in CORPUS:
        written = written_path(mutation)
        for batch in packed:
            members, writes, reported = batch
            disjoint = all(written[: len(other)] != other[: len(written)] for other in writes)
            if disjoint and mutation.path not in reported:
                break
        else:
            members, writes, reported = [], [], set()
            packed.append((members, writes, reported))
        members.append(mutation)
        writes.append(written)
        reported.add(mutation.path)
    return [members for members, _, _ in packed]


def combined(members: list[Mutation]) -> dict[str, Any]:
    """One values document holding every member's mutation (their written paths are disjoint)."""
    document: dict[str, Any] = {}
    for mutation in members:
        target, source = document, mutation.document
        while (key := next(iter(source))) in target:
            target, source = target[key], source[key]
        target[key] = source[key]
    return document


def location(major: str, mutation: Mutation) -> str:
    """How each helm names a key path in its schema error lines. helm 4 reports a bad map key
    (propertyNames) at '' instead of the map's path: the key itself is named, which is all helm gives
    (tfchart validate names the full path)."""
    if major == "3":
        return ".".join(mutation.path) if mutation.path else "(root)"
    if mutation.kind == "bad-key":
        return "at ''"
    return "at '" + "".join(f"/{key}" for key in mutation.path) + "'"


@cache
def helm_results() -> dict[tuple[str, str], list[str]]:
    """Each mutation's schema-error lines from `helm template` with both helms: one run per batch and helm
    (about 6 batches instead of one run per mutation), in parallel (helm is single-threaded)."""
    WORK.mkdir(parents=True, exist_ok=True)
    jobs = []
    for index, members in enumerate(batches()):
        path = WORK / f"{index:04d}.yaml"
        path.write_text(yaml.safe_dump(combined(members)))
        jobs += [(members, major, path) for major in HELM_MAJORS]
    with ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda job: template(job[1], values=[job[2]]), jobs))
    found: dict[tuple[str, str], list[str]] = {}
    for (members, major, path), result in zip(jobs, results, strict=True):
        assert result.returncode != 0, f"helm {major} accepted {path}"
        assert "Traceback" not in result.stderr
        errors = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith("- ")]
        for mutation in members:
            prefix = f"- {location(major, mutation)}: "
            found[(mutation.id, major)] = [line for line in errors if line.startswith(prefix)]
    return found


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
        lines = helm_results()[(mutation.id, major)]
        assert lines, f"helm {major} reported nothing at {location(major, mutation)} for {mutation.document}"
        if mutation.mentions:
            assert any(mutation.mentions in line for line in lines), f"helm {major}: {lines}"


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
