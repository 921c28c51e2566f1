"""Which model versions TensorFlow Serving is configured to load, from the release's values.

The chart renders `serving.modelVersionPolicy` twice on the ConfigMap `<fullname>-serving`: as TF Serving's
model config (`models.config`, protobuf text format, which the server re-reads) and, as the values gave it,
as JSON in the annotation tfdcontract.MODEL_VERSION_POLICY_ANNOTATION. `tfchart status` reads the annotation
(tests/chart/test_serving_versions.py holds it equal to the model config as TF Serving's own protos parse it)
and applies the policy to the versions the chief reported (`exported_versions`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from tfdcontract import MODEL_VERSION_POLICY_ANNOTATION


@dataclass(frozen=True)
class VersionPolicy:
    """A model's model_version_policy: `latest` N, `specific` versions, or `all`."""

    kind: str  # latest | specific | all
    latest: int = 1
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
class ServingVersions:
    """What `tfchart status` shows about model versions: exported, configured, loaded."""

    config_map: str
    model: str
    policy: str  # VersionPolicy.describe(), or "" when the config could not be read
    exported: list[int] | None  # None: the chief's status did not say (log gone, older trainer)
    loaded: list[int] | None
    missing: list[int] = field(default_factory=list)  # pinned (specific) but not exported
    note: str = ""


def read_policy(text: str) -> tuple[str, VersionPolicy]:
    """The model name and policy of the annotation's JSON (ValueError when it is not the chart's)."""
    document = json.loads(text)
    kind, latest, versions = document["type"], document.get("latest", 1), document.get("versions") or []
    if kind not in ("latest", "specific", "all") or not all(isinstance(v, int) for v in [latest, *versions]):
        raise ValueError(f"unknown policy {document!r}")
    return str(document.get("model", "")), VersionPolicy(kind, int(latest), tuple(int(v) for v in versions))


def serving_versions(config_map: str, text: str | None, exported: list[int] | None) -> ServingVersions:
    """Apply the policy recorded on Serving's ConfigMap (its annotation's `text`) to `exported`."""
    if text is None:
        return ServingVersions(config_map, "", "", exported, None, note=f"{config_map} has no "
                               f"{MODEL_VERSION_POLICY_ANNOTATION} annotation (made by an older chart)")  # fmt: skip
    try:
        model, policy = read_policy(text)
    except (ValueError, KeyError, TypeError) as error:
        note = f"{config_map}'s {MODEL_VERSION_POLICY_ANNOTATION} annotation cannot be read: {error}"
        return ServingVersions(config_map, "", "", exported, None, note=note)
    if exported is None:
        unknown = "the exported versions are unknown (no tfd-status line in the chief's log lists them)"
        return ServingVersions(config_map, model, policy.describe(), None, None, note=unknown)
    missing = sorted(set(policy.versions) - set(exported)) if policy.kind == "specific" else []
    return ServingVersions(config_map, model, policy.describe(), exported, policy.selects(exported), missing)
