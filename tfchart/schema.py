r"""Validation against the chart's own values.schema.json (the one source of truth).

Two engines, one schema: a fastjsonschema validator compiled once per schema version and cached on
disk answers the common case (valid values) in a few milliseconds; only when it rejects, the
complete jsonschema validator runs to list every problem with its key path.

helm checks `pattern` with Go's RE2, where `$` matches only at the end of the text; in Python's `re`
it also matches before a final newline, so "name\n" would pass here and fail in helm. Both engines
get the schema with `$` spelled `\Z` (go_patterns), which means what RE2's `$` means.
"""

from __future__ import annotations

import difflib
import functools
import json
import marshal
import os
import re
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfchart.errors import Problem
from tfchart.schema_formats import describe

Validator = Callable[[Any], Any]


# Bumped when go_patterns changes what is compiled from the same schema text (cached bytecode).
PATTERN_DIALECT = 2


def go_pattern(pattern: str) -> str:
    r"""An RE2 pattern for Python's re: `$` outside a character class becomes `\Z` (end of text only)."""
    out: list[str] = []
    escaped = in_class = False
    for index, char in enumerate(pattern):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]" or pattern[index - 1] == "["
        elif char == "[":
            in_class = True
        elif char == "$":
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


def re2_source(pattern: str) -> str:
    """The schema's own spelling of a pattern go_pattern translated (for messages)."""
    return pattern.replace("\\Z", "$")


def go_patterns(node: Any) -> Any:
    """The schema with every `pattern` translated by go_pattern."""
    if isinstance(node, dict):
        return {
            key: go_pattern(child) if key == "pattern" and isinstance(child, str) else go_patterns(child)
            for key, child in node.items()
        }
    if isinstance(node, list):
        return [go_patterns(child) for child in node]
    return node


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfchart"


@functools.cache
def fast_validator(schema_path: Path) -> Validator:
    """A compiled validator for the schema; its bytecode is cached on disk by schema hash and Python."""
    text = schema_path.read_bytes()
    # CRC-32 (zlib, already loaded) is enough to tell schema versions apart; hashlib costs 5 ms.
    digest = f"{zlib.crc32(text):08x}-{len(text)}-{sys.hexversion:x}-{PATTERN_DIALECT}"
    cached = _cache_dir() / f"schema-{digest}.marshal"
    try:
        code = marshal.loads(cached.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        code = _compile(text)
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            temporary = cached.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_bytes(marshal.dumps(code))
            temporary.replace(cached)
        except OSError:
            pass  # a read-only cache only costs the compile next time
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    return namespace["validate"]  # type: ignore[no-any-return]


def _compile(schema_text: bytes) -> Any:
    import fastjsonschema

    source = fastjsonschema.compile_to_code(
        go_patterns(json.loads(schema_text)), use_default=False, detailed_exceptions=False
    )
    # The generated module imports two exception classes from fastjsonschema, and with them the
    # package (urllib, uuid...): ~10 ms per run. Local stand-ins keep the fast path import-free.
    source = source.replace(
        "from fastjsonschema import JsonSchemaValueException, JsonSchemaValuesException",
        "class JsonSchemaValueException(ValueError):\n"
        "    def __init__(self, message, value=None, name=None, definition=None, rule=None):\n"
        "        super().__init__(message)\n"
        "class JsonSchemaValuesException(ValueError):\n"
        "    def __init__(self, errors):\n"
        "        super().__init__(errors)",
    )
    root = re.search(r"^def (\w+)\(data", source, re.MULTILINE)
    assert root, "fastjsonschema generated no validator function"
    source += f"\n\nvalidate = {root.group(1)}\n"
    return compile(source, "<tfchart values.schema.json>", "exec")


def is_valid(schema_path: Path, values: Any) -> bool:
    validate = fast_validator(schema_path)
    try:
        validate(values)
    except Exception as error:  # fastjsonschema.JsonSchemaValueException, without importing it
        if type(error).__name__ == "JsonSchemaValueException":
            return False
        raise
    return True


def dotted(parts: Any) -> str:
    return ".".join(str(part) for part in parts) or "(root)"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _default_at(defaults: dict[str, Any], path: list[Any]) -> Any:
    node: Any = defaults
    for key in path:
        if isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return None
    return node


def _set_fix(path: str, value: Any) -> str:
    if value is None or (isinstance(value, (dict, list)) and value):
        return ""
    if isinstance(value, bool):
        rendered = "true" if value else "false"
    elif isinstance(value, (dict, list)):
        rendered = "{}" if isinstance(value, list) else "null"
    else:
        rendered = str(value)
    escaped = ".".join(part.replace(".", "\\.") for part in path.split("."))
    return f"--set {escaped}={rendered}"


@functools.lru_cache(maxsize=4)
def _complete_schema(text: str) -> dict[str, Any]:
    """The schema as the complete validator reads it (parsed and translated once per schema text)."""
    schema: dict[str, Any] = go_patterns(json.loads(text))
    return schema


def problems(schema_path: Path, values: dict[str, Any], defaults: dict[str, Any]) -> list[Problem]:
    """Every schema violation, as problems naming the key path, the value and a fix."""
    import jsonschema

    validator = jsonschema.Draft7Validator(_complete_schema(schema_path.read_text()))
    found: list[Problem] = []
    for error in sorted(validator.iter_errors(values), key=lambda e: [str(p) for p in e.absolute_path]):
        found.extend(_explain(error, defaults))
    unique: dict[tuple[str, str], Problem] = {}
    for problem in found:
        unique.setdefault((problem.path, problem.message), problem)
    return list(unique.values())


def _explain(error: Any, defaults: dict[str, Any]) -> list[Problem]:
    path = list(error.absolute_path)
    where = dotted(path)
    schema = error.schema
    kind = error.validator
    value = error.instance
    default = _default_at(defaults, path)
    fix_default = _set_fix(where, default) if where != "(root)" else ""

    if "propertyNames" in error.schema_path:
        key_path = dotted([*path, value])
        return [
            Problem(
                key_path,
                f"key {value!r} is not {describe(re2_source(schema.get('pattern', '')))}",
                value,
                "rename the key",
            )
        ]
    if kind == "additionalProperties":
        known = list(schema.get("properties", {}))
        out = []
        for key in value:
            if key in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = (
                f"did you mean {'.'.join([*map(str, path), close[0]])}?" if close else f"known keys: {', '.join(known)}"
            )
            out.append(Problem(dotted([*path, key]), "unknown key", value[key], f"remove it ({hint})"))
        return out
    if kind == "type":
        wanted = schema["type"]
        wanted_text = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return [Problem(where, f"expected {wanted_text}, got {_type_name(value)} {_shown(value)}", value, fix_default)]
    if kind == "enum":
        choices = ", ".join(str(choice) for choice in schema["enum"] if choice != "")
        return [
            Problem(
                where,
                f"{_shown(value)} is not one of: {choices}",
                value,
                _set_fix(where, schema["enum"][0] or schema["enum"][-1]),
            )
        ]
    if kind == "pattern":
        return [Problem(where, f"{_shown(value)} is not {describe(re2_source(schema['pattern']))}", value, fix_default)]
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        bound = schema[kind]
        relation = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[kind]
        return [Problem(where, f"must be {relation} {bound} (got {value})", value, fix_default)]
    if kind in ("maxLength", "minLength"):
        limit = schema[kind]
        relation = "at most" if kind == "maxLength" else "at least"
        return [Problem(where, f"must be {relation} {limit} characters (got {len(value)})", value, "")]
    if kind in ("minItems", "maxItems", "uniqueItems"):
        return [Problem(where, error.message, value, fix_default)]
    if kind == "required":
        missing = [key for key in schema.get("required", []) if key not in value]
        return [
            Problem(
                dotted([*path, key]),
                "is required (was it set to null?)",
                None,
                _set_fix(dotted([*path, key]), _default_at(defaults, [*path, key])),
            )
            for key in missing
        ]
    if kind == "oneOf":
        return [
            Problem(
                where, f"{_shown(value)} is not valid: expected {_describe_branch_list(schema)}", value, fix_default
            )
        ]
    return [Problem(where, error.message, value, fix_default)]


def _describe_branch(schema: dict[str, Any]) -> str:
    if "pattern" in schema:
        return describe(re2_source(schema["pattern"]))
    kind = schema.get("type", "value")
    bounds = []
    if "minimum" in schema:
        bounds.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bounds.append(f"<= {schema['maximum']}")
    return f"a {kind}" + (f" {' and '.join(bounds)}" if bounds else "")


def _describe_branch_list(schema: dict[str, Any]) -> str:
    return " or ".join(_describe_branch(branch) for branch in schema["oneOf"])


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, (bytes, bytearray)) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
