"""A check's verdict, and what the checks share: the cluster's schedulable nodes (listed once), and a
read that RBAC forbids turning into one `could not check` warning instead of failing the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tfchart.errors import KubernetesError
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


class Nodes:
    """The schedulable nodes, listed on first use and shared by the checks that need them."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._nodes: list[Any] | None = None

    def __call__(self) -> list[Any]:
        if self._nodes is None:
            self._nodes = [node for node in self._api.list_nodes() if schedulable(node)]
        return self._nodes


def schedulable(node: Any) -> bool:
    if node.spec and node.spec.unschedulable:
        return False
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def allocatable(node: Any, resource: str) -> Decimal:
    value = ((node.status.allocatable if node.status else None) or {}).get(resource)
    return quantity.parse(value) if value is not None else Decimal(0)


def name_of(obj: Any) -> str:
    return str(obj.metadata.name)


def guarded(name: str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """The check's findings; a read that RBAC forbids becomes one `could not check` warning."""
    try:
        return check()
    except KubernetesError as error:
        if not is_access_denied(error):
            raise
        return [Finding(name, WARN, f"could not check: {error.message}", error.hint)]


def is_access_denied(error: KubernetesError) -> bool:
    from tfchart.cluster.kube import AccessDenied

    return isinstance(error, AccessDenied)
