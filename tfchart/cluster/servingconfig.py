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
from typing import Any, NamedTuple

from tfdcontract import MODEL_VERSION_POLICY_ANNOTATION


class VersionPolicy(NamedTuple):
    """A model's model_version_policy: `latest` N, `specific` versions, or `all`."""

    kind: str  # latest | specific | all
    latest: int = 1
    versions: tuple[int, ...] = ()

    def selects(self, exported: Sequence[int]) -> list[int]:
        """The exported versions this policy loads (TF Serving's rule: num_versions 0 loads one), ascending."""
        ordered = sorted(set(exported))
        if self.kind == "specific":
            return [v for v in ordered if v in self.versions]
        return ordered if self.kind == "all" else ordered[-max(self.latest, 1) :]


def read_policy(text: str) -> tuple[str, VersionPolicy]:
    """The model name and policy of the annotation's JSON (ValueError when it is not the chart's)."""
    document = json.loads(text)
    kind, latest, versions = document["type"], document.get("latest", 1), document.get("versions") or []
    if kind not in ("latest", "specific", "all") or not all(isinstance(v, int) for v in [latest, *versions]):
        raise ValueError(f"unknown policy {document!r}")
    return str(document.get("model", "")), VersionPolicy(kind, int(latest), tuple(int(v) for v in versions))


def serving_versions(config_map: str, text: str | None, exported: list[int] | None) -> dict[str, Any]:
    """What `tfchart status` shows of model versions: the policy recorded on Serving's ConfigMap (its annotation's
    `text`; `policy` "" when it cannot be read) applied to `exported` (None: the chief's status did not say: its
    log gone, an older trainer); `missing`: pinned (specific) but not exported; a `note` says what is unknown."""
    versions = {"config_map": config_map, "model": "", "policy": "", "exported": exported, "loaded": None,
                "missing": [], "note": ""}  # fmt: skip
    if text is None:
        return versions | {"note": f"{config_map} has no {MODEL_VERSION_POLICY_ANNOTATION} annotation (made by an "
                                   "older chart)"}  # fmt: skip
    try:
        model, policy = read_policy(text)
    except (ValueError, KeyError, TypeError) as error:
        return versions | {"note": f"{config_map}'s {MODEL_VERSION_POLICY_ANNOTATION} annotation cannot be read: "
                                   f"{error}"}  # fmt: skip
    described = {"all": "all versions", "specific": "specific: " + ", ".join(map(str, policy.versions))}
    versions |= {"model": model, "policy": described.get(policy.kind, f"latest {max(policy.latest, 1)}")}
    if exported is None:
        versions["note"] = "the exported versions are unknown (no tfd-status line in the chief's log lists them)"
        return versions
    missing = sorted(set(policy.versions) - set(exported)) if policy.kind == "specific" else []
    return versions | {"loaded": policy.selects(exported), "missing": missing}
