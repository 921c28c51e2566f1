"""A check's verdict, and what the checks share (Context): the release's plan, the cluster's schedulable nodes
and its API discovery (each read once, however many checks ask), and a read that RBAC forbids turning into one
`could not check` warning instead of failing the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.objects import condition_true
from tfchart.manifests import quantity

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi
    from tfchart.cluster.preflight.plan import Plan

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # ok | warn | fail
    message: str
    hint: str = ""


@dataclass
class Context:
    """What a cluster check reads: the API, the release's plan, its namespace and name; what it read, read once."""

    api: KubeApi
    planned: Plan
    namespace: str
    release: str = ""
    read: dict[tuple[str | None, ...], Any] = field(default_factory=dict)

    @cached_property
    def nodes(self) -> list[Any]:
        """The schedulable nodes, listed on first use."""
        return [node for node in self.api.list_objects("Node") if schedulable(node)]

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves `plural` in group/version (API discovery)."""
        if (group, version) not in self.read:
            self.read[(group, version)] = self.api.served_resources(group, version) or []
        return plural in self.read[(group, version)]

    def custom(self, group: str, version: str, plural: str, name: str, namespace: str | None = None) -> Any:
        """A custom object as JSON, None where it does not exist."""
        if (key := (group, version, plural, name, namespace)) not in self.read:
            self.read[key] = self.api.read_custom_object(*key)
        return self.read[key]


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
