"""A check's verdict, and what the checks share: the cluster's schedulable nodes (listed once), and a
read that RBAC forbids turning into one `could not check` warning instead of failing the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.objects import condition_true
from tfchart.manifests import quantity

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # ok | warn | fail
    message: str
    hint: str = ""


def schedulable_nodes(api: KubeApi) -> Callable[[], list[Any]]:
    """The schedulable nodes, listed on first use (once, however many checks ask)."""
    return cache(lambda: [node for node in api.list_objects("Node") if schedulable(node)])


def schedulable(node: Any) -> bool:
    return not (node.spec and node.spec.unschedulable) and condition_true(node, "Ready")


def allocatable(node: Any, resource: str) -> Decimal:
    value = ((node.status.allocatable if node.status else None) or {}).get(resource)
    return quantity.parse(value) if value is not None else Decimal(0)


def guarded(name: str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """The check's findings; a read that RBAC forbids becomes one `could not check` warning."""
    try:
        return check()
    except AccessDenied as error:
        return [Finding(name, WARN, f"could not check: {error.message}", error.hint)]
