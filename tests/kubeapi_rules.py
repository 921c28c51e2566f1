"""What the API server's validation refuses in an update, for tests/kubeapi.py: 422 Invalid with causes.

An update (PATCH or PUT, dryRun=All included: validation runs before the dry run stops) is checked against the
object as stored by the rule of its resource in UPDATE_RULES; each rule returns the causes (`reason`, `message`,
`field`) of what kube-apiserver v1.36.2 refuses, in its order. Add a resource's rule here (an upgrade guard that
asks for a dry run relies on them).

Only these rules run: any other update is accepted as it is (the fake validates no schema, no required field, no
quantity), which is a gap to remember when a test expects a 422 for anything else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Cause = dict[str, str]
# StatefulSet spec fields an update may change (apps/validation ValidateStatefulSetUpdate)
STATEFULSET_MUTABLE = ("replicas", "ordinals", "template", "updateStrategy", "revisionHistoryLimit",
                       "persistentVolumeClaimRetentionPolicy", "minReadySeconds")  # fmt: skip
STATEFULSET_FORBIDDEN = ("Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', "
                         "'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy'"
                         " and 'minReadySeconds' are forbidden")  # fmt: skip
# Job spec fields fixed once created (batch/validation ValidateJobSpecUpdate; completions may only change with
# parallelism in an elastic Indexed Job, which the chart never renders)
JOB_IMMUTABLE = ("selector", "template", "completions", "completionMode", "podFailurePolicy", "managedBy")


def go_value(value: Any) -> str:
    """A value as the API server prints it in a field error: JSON, compact."""
    return json.dumps(value, separators=(",", ":"))


def immutable(field: str, value: Any) -> Cause:
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {go_value(value)}: field is immutable",
            "field": field}  # fmt: skip


def job_update(before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    old, new = before.get("spec") or {}, after.get("spec") or {}
    return [immutable(f"spec.{key}", new.get(key)) for key in JOB_IMMUTABLE if old.get(key) != new.get(key)]


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        held = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[operator]  # fmt: skip
        if not held:
            return False
    return True


def stateful_set_update(before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    old, new = before.get("spec") or {}, after.get("spec") or {}
    causes = []
    labels = ((new.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector_matches(new.get("selector") or {}, labels):
        causes.append({"reason": "FieldValueInvalid", "field": "spec.template.metadata.labels",
                       "message": f"Invalid value: {go_value(labels)}: `selector` does not match template `labels`"})
    fixed = set(old) | set(new)
    if any(old.get(key) != new.get(key) for key in fixed - set(STATEFULSET_MUTABLE)):
        causes.append({"reason": "FieldValueForbidden", "message": STATEFULSET_FORBIDDEN, "field": "spec"})
    return causes


def deployment_update(before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    old, new = (before.get("spec") or {}).get("selector"), (after.get("spec") or {}).get("selector")
    return [immutable("spec.selector", new)] if old != new else []


UPDATE_RULES: dict[str, Callable[[dict[str, Any], dict[str, Any]], list[Cause]]] = {
    "jobs": job_update,
    "statefulsets": stateful_set_update,
    "deployments": deployment_update,
}


def update_causes(resource: str, before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    """Why the API server refuses to update `before` (as stored) to `after`; [] when it accepts it."""
    rule = UPDATE_RULES.get(resource)
    return rule(before, after) if rule else []
