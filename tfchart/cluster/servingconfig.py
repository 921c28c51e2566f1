"""Which model versions TensorFlow Serving is configured to load, read back from the release.

The chart renders TF Serving's model config (`models.config`, a `ModelServerConfig` in protobuf text
format) into the ConfigMap `<fullname>-serving`, which the server re-reads: it is what Serving loads
now (give or take the kubelet's refresh of the mounted file and the poll interval). `tfchart status`
applies its `model_version_policy` to the versions the chief reported (`exported_versions`).
The reader is a small parser of the protobuf text format, not the `tensorflow-serving-api` protos
(tfchart does not depend on TensorFlow); a ConfigMap that is not text format is reported, never guessed at.
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
CLOSING = {"{": "}", "<": ">"}  # a message is written {...} or <...>


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
        if after in CLOSING:
            nested, position = _message(tokens, position + 1, CLOSING[after], depth + 1)
            fields.append((token, nested))
        elif after == "[":  # a list of scalars or of messages: the field repeated
            position += 1
            while position < len(tokens) and tokens[position] != "]":
                item = tokens[position]
                if item in CLOSING:
                    nested, position = _message(tokens, position + 1, CLOSING[item], depth + 1)
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


def _string(message: Message, name: str) -> str:
    return next((value for value in _all(message, name) if isinstance(value, str)), "")


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
    configs = [config for configs in _messages(parse_text_proto(text), "model_config_list")
               for config in _messages(configs, "config")]
    return [ServedModel(_string(config, "name"), _string(config, "base_path"), _policy(config)) for config in configs]


def _policy(config: Message) -> VersionPolicy:
    """The last model_version_policy; in it, `specific` wins over `all`, which wins over `latest`."""
    policies = _messages(config, "model_version_policy")
    policy = policies[-1] if policies else []
    if specific := _messages(policy, "specific"):
        return VersionPolicy("specific", versions=tuple(_integers(specific[-1], "versions")))
    if _messages(policy, "all"):
        return VersionPolicy("all")
    if latest := _messages(policy, "latest"):
        counts = _integers(latest[-1], "num_versions")
        return VersionPolicy("latest", latest=counts[-1] if counts else 0)
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

    def unread(note: str) -> ServingVersions:
        return ServingVersions(config_map, model, "", exported, None, note=note)

    if text is None:
        return unread(f"{config_map} has no {MODELS_CONFIG_KEY}")
    try:
        models = served_models(text)
    except ConfigSyntaxError as error:
        return unread(f"{config_map}'s {MODELS_CONFIG_KEY} is not protobuf text format: {error}")
    chosen = next((m for m in models if m.name == model), models[0] if models else None)
    if chosen is None:
        return unread(f"{config_map}'s {MODELS_CONFIG_KEY} configures no model")
    policy = chosen.policy
    if exported is None:
        unknown = "the exported versions are unknown (no tfd-status line in the chief's log lists them)"
        return ServingVersions(config_map, chosen.name, policy.describe(), None, None, note=unknown)
    missing = sorted(set(policy.versions) - set(exported)) if policy.kind == "specific" else []
    return ServingVersions(config_map, chosen.name, policy.describe(), exported, policy.selects(exported), missing)
