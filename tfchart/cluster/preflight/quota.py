"""quota: every ResourceQuota of the namespace: used + what the release adds, against hard."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tfchart.cluster.objects import name_of
from tfchart.cluster.preflight.findings import FAIL, OK, WARN, Context, Finding
from tfchart.cluster.preflight.plan import Plan, total
from tfchart.manifests.quantity import parse, shown


def check_quota(context: Context) -> list[Finding]:
    quotas = context.api.list_objects("ResourceQuota", context.namespace)
    if not quotas:
        return [Finding("quota", OK, f"no ResourceQuota in namespace {context.namespace}")]
    return [quota_finding(quota, context.planned) for quota in sorted(quotas, key=name_of)]


def release_adds(planned: Plan, key: str) -> Decimal | None:
    """What the release adds to quota resource `key`, or None when the chart does not affect it."""
    if key in planned.objects:
        return Decimal(planned.objects[key])
    if key.startswith("count/"):
        return Decimal(0)
    if key == "requests.storage":
        return planned.claim_size or Decimal(0)
    kind, _, resource = key.partition(".")
    if kind in ("requests", "limits") and resource:
        return total(planned.roles, kind, resource)
    if key in ("cpu", "memory", "ephemeral-storage"):
        return total(planned.roles, "requests", key)
    return None


def quota_finding(quota: Any, planned: Plan) -> Finding:
    hard = (quota.status.hard if quota.status else None) or (quota.spec.hard if quota.spec else None) or {}
    used = (quota.status.used if quota.status else None) or {}
    over, tight, missing = [], [], []
    for key in sorted(hard):
        adds = release_adds(planned, key)
        if adds is None or adds == 0:
            continue
        limit, now = parse(hard[key]), parse(used.get(key, "0"))
        after = now + adds
        if after > limit:
            over.append(f"{key}: {shown(now)} used + {shown(adds)} > {shown(limit)}")
        elif after > limit * Decimal("0.9"):
            tight.append(f"{key}: {shown(after)} of {shown(limit)} after install")
        missing += unset_requests(planned, key)
    name = name_of(quota)
    if over or missing:
        return Finding("quota", FAIL, f"ResourceQuota {name} would be exceeded: " + "; ".join(over + missing),
                       f"lower replicas/resources, or ask for more quota (`kubectl describe resourcequota {name}`)")
    if tight:
        return Finding("quota", WARN, f"ResourceQuota {name} is almost full: " + "; ".join(tight),
                       "a restart or an upgrade's extra pod may not fit")
    return Finding("quota", OK, f"ResourceQuota {name} has room for the release")


def unset_requests(planned: Plan, key: str) -> list[str]:
    """Quota on a compute resource rejects pods that do not set it."""
    kind, _, resource = key.partition(".")
    if kind not in ("requests", "limits") or resource not in ("cpu", "memory"):
        return []
    return [f"{role.role} pods set no {kind}.{resource} and would be rejected by the quota"
            for role in planned.roles if resource not in getattr(role, kind)]
