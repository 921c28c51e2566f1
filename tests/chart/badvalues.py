"""Generates invalid values documents from values.schema.json: at least one per schema key.

Each mutation names the dotted key path the error must point at. tfchart's validator tests reuse
this corpus (issue 4); the chart tests check helm rejects every one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.chartlib import CHART, load_yaml

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS: dict[str, Any] = load_yaml(CHART / "values.yaml")

BAD_STRING = "-Bad Value!/"


@dataclass(frozen=True)
class Mutation:
    path: tuple[str, ...]  # where the error is reported
    kind: str  # wrong-type, enum, pattern, minimum, maximum, unknown-key, bad-key, bad-item, bad-quantity
    document: dict[str, Any]  # the values document a user would pass with -f
    mentions: str = ""  # a word the error must also mention (e.g. the unknown key)

    @property
    def id(self) -> str:
        return f"{'.'.join(self.path) or '(root)'}:{self.kind}"


def nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    document: Any = value
    for key in reversed(path):
        document = {key: document}
    assert isinstance(document, dict)
    return document


def wrong_type_for(schema: dict[str, Any]) -> Any:
    types = schema.get("type")
    if types is None and "oneOf" in schema:
        types = [s["type"] for s in schema["oneOf"]]
    allowed = set(types) if isinstance(types, list) else {types}
    for candidate in ({"a": "map"}, ["a", "list"], "a-string", True):
        kind = {dict: "object", list: "array", str: "string", bool: "boolean"}[type(candidate)]
        if kind not in allowed:
            return candidate
    raise AssertionError(f"no wrong type for {schema}")


def mutations_for(schema: dict[str, Any], path: tuple[str, ...], default: Any) -> Iterator[Mutation]:
    if path:
        yield Mutation(path, "wrong-type", nest(path, wrong_type_for(schema)))
    if "enum" in schema:
        yield Mutation(path, "enum", nest(path, "not-a-valid-choice"))
    if "pattern" in schema and "string" in str(schema.get("type")):
        yield Mutation(path, "pattern", nest(path, BAD_STRING))
    if schema.get("type") == "integer" or "integer" in str(schema.get("type")):
        if "minimum" in schema:
            yield Mutation(path, "minimum", nest(path, schema["minimum"] - 1))
        if "maximum" in schema:
            yield Mutation(path, "maximum", nest(path, schema["maximum"] + 1))
    if "oneOf" in schema and path[-1] == "learningRate":
        yield Mutation(path, "minimum", nest(path, -0.5))
    properties = schema.get("properties")
    if properties is not None:
        if schema.get("additionalProperties") is False:
            yield Mutation(path, "unknown-key", nest((*path, "bogusKey"), 1), mentions="bogusKey")
        for key, child in properties.items():
            child_default = default.get(key) if isinstance(default, dict) else None
            yield from mutations_for(child, (*path, key), child_default)
    elif schema.get("type") == "object":
        names = schema.get("propertyNames", {}).get("pattern")
        if names:  # a key of its own per map: helm 4 names no path for it, so the key tells them apart
            bad_key = f"Bad Key!{'.'.join(path)}!"
            yield Mutation(path, "bad-key", nest((*path, bad_key), "x"), mentions=bad_key)
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            if "oneOf" in values:
                yield Mutation((*path, "memory"), "bad-quantity", nest((*path, "memory"), "4XB"))
            elif values.get("pattern"):
                yield Mutation((*path, "key"), "pattern", nest((*path, "key"), BAD_STRING))
    if schema.get("type") == "array":
        items = schema.get("items", {})
        if items.get("pattern") or items.get("enum"):
            yield Mutation((*path, "0"), "bad-item", nest(path, [BAD_STRING]))
        elif items.get("type") == "object":
            if items.get("additionalProperties") is False:
                yield Mutation((*path, "0"), "bad-item", nest(path, [{"bogusKey": 1}]), mentions="bogusKey")
            elif items.get("required"):
                yield Mutation((*path, "0"), "bad-item", nest(path, [{}]), mentions=items["required"][0])


def corpus() -> list[Mutation]:
    return list(mutations_for(SCHEMA, (), DEFAULTS))


def leaf_paths(schema: dict[str, Any] = SCHEMA, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    properties = schema.get("properties")
    if properties is None:
        yield path
        return
    for key, child in properties.items():
        yield from leaf_paths(child, (*path, key))


def merged(document: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of a user document over the chart defaults (maps merge, the rest replaces)."""

    def merge(base: Any, override: Any) -> Any:
        if isinstance(base, dict) and isinstance(override, dict):
            out = dict(base)
            for key, value in override.items():
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = merge(base.get(key), value)
            return out
        return copy.deepcopy(override)

    result = merge(DEFAULTS, document)
    assert isinstance(result, dict)
    return result
