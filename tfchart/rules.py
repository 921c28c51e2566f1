"""Cross-field rules: the Python twin of the chart's `tf-distributed.validateValues` template.

The chart is the source of truth; tests/tfchart check that helm and these rules reject exactly the
same documents with the same key paths. Each rule skips values of the wrong type (the schema
reports those).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tfchart.errors import Problem

Rule = Callable[[dict[str, Any]], Iterator[Problem]]
COMPONENTS = ("ps", "worker", "chief", "evaluator", "tensorboard", "serving")
_RULES: list[Rule] = []


def rule(function: Rule) -> Rule:
    _RULES.append(function)
    return function


def get(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@rule
def parameter_server_needs_ps_and_workers(v: dict[str, Any]) -> Iterator[Problem]:
    if get(v, "training.strategy") != "parameter_server":
        return
    ps, workers = integer(get(v, "ps.replicas")), integer(get(v, "worker.replicas"))
    if ps is not None and ps < 1:
        yield Problem(
            "ps.replicas",
            f"training.strategy=parameter_server needs at least one parameter server (got {ps})",
            ps,
            "--set ps.replicas=1",
        )
    if workers is not None and workers < 1:
        yield Problem(
            "worker.replicas",
            f"training.strategy=parameter_server needs at least one worker (got {workers})",
            workers,
            "--set worker.replicas=2",
        )


@rule
def single_device_uses_one_gpu(v: dict[str, Any]) -> Iterator[Problem]:
    count = integer(get(v, "chief.gpu.count"))
    if get(v, "training.strategy") == "single_device" and count is not None and count > 1:
        yield Problem(
            "chief.gpu.count",
            f"training.strategy=single_device uses one device but chief.gpu.count={count}",
            count,
            "--set training.strategy=mirrored (or --set chief.gpu.count=1)",
        )


@rule
def sync_replicas_share_gpus(v: dict[str, Any]) -> Iterator[Problem]:
    workers = integer(get(v, "worker.replicas"))
    if get(v, "training.strategy") != "multi_worker_mirrored" or not workers or workers < 1:
        return
    chief, worker = integer(get(v, "chief.gpu.count")), integer(get(v, "worker.gpu.count"))
    if chief is not None and worker is not None and chief != worker:
        yield Problem(
            "chief.gpu.count",
            "training.strategy=multi_worker_mirrored needs the same GPU count on every replica "
            f"(chief {chief}, worker {worker})",
            chief,
            f"--set chief.gpu.count={worker}",
        )
    chief_kind, worker_kind = get(v, "chief.gpu.resourceName"), get(v, "worker.gpu.resourceName")
    if isinstance(chief_kind, str) and isinstance(worker_kind, str) and chief_kind != worker_kind:
        yield Problem(
            "chief.gpu.resourceName",
            f"multi_worker_mirrored replicas must use one GPU kind (chief {chief_kind}, worker {worker_kind})",
            chief_kind,
            f"--set chief.gpu.resourceName={worker_kind}",
        )


@rule
def gpus_only_through_gpu_count(v: dict[str, Any]) -> Iterator[Problem]:
    for role in COMPONENTS:
        name = get(v, f"{role}.gpu.resourceName")
        resources = get(v, f"{role}.resources")
        if not isinstance(name, str) or not isinstance(resources, dict):
            continue
        for kind in ("requests", "limits"):
            quantities = resources.get(kind)
            if isinstance(quantities, dict) and name in quantities:
                escaped = name.replace(".", "\\.")
                yield Problem(
                    f"{role}.resources.{kind}",
                    f"sets {name} directly; GPUs are requested only through {role}.gpu.count (rendered as a limit)",
                    quantities[name],
                    f"--set {role}.resources.{kind}.{escaped}=null --set {role}.gpu.count={quantities[name]}",
                )


@rule
def storage_is_required(v: dict[str, Any]) -> Iterator[Problem]:
    if get(v, "storage.create") is False and not get(v, "storage.existingClaim"):
        yield Problem(
            "storage",
            "storage.create=false and no storage.existingClaim: checkpoints, logs and exports need a volume",
            None,
            "--set storage.create=true (or --set storage.existingClaim=<pvc-name>)",
        )


# -- shared storage: the twin of tf-distributed.claimPods / storageNeed / colocate (_helpers.tpl) --

RWX_EXAMPLES = "NFS, CephFS, EFS, Azure Files, Filestore, Longhorn..."


def claim_pods(v: dict[str, Any]) -> list[tuple[str, int]]:
    """(role, pods) of every pod that mounts the shared claim, in the chart's order; the helm test pod counts."""
    strategy = get(v, "training.strategy")
    ps, workers = integer(get(v, "ps.replicas")) or 0, integer(get(v, "worker.replicas")) or 0
    counts: list[tuple[str, int]] = []
    if strategy == "parameter_server" and ps > 0:
        counts.append(("ps", ps))
    if strategy in ("parameter_server", "multi_worker_mirrored") and workers > 0:
        counts.append(("worker", workers))
    counts.append(("chief", 1))
    if get(v, "evaluator.enabled") is True:
        counts.append(("evaluator", 1))
    for role in ("tensorboard", "serving"):
        if get(v, f"{role}.enabled") is True:
            counts.append((role, integer(get(v, f"{role}.replicas")) or 0))
    if get(v, "tests.enabled") is True:
        counts.append(("helm test", 1))
    return counts


@dataclass(frozen=True)
class StorageNeed:
    """The access mode the values need from the claim's StorageClass (or existing claim), and why."""

    mode: str  # ReadWriteMany | ReadWriteOnce | ReadWriteOncePod
    pods: tuple[tuple[str, int], ...]  # (role, pods) that mount the claim

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
            return (
                f"storage: needs ReadWriteMany: {self.pods_phrase} from any node, so the StorageClass must offer "
                f"ReadWriteMany ({RWX_EXAMPLES})"
            )
        if self.mode == "ReadWriteOnce":
            return (
                f"storage: needs ReadWriteOnce: {self.pods_phrase} from one node (co-located), "
                "so any StorageClass will do"
            )
        return f"storage: needs {self.mode}: {self.pods_phrase}"


def access_modes(v: dict[str, Any]) -> list[str] | None:
    modes = get(v, "storage.accessModes")
    if not isinstance(modes, list) or not modes or not all(isinstance(mode, str) for mode in modes):
        return None
    return modes


def storage_need(v: dict[str, Any]) -> StorageNeed | None:
    """What storage.accessModes asks of the cluster; None when the modes are unusable (see storage_access_modes)."""
    modes = access_modes(v)
    if modes is None or any(problem.path == "storage.accessModes" for problem in storage_access_modes(v)):
        return None
    pods = tuple(claim_pods(v))
    for mode in ("ReadWriteMany", "ReadWriteOnce"):
        if mode in modes:
            return StorageNeed(mode, pods)
    return StorageNeed(modes[0], pods)


@rule
def storage_access_modes(v: dict[str, Any]) -> Iterator[Problem]:
    modes = access_modes(v)
    if modes is None:
        return
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        yield Problem(
            "storage.accessModes",
            "ReadWriteOncePod cannot be combined with other access modes (Kubernetes rejects such a claim)",
            modes,
            "--set storage.accessModes={ReadWriteOnce}",
        )
    elif "ReadWriteOncePod" in modes:
        pods = claim_pods(v)
        total = sum(count for _, count in pods)
        if total > 1:
            roles = ", ".join(f"{role} {count}" for role, count in pods)
            yield Problem(
                "storage.accessModes",
                f"ReadWriteOncePod lets a single pod mount the claim, but {total} pods mount it ({roles})",
                modes,
                "--set storage.accessModes={ReadWriteOnce} (co-locates them on one node)",
            )
    elif "ReadWriteOnce" not in modes and "ReadWriteMany" not in modes:
        yield Problem(
            "storage.accessModes",
            "ReadOnlyMany alone is not writable, but training writes checkpoints, logs and exports to the claim",
            modes,
            "--set storage.accessModes={ReadWriteOnce} (or {ReadWriteMany} with a StorageClass that offers it)",
        )


@rule
def scale_down_needs_rbac(v: dict[str, Any]) -> Iterator[Problem]:
    if (
        get(v, "training.cleanupPolicy") == "scaleDown"
        and get(v, "rbac.create") is False
        and get(v, "training.strategy") in ("parameter_server", "multi_worker_mirrored")
    ):
        yield Problem(
            "training.cleanupPolicy",
            "scaleDown needs the chief's Role to scale the StatefulSets but rbac.create=false",
            "scaleDown",
            "--set rbac.create=true (or --set training.cleanupPolicy=keep)",
        )


@rule
def learning_rate_in_range(v: dict[str, Any]) -> Iterator[Problem]:
    value = get(v, "training.learningRate")
    if isinstance(value, bool) or value is None:
        return
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return
    if rate <= 0 or rate > 10:
        yield Problem(
            "training.learningRate", f"{value} is out of range (0, 10]", value, "--set training.learningRate=0.01"
        )


@rule
def checkpoint_before_the_end(v: dict[str, Any]) -> Iterator[Problem]:
    every, steps = integer(get(v, "training.checkpointEverySteps")), integer(get(v, "training.trainSteps"))
    if every is not None and steps is not None and every > steps:
        yield Problem(
            "training.checkpointEverySteps",
            f"{every} is larger than training.trainSteps={steps}, so no checkpoint would be written before the end",
            every,
            f"--set training.checkpointEverySteps={steps}",
        )


@rule
def serving_ports_differ(v: dict[str, Any]) -> Iterator[Problem]:
    rest, grpc = integer(get(v, "serving.service.restPort")), integer(get(v, "serving.service.grpcPort"))
    if rest is not None and rest == grpc:
        yield Problem(
            "serving.service.grpcPort",
            f"equals serving.service.restPort ({rest})",
            grpc,
            "--set serving.service.grpcPort=8500 --set serving.service.restPort=8501",
        )


@rule
def ingress_needs_its_component(v: dict[str, Any]) -> Iterator[Problem]:
    if get(v, "tensorboard.ingress.enabled") is True and get(v, "tensorboard.enabled") is False:
        yield Problem(
            "tensorboard.ingress.enabled",
            "the Ingress needs TensorBoard",
            True,
            "--set tensorboard.enabled=true (or --set tensorboard.ingress.enabled=false)",
        )
    if get(v, "serving.ingress.enabled") is True and get(v, "serving.enabled") is False:
        yield Problem(
            "serving.ingress.enabled",
            "the Ingress needs TensorFlow Serving",
            True,
            "--set serving.enabled=true (or --set serving.ingress.enabled=false)",
        )


def check(values: dict[str, Any]) -> list[Problem]:
    return [problem for function in _RULES for problem in function(values)]
