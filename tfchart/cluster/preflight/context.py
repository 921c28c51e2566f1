"""What the checks share. The Context: what the release would create, read from its render (helm template of the same
values): its pods per role (the `helm test` pod left out), what it adds to a quota, and the render
for the objects a check looks for; and, from the API, the cluster's schedulable nodes, listed once however many checks
ask (a check reads the rest itself, each object once). A check's verdict (Finding); a read that RBAC forbids becomes one
`could not check` warning instead of failing the run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tfchart.cluster.kube import AccessDenied, resource_name
from tfchart.manifests import quantity
from tfchart.manifests.workloads import Workload, resources, running
from tfdcontract import CHIEF, EVALUATOR, PS, WORKER

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

GANG_ROLES = (PS, WORKER, CHIEF, EVALUATOR)  # the pods of the PodGroup / Kueue pod group
OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # ok | warn | fail
    message: str
    hint: str = ""


@dataclass
class Context:
    """What a check reads: the API, the release's render, its namespace and name; its pods and the nodes, read once."""

    api: KubeApi
    docs: list[dict[str, Any]]
    namespace: str
    release: str = ""

    @cached_property
    def roles(self) -> list[Workload]:
        """The release's pod templates (the helm test's left out)."""
        return running(self.docs)

    @cached_property
    def adds(self) -> defaultdict[str, Decimal]:
        """What the release adds to each quota key (0 where the chart does not affect it): the objects quota counts
        (pods, services, count/jobs.batch...), and what its pods request and are limited to."""
        adds = defaultdict(Decimal, secrets=Decimal(1))  # helm's release record (sh.helm.release.v1.<release>.v1)
        for workload in self.roles:
            if workload.kind != "JobSet":  # a JobSet counts once, with one Job per replicatedJob (below)
                adds[f"count/{resource_name(workload.kind)}"] += 1
            adds["pods"] += workload.replicas
        for doc in self.docs:
            kind, spec = doc.get("kind"), doc.get("spec") or {}
            if kind == "Service":
                adds["services"] += 1
                adds["services.nodeports"] += spec.get("type") in ("NodePort", "LoadBalancer")
                adds["services.loadbalancers"] += spec.get("type") == "LoadBalancer"
            elif kind == "PersistentVolumeClaim":
                adds["persistentvolumeclaims"] += 1
                adds["requests.storage"] = quantity.parse(((spec.get("resources") or {}).get("requests")
                                                           or {}).get("storage", "0"))  # fmt: skip
            elif kind == "JobSet":
                adds[f"count/{resource_name(kind)}"] += 1
                adds["count/jobs.batch"] += sum(int(job.get("replicas", 1)) for job in spec.get("replicatedJobs") or [])
        for plain in ("pods", "services", "persistentvolumeclaims", "secrets"):
            adds[f"count/{plain}"] = adds[plain]
        for limit in ("requests", "limits"):
            adds.update({f"{limit}.{key}": value for key, value in requested(self.roles, limit).items()})
        for short in ("cpu", "memory", "ephemeral-storage"):  # the quota's short names of requests.<key>
            adds[short] = adds[f"requests.{short}"]
        return adds

    def doc(self, kind: str) -> dict[str, Any] | None:
        """The render's first object of `kind` (the gang's PodGroup, the JobSet, a NetworkPolicy), None if none."""
        return next((doc for doc in self.docs if doc.get("kind") == kind), None)

    def label(self, key: str) -> str:
        """A label of the run (Kueue's queue and priority class): the JobSet's (the chart puts Kueue's labels on the
        JobSet only), else one the TensorFlow pods carry."""
        if (jobset := self.doc("JobSet")) is not None:
            return str(((jobset.get("metadata") or {}).get("labels") or {}).get(key) or "")
        return next(filter(None, (role.pod_labels.get(key) for role in self.roles if role.role in GANG_ROLES)), "")

    @cached_property
    def nodes(self) -> list[dict[str, Any]]:
        """The schedulable nodes, listed on first use: neither cordoned nor other than Ready."""
        return [node for node in self.api.items("Node") if not (node.get("spec") or {}).get("unschedulable") and any(
            each.get("type") == "Ready" and each.get("status") == "True"
            for each in (node.get("status") or {}).get("conditions") or [])]  # fmt: skip


def requested(roles: list[Workload], kind: str = "requests") -> dict[str, Decimal]:
    """What the roles' pods request (or are limited to) together, per resource they ask for, in name order."""
    totals: dict[str, Decimal] = {}
    for role in roles:
        for key, value in resources(role.spec, kind).items():
            totals[key] = totals.get(key, Decimal(0)) + role.replicas * value
    return {key: totals[key] for key in sorted(totals) if totals[key] > 0}


def allocatable(node: dict[str, Any], resource: str) -> Decimal:
    return quantity.parse(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0))


def guarded(name: str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """The check's findings; a read that RBAC forbids becomes one `could not check` warning."""
    try:
        return check()
    except AccessDenied as error:
        return [Finding(name, WARN, f"could not check: {error.message}", error.hint)]
