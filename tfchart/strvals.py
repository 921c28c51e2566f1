"""helm's `--set` family, ported from helm's pkg/strvals parser (3.17 and 4.1 parse alike).

Supports nested keys (`a.b=c`), lists (`a={x,y}`), indexes (`a[0].b=c`, `a[1][0]=x`), escapes
(`a\\.b=c` for a literal dot, `a=x\\,y` for a literal comma), several assignments per flag
(`a=1,b=2`) and helm's typing: true/false/null (Go's case folding), 64-bit decimal integers without
a leading zero; everything else stays a string. `--set-string` keeps values strings, `--set-json`
reads each value as one JSON document (numbers become float64, as in helm), `--set-file` reads each
value from a file. Like helm, an empty key is ignored (`--set =x`), an index is at most 65536 and a
key path at most 30 names deep, and a key that already holds a value of another kind (a null from
a values file included) is an error.

The parser runs in time linear in its input: helm's recursive descent is driven from an explicit
stack (a key may nest indexes and names as deep as its length), and nothing is re-scanned.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Generator
from decimal import Decimal
from typing import Any

from tfchart.errors import UsageError

MAX_INDEX = 65536
MAX_NESTING = 30
MAX_JSON_DEPTH = 10_000  # encoding/json's maxNestingDepth
_INT64 = (-(2**63), 2**63 - 1)

OnAssign = Callable[[tuple[str, ...], str], None]  # (key path, the assignment's text in the argument)
_Path = tuple[Any, str] | None  # (parent, name): a key path shared with its parent, built in O(1)
ReadFile = Callable[[str], Any]


class _Eof:
    """io.EOF: the argument ended; not an error at a key's start."""


EOF = _Eof()
_Result = _Eof | None
_Call = Generator[Any, Any, Any]


class ParseError(Exception):
    pass


def json_number(value: int | float) -> int | float:
    """A number held as a Go float64, as helm's JSON round trip prints it and Python reads it back.

    Integral values below 1e21 print without a fraction (so `0.0`, `1e3` and `3.0` are integers,
    as helm's templates see them); others stay floats.
    """
    number = float(value)
    if number.is_integer() and abs(number) < 1e21:
        return int(Decimal(repr(number)))
    return number


def go_is_space(char: str) -> bool:
    """unicode.IsSpace: Python's str.isspace also counts \\x1c-\\x1f, Go does not."""
    if ord(char) < 0x100:
        return char in "\t\n\v\f\r \x85\xa0"
    return char.isspace()


_FOLDS = {"s": "sS\u017f", "k": "kK\u212a"}


def equal_fold(text: str, word: str) -> bool:
    """strings.EqualFold(text, word) for an ASCII lower-case `word` (Go's simple case folding)."""
    if len(text) != len(word):
        return False
    return all(char in _FOLDS.get(letter, letter + letter.upper()) for char, letter in zip(text, word, strict=True))


def _parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64)."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    number = int(text)
    return number if _INT64[0] <= number <= _INT64[1] else None


def typed(value: str, as_string: bool = False) -> Any:
    """helm's typedVal: booleans and null (any case), int64 without a leading zero, else the string."""
    if as_string:
        return value
    if equal_fold(value, "true"):
        return True
    if equal_fold(value, "false"):
        return False
    if equal_fold(value, "null"):
        return None
    if value == "0":
        return 0
    if value and value[0] != "0":
        number = _parse_int64(value)
        if number is not None:
            return number
    return value


def _atoi(text: str) -> int:
    """strconv.Atoi: an optional sign and ASCII digits (leading zeros allowed), within int64."""
    number = _parse_int64(text)
    if number is None:
        raise ParseError(f'error parsing index: strconv.Atoi: parsing "{text}": invalid syntax')
    return number


_STOPS: dict[str, re.Pattern[str]] = {}


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def read(self) -> str | None:
        if self.pos >= len(self.text):
            return None
        char = self.text[self.pos]
        self.pos += 1
        return char

    def until(self, stop: str) -> tuple[str, str | None]:
        """Runes up to a stop rune (returned), honouring backslash escapes; None at the end (EOF)."""
        pattern = _STOPS.get(stop)
        if pattern is None:
            pattern = _STOPS[stop] = re.compile("[" + re.escape(stop + "\\") + "]")
        text, end = self.text, len(self.text)
        out: list[str] = []
        while True:
            found = pattern.search(text, self.pos)
            if found is None:
                out.append(text[self.pos :])
                self.pos = end
                return "".join(out), None
            at = found.start()
            out.append(text[self.pos : at])
            char = text[at]
            if char != "\\":
                self.pos = at + 1
                return "".join(out), char
            if at + 1 >= end:
                self.pos = end
                return "".join(out), None
            out.append(text[at + 1])
            self.pos = at + 2


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    if key:  # helm ignores an empty key
        data[key] = value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "a map"


class _Parser:
    def __init__(self, text: str, mode: str, on_assign: OnAssign | None, read_file: ReadFile | None) -> None:
        self.scanner = _Scanner(text)
        self.mode = mode  # typed | string | json | file
        self.on_assign = on_assign
        self.read_file = read_file
        self.spans: list[tuple[int, int]] = []  # where each value's text is in the argument
        self.assignment_start = 0

    def value_text(self, stop: str) -> tuple[str, str | None]:
        start = self.scanner.pos
        text, last = self.scanner.until(stop)
        self.spans.append((start, self.scanner.pos - (last is not None)))
        return text, last

    # -- values ---------------------------------------------------------------------------------

    def convert(self, text: str) -> Any:
        if self.mode == "file":
            assert self.read_file is not None
            return self.read_file(text)
        return typed(text, self.mode == "string")

    def assigned(self, path: _Path) -> None:
        if self.on_assign is None:
            return
        names: list[str] = []
        while path is not None:
            path, name = path
            names.append(name)
        if all(names):
            text = self.scanner.text[self.assignment_start : self.scanner.pos].rstrip(",")
            self.on_assign(tuple(reversed(names)), text)

    def value_list(self) -> list[Any] | _Eof | None:
        """`{a,b}`: the list; EOF right after `=`; None when the value is not a list."""
        char = self.scanner.read()
        if char is None:
            return EOF
        if char != "{":
            self.scanner.pos -= 1
            return None
        items: list[Any] = []
        while True:
            text, last = self.value_text(",}")
            if last is None:
                raise ParseError("list must terminate with '}'")
            if last == "}":
                if self.scanner.read() not in (",", None):
                    self.scanner.pos -= 1
                items.append(self.convert(text))
                return items
            items.append(self.convert(text))

    def empty_value(self) -> bool:
        """helm's emptyVal: only spaces up to a comma or the end."""
        while True:
            char = self.scanner.read()
            if char is None or char == ",":
                return True
            if not go_is_space(char):
                self.scanner.pos -= 1
                return False

    def json_value(self) -> Any:
        """One JSON document from here (Go's json.Decoder), then spaces up to a comma."""
        text, start = self.scanner.text, self.scanner.pos
        depth = _json_depth(text, start)
        if depth > MAX_JSON_DEPTH:
            raise ParseError(f"exceeded max depth of {MAX_JSON_DEPTH} in the JSON value")
        try:
            value, end = _json_decode(text, start, depth)
        except ValueError as error:
            raise ParseError(f"invalid JSON value: {error}") from None
        self.scanner.pos = end
        self.empty_value()
        return value

    def assignment(self) -> tuple[Any, _Result]:
        """The value after `=`, and EOF when the argument ended with it."""
        if self.mode == "json":
            if self.empty_value():
                return None, None
            return self.json_value(), None
        items = self.value_list()
        if isinstance(items, _Eof):
            return "", EOF
        if items is not None:
            return items, None
        text, _ = self.value_text(",")
        return self.convert(text), None  # helm returns the reader's error here, not the EOF

    # -- keys (helm's key and listItem, as generators driven by run) ---------------------------------

    def key(self, data: dict[str, Any], level: int, path: _Path) -> _Call:
        key, last = self.scanner.until("=[,.")
        if last is None:
            if not key:
                return EOF
            raise ParseError(f"key {key!r} has no value")
        here = (path, key)
        if last == "[":
            index = self.key_index()
            if key in data and not isinstance(data[key], list):
                raise ParseError(f"key {key!r} holds {_kind(data[key])}, not a list: cannot set {key}[{index}]")
            items = data.get(key, [])
            if not key:
                items = list(items)  # helm sets nothing under an empty key
            result = yield self.list_item(items, index, level, here)
            _set(data, key, items)
            return result
        if last == "=":
            value, result = self.assignment()
            _set(data, key, value)
            self.assigned(here)
            return result
        if last == ",":
            raise ParseError(f"key {key!r} has no value (cannot end with ,)")
        level += 1
        if level > MAX_NESTING:
            raise ParseError(f"value name nested level is greater than maximum supported nested level of {MAX_NESTING}")
        if key in data and not isinstance(data[key], dict):
            raise ParseError(f"key {key!r} holds {_kind(data[key])}, not a map: cannot set {key}.<name>")
        inner = data.get(key, {})
        result = yield self.key(inner, level, here)
        if result is None and not inner:
            raise ParseError(f"key map {key!r} has no value")
        if inner:
            _set(data, key, inner)
        return result

    def key_index(self) -> int:
        text, last = self.scanner.until("]")
        if last is None:
            raise ParseError("error parsing index: missing ']'")
        return _atoi(text)

    def list_item(self, items: list[Any], index: int, level: int, path: _Path) -> _Call:
        if index < 0:
            raise ParseError(f"negative {index} index not allowed")
        here = (path, str(index))
        rest, last = self.scanner.until("[.=")
        if rest:
            raise ParseError(f"unexpected data at end of array index: {rest!r}")
        if last is None:
            return EOF
        if last == "=":
            value, _ = self.assignment()  # an empty value at the end is "", not an error
            set_index(items, index, value)
            self.assigned(here)
            return None
        if last == "[":
            next_index = self.key_index()
            current = items[index] if index < len(items) else None
            if current is not None and not isinstance(current, list):
                raise ParseError(f"index {index} holds {_kind(current)}, not a list")
            nested: list[Any] = current if current is not None else []
            result = yield self.list_item(nested, next_index, level, here)
            if result is not None:
                return result
            set_index(items, index, nested)
            return None
        if index < len(items):
            if not isinstance(items[index], dict):
                items[index] = {}
            inner = items[index]
        else:
            inner = {}
        result = yield self.key(inner, level, here)
        if result is not None:
            return result
        set_index(items, index, inner)
        return None

    def parse(self, data: dict[str, Any]) -> None:
        while True:
            self.assignment_start = self.scanner.pos
            if isinstance(run(self.key(data, 0, None)), _Eof):
                return


def run(call: _Call) -> Any:
    """Drives generator-based recursion with an explicit stack: depth costs memory, not Python frames."""
    stack = [call]
    value: Any = None
    while stack:
        try:
            nested = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            value = done.value
            continue
        stack.append(nested)
        value = None
    return value


def set_index(items: list[Any], index: int, value: Any) -> None:
    if index < 0:
        raise ParseError(f"negative {index} index not allowed")
    if index > MAX_INDEX:
        raise ParseError(f"index of {index} is greater than maximum supported index of {MAX_INDEX}")
    if index >= len(items):
        items.extend([None] * (index + 1 - len(items)))
    items[index] = value


# -- JSON as Go reads it ----------------------------------------------------------------------------


def _json_depth(text: str, start: int) -> int:
    """The nesting depth of the JSON document starting at `start` (a linear scan, strings skipped)."""
    if start >= len(text) or text[start] not in "[{":
        return 0  # a scalar: no nesting
    depth = deepest = 0
    in_string = escaped = False
    for position in range(start, len(text)):
        char = text[position]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
            if depth <= 0:
                break
    return deepest


def _go_float(text: str) -> int | float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"number {text} does not fit a float64")
    return json_number(number)


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid character in {name!r}: NaN and Infinity are not JSON")


_DECODER = json.JSONDecoder(parse_float=_go_float, parse_int=_go_float, parse_constant=_no_constant)


def _json_decode(text: str, start: int, depth: int) -> tuple[Any, int]:
    if depth < 400:
        return _DECODER.raw_decode(text, start)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 3 * depth + 200))  # the C scanner recurses once per level
    try:
        return _DECODER.raw_decode(text, start)
    finally:
        sys.setrecursionlimit(limit)


def json_document(text: str, what: str) -> Any:
    """A whole argument as one JSON document (helm 4's --set-json '{...}')."""
    depth = _json_depth(text, 0)
    if depth > MAX_JSON_DEPTH:
        raise UsageError(f"{what}: exceeded max depth of {MAX_JSON_DEPTH}", "flatten the JSON value")
    try:
        value, end = _json_decode(text, 0, depth)
    except ValueError as error:
        raise UsageError(
            f"{what}: invalid JSON: {error}", 'pass one JSON object, e.g. \'{"worker":{"replicas":2}}\''
        ) from None
    if text[end:].strip(" \t\r\n"):
        raise UsageError(f"{what}: invalid character after the JSON object", "pass exactly one JSON object")
    return value


# -- entry points -----------------------------------------------------------------------------------

_FLAGS = {"typed": "--set", "string": "--set-string", "json": "--set-json", "file": "--set-file"}


def _shown(argument: str) -> str:
    return repr(argument) if len(argument) <= 80 else repr(argument[:77] + "...") + f" ({len(argument)} characters)"


def parse_into(
    assignment: str,
    data: dict[str, Any],
    as_string: bool = False,
    *,
    mode: str | None = None,
    on_assign: OnAssign | None = None,
    read_file: ReadFile | None = None,
) -> None:
    """Applies one argument of the --set family to `data` in place, as helm's strvals does.

    `on_assign` is told the key path of every value set and the text of its assignment, for error messages.
    """
    mode = mode or ("string" if as_string else "typed")
    try:
        _Parser(assignment, mode, on_assign, read_file).parse(data)
    except ParseError as error:
        flag = _FLAGS[mode]
        raise UsageError(
            f"failed parsing {flag} data {_shown(assignment)}: {error}",
            f"see `helm install --help` for the {flag} syntax (KEY=VALUE, a.b=c, a[0]=x, a\\.b=c)",
        ) from None


def replace_file_paths(argument: str, replace: Callable[[str], str]) -> str:
    """A --set-file argument with each path replaced by replace(path), escaped for the parser."""
    parser = _Parser(argument, "file", None, lambda path: path)
    try:
        parser.parse({})
    except ParseError:
        return argument  # not reached: the argument was parsed before
    out: list[str] = []
    previous = 0
    for start, end in parser.spans:
        replacement = replace(argument[start:end])
        out.append(argument[previous:start])
        out.append("".join("\\" + char if char in ",{}\\" else char for char in replacement))
        previous = end
    out.append(argument[previous:])
    return "".join(out)


def apply_json(
    argument: str,
    data: dict[str, Any],
    helm_major: Callable[[], int] | None = None,
    on_assign: OnAssign | None = None,
) -> dict[str, Any]:
    """One --set-json argument: KEY=JSON pairs, or (helm 4) a whole JSON object merged into the values."""
    from tfchart.goyaml import merge_maps
    from tfchart.values import iter_leaf_paths

    stripped = argument.strip()
    if stripped.startswith("{") and (helm_major() if helm_major is not None else 4) >= 4:
        document = json_document(stripped, f"failed parsing --set-json data {_shown(argument)}")
        if not isinstance(document, dict):
            raise UsageError(f"--set-json {_shown(argument)} is not a JSON object", "pass KEY=JSON or one JSON object")
        if on_assign is not None:
            for path in iter_leaf_paths(document):
                on_assign(path, argument)
        return merge_maps(data, document)
    parse_into(argument, data, mode="json", on_assign=on_assign)
    return data
