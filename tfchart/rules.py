"""Cross-field rules: the Python twin of the chart's `tf-distributed.validateValues` template.

The chart is the source of truth; tests/tfchart check that helm and these rules reject exactly the
same documents with the same key paths. Each rule skips values of the wrong type (the schema
reports those).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
