"""values.yaml, values.schema.json and the README parameter tables stay in step."""

from __future__ import annotations

import json
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
READMES = [REPO / "README.md", CHART / "README.md"]


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


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_readme_parameter_table_is_generated_and_up_to_date(readme: Path, tmp_path: Path) -> None:
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
    assert copy.read_text() == readme.read_text(), f"{readme.name} is out of date: run `make docs`"


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
