"""A change shown field by field, as the upgrade guard reports what the API server refuses: the leaves that differ
(lists of named objects compared by name), each value as JSON, a long one shortened around the difference."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import zip_longest
from os.path import commonprefix
from typing import Any

LONG = 100  # values longer than this (as JSON) are shortened around the difference
CONTEXT = 30  # characters kept on each side of the difference of two long strings

def _child(path: str, key: Any) -> str:
    key = str(key)
    return f"{path}.{key}" if key.isascii() and key.isidentifier() else f"{path}[{json.dumps(key)}]"


def by_name(items: list[Any]) -> dict[str, Any] | None:
    """A list of named objects (containers, env, volumes, ports) by name, or None when it is not one."""
    names: list[Any] = [item.get("name") if isinstance(item, dict) else None for item in items]
    named = all(isinstance(name, str) for name in names) and len(set(names)) == len(names)
    return dict(zip(names, items, strict=True)) if named else None


def field_changes(path: str, old: Any, new: Any) -> Iterator[tuple[str, Any, Any]]:
    """(path, old, new) of every leaf that differs; an absent value is None. Objects are compared key
    by key; lists of named objects by name (`containers[name=trainer]`), so one added environment
    variable is one line; other lists item by item."""
    container = {type(old), type(new)} - {type(None)}  # an absent side is an empty dict or list
    if old == new:
        return
    if container == {dict}:
        for key in sorted((old or {}).keys() | (new or {}).keys(), key=str):
            yield from field_changes(_child(path, key), (old or {}).get(key), (new or {}).get(key))
    elif container == {list} and (named := by_name(old or [])) is not None and (news := by_name(new or [])) is not None:
        changes = [change for name in [*named, *(name for name in news if name not in named)]
                   for change in field_changes(f"{path}[name={name}]", named.get(name), news.get(name))]  # fmt: skip
        yield from changes or [(path, list(named), list(news))]  # none: the same items reordered
    elif container == {list}:
        for index, (before, after) in enumerate(zip_longest(old or [], new or [])):
            yield from field_changes(f"{path}[{index}]", before, after)
    else:
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
        keys = ", ".join([*(str(key) for key in list(value)[:6]), *(["…"] if len(value) > 6 else [])])
        return f"an object of {len(value)} keys ({keys})"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return text


def show_pair(old: Any, new: Any) -> tuple[str, str]:
    """Both values; two long strings are shown around their first difference, with their lengths."""
    if not (isinstance(old, str) and isinstance(new, str)) or max(len(json_text(old)), len(json_text(new))) <= LONG:
        return show(old), show(new)
    prefix = len(commonprefix([old, new]))  # noqa: RUF071 (by character, as meant)
    suffix = len(commonprefix([old[prefix:][::-1], new[prefix:][::-1]]))  # noqa: RUF071
    start = max(0, prefix - CONTEXT)

    def around(text: str) -> str:
        end = len(text) - max(0, suffix - CONTEXT)
        middle = text[start:end]
        if len(middle) > 2 * LONG:  # the difference itself is very long: keep its edges
            middle = middle[: LONG - 1] + "…" + middle[-(LONG - 1) :]
        head, tail = "…" if start > 0 else "", "…" if end < len(text) else ""
        return f'"{head}{json_text(middle)[1:-1]}{tail}" ({len(text)} characters)'

    return around(old), around(new)
