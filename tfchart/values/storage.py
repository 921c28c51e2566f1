"""What the release asks of the shared claim, read from its render for preflight to check against the cluster: which
pods mount the claim, the access mode they need (ReadWriteMany when they may spread over nodes, ReadWriteOnce when
the chart co-locates them), and the claim the chart creates (or the existing one it mounts). The chart says the same
need in words (tf-distributed.storageNeed: its NOTES, and the `# NOTE: ` that `tfchart validate` prints)."""

from __future__ import annotations

from typing import Any, NamedTuple

from tfchart.manifests.workloads import workloads
from tfdcontract import CHIEF, EVALUATOR, PS, SERVING, TENSORBOARD, WORKER

RWX_EXAMPLES = "NFS, CephFS, EFS, Azure Files, Filestore, Longhorn..."
ORDER = (PS, WORKER, CHIEF, EVALUATOR, TENSORBOARD, SERVING, "helm test")  # the chart's claimPods order
HOSTNAME = "kubernetes.io/hostname"


class StorageNeed(NamedTuple):
    """The access mode the release needs from its claim, and why."""

    mode: str  # ReadWriteMany | ReadWriteOnce | ReadWriteOncePod; any but ReadWriteMany co-locates the pods
    total: int  # the pods that mount the claim
    pods: str  # "N pods mount the claim (ps 1, worker 2, ...)", as the chart's claimPodsPhrase says it
    claim: str
    claim_spec: dict[str, Any] | None  # the PersistentVolumeClaim the chart creates; None: an existing claim


def need(docs: list[dict[str, Any]]) -> StorageNeed | None:
    """The release's storage need; None when nothing mounts a claim."""
    mounting = [w for w in workloads(docs) if w.claims() and w.replicas > 0]
    if not mounting:
        return None
    claim = mounting[0].claims()[0]
    spec = next((doc.get("spec") or {} for doc in docs if doc.get("kind") == "PersistentVolumeClaim"
                 and (doc.get("metadata") or {}).get("name") == claim), None)  # fmt: skip
    counts: dict[str, int] = {}
    for w in sorted(mounting, key=lambda w: ORDER.index(w.role) if w.role in ORDER else len(ORDER)):
        counts[w.role] = counts.get(w.role, 0) + w.replicas
    total, roles = sum(counts.values()), ", ".join(f"{role} {count}" for role, count in counts.items())
    modes = list(spec.get("accessModes") or []) if spec else []
    if not modes:  # an existing claim: the chart co-locates the pods unless the values asked for ReadWriteMany
        modes = ["ReadWriteOnce"] if any(_colocated(w.spec) for w in mounting) else ["ReadWriteMany"]
    mode = next((m for m in ("ReadWriteMany", "ReadWriteOnce") if m in modes), modes[0])
    return StorageNeed(mode, total, f"{total} {'pod mounts' if total == 1 else 'pods mount'} the claim ({roles})",
                       claim, spec)  # fmt: skip


def _colocated(pod: dict[str, Any]) -> bool:
    terms = ((pod.get("affinity") or {}).get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return any(term.get("topologyKey") == HOSTNAME for term in terms or [])
