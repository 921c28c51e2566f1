"""A change shown field by field, as the upgrade guard reports what the API server refuses: the leaves that differ
(lists of named objects compared by name), each value as JSON, a long one shortened around the difference."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import zip_longest
from typing import Any

LONG = 100  # values longer than this (as JSON) are shortened around the difference
CONTEXT = 30  # characters kept on each side of the difference of two long strings

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _child(path: str, key: Any) -> str:
    key = str(key)
    return f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def by_name(items: list[Any]) -> dict[str, Any] | None:
    """A list of named objects (containers, env, volumes, ports) by name, or None when it is not one."""
    named: dict[str, Any] = {}
    for item in items:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or name in named:
            return None
        named[name] = item
    return named


def field_changes(path: str, old: Any, new: Any) -> Iterator[tuple[str, Any, Any]]:
    """(path, old, new) of every leaf that differs; an absent value is None. Objects are compared key
    by key; lists of named objects by name (`containers[name=trainer]`), so one added environment
    variable is one line; other lists item by item."""
    if old == new:
        return
    if isinstance(old, dict) or isinstance(new, dict):
        if isinstance(old, (dict, type(None))) and isinstance(new, (dict, type(None))):
            before_dict, after_dict = old or {}, new or {}
            for key in sorted(before_dict.keys() | after_dict.keys(), key=str):
                yield from field_changes(_child(path, key), before_dict.get(key), after_dict.get(key))
            return
    elif isinstance(old, (list, type(None))) and isinstance(new, (list, type(None))):
        before_list, after_list = old or [], new or []
        before_named, after_named = by_name(before_list), by_name(after_list)
        if before_named is not None and after_named is not None:
            names = list(before_named) + [name for name in after_named if name not in before_named]
            changes = [
                change for name in names
                for change in field_changes(f"{path}[name={name}]", before_named.get(name), after_named.get(name))
            ]
            yield from changes or [(path, list(before_named), list(after_named))]  # none: the same items reordered
            return
        for index, (before, after) in enumerate(zip_longest(before_list, after_list)):
            yield from field_changes(f"{path}[{index}]", before, after)
        return
    yield path, old, new


def json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def show(value: Any) -> str:
    """A value as JSON; a very long one summarised (a string keeps its start and end), never cut JSON."""
    if value is None:
        return "(not set)"
    text = json_text(value)
    if len(text) <= LONG:
        return text
    if isinstance(value, str):
        half = LONG // 2 - 3
        return f"{json_text(value[:half])[:-1]}…{json_text(value[-half:])[1:]} ({len(value)} characters)"
    if isinstance(value, dict):
        keys = ", ".join(str(key) for key in list(value)[:6])
        more = ", …" if len(value) > 6 else ""
        return f"an object of {len(value)} keys ({keys}{more})"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return text


def common(a: str, b: str) -> int:
    """The length of the start two strings share."""
    return next((index for index, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def show_pair(old: Any, new: Any) -> tuple[str, str]:
    """Both values; two long strings are shown around their first difference, with their lengths."""
    if not (isinstance(old, str) and isinstance(new, str)) or max(len(json_text(old)), len(json_text(new))) <= LONG:
        return show(old), show(new)
    prefix = common(old, new)
    suffix = common(old[prefix:][::-1], new[prefix:][::-1])
    start = max(0, prefix - CONTEXT)

    def around(text: str) -> str:
        end = len(text) - max(0, suffix - CONTEXT)
        middle = text[start:end]
        if len(middle) > 2 * LONG:  # the difference itself is very long: keep its edges
            middle = middle[: LONG - 1] + "…" + middle[-(LONG - 1) :]
        head, tail = "…" if start > 0 else "", "…" if end < len(text) else ""
        return f'"{head}{json_text(middle)[1:-1]}{tail}" ({len(text)} characters)'

    return around(old), around(new)
