"""What the release asks of the shared claim, read from its render: which pods mount the claim, the
access mode they need (ReadWriteMany when they may spread over nodes, ReadWriteOnce when the chart
co-locates them), and the claim the chart creates (or the existing one it mounts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfchart.manifests.workloads import workloads
from tfdcontract import CHIEF, EVALUATOR, PS, SERVING, TENSORBOARD, WORKER

RWX_EXAMPLES = "NFS, CephFS, EFS, Azure Files, Filestore, Longhorn..."
ORDER = (PS, WORKER, CHIEF, EVALUATOR, TENSORBOARD, SERVING, "helm test")  # the chart's claimPods order
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class StorageNeed:
    """The access mode the release needs from its claim, and why."""

    mode: str  # ReadWriteMany | ReadWriteOnce | ReadWriteOncePod
    pods: tuple[tuple[str, int], ...]  # (role, pods) that mount the claim
    claim: str
    claim_spec: dict[str, Any] | None  # the PersistentVolumeClaim the chart creates; None: an existing claim

    @property
    def total(self) -> int:
        return sum(count for _, count in self.pods)

    @property
    def colocated(self) -> bool:
        """Without ReadWriteMany the chart puts every pod of the release on one node."""
        return self.mode != "ReadWriteMany"

    @property
    def pods_phrase(self) -> str:
        roles = ", ".join(f"{role} {count}" for role, count in self.pods)
        return f"{self.total} {'pod mounts' if self.total == 1 else 'pods mount'} the claim ({roles})"

    @property
    def line(self) -> str:
        """One line, the same as the chart's NOTES (tf-distributed.storageNeed)."""
        if self.mode == "ReadWriteMany":
            return (f"storage: needs ReadWriteMany: {self.pods_phrase} from any node, so the StorageClass must "
                    f"offer ReadWriteMany ({RWX_EXAMPLES})")  # fmt: skip
        if self.mode == "ReadWriteOnce":
            return (f"storage: needs ReadWriteOnce: {self.pods_phrase} from one node (co-located), so any "
                    "StorageClass will do")  # fmt: skip
        return f"storage: needs {self.mode}: {self.pods_phrase}"


def need(docs: list[dict[str, Any]]) -> StorageNeed | None:
    """The release's storage need; None when nothing mounts a claim."""
    mounting = [w for w in workloads(docs) if w.claims() and w.replicas > 0]
    if not mounting:
        return None
    claim = mounting[0].claims()[0]
    spec = next((doc.get("spec") or {} for doc in docs if doc.get("kind") == "PersistentVolumeClaim"
                 and (doc.get("metadata") or {}).get("name") == claim), None)  # fmt: skip
    counts: dict[str, int] = {}
    for workload in mounting:
        counts[workload.role] = counts.get(workload.role, 0) + workload.replicas
    pods = tuple(sorted(counts.items(), key=lambda item: ORDER.index(item[0]) if item[0] in ORDER else len(ORDER)))
    modes = list(spec.get("accessModes") or []) if spec else []
    if not modes:  # an existing claim: the chart co-locates the pods unless the values asked for ReadWriteMany
        modes = ["ReadWriteOnce"] if any(_colocated(w.spec) for w in mounting) else ["ReadWriteMany"]
    mode = next((m for m in ("ReadWriteMany", "ReadWriteOnce") if m in modes), modes[0])
    return StorageNeed(mode, pods, claim, spec)


def _colocated(pod: dict[str, Any]) -> bool:
    terms = ((pod.get("affinity") or {}).get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return any(term.get("topologyKey") == HOSTNAME for term in terms or [])
