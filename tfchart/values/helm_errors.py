"""helm's refusal of a render, read back as problems: its schema errors (helm 3 words them in
gojsonschema's style, helm 4 in santhosh-tekuri/jsonschema's tree), the chart's own rules (the
`N problem(s) in values` list of _validate.tpl, each `key: message. Fix: ...`), and a values file or
--set argument helm could not parse. Anything else is not about values and stays helm's error.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import replace

from tfchart.errors import HelmError, Problem
from tfchart.helm.runner import error_text, failure

SCHEMA_HEADER = "values don't meet the specifications of the schema(s)"
RULES_HEADER = re.compile(r"^\S+: \d+ problem\(s\) in values:$", re.MULTILINE)
HELM4_LINE = re.compile(r"^(?P<indent>\s*)- at '(?P<pointer>(?:[^'\\]|\\.)*)': (?P<message>.*)$")
HELM3_LINE = re.compile(r"^- (?P<path>.*?): (?P<message>.*)$")
QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
PATTERN = re.compile(r"(?P<value>'(?:[^'\\]|\\.)*' )?does not match pattern '(?P<pattern>.*)'$", re.IGNORECASE)
PARSE_FILE = re.compile(r"^failed to parse (?P<file>.+?): (?P<error>.*)$", re.DOTALL)
PARSE_SET = re.compile(r"^failed parsing (?P<flag>--set[-a-z]*) data: (?P<error>.*)$", re.DOTALL)
UNKNOWN, REQUIRED = "unknown key", "is required (was it set to null?)"
Node = tuple[str, str, list["Node"]]  # helm 4: (key path, message, the errors under it)


def read(stderr: str, meanings: Mapping[str, str]) -> list[Problem]:
    """The problems of a failed `helm template`; HelmError when helm failed for another reason."""
    text = error_text(stderr)
    if text.startswith(SCHEMA_HEADER):
        lines = text.splitlines()[1:]
        return _helm4(lines, meanings) if any(HELM4_LINE.match(line) for line in lines) else _helm3(lines, meanings)
    if header := RULES_HEADER.search(text):
        return [_rule(line.strip()[2:]) for line in text[header.end() :].splitlines() if line.strip().startswith("- ")]
    if parsed := PARSE_FILE.match(text):
        line = int(found[1]) if (found := re.search(r"\bline (\d+)", parsed["error"])) else None
        return [Problem("(root)", parsed["error"], file=parsed["file"], line=line, kind="file")]
    if parsed := PARSE_SET.match(text):
        return [Problem("(root)", parsed["error"], file=parsed["flag"], kind="set")]
    raise failure(stderr) if text else HelmError("helm template failed without a message")


def _rule(line: str) -> Problem:
    path, _, rest = line.partition(": ")
    message, _, fix = rest.rpartition(". Fix: ")
    return Problem(path, message or rest, None, fix, kind="rule")


def _unquote(text: str) -> str:
    """Text as helm 4 quotes it (Go's %q in single quotes, a ' escaped): Python's escapes are Go's."""
    try:
        return str(ast.literal_eval(f"'{text}'")) if "\\" in text else text
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _under(path: str, key: str) -> str:
    return key if path in ("(root)", "") else f"{path}.{key}"


def _message(message: str, json_escaped: bool, meanings: Mapping[str, str]) -> str:
    """helm's words, a pattern replaced by what it means where the chart's schema says (x-pattern-meanings)."""
    if not (match := PATTERN.search(message)):
        return message
    pattern = _unquote(match["pattern"]) if json_escaped else match["pattern"]
    meaning = meanings.get(pattern)
    if meaning is None and pattern.startswith("^$|") and pattern[3:] in meanings:
        meaning = f"{meanings[pattern[3:]]} (or empty)"
    return f"{match['value'] or ''}is not {meaning}" if meaning else message


def _helm3(lines: list[str], meanings: Mapping[str, str]) -> list[Problem]:
    found: list[Problem] = []
    pending: int | None = None  # a bad map key's problem: helm 3 says why on the next line
    for match in filter(None, map(HELM3_LINE.match, lines)):
        path, message = match["path"], match["message"]
        if pending is not None and path == found[pending].path.rpartition(".")[0]:
            why = _message(message, False, meanings).replace("Does not", "does not")
            found[pending], pending = replace(found[pending], message=f"key {found[pending].key!r} {why}"), None
            continue
        if bad_key := re.match(r'Property name of "(.*)" does not match$', message):
            pending = len(found)
            found.append(Problem(_under(path, bad_key[1]), f"key {bad_key[1]!r} is not allowed", key=bad_key[1]))
        elif message == "Must validate one and only one schema (oneOf)":
            continue  # the failing form's own error follows
        elif extra := re.match(r"Additional property (.*) is not allowed$", message):
            found.append(Problem(_under(path, extra[1]), UNKNOWN, key=extra[1]))
        elif enum := re.match(r".* must be one of the following: (.*)$", message):
            choices = tuple(re.findall(r'"((?:[^"\\]|\\.)*)"', enum[1]))
            found.append(Problem(path, f"must be one of: {', '.join(choices)}", choices=choices))
        elif required := re.match(r"(.*) is required$", message):
            found.append(Problem(_under(path, required[1]), REQUIRED, kind="required"))
        else:
            found.append(Problem(path, _message(message, False, meanings)))
    return found


def _helm4(lines: list[str], meanings: Mapping[str, str]) -> list[Problem]:
    """helm 4's tree of errors (each line indented under its cause) as (path, message, children) nodes, explained."""
    top: Node = ("", "", [])
    stack: list[tuple[int, Node]] = [(-1, top)]
    for match in filter(None, map(HELM4_LINE.match, lines)):
        keys = [key.replace("~1", "/").replace("~0", "~") if "~" in key else key
                for key in _unquote(match["pointer"]).split("/")[1:]]  # fmt: skip
        node: Node = (".".join(keys) or "(root)", match["message"], [])
        while stack[-1][0] >= len(match["indent"]):
            stack.pop()
        stack[-1][1][2].append(node)
        stack.append((len(match["indent"]), node))
    return [problem for root in top[2] for problem in _explain(root, meanings)]


def _explain(node: Node, meanings: Mapping[str, str]) -> list[Problem]:
    path, message, children = node
    names = [_unquote(name) for name in QUOTED.findall(message)] if "'" in message else []
    if message.endswith("validation failed") and children:
        return [problem for child in children for problem in _explain(child, meanings)]
    if message.startswith("invalid propertyName") and names:  # helm 4 loses the map's path: found by name later
        why = "; ".join(_message(child[1], True, meanings) for child in children) or message
        return [Problem("", f"key {why}" if why.startswith("'") else f"key {names[0]!r}: {why}", key=names[0])]
    if message.startswith(("'oneOf' failed", "'anyOf' failed")) and children:
        forms = "; ".join(_message(child[1], True, meanings) for child in children)
        return [Problem(path, f"matches none of its allowed forms: {forms}")]
    if message.startswith(("additional property ", "additional properties ")):
        return [Problem(_under(path, name), UNKNOWN, key=name) for name in names]
    if message.startswith(("missing property ", "missing properties ")):
        return [Problem(_under(path, name), REQUIRED, kind="required") for name in names]
    if message.startswith("value must be one of "):
        return [Problem(path, f"must be one of: {', '.join(names)}", choices=tuple(names))]
    return [Problem(path, _message(message, True, meanings))]
