"""Which model versions TensorFlow Serving is configured to load, read back from the release.

The chart renders TF Serving's model config (`models.config`, a `ModelServerConfig` in protobuf text
format) into the ConfigMap `<fullname>-serving`; the server re-reads it, so the ConfigMap is what
Serving loads now (give or take the kubelet's refresh of the mounted file and the poll interval).
`tfchart status` reads it back, applies its `model_version_policy` to the versions the chief
reported in status.json (`exported_versions`) and shows which versions Serving loads.

The reader is a small parser of the protobuf text format (messages, scalar fields, comments), not
the `tensorflow-serving-api` protos: tfchart does not depend on TensorFlow. A hand-edited ConfigMap
that is not text format is reported as such, never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

MODELS_CONFIG_KEY = "models.config"

#: TF Serving's default when a model has no model_version_policy: the newest version only.
DEFAULT_LATEST = 1

_TOKEN = re.compile(r'\s+|#[^\n]*|(?P<tok>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[{}:;,<>\[\]]|[^\s{}:;,<>\[\]"\']+)')


class ConfigSyntaxError(ValueError):
    """The text is not protobuf text format this reader understands."""


Message = list[tuple[str, "str | Message"]]


def parse_text_proto(text: str) -> Message:
    """A text-format message as (field, value) pairs in order; a value is a scalar string or a message."""
    tokens = _tokens(text)
    message, position = _message(tokens, 0, closing=None, depth=0)
    if position != len(tokens):
        raise ConfigSyntaxError(f"unexpected {tokens[position]!r}")
    return message


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:  # only an unterminated quote gets here
            raise ConfigSyntaxError(f"unterminated string at character {position}")
        if match["tok"] is not None:
            tokens.append(match["tok"])
        position = match.end()
    return tokens


#: Deeper nesting than any model config has; refused rather than recursed into.
MAX_DEPTH = 64


def _message(tokens: list[str], position: int, closing: str | None, depth: int) -> tuple[Message, int]:
    if depth > MAX_DEPTH:
        raise ConfigSyntaxError(f"messages nested more than {MAX_DEPTH} deep")
    fields: Message = []
    while position < len(tokens):
        token = tokens[position]
        if token == closing:
            return fields, position + 1
        if token in ";,":
            position += 1
            continue
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\[\]/]*", token):
            raise ConfigSyntaxError(f"expected a field name, found {token!r}")
        position += 1
        after = tokens[position] if position < len(tokens) else ""
        if after == ":":
            position += 1
            after = tokens[position] if position < len(tokens) else ""
        if after in ("{", "<"):
            nested, position = _message(tokens, position + 1, "}" if after == "{" else ">", depth + 1)
            fields.append((token, nested))
        elif after == "[":  # a list of scalars or of messages: the field repeated
            position += 1
            while position < len(tokens) and tokens[position] != "]":
                item = tokens[position]
                if item in ("{", "<"):
                    nested, position = _message(tokens, position + 1, "}" if item == "{" else ">", depth + 1)
                    fields.append((token, nested))
                    continue
                if item in "}>:;[":
                    raise ConfigSyntaxError(f"unexpected {item!r} in the list of {token!r}")
                if item != ",":
                    fields.append((token, _scalar(item)))
                position += 1
            if position >= len(tokens):
                raise ConfigSyntaxError(f"missing ']' after the list of {token!r}")
            position += 1
        elif after and after not in "{}<>:;,[]":
            fields.append((token, _scalar(after)))
            position += 1
        else:
            raise ConfigSyntaxError(f"field {token!r} has no value")
    if closing is not None:
        raise ConfigSyntaxError(f"missing {closing!r}")
    return fields, position


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


def _scalar(token: str) -> str:
    if token[:1] in "\"'":
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[0]), token[1:-1])
    return token


def _all(message: Message, name: str) -> list[str | Message]:
    return [value for key, value in message if key == name]


def _messages(message: Message, name: str) -> list[Message]:
    return [value for value in _all(message, name) if isinstance(value, list)]


@dataclass(frozen=True)
class VersionPolicy:
    """A model's model_version_policy: `latest` N, `specific` versions, or `all`."""

    kind: str  # latest | specific | all
    latest: int = DEFAULT_LATEST
    versions: tuple[int, ...] = ()

    def describe(self) -> str:
        if self.kind == "all":
            return "all versions"
        if self.kind == "specific":
            return "specific: " + ", ".join(str(v) for v in self.versions)
        return f"latest {self.serves}"

    def selects(self, exported: Sequence[int]) -> list[int]:
        """The exported versions this policy loads (TF Serving's rule), ascending."""
        ordered = sorted(set(exported))
        if self.kind == "all":
            return ordered
        if self.kind == "specific":
            return [v for v in ordered if v in self.versions]
        return ordered[-self.serves :]

    @property
    def serves(self) -> int:
        """How many of the newest versions `latest` loads: TF Serving reads num_versions 0 as 1."""
        return max(self.latest, 1)


@dataclass(frozen=True)
class ServedModel:
    name: str
    base_path: str
    policy: VersionPolicy


def served_models(text: str) -> list[ServedModel]:
    """The models of a ModelServerConfig text (model_config_list.config entries)."""
    root = parse_text_proto(text)
    models = []
    for config_list in _messages(root, "model_config_list"):
        for config in _messages(config_list, "config"):
            name = next((v for v in _all(config, "name") if isinstance(v, str)), "")
            base = next((v for v in _all(config, "base_path") if isinstance(v, str)), "")
            models.append(ServedModel(name, base, _policy(config)))
    return models


def _policy(config: Message) -> VersionPolicy:
    policies = _messages(config, "model_version_policy")
    if not policies:
        return VersionPolicy("latest")
    policy = policies[-1]
    for kind in ("specific", "all", "latest"):
        chosen = _messages(policy, kind)
        if not chosen:
            continue
        if kind == "specific":
            return VersionPolicy(kind, versions=tuple(_integers(chosen[-1], "versions")))
        if kind == "latest":
            counts = _integers(chosen[-1], "num_versions")
            return VersionPolicy(kind, latest=counts[-1] if counts else 0)
        return VersionPolicy(kind)
    return VersionPolicy("latest")


def _integers(message: Message, name: str) -> list[int]:
    numbers = []
    for value in _all(message, name):
        if not isinstance(value, str) or not re.fullmatch(r"[+-]?\d+", value):
            raise ConfigSyntaxError(f"{name} must be an integer, found {value!r}")
        numbers.append(int(value))
    return numbers


@dataclass(frozen=True)
class ServingVersions:
    """What `tfchart status` shows about model versions: exported, configured, loaded."""

    config_map: str
    model: str
    policy: str  # VersionPolicy.describe(), or "" when the config could not be read
    exported: list[int] | None  # None: the chief's status did not say (log gone, older trainer)
    loaded: list[int] | None
    missing: list[int] = field(default_factory=list)  # pinned (specific) but not exported
    note: str = ""


def serving_versions(config_map: str, text: str | None, model: str, exported: list[int] | None) -> ServingVersions:
    """Apply the ConfigMap's policy for `model` (the first model when the name is unknown) to `exported`."""
    if text is None:
        return ServingVersions(config_map, model, "", exported, None, note=f"{config_map} has no {MODELS_CONFIG_KEY}")
    try:
        models = served_models(text)
    except ConfigSyntaxError as error:
        return ServingVersions(config_map, model, "", exported, None,
                               note=f"{config_map}'s {MODELS_CONFIG_KEY} is not protobuf text format: {error}")
    chosen = next((m for m in models if m.name == model), models[0] if models else None)
    if chosen is None:
        return ServingVersions(config_map, model, "", exported, None,
                               note=f"{config_map}'s {MODELS_CONFIG_KEY} configures no model")
    policy = chosen.policy
    missing = sorted(set(policy.versions) - set(exported or ())) if policy.kind == "specific" else []
    if exported is None:
        unknown = "the exported versions are unknown (no tfd-status line in the chief's log lists them)"
        return ServingVersions(config_map, chosen.name, policy.describe(), None, None, note=unknown)
    return ServingVersions(config_map, chosen.name, policy.describe(), exported, policy.selects(exported), missing)
