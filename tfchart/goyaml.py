"""YAML decoded as helm decodes values files: sigs.k8s.io/yaml over go-yaml v2, then JSON.

go-yaml v2 types YAML 1.1 scalars (`y`, `on` and `no` are booleans, `1e3` a float,
`0o17`/`0x1F`/`017` integers, timestamps stay strings, unknown tags are ignored, `<<` merges in
document order); the result goes through JSON (every number becomes a float64, map keys become
strings, NaN and infinities are refused). helm 4 also splits a file into its `---` documents;
helm 3 reads the first document only.

This is reproduced on PyYAML's event stream (libyaml, the parser go-yaml was ported from): its own
composer keeps alias nodes, and the decoder counts decodes and alias expansions exactly as go-yaml
does, so an alias bomb fails in milliseconds with helm's "excessive aliasing" instead of being
expanded. Nothing recurses on the document's depth. `line_in` finds where a document sets a key.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from tfchart.errors import Problem
from tfchart.inputs import Inputs, Source

try:  # libyaml when available: the parser go-yaml was ported from, and several times faster
    from yaml import CBaseLoader as EventLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import BaseLoader as EventLoader  # type: ignore[assignment]
from tfchart.strvals import json_number

Path_ = tuple[str, ...]
HelmMajor = Callable[[], int]

MAX_DEPTH = 10_000  # go-yaml's max_flow_level / max_indents, and encoding/json's maxNestingDepth
MAX_INPUT_BYTES = 64 * 1024 * 1024  # a pipe or device that never ends (/dev/zero) is refused past this
HELM4_LINE_BUFFER = 4096  # bufio's default size, see _helm4_documents

_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_BINARY = "tag:yaml.org,2002:binary"
_MERGE = "tag:yaml.org,2002:merge"
_RESOLVABLE = {"", _STR, _BOOL, _INT, _FLOAT, _NULL, _TIMESTAMP}
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


# -- errors -----------------------------------------------------------------------------------------


class ValuesFileError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _DecodeError(Exception):
    """A document helm refuses: where (key path, 0-based line) and why."""

    def __init__(self, message: str, line: int | None, path: Path_ = ()) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path


def _go_replace(error: UnicodeError) -> tuple[str, int]:
    """Go's rule for invalid UTF-8 (json.Marshal, strings.ToValidUTF8 style): U+FFFD per bad byte."""
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd", error.start + 1


codecs.register_error("tfchart-go", _go_replace)


def go_string(raw: bytes) -> str:
    """Bytes as a Go string ends up after helm's JSON round trip: invalid UTF-8 becomes U+FFFD per byte."""
    return raw.decode("utf-8", errors="tfchart-go")


# -- the YAML node graph (go-yaml's parser) ---------------------------------------------------------

SCALAR, SEQUENCE, MAPPING, ALIAS = range(4)


class Node:
    """A composed YAML node. Alias nodes stay alias nodes (go-yaml counts them)."""

    __slots__ = ("children", "implicit", "kind", "line", "tag", "target", "value")

    def __init__(self, kind: int, line: int, tag: str = "", value: str = "", implicit: bool = False) -> None:
        self.kind = kind
        self.line = line  # 0-based, in the whole file
        self.tag = tag
        self.value = value
        self.implicit = implicit
        self.children: list[Node] = []  # a mapping's are key, value, key, value...
        self.target: Node | None = None


def compose(data: bytes, first_line: int = 0) -> Node | None:
    """The first document of `data` as go-yaml v2's parser builds it; None when there is none.

    Later documents are not read (go-yaml's Unmarshal stops after the first). Anchors may be
    redefined (the latest wins) and an anchor is known inside its own value, as in go-yaml.
    """
    loader = EventLoader(data if data else b"\n")
    try:
        loader.get_event()  # StreamStartEvent
        if loader.check_event(yaml.StreamEndEvent):
            return None
        loader.get_event()  # DocumentStartEvent
        anchors: dict[str, Node] = {}
        stack: list[Node] = []
        block_columns: list[int] = []  # columns of the open block collections that pushed an indent
        opened: list[int] = []  # per open collection: 0 indentless sequence, 1 block, 2 flow
        flow_depth = 0
        root: Node | None = None
        while root is None:
            event: Any = loader.get_event()
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                node = stack.pop()
                how = opened.pop()
                if how == 1:
                    block_columns.pop()
                elif how == 2:
                    flow_depth -= 1
                if not stack:
                    root = node
                continue
            line = first_line + event.start_mark.line
            if isinstance(event, yaml.AliasEvent):
                name = str(event.anchor)
                target = anchors.get(name)
                if target is None:
                    raise _DecodeError(f"unknown anchor '{name}' referenced", line)
                node = Node(ALIAS, line, value=name)
                node.target = target
            elif isinstance(event, yaml.ScalarEvent):
                node = Node(SCALAR, line, event.tag or "", event.value, bool(event.implicit[0]))
            else:
                kind = MAPPING if isinstance(event, yaml.MappingStartEvent) else SEQUENCE
                node = Node(kind, line, event.tag or "")
                column = event.start_mark.column
                if event.flow_style:
                    flow_depth += 1
                    opened.append(2)
                    if flow_depth > MAX_DEPTH:
                        raise _DecodeError(f"exceeded max depth of {MAX_DEPTH}", line)
                elif not block_columns or column > block_columns[-1]:
                    block_columns.append(column)
                    opened.append(1)
                    if len(block_columns) > MAX_DEPTH:
                        raise _DecodeError(f"exceeded max depth of {MAX_DEPTH}", line)
                else:
                    opened.append(0)  # an indentless sequence: a mapping's value at the same column
            if getattr(event, "anchor", None) is not None and not isinstance(event, yaml.AliasEvent):
                anchors[event.anchor] = node
            if stack:
                stack[-1].children.append(node)
            if node.kind in (MAPPING, SEQUENCE):
                stack.append(node)
            elif not stack:
                root = node
        loader.get_event()  # DocumentEndEvent: what follows the root in this document must parse
        return root
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        reason = error.problem or error.context or "YAML syntax error"
        raise _DecodeError(f"YAML syntax error: {reason}", first_line + mark.line if mark else None) from None
    except yaml.YAMLError as error:  # ReaderError: invalid UTF-8, control characters
        position = getattr(error, "position", None)
        line = data[:position].count(b"\n") if isinstance(position, int) else None
        reason = getattr(error, "reason", None) or str(error)
        raise _DecodeError(f"not a YAML file: {reason}", None if line is None else first_line + line) from None
    finally:
        loader.dispose()


# -- scalars: go-yaml v2's resolve ------------------------------------------------------------------

_HINTS = {**dict.fromkeys("+-", "S"), **dict.fromkeys("0123456789", "D"), **dict.fromkeys("yYnNtTfFoO~", "M")}
_HINTS["."] = "."
_RESOLVE_MAP: dict[str, tuple[str, Any]] = {}
for _words, _tag, _value in (
    ("y Y yes Yes YES true True TRUE on On ON", _BOOL, True),
    ("n N no No NO false False FALSE off Off OFF", _BOOL, False),
    ("~ null Null NULL", _NULL, None),
    (".nan .NaN .NAN", _FLOAT, math.nan),
    (".inf .Inf .INF +.inf +.Inf +.INF", _FLOAT, math.inf),
    ("-.inf -.Inf -.INF", _FLOAT, -math.inf),
    ("<<", _MERGE, "<<"),
):
    for _word in _words.split():
        _RESOLVE_MAP[_word] = (_tag, _value)
_RESOLVE_MAP[""] = (_NULL, None)

_DOT_FLOAT = re.compile(r"\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?")  # strconv.ParseFloat(".…")
_YAML_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_INT = re.compile(r"([+-]?)(?:0[xX]([0-9a-fA-F]+)|0[oO]([0-7]+)|0[bB]([01]+)|0([0-7]+)|([0-9]+))")
_TIMESTAMP_RE = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,]\d+)?(?:Z|[+-](\d{2}):(\d{2}))"
    r"| (\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,]\d+)?)?"
)


def _short_tag(tag: str) -> str:
    return "!!" + tag[len("tag:yaml.org,2002:") :] if tag.startswith("tag:yaml.org,2002:") else tag


def go_parse_int(text: str, signed: bool = True) -> int | None:
    """strconv.ParseInt(text, 0, 64) (or ParseUint with signed=False); None where Go fails."""
    match = _GO_INT.fullmatch(text)
    if not match or (match.group(1) and not signed):
        return None
    hexa, octal, binary, legacy_octal, decimal = match.group(2, 3, 4, 5, 6)
    if decimal is not None:
        if len(decimal) > 1 and decimal[0] == "0":
            return None  # "08", "09": base 0 reads a leading 0 as octal
        number = int(decimal)
    elif hexa is not None:
        number = int(hexa, 16)
    elif octal is not None:
        number = int(octal, 8)
    elif binary is not None:
        number = int(binary, 2)
    else:
        number = int(legacy_octal, 8)
    if match.group(1) == "-":
        number = -number
    if signed:
        return number if _INT64_MIN <= number <= _INT64_MAX else None
    return number if number <= _UINT64_MAX else None


def _go_parse_binary(text: str, signed: bool) -> int | None:
    """strconv.ParseInt/ParseUint(text, 2, 64)."""
    match = re.fullmatch(r"([+-]?)([01]+)", text)
    if not match or (match.group(1) and not signed):
        return None
    number = int(match.group(2), 2) * (-1 if match.group(1) == "-" else 1)
    if signed:
        return number if _INT64_MIN <= number <= _INT64_MAX else None
    return number if number <= _UINT64_MAX else None


def _go_float(text: str) -> float | None:
    number = float(text.replace("_", ""))
    return None if math.isinf(number) else number  # Go: ErrRange, the scalar stays a string


def _is_timestamp(text: str) -> bool:
    match = _TIMESTAMP_RE.fullmatch(text)
    if not match:
        return False
    year, month, day = (int(part) for part in match.group(1, 2, 3))
    try:
        date(year, month, day)
    except ValueError:
        return False
    clock = match.group(4, 5, 6) if match.group(4) else match.group(9, 10, 11)
    if clock[0] is not None:
        hour, minute, second = (int(part) for part in clock)
        if hour > 23 or minute > 59 or second > 59:
            return False
    return match.group(7) is None or (int(match.group(7)) <= 24 and int(match.group(8)) <= 59)


def _resolve_untyped(tag: str, text: str) -> tuple[str, Any]:
    hint = _HINTS.get(text[0]) if text else "N"
    if hint is None or tag in (_STR, _BINARY):
        return _STR, text
    item = _RESOLVE_MAP.get(text)
    if item is not None:
        return item
    if hint == ".":
        if _DOT_FLOAT.fullmatch(text):
            number = _go_float(text)
            if number is not None:
                return _FLOAT, number
    elif hint in ("D", "S"):
        if tag in ("", _TIMESTAMP) and _is_timestamp(text):
            return _TIMESTAMP, text
        plain = text.replace("_", "")
        integer = go_parse_int(plain)
        if integer is None:
            integer = go_parse_int(plain, signed=False)
        if integer is not None:
            return _INT, integer
        if _YAML_FLOAT.fullmatch(plain):
            number = _go_float(plain)
            if number is not None:
                return _FLOAT, number
        if plain.startswith("0b"):
            integer = _go_parse_binary(plain[2:], True)
            if integer is None:
                integer = _go_parse_binary(plain[2:], False)
            if integer is not None:
                return _INT, integer
        elif plain.startswith("-0b"):
            integer = _go_parse_binary("-" + plain[3:], True)
            if integer is not None:
                return _INT, integer
    return _STR, text


def resolve(tag: str, text: str) -> tuple[str, Any]:
    """go-yaml v2's resolve(): the tag a scalar resolves to and its Go value; a tag mismatch fails."""
    if tag not in _RESOLVABLE:
        return tag, text
    resolved_tag, value = _resolve_untyped(tag, text)
    if tag in ("", resolved_tag, _STR, _BINARY):
        return resolved_tag, value
    if tag == _FLOAT and resolved_tag == _INT:
        return _FLOAT, float(value)
    raise ValueError(f"cannot decode {_short_tag(resolved_tag)} `{text}` as a {_short_tag(tag)}")


def _scalar(node: Node) -> Any:
    """The Go value of a scalar decoded into interface{} (before the JSON round trip)."""
    if node.tag == "" and not node.implicit:
        return node.value
    tag, value = resolve(node.tag, node.value)
    if tag == _BINARY:
        try:
            decoded = base64.b64decode(node.value.replace("\n", "").replace("\r", ""), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("!!binary value contains invalid base64 data") from None
        return go_string(decoded)
    if tag == _TIMESTAMP:
        return node.value  # go-yaml keeps timestamps as their text when decoding into interface{}
    return value


def _float32_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32): how sigs.k8s.io/yaml turns a float map key into a string."""
    import struct

    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        single = math.copysign(math.inf, value)
    if math.isinf(single):
        return "+Inf" if single > 0 else "-Inf"
    negative = math.copysign(1.0, single) < 0
    if single == 0:
        return "-0" if negative else "0"
    for precision in range(1, 10):
        text = f"{abs(single):.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == abs(single):
            break
    mantissa, exponent_text = text.split("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    exponent = int(exponent_text)
    sign = "-" if negative else ""
    if exponent < -4 or exponent >= 6:
        rest = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{rest}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    point = exponent + 1
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _json_key(value: Any) -> str:
    """sigs.k8s.io/yaml's map key conversion; other key types are refused like helm does."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value > _INT64_MAX:
            raise ValueError(f"unsupported map key of type uint64: {value}")
        return str(value)
    if isinstance(value, float):
        text = _float32_g(value)
        return {"+Inf": ".inf", "-Inf": "-.inf", "NaN": ".nan"}.get(text, text)
    raise ValueError("unsupported map key of type <nil>: a key cannot be null (`~`, `null` or empty)")


def _json_value(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            shown = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
            raise ValueError(
                f"{shown} is not a number JSON can hold: helm refuses it (json: unsupported value: {shown}); "
                "quote it to pass a string"
            )
        return json_number(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return json_number(value)
    return value


# -- decoding: go-yaml v2's decoder with its alias accounting, then the JSON round trip --------------

_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000


def allowed_alias_ratio(decodes: int) -> float:
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * ((decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW))


def _is_merge(node: Node) -> bool:
    return node.kind == SCALAR and node.value == "<<" and (node.implicit or node.tag == _MERGE)


_VISIT, _SEQ, _MAP, _MERGE_SEQ, _ALIAS_EXIT = range(5)
_Chain = tuple[Any, str] | None  # a key path as (parent, name): O(1) per level, built into a tuple on error


def _materialize(chain: _Chain) -> Path_:
    names: list[str] = []
    while chain is not None:
        chain, name = chain
        names.append(name)
    return tuple(reversed(names))


class _Decoder:
    """go-yaml v2's decoder into interface{} with sigs.k8s.io/yaml's conversion, without recursion.

    Every decode step is counted in go-yaml's order (a node, its alias, an alias's target, a merged
    mapping), so excessive aliasing is detected at the same point, before anything is expanded.
    """

    def __init__(self) -> None:
        self.decodes = 0
        self.aliases = 0
        self.alias_depth = 0
        self.active: set[int] = set()

    def count(self, node: Node, path: _Chain) -> None:
        self.decodes += 1
        if self.alias_depth:
            self.aliases += 1
        if (
            self.aliases > 100
            and self.decodes > 1000
            and self.aliases / self.decodes > allowed_alias_ratio(self.decodes)
        ):
            raise _DecodeError(
                "document contains excessive aliasing (helm's limit: aliases may expand to at most "
                f"{allowed_alias_ratio(self.decodes):.0%} of the decoded nodes)",
                node.line,
                _materialize(path),
            )

    def enter_alias(self, node: Node, path: _Chain) -> Node:
        if id(node) in self.active:
            raise _DecodeError(f"anchor '{node.value}' value contains itself", node.line, _materialize(path))
        self.active.add(id(node))
        self.alias_depth += 1
        assert node.target is not None
        return node.target

    def exit_alias(self, node: Node) -> None:
        self.active.discard(id(node))
        self.alias_depth -= 1

    def key(self, node: Node, path: _Chain) -> str:
        self.count(node, path)
        alias = None
        if node.kind == ALIAS:
            alias = node
            node = self.enter_alias(node, path)
            self.count(node, path)
        try:
            if node.kind != SCALAR:
                raise _DecodeError(
                    "invalid map key: a key must be a scalar, not a map or a list", node.line, _materialize(path)
                )
            try:
                return _json_key(_scalar(node))
            except ValueError as error:
                raise _DecodeError(str(error), node.line, _materialize(path)) from None
        finally:
            if alias is not None:
                self.exit_alias(alias)

    def decode(self, document_line: int, root: Node) -> Any:
        holder: list[Any] = []
        self.count(root, None)  # go-yaml unmarshals the document node, then its root
        # tasks: (kind, node, container, index/key, path, depth)
        stack: list[tuple[int, Node, Any, Any, _Chain, int]] = [(_VISIT, root, holder, None, None, 0)]
        while stack:
            task, node, container, slot, path, depth = stack.pop()
            if task == _VISIT:
                self.count(node, path)
                if node.kind == ALIAS:  # the target's own visit counts it, inside the alias
                    target = self.enter_alias(node, path)
                    stack.append((_ALIAS_EXIT, node, None, None, path, depth))
                    stack.append((_VISIT, target, container, slot, path, depth))
                    continue
                if node.kind == SCALAR:
                    try:
                        value = _json_value(_scalar(node))
                    except ValueError as error:
                        raise _DecodeError(str(error), node.line, _materialize(path)) from None
                    _put(container, slot, value)
                    continue
                if depth + 1 > MAX_DEPTH:
                    raise _DecodeError(
                        f"exceeded max depth of {MAX_DEPTH} nested maps and lists", node.line, _materialize(path)
                    )
                if node.kind == SEQUENCE:
                    items: list[Any] = []
                    _put(container, slot, items)
                    stack.append((_SEQ, node, items, 0, path, depth + 1))
                else:
                    mapping: dict[str, Any] = {}
                    _put(container, slot, mapping)
                    stack.append((_MAP, node, mapping, 0, path, depth + 1))
            elif task == _SEQ:
                if slot < len(node.children):
                    stack.append((_SEQ, node, container, slot + 1, path, depth))
                    stack.append((_VISIT, node.children[slot], container, None, (path, str(slot)), depth))
            elif task == _MAP:
                if 2 * slot >= len(node.children):
                    continue
                key_node, value_node = node.children[2 * slot], node.children[2 * slot + 1]
                stack.append((_MAP, node, container, slot + 1, path, depth))
                if _is_merge(key_node):
                    self.merge(value_node, container, path, depth, stack)
                    continue
                key = self.key(key_node, path)
                stack.append((_VISIT, value_node, container, key, (path, key), depth))
            elif task == _MERGE_SEQ:
                if slot < 0:
                    continue
                stack.append((_MERGE_SEQ, node, container, slot - 1, path, depth))
                element = node.children[slot]
                if element.kind == ALIAS:
                    assert element.target is not None
                    if element.target.kind != MAPPING:
                        raise _merge_error(element, path)
                elif element.kind != MAPPING:
                    raise _merge_error(element, path)
                self.merge_mapping(element, container, path, depth, stack)
            else:  # _ALIAS_EXIT
                self.exit_alias(node)
        return holder[0] if holder else None

    def merge(self, value: Node, out: dict[str, Any], path: _Chain, depth: int, stack: list[Any]) -> None:
        if value.kind == MAPPING:
            self.merge_mapping(value, out, path, depth, stack)
        elif value.kind == ALIAS:
            assert value.target is not None
            if value.target.kind != MAPPING:
                raise _merge_error(value, path)
            self.merge_mapping(value, out, path, depth, stack)
        elif value.kind == SEQUENCE:
            # earlier maps take precedence: go-yaml merges them last to first
            stack.append((_MERGE_SEQ, value, out, len(value.children) - 1, path, depth))
        else:
            raise _merge_error(value, path)

    def merge_mapping(self, node: Node, out: dict[str, Any], path: _Chain, depth: int, stack: list[Any]) -> None:
        """Decodes a mapping (or an alias of one) into `out`, like go-yaml's d.unmarshal(n, out)."""
        self.count(node, path)
        if node.kind == ALIAS:
            target = self.enter_alias(node, path)
            stack.append((_ALIAS_EXIT, node, None, None, path, depth))
            self.count(target, path)
            node = target
        stack.append((_MAP, node, out, 0, path, depth))


def _merge_error(node: Node, path: _Chain) -> _DecodeError:
    return _DecodeError("map merge requires map or sequence of maps as the value", node.line, _materialize(path))


def _put(container: Any, slot: Any, value: Any) -> None:
    if isinstance(container, dict):
        container[slot] = value
    else:
        container.append(value)


def decode_document(data: bytes, first_line: int = 0) -> tuple[Any, Node | None]:
    """One document as sigs.k8s.io/yaml gives it to helm, and its node tree (for line lookups)."""
    root = compose(data, first_line)
    if root is None:
        return None, None
    return _Decoder().decode(first_line, root), root


# -- values files -----------------------------------------------------------------------------------


@dataclass
class Loaded:
    """A values file as helm reads it: its map (None when it holds no document) and its documents."""

    data: dict[str, Any] | None
    documents: list[Node] = field(default_factory=list)


def _helm3_documents(data: bytes) -> list[tuple[bytes, int]]:
    return [(data, 0)]


def _helm4_documents(data: bytes, name: str) -> list[tuple[bytes, int]]:
    """helm 4's split of a values file (apimachinery's YAMLReader over bufio lines), with line numbers.

    A line starting with `---` ends a document; anything but a comment after it is an error. A last
    line without a newline whose length is a multiple of 4096 bytes is dropped by helm 4.1 (helm
    issue #32506): tfchart refuses such a file rather than silently differ.
    """
    lines = data.split(b"\n")
    last = lines.pop()  # after the last newline: b"" when the file ends with one
    if last and len(last) % HELM4_LINE_BUFFER == 0:
        raise _DecodeError(
            f"{name}'s last line has no newline and is {len(last)} bytes long (a multiple of 4096): "
            "helm 4.1 silently ignores such a line (helm issue #32506); add a newline at the end of the file",
            len(lines),
        )
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]  # bufio's ReadLine drops \r\n
    if last:
        lines.append(last)  # no newline after it: its \r stays
    chunks: list[tuple[bytes, int]] = []
    buffer: list[bytes] = []
    start = 0
    for number, line in enumerate(lines):
        if line.startswith(b"---"):
            rest = line[3:].decode("utf-8", errors="replace").strip()
            if rest and not rest.startswith("#"):
                raise _DecodeError(f"invalid Yaml document separator: {rest}", number)
            if buffer:
                chunks.append((b"".join(buffer), start))
                buffer = []
            continue
        if not buffer:
            start = number
        buffer.append(line + b"\n")
    if buffer:
        chunks.append((b"".join(buffer), start))
    return chunks


def _decode_documents(chunks: list[tuple[bytes, int]], name: str) -> Loaded:
    merged: dict[str, Any] | None = None
    documents: list[Node] = []
    for chunk, first_line in chunks:
        value, root = decode_document(chunk, first_line)
        if root is not None:
            documents.append(root)
        if value is None:
            continue
        if not isinstance(value, dict):
            kind = "a list" if isinstance(value, list) else f"a {_type_name(value)}"
            raise _DecodeError(
                f"the document is {kind}, but a values file must be a map of keys (key: value)", first_line
            )
        merged = value if merged is None else merge_maps(merged, value)
    return Loaded(merged, documents)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else type(value).__name__


def load_bytes(data: bytes, name: str, helm_major: HelmMajor | None = None) -> Loaded:
    """A values file's bytes as helm reads them; helm_major is asked only where helm 3 and 4 differ.

    helm 3 decodes the first YAML document of the file; helm 4 splits the file into lines (ending
    each with a newline, dropping \r before one) and at `---` lines, and merges every document. For a
    file with no separator that ends with a newline both parse the very same bytes.
    """
    helm3: Loaded | None = None
    helm3_error: _DecodeError | None = None
    try:
        helm3 = _decode_documents(_helm3_documents(data), name)
    except _DecodeError as error:
        helm3_error = error
    helm4: Loaded | None = None
    helm4_error: _DecodeError | None = None
    try:
        chunks = _helm4_documents(data, name)
        if chunks == [(data, 0)] or (not chunks and not data.strip()):
            helm4, helm4_error = helm3, helm3_error  # helm 4 parses the very same bytes
        else:
            helm4 = _decode_documents(chunks, name)
    except _DecodeError as error:
        helm4_error = error
    if helm3 is not None and helm4 is not None:
        same = helm3 is helm4 or strict_equal(helm3.data or {}, helm4.data or {})
    else:
        same = helm3_error is not None and helm4_error is not None
    major = 3 if same else (helm_major() if helm_major is not None else 4)
    failure, loaded = (helm3_error, helm3) if major == 3 else (helm4_error, helm4)
    if failure is not None:
        if not same:
            failure.message += " (helm 3 and helm 4 read this file differently: helm 4 merges every `---` document)"
        raise ValuesFileError(_problem(failure, name))
    assert loaded is not None
    return loaded


def strict_equal(left: Any, right: Any) -> bool:
    """Equality that tells 1, 1.0 and True apart (helm's types differ), without recursion."""
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, dict):
            if a.keys() != b.keys():
                return False
            pending.extend((a[key], b[key]) for key in a)
        elif isinstance(a, list):
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif a != b:
            return False
    return True


def _problem(error: _DecodeError, name: str) -> Problem:
    path = ".".join(part.replace(".", "\\.") for part in error.path) if error.path else "(root)"
    return Problem(path, error.message, file=name, line=None if error.line is None else error.line + 1)


def load_file(path: Path | Source, helm_major: HelmMajor | None = None) -> dict[str, Any] | None:
    """A values file as helm reads it: None when it holds no document (helm reads {}), else a map."""
    source = path if isinstance(path, Source) else Inputs().read(str(path))
    return load_bytes(source.data, source.name, helm_major).data


# -- line lookups -----------------------------------------------------------------------------------


def _key_text(node: Node) -> str | None:
    if node.kind == ALIAS and node.target is not None:
        node = node.target
    if node.kind != SCALAR:
        return None
    try:
        return _json_key(_scalar(node))
    except ValueError:
        return None


def line_in(root: Node, path: Path_) -> int | None:
    """1-based line where the document sets `path` (or a prefix of it to a non-map value), else None."""
    node = root
    line: int | None = node.line + 1
    for key in path:
        while node.kind == ALIAS and node.target is not None:
            node = node.target
        if node.kind == MAPPING:
            found = None
            for index in range(len(node.children) - 2, -1, -2):  # the last occurrence wins
                if _key_text(node.children[index]) == key:
                    found = index
                    break
            if found is None:
                return None
            line = node.children[found].line + 1
            node = node.children[found + 1]
        elif node.kind == SEQUENCE and key.isdigit() and int(key) < len(node.children):
            node = node.children[int(key)]
            line = node.line + 1
        else:
            return line  # the file sets a scalar or list where the path continues: it set it all
    return line


def line_of(file: Path, path: Path_) -> int | None:
    """1-based line where `file` sets `path`, read from disk (the validate report has its own copy)."""
    try:
        loaded = load_bytes(file.read_bytes(), str(file))
    except (OSError, ValuesFileError):
        return None
    for root in reversed(loaded.documents):
        line = line_in(root, path)
        if line is not None:
            return line
    return None

def merge_maps(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """helm's mergeMaps for user files: maps merge recursively, anything else replaces (no recursion here)."""
    out = dict(base)
    pending = [(out, override)]
    while pending:
        target, source = pending.pop()
        for key, value in source.items():
            current = target.get(key)
            if isinstance(value, dict) and isinstance(current, dict):
                merged = dict(current)
                target[key] = merged
                pending.append((merged, value))
            else:
                target[key] = value
    return out
