"""values.yaml, values.schema.json and the chart README's parameter table stay in step; README.md
stays a short front door whose links, and those of docs/, all resolve inside the repository."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.chartlib import CHART, REPO, TOOLS, load_yaml, tool, values_files

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
VALUES: dict[str, Any] = load_yaml(CHART / "values.yaml")
README = REPO / "README.md"
CHART_README = CHART / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "examples").glob("*/README.md"))


def value_keys(value: Any, path: str = "") -> set[str]:
    keys = {path} if path else set()
    if isinstance(value, dict):
        for key, child in value.items():
            keys |= value_keys(child, f"{path}.{key}" if path else key)
    return keys


def generated_from_values(schema: dict[str, Any]) -> bool:
    """Objects the chart defines key by key (every key required unless nullable), as opposed to
    Kubernetes-shaped objects (affinity, resources, seccompProfile, selectors) whose optional keys
    the defaults do not all set."""
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    return bool(properties) and all(
        key in required or "null" in str(child.get("type")) for key, child in properties.items()
    )


def schema_keys(schema: dict[str, Any], path: str = "") -> tuple[set[str], set[str]]:
    """(every key the schema defines, the subset that are leaves)."""
    keys: set[str] = set()
    leaves: set[str] = set()
    for key, child in schema.get("properties", {}).items():
        sub = f"{path}.{key}" if path else key
        keys.add(sub)
        if generated_from_values(child):
            child_keys, child_leaves = schema_keys(child, sub)
            keys |= child_keys
            leaves |= child_leaves
        else:
            leaves.add(sub)
    return keys, leaves


def test_values_and_schema_have_the_same_key_set() -> None:
    from_values = value_keys(VALUES)
    from_schema, leaves = schema_keys(SCHEMA)
    missing_in_values = from_schema - from_values
    unknown_to_schema = {
        key for key in from_values - from_schema if not any(key.startswith(f"{leaf}.") for leaf in leaves)
    }
    assert missing_in_values == set(), "keys in the schema missing from values.yaml"
    assert unknown_to_schema == set(), "keys in values.yaml missing from the schema"
    assert len(from_schema) > 250


def every_object(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, schema)] if "properties" in schema else []
    for key, child in schema.get("properties", {}).items():
        found += every_object(child, f"{path}.{key}" if path else key)
    items = schema.get("items")
    if isinstance(items, dict):
        found += every_object(items, f"{path}[]")
    return found


# Objects that must accept keys the chart does not define, and why.
OPEN_OBJECTS = {
    "global": "parent charts pass their own globals to subcharts",
}


def test_every_object_forbids_unknown_keys_and_every_property_has_a_description() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert SCHEMA["additionalProperties"] is False
    for path, schema in every_object(SCHEMA):
        if path in OPEN_OBJECTS:
            assert schema["additionalProperties"] is True
            continue
        extra = schema.get("additionalProperties")
        if path.endswith("[]") and extra is None and schema.get("required") == ["name"]:
            continue  # a Kubernetes Volume: its many source types are validated by the API server
        if ".extraVolumes[]." in path and extra is None:
            continue  # a source of that Volume: only its file paths are checked (tfchart local writes them)
        assert extra is False, f"{path or '(root)'} accepts unknown keys"
        for key, child in schema["properties"].items():
            assert child.get("description"), f"{path}.{key} has no description"


def test_nullable_fields_are_typed_with_null() -> None:
    for path in (
        "storage.storageClassName",
        "chief.activeDeadlineSeconds",
        "chief.ttlSecondsAfterFinished",
        "networkPolicy.clientNamespaceSelector",
    ):
        node = SCHEMA
        for key in path.split("."):
            node = node["properties"][key]
        assert "null" in node["type"] and len(node["type"]) == 2, path


@pytest.mark.parametrize("values_file", values_files(), ids=lambda p: p.name)
def test_every_values_file_is_valid_against_the_schema(values_file: Path) -> None:
    from tests.chart.badvalues import merged

    jsonschema.Draft7Validator(SCHEMA).validate(merged(load_yaml(values_file)))


def test_committed_schema_is_generated_from_values_yaml() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_schema.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_chart_readme_parameter_table_is_generated_and_up_to_date(tmp_path: Path) -> None:
    """The one parameter table lives in the chart README (`make docs` regenerates it there)."""
    readme = CHART_README
    generator = tool("readme-generator", TOOLS / "node" / "node_modules" / ".bin" / "readme-generator")
    copy = tmp_path / "README.md"
    shutil.copy(readme, copy)
    result = subprocess.run(
        [str(generator), "--values", str(CHART / "values.yaml"), "--readme", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # The generator fails on any value without metadata and on metadata without a value.
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Metadata is correct" in result.stdout
    subprocess.run([sys.executable, str(REPO / "scripts" / "compact_tables.py"), str(copy)], check=True)
    assert copy.read_text() == readme.read_text(), f"{readme.name} is out of date: run `make docs`"


def test_chart_readme_reads_in_helm_show_readme() -> None:
    """`helm show readme` prints the file as it is, outside any repository: no relative link, no padded table."""
    text = CHART_README.read_text()
    outside = [link for link in relative_links(CHART_README) if not link.startswith("#")]
    assert not outside, outside
    assert not [line for line in text.splitlines() if line.startswith("|") and "  |" in line]


def test_defaults_stated_in_param_modifiers_are_the_values() -> None:
    """`## @param key [object, default: ...]` puts its own default in the README: it must be the value."""
    import re

    stated = re.findall(r"^\s*## @param (\S+) \[[^\]]*default: ([^\]]+)\]", (CHART / "values.yaml").read_text(), re.M)
    assert len(stated) >= 4
    for key, default in stated:
        value: Any = VALUES
        for part in key.split("."):
            value = value[part]
        if isinstance(value, list):
            assert default == " and ".join(map(str, value)), key
        else:
            assert json.loads(default) == value, key


# README.md: a short front door; the parameter table and the long sections live elsewhere.


def markdown_outside_code(text: str) -> str:
    """The text with fenced code blocks and inline code spans removed (link texts keep their brackets)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def github_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors: set[str] = set()
    outside_fences = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    for heading in re.findall(r"^#{1,6} +(.+?) *$", outside_fences, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def relative_links(path: Path) -> list[str]:
    targets = re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", markdown_outside_code(path.read_text()))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_readme_is_a_short_front_door_with_a_contents_list() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move detail into docs/"
    assert "## Contents" in lines[:15], "README.md needs a contents list near the top"
    contents = lines[lines.index("## Contents") + 1 :]
    contents = contents[: next(i for i, line in enumerate(contents) if line.startswith("## "))]
    listed = set(re.findall(r"^- \[[^\]]+\]\(#([^)]+)\)$", "\n".join(contents), re.M))
    sections = github_anchors(README) - {"contents", "tf-distributed"}
    assert listed == sections, "the contents list names every section of README.md, and only those"
    for part in ("what-it-is", "set-up", "a-five-minute-tour", "install-on-a-cluster", "where-to-read-more"):
        assert part in sections, part


def test_readme_keeps_exactly_the_two_set_up_commands() -> None:
    """`make run` runs the default topology (tests/e2e/test_local.py runs it), `make test` everything
    CI runs (.ci/run calls exactly that)."""
    text = README.read_text()
    setup = text[text.index("## Set-up") : text.index("## A five-minute tour")]
    blocks = re.findall(r"^```bash\n(.*?)^```", setup, re.M | re.S)
    assert len(blocks) == 1
    commands = [line.split("#")[0].strip() for line in blocks[0].splitlines()]
    assert commands == ["make run", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^run: ", makefile, re.M) and re.search(r"^test: ", makefile, re.M)
    assert (REPO / ".ci" / "run").read_text().rstrip().endswith("exec make test")


def test_the_parameter_table_is_only_in_the_chart_readme() -> None:
    for path in [README, *DOCS]:
        text = path.read_text()
        assert "## Parameters" not in text and "| `global.imageRegistry`" not in text, path.name
    assert "| `global.imageRegistry`" in CHART_README.read_text()
    assert "charts/tf-distributed/README.md#parameters" in README.read_text()
    makefile = (REPO / "Makefile").read_text()
    docs_target = makefile[makefile.index("\ndocs:") :].split("\n\n")[0]
    assert "--readme charts/tf-distributed/README.md" in docs_target
    assert "--readme README.md" not in docs_target


BENCH_RESULTS = REPO / "bench" / "RESULTS.md"


@pytest.mark.parametrize("path", [README, CHART_README, *DOCS, BENCH_RESULTS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves_inside_the_repository(path: Path) -> None:
    links = relative_links(path)
    assert links or path != README
    for link in links:
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        assert resolved.is_relative_to(REPO), f"{path.name}: {link} points outside the repository"
        assert resolved.exists(), f"{path.name}: {link} points at nothing"
        if anchor and resolved.suffix == ".md":
            assert anchor in github_anchors(resolved), f"{path.name}: {link}: no such heading"


def test_no_document_points_outside_the_repository() -> None:
    roots = ["README.md", "docs", "examples", "tfchart", "trainer", "charts"]
    files = [REPO / "README.md"] + [
        f for root in roots[1:] for f in (REPO / root).rglob("*") if f.is_file() and "__pycache__" not in f.parts
    ]
    for f in files:
        text = f.read_text(errors="replace")
        assert "DESIGN" not in text, f"{f.relative_to(REPO)} names a design document outside the repository"
        assert "../shared" not in text, f"{f.relative_to(REPO)} points outside the repository"


def test_every_pattern_of_the_schema_has_a_human_description() -> None:
    """tfchart says what a value must look like ("a DNS label ..."), never a regular expression: the schema
    carries what each of its patterns means (x-pattern-meanings), and tfchart reads it from the chart."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    meanings = schema.pop("x-pattern-meanings")
    patterns: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.add(node["pattern"])
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(schema)
    assert patterns and [p for p in patterns if p not in meanings and p.removeprefix("^$|") not in meanings] == []
    assert set(meanings) <= patterns | {p.removeprefix("^$|") for p in patterns}  # none that is not used
