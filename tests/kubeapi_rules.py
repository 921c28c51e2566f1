"""What the API server refuses in an update, for tests/kubeapi.py: 422 Invalid with causes, or 403 from admission.

An update (PATCH or PUT, dryRun=All included: validation and admission run before the dry run stops) is checked
against the object as stored by the rule of its resource in UPDATE_RULES; each rule returns the causes (`reason`,
`message`, `field`) of what kube-apiserver v1.36.2 refuses, in its order (a JobSet's: its CRD's CEL rules). Then
ADMISSION_RULES play the admission that runs after validation: the PersistentVolumeClaimResize plugin and JobSet's
validating webhook, each a 403 message. `tfchart upgrade`'s guard asks for such a dry run and reports these answers.

Only these rules run: any other update is accepted as it is (the fake validates no schema, no required field), which
is a gap to remember when a test expects a 422 for anything else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from tests.chartlib import selects

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


def stateful_set_update(before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    old, new = before.get("spec") or {}, after.get("spec") or {}
    causes = []
    labels = ((new.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selects(new.get("selector") or {}, labels):
        causes.append({"reason": "FieldValueInvalid", "field": "spec.template.metadata.labels",
                       "message": f"Invalid value: {go_value(labels)}: `selector` does not match template `labels`"})
    fixed = set(old) | set(new)
    if any(old.get(key) != new.get(key) for key in fixed - set(STATEFULSET_MUTABLE)):
        causes.append({"reason": "FieldValueForbidden", "message": STATEFULSET_FORBIDDEN, "field": "spec"})
    return causes


def deployment_update(before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    old, new = (before.get("spec") or {}).get("selector"), (after.get("spec") or {}).get("selector")
    return [immutable("spec.selector", new)] if old != new else []


def storage(spec: dict[str, Any]) -> Any:
    """A claim's requested storage as a number (the API server compares quantities by value), or None."""
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    return None if size is None else parse_quantity(size)


CLAIM_IMMUTABLE = ("Forbidden: spec is immutable after creation except resources.requests and "
                   "volumeAttributesClassName for bound claims")


def claim_update(before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    """core/validation ValidatePersistentVolumeClaimUpdate: a bound claim's requests.storage may change (not below
    status.capacity: RecoverVolumeExpansionFailure); a claim without a class may get one
    (RetroactiveDefaultStorageClass).
    """
    old, new = before.get("spec") or {}, after.get("spec") or {}
    bound = (before.get("status") or {}).get("phase") == "Bound"

    def fixed(spec: dict[str, Any]) -> dict[str, Any]:
        spec = json.loads(json.dumps(spec))
        requests = (spec.get("resources") or {}).get("requests") or {}
        if "storage" in requests:
            requests["storage"] = None if bound else storage(spec)
        if old.get("storageClassName") is None and new.get("storageClassName"):
            spec.pop("storageClassName", None)
        spec.pop("volumeAttributesClassName", None)
        return spec

    causes = []
    if fixed(old) != fixed(new):
        causes.append({"reason": "FieldValueForbidden", "message": CLAIM_IMMUTABLE, "field": "spec"})
    capacity = ((before.get("status") or {}).get("capacity") or {}).get("storage")
    smaller = storage(new) is not None and storage(old) is not None and storage(new) < storage(old)
    if smaller and capacity is not None and storage(new) <= parse_quantity(capacity):
        causes.append({"reason": "FieldValueForbidden", "field": "spec.resources.requests.storage",
                       "message": "Forbidden: field can not be less than status.capacity"})  # fmt: skip
    return causes


# JobSet v0.12.0's CRD (x-kubernetes-validations: self == oldSelf) keeps these spec fields
JOBSET_CEL_IMMUTABLE = ("successPolicy", "failurePolicy", "startupPolicy", "network", "volumeClaimPolicies")


def jobset_update(before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    old, new = before.get("spec") or {}, after.get("spec") or {}
    return [{"reason": "FieldValueInvalid", "message": 'Invalid value: "object": Value is immutable',
             "field": f"spec.{key}"} for key in JOBSET_CEL_IMMUTABLE if old.get(key) != new.get(key)]  # fmt: skip


UPDATE_RULES: dict[str, Callable[[dict[str, Any], dict[str, Any]], list[Cause]]] = {
    "jobs": job_update,
    "statefulsets": stateful_set_update,
    "deployments": deployment_update,
    "persistentvolumeclaims": claim_update,
    "jobsets": jobset_update,
}
Objects = dict[tuple[str, str | None, str], dict[str, Any]]


def claim_resize(before: dict[str, Any], after: dict[str, Any], objects: Objects) -> str | None:
    """The PersistentVolumeClaimResize admission plugin: a claim grows only where its StorageClass allows expansion."""
    old, new = storage(before.get("spec") or {}), storage(after.get("spec") or {})
    if old is None or new is None or new <= old:
        return None
    name = (after.get("spec") or {}).get("storageClassName") or ""
    if (objects.get(("storageclasses", None, name)) or {}).get("allowVolumeExpansion") is True:
        return None
    return (f'persistentvolumeclaims "{before["metadata"]["name"]}" is forbidden: only dynamically provisioned pvc can '
            "be resized and the storageclass that provisions the pvc must support resize")  # fmt: skip


# What JobSet's webhook lets change of a suspended JobSet's pod templates (for Kueue): metadata and scheduling.
JOBSET_SUSPENDED_MUTABLE = (("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector"),
                            ("spec", "tolerations"), ("spec", "schedulingGates"))  # fmt: skip


def jobset_webhook(before: dict[str, Any], after: dict[str, Any], objects: Objects) -> str | None:
    """JobSet v0.12.0's validating webhook (pkg/webhooks/jobset_webhook.go ValidateUpdate): replicatedJobs and
    managedBy are immutable, except what Kueue may change of a suspended JobSet's pod templates."""
    old, new = (json.loads(json.dumps(document.get("spec") or {})) for document in (before, after))
    if old.get("suspend") and len(old.get("replicatedJobs") or []) == len(new.get("replicatedJobs") or []):
        for was, rjob in zip(old.get("replicatedJobs") or [], new.get("replicatedJobs") or [], strict=True):
            template, kept = rjob["template"]["spec"]["template"], was["template"]["spec"]["template"]
            for part, key in JOBSET_SUSPENDED_MUTABLE:
                template.setdefault(part, {})[key] = (kept.get(part) or {}).get(key)
                kept.setdefault(part, {})[key] = (kept.get(part) or {}).get(key)
    errors = [f"spec.{key}: Invalid value: {go_value(new.get(key))}: field is immutable"
              for key in ("replicatedJobs", "managedBy") if new.get(key) != old.get(key)]  # fmt: skip
    return f'admission webhook "vjobset.kb.io" denied the request: {", ".join(errors)}' if errors else None


ADMISSION_RULES: dict[str, Callable[[dict[str, Any], dict[str, Any], Objects], str | None]] = {
    "persistentvolumeclaims": claim_resize,
    "jobsets": jobset_webhook,
}


def update_causes(resource: str, before: dict[str, Any], after: dict[str, Any]) -> list[Cause]:
    """Why the API server refuses to update `before` (as stored) to `after`; [] when it accepts it."""
    rule = UPDATE_RULES.get(resource)
    return rule(before, after) if rule else []


def admission_refusal(resource: str, before: dict[str, Any], after: dict[str, Any], objects: Objects) -> str | None:
    """The 403 message of an admission plugin or webhook that refuses an update validation let pass; None: admitted."""
    rule = ADMISSION_RULES.get(resource)
    return rule(before, after, objects) if rule else None
