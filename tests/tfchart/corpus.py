"""Invalid values documents made by mutating every file in values/ (tfchart validate vs helm parity).

Per values file: the schema-derived mutations of tests/chart/badvalues.py (wrong types, out of
range, bad enums, bad quantities and names, unknown keys, bad map keys and list items) applied on
top of the file's content, the hand-written cross-field fixtures applied on top of it, and
file-level damage (YAML syntax errors, a list or a scalar as root, binary junk, an empty file).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml

from tests.chart.badvalues import corpus as schema_mutations
from tests.chartlib import REPO, VALUES_DIR
from tfchart.goyaml import merge_maps

FIXTURES = sorted((REPO / "tests" / "fixtures" / "bad-values").glob("*.yaml"))
PER_FILE_SCHEMA_MUTATIONS = 70


@dataclass(frozen=True)
class Case:
    name: str
    content: bytes
    key_path: str  # dotted path the problem must name ("" when the damage is file-level)
    expect_line: bool  # the problem is inside the file, so file:line must be reported


def _dump(document: dict[str, Any]) -> bytes:
    return yaml.safe_dump(document, sort_keys=False).encode()


def cases() -> list[Case]:
    rng = random.Random(20261122)
    mutations = schema_mutations()
    out: list[Case] = []
    for values_file in sorted(VALUES_DIR.glob("*.yaml")):
        base = yaml.safe_load(values_file.read_text()) or {}
        stem = values_file.stem
        for mutation in rng.sample(mutations, PER_FILE_SCHEMA_MUTATIONS):
            document = merge_maps(base, mutation.document)
            out.append(Case(f"{stem}:{mutation.id}", _dump(document), ".".join(mutation.path), True))
        for fixture in FIXTURES:
            document = merge_maps(base, yaml.safe_load(fixture.read_text()))
            out.append(Case(f"{stem}:fixture:{fixture.stem}", _dump(document), "", False))
        text = values_file.read_bytes()
        lines = text.splitlines(keepends=True)
        out += [
            Case(f"{stem}:syntax:unclosed-flow", text + b"\nbroken: [1, 2\n", "", True),
            Case(
                f"{stem}:syntax:bad-indent",
                b"".join(lines[:3]) + b"   misindented: 1\n  - item\n" + b"".join(lines[3:]),
                "",
                True,
            ),
            Case(f"{stem}:syntax:tab-indent", text + b"training:\n\tstrategy: mirrored\n", "", True),
            Case(f"{stem}:syntax:duplicate-anchor-alias", text + b"x: *undefined\n", "", True),
            Case(
                f"{stem}:root:list",
                b"- " + b"\n- ".join(line.rstrip() for line in lines[:3] if line.strip()) + b"\n",
                "",
                True,
            ),
            Case(f"{stem}:root:scalar", b"just a string\n", "", True),
            Case(f"{stem}:binary-junk", bytes(rng.randrange(256) for _ in range(300)), "", False),
            Case(f"{stem}:empty", b"", "", False),
        ]
    return out
