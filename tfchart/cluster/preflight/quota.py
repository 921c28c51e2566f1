"""quota: every ResourceQuota of the namespace: used + what the release adds, against hard."""

from __future__ import annotations

from decimal import Decimal
from functools import partial
from typing import Any

from tfchart.cluster.objects import name_of
from tfchart.cluster.preflight.plan import FAIL, OK, WARN, Context, Finding, Plan, total
from tfchart.manifests.quantity import parse, shown

finding = partial(Finding, "quota")


def check_quota(context: Context) -> list[Finding]:
    quotas = context.api.list_objects("ResourceQuota", context.namespace)
    if not quotas:
        return [finding(OK, f"no ResourceQuota in namespace {context.namespace}")]
    return [quota_finding(quota, context.planned) for quota in sorted(quotas, key=name_of)]


def release_adds(planned: Plan, key: str) -> Decimal:
    """What the release adds to quota resource `key` (0 where the chart does not affect it)."""
    kind, _, resource = key.partition(".")
    if key in planned.objects:
        return Decimal(planned.objects[key])
    if kind in ("requests", "limits") and resource:
        return total(planned.roles, kind, resource)
    return total(planned.roles, "requests", key) if key in ("cpu", "memory", "ephemeral-storage") else Decimal(0)


def quota_finding(quota: Any, planned: Plan) -> Finding:
    hard = (quota.status.hard if quota.status else None) or (quota.spec.hard if quota.spec else None) or {}
    used = (quota.status.used if quota.status else None) or {}
    over, tight, missing = [], [], []
    for key in sorted(hard):
        if not (adds := release_adds(planned, key)):
            continue
        limit, now = parse(hard[key]), parse(used.get(key, "0"))
        if now + adds > limit:
            over.append(f"{key}: {shown(now)} used + {shown(adds)} > {shown(limit)}")
        elif now + adds > limit * Decimal("0.9"):
            tight.append(f"{key}: {shown(now + adds)} of {shown(limit)} after install")
        kind, _, resource = key.partition(".")  # quota on a compute resource rejects pods that do not set it
        missing += [f"{role.role} pods set no {key} and would be rejected by the quota" for role in planned.roles
                    if kind in ("requests", "limits") and resource in ("cpu", "memory")
                    and resource not in getattr(role, kind)]  # fmt: skip
    name = name_of(quota)
    if over or missing:
        return finding(FAIL, f"ResourceQuota {name} would be exceeded: " + "; ".join(over + missing),
                       f"lower replicas/resources, or ask for more quota (`kubectl describe resourcequota {name}`)")
    if tight:
        return finding(WARN, f"ResourceQuota {name} is almost full: " + "; ".join(tight),
                       "a restart or an upgrade's extra pod may not fit")
    return finding(OK, f"ResourceQuota {name} has room for the release")
