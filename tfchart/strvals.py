"""helm's `--set` syntax, ported from helm's pkg/strvals parser so that tfchart merges exactly as helm.

Supports nested keys (`a.b=c`), lists (`a={x,y}`), indexes (`a[0].b=c`, `a[1][0]=x`), escapes
(`a\\.b=c` for a literal dot, `a=x\\,y` for a literal comma), several assignments per flag
(`a=1,b=2`) and helm's typing: true/false/null (any case), 64-bit integers without leading zeros;
everything else stays a string (`--set-string` keeps all values strings).
"""

from __future__ import annotations

from typing import Any

from tfchart.errors import UsageError

MAX_INDEX = 65536
MAX_NESTING = 30
_INT64 = (-(2**63), 2**63 - 1)


class _EOF(Exception):
    pass


class _NotList(Exception):
    pass


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def read(self) -> str:
        if self.pos >= len(self.text):
            raise _EOF
        char = self.text[self.pos]
        self.pos += 1
        return char

    def unread(self) -> None:
        self.pos -= 1

    def until(self, stop: set[str]) -> tuple[str, str | None]:
        """Runes up to a stop rune (returned), honouring backslash escapes; last is None at the end."""
        out: list[str] = []
        while True:
            try:
                char = self.read()
            except _EOF:
                return "".join(out), None
            if char in stop:
                return "".join(out), char
            if char == "\\":
                try:
                    out.append(self.read())
                except _EOF:
                    return "".join(out), None
            else:
                out.append(char)


def typed(value: str, as_string: bool) -> Any:
    if as_string:
        return value
    lowered = value.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    if lowered == "null":
        return None
    if value == "0":
        return 0
    if value and value[0] != "0":
        try:
            number = int(value, 10)
        except ValueError:
            return value
        if _INT64[0] <= number <= _INT64[1] and value.lstrip("+-").isdigit():
            return number
    return value


class _Parser:
    def __init__(self, text: str, data: dict[str, Any], as_string: bool) -> None:
        self.scanner = _Scanner(text)
        self.data = data
        self.as_string = as_string

    def parse(self) -> None:
        while True:
            try:
                self.key(self.data, 0)
            except _EOF:
                return

    def key(self, data: dict[str, Any], level: int) -> None:
        key, last = self.scanner.until({"=", "[", ",", "."})
        if last is None:
            if not key:
                raise _EOF
            raise UsageError(f'key "{key}" has no value')
        if last == "[":
            index = self.key_index()
            current = data.get(key)
            if current is None:
                current = []
            if not isinstance(current, list):
                raise UsageError(f'key "{key}" is not a list (it is {type(current).__name__})')
            data[key] = current
            self.list_item(current, index, level)
            return
        if last == "=":
            try:
                data[key] = self.value_list()
            except _EOF:
                data[key] = ""
                raise
            except _NotList:
                text, at_end = self.value()
                data[key] = typed(text, self.as_string)
                if at_end:
                    raise _EOF from None
            return
        if last == ",":
            data[key] = ""
            raise UsageError(f'key "{key}" has no value (cannot end with ,)')
        # last == "."
        if level + 1 > MAX_NESTING:
            raise UsageError(f"value name nested level is greater than maximum supported nested level of {MAX_NESTING}")
        inner = data.get(key)
        if inner is None:
            inner = {}
        if not isinstance(inner, dict):
            raise UsageError(f'key "{key}" is not a map (it is {type(inner).__name__}): cannot set "{key}.<child>"')
        try:
            self.key(inner, level + 1)
        except _EOF:
            if inner:
                data[key] = inner
            raise
        if not inner:
            raise UsageError(f'key map "{key}" has no value')
        data[key] = inner

    def key_index(self) -> int:
        text, last = self.scanner.until({"]"})
        if last is None:
            raise UsageError("error parsing index: missing ']'")
        try:
            index = int(text)
        except ValueError:
            raise UsageError(f'error parsing index: "{text}" is not a number') from None
        if index < 0:
            raise UsageError(f"negative {index} index not allowed")
        if index > MAX_INDEX:
            raise UsageError(f"index of {index} is greater than maximum supported index of {MAX_INDEX}")
        return index

    def list_item(self, items: list[Any], index: int, level: int) -> None:
        """Sets items[index] (in place, growing the list with nulls) from what follows `]`."""
        rest, last = self.scanner.until({"[", ".", "="})
        if rest:
            raise UsageError(f'unexpected data at end of array index: "{rest}"')
        if last is None:
            raise _EOF
        if last == "=":
            try:
                set_index(items, index, self.value_list())
            except _EOF:
                set_index(items, index, "")
                raise
            except _NotList:
                text, at_end = self.value()
                set_index(items, index, typed(text, self.as_string))
                if at_end:
                    raise _EOF from None
            return
        if last == "[":
            next_index = self.key_index()
            nested = items[index] if index < len(items) and items[index] is not None else []
            if not isinstance(nested, list):
                raise UsageError(f"index {index} is not a list")
            set_index(items, index, nested)
            self.list_item(nested, next_index, level)
            return
        inner = items[index] if index < len(items) and isinstance(items[index], dict) else {}
        set_index(items, index, inner)
        self.key(inner, level)

    def value(self) -> tuple[str, bool]:
        text, last = self.scanner.until({","})
        return text, last is None

    def value_list(self) -> list[Any]:
        char = self.scanner.read()  # raises _EOF for `key=` at the very end
        if char != "{":
            self.scanner.unread()
            raise _NotList
        items: list[Any] = []
        while True:
            text, last = self.scanner.until({",", "}"})
            if last is None:
                raise UsageError("list must terminate with '}'")
            if last == "}":
                try:
                    if self.scanner.read() != ",":
                        self.scanner.unread()
                except _EOF:
                    pass
                items.append(typed(text, self.as_string))
                return items
            items.append(typed(text, self.as_string))


def set_index(items: list[Any], index: int, value: Any) -> None:
    if index >= len(items):
        items.extend([None] * (index + 1 - len(items)))
    items[index] = value


def parse_into(assignment: str, data: dict[str, Any], as_string: bool = False) -> None:
    """Applies one `--set` argument to `data` in place, as helm's strvals.ParseInto does."""
    try:
        _Parser(assignment, data, as_string).parse()
    except UsageError as error:
        raise UsageError(
            f"failed parsing --set data {assignment!r}: {error.message}",
            "see `helm install --help` for the --set syntax",
        ) from None
