"""Cross-field rules: the Python twin of the chart's `tf-distributed.validateValues` template.

The chart is the source of truth; tests/tfchart check that helm and these rules reject exactly the
same documents with the same key paths. Each rule skips values of the wrong type (the schema
reports those).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from tfchart.errors import Problem
from tfdcontract import CHIEF, COMPONENTS, EVALUATOR, PS, SERVING, TENSORBOARD, TF_ROLES, WORKER


@dataclass(frozen=True)
class Release:
    """The release name and namespace the values are rendered for; None where not known (tfchart validate).

    Rules that depend on them (object names, the cluster map's size) then assume the longest the chart
    allows: a 45-character name prefix (unless fullnameOverride sets it) and a 63-character namespace
    (unless namespaceOverride sets it), so values valid here are valid for every release.
    """

    name: str | None = None
    namespace: str | None = None


Rule = Callable[[dict[str, Any]], Iterator[Problem]]
NamedRule = Callable[[dict[str, Any], Release], Iterator[Problem]]
#: Every cross-field rule by name, in order. Each is the twin of a check in the chart's
#: _validate.tpl; tests/fixtures/bad-values is the case table both are tested against, rule by rule.
RULES: dict[str, NamedRule] = {}


def rule(function: Rule) -> Rule:
    RULES[function.__name__] = lambda values, _release: function(values)
    return function


def named_rule(function: NamedRule) -> NamedRule:
    """A rule that needs the release name or namespace (see Release)."""
    RULES[function.__name__] = function
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


def chief_enabled(v: dict[str, Any]) -> bool:
    """The twin of tf-distributed.chiefEnabled: a separate chief, except multi_worker_mirrored with
    chief.replicas=0 (worker 0 is the chief; the workers run as an Indexed Job)."""
    replicas = integer(get(v, "chief.replicas"))
    return get(v, "training.strategy") != "multi_worker_mirrored" or replicas is None or replicas > 0


@rule
def chief_absent_only_in_sync_training(v: dict[str, Any]) -> Iterator[Problem]:
    strategy, chiefs = get(v, "training.strategy"), integer(get(v, "chief.replicas"))
    if chiefs is not None and chiefs < 1 and strategy != "multi_worker_mirrored":
        yield Problem(
            "chief.replicas",
            "only training.strategy=multi_worker_mirrored runs without a separate chief (worker 0 is the chief), "
            f"but training.strategy={strategy}",
            chiefs,
            "--set chief.replicas=1 (or --set training.strategy=multi_worker_mirrored)",
        )
        return
    workers = integer(get(v, "worker.replicas"))
    if not chief_enabled(v) and workers is not None and workers < 1:
        yield Problem(
            "worker.replicas",
            f"with chief.replicas=0 worker 0 is the chief, so at least one worker is needed (got {workers})",
            workers,
            "--set worker.replicas=2 (or --set chief.replicas=1)",
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
    if get(v, "training.strategy") != "multi_worker_mirrored" or not workers or workers < 1 or not chief_enabled(v):
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
def batch_splits_evenly_across_replicas(v: dict[str, Any]) -> Iterator[Problem]:
    """Synchronous strategies split training.batchSize (the global batch) evenly over the replicas in
    sync; Keras refuses a remainder at the first step."""
    strategy, batch = get(v, "training.strategy"), integer(get(v, "training.batchSize"))
    devices = integer(get(v, "chief.gpu.count"))
    if batch is None or devices is None or batch < 1:
        return
    per_task = max(1, devices)
    if strategy == "mirrored":
        tasks, shape = 1, f"mirrored: {per_task} device(s)"
    elif strategy == "multi_worker_mirrored" and not chief_enabled(v):
        workers, worker_devices = integer(get(v, "worker.replicas")), integer(get(v, "worker.gpu.count"))
        if workers is None or worker_devices is None:
            return
        per_task = max(1, worker_devices)
        tasks = workers
        shape = f"multi_worker_mirrored: {workers} worker(s) x {per_task} device(s), worker 0 the chief"
    elif strategy == "multi_worker_mirrored":
        workers = integer(get(v, "worker.replicas"))
        if workers is None or integer(get(v, "worker.gpu.count")) != devices:
            return  # sync_replicas_share_gpus names the mismatch
        tasks, shape = 1 + workers, f"multi_worker_mirrored: chief + {workers} worker(s) x {per_task} device(s)"
    else:
        return
    replicas = tasks * per_task
    if replicas > 0 and batch % replicas:
        yield Problem(
            "training.batchSize",
            f"{batch} is the global batch, split evenly across the {replicas} replicas in sync ({shape}); "
            f"it is not divisible by {replicas}",
            batch,
            f"--set training.batchSize={batch + replicas - batch % replicas}",
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
def specific_versions_are_listed(v: dict[str, Any]) -> Iterator[Problem]:
    policy = get(v, "serving.modelVersionPolicy")
    if not isinstance(policy, dict) or get(v, "serving.enabled") is not True:
        return
    if policy.get("type") == "specific" and not policy.get("versions"):
        yield Problem(
            "serving.modelVersionPolicy.versions",
            "type specific serves exactly the versions listed, and none are",
            policy.get("versions"),
            "--set serving.modelVersionPolicy.versions={1} (or --set serving.modelVersionPolicy.type=latest)",
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


# -- shared storage: the twin of tf-distributed.claimPods / storageNeed / colocate (_storage.tpl) --

MODEL_CONFIG_DIR = "/etc/tf-serving"  # where the Serving pod mounts its model config (serving/deployment.yaml)
RWX_EXAMPLES = "NFS, CephFS, EFS, Azure Files, Filestore, Longhorn..."


def claim_pods(v: dict[str, Any]) -> list[tuple[str, int]]:
    """(role, pods) of every pod that mounts the shared claim, in the chart's order; the helm test pod counts."""
    strategy = get(v, "training.strategy")
    ps, workers = integer(get(v, "ps.replicas")) or 0, integer(get(v, "worker.replicas")) or 0
    counts: list[tuple[str, int]] = []
    if strategy == "parameter_server" and ps > 0:
        counts.append((PS, ps))
    if strategy in ("parameter_server", "multi_worker_mirrored") and workers > 0:
        counts.append((WORKER, workers))
    if chief_enabled(v):
        counts.append((CHIEF, 1))
    if get(v, "evaluator.enabled") is True:
        counts.append((EVALUATOR, 1))
    for role in (TENSORBOARD, SERVING):
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
def supervisor_has_what_it_needs(v: dict[str, Any]) -> Iterator[Problem]:
    if supervisor_enabled(v) and get(v, "rbac.create") is False:
        yield Problem(
            "supervisor.enabled",
            "the run supervisor needs its ServiceAccount and Role, but rbac.create=false",
            True,
            "--set rbac.create=true"
            " (or --set supervisor.enabled=false and free the GPUs by hand: tfchart stop RELEASE)",
        )
    if (integer(get(v, "scheduling.startTimeoutSeconds")) or 0) > 0 and get(v, "supervisor.enabled") is False:
        yield Problem(
            "scheduling.startTimeoutSeconds",
            "the run supervisor enforces it, but supervisor.enabled=false",
            get(v, "scheduling.startTimeoutSeconds"),
            "--set supervisor.enabled=true (or --set scheduling.startTimeoutSeconds=0)",
        )


def decimal(v: dict[str, Any], dotted: str) -> float | None:
    """A number, or a decimal string (helm's --set keeps 0.5 a string), as the chart's float64 reads it;
    None where the schema names the problem instead."""
    value = get(v, dotted)
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@rule
def export_gate_in_range(v: dict[str, Any]) -> Iterator[Problem]:
    gate = decimal(v, "training.exportMinAccuracy")
    if gate is not None and (gate < 0 or gate > 1):  # NaN passes, as the chart's comparisons let it
        value = get(v, "training.exportMinAccuracy")
        yield Problem(
            "training.exportMinAccuracy", f"{value} is out of range [0, 1]", value,
            "--set training.exportMinAccuracy=0.95 (0 exports always)",
        )


@rule
def learning_rate_in_range(v: dict[str, Any]) -> Iterator[Problem]:
    rate = decimal(v, "training.learningRate")
    if rate is not None and (rate <= 0 or rate > 10):
        value = get(v, "training.learningRate")
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


# -- Prometheus metrics: the twin of the metrics block of validateValues ------------------------------

MONITOR_KINDS = {"serviceMonitor": "ServiceMonitor", "podMonitor": "PodMonitor"}
#: metrics.port's default, the first port the fix of a clash proposes.
DEFAULT_METRICS_PORT = 9464


@rule
def monitors_have_targets(v: dict[str, Any]) -> Iterator[Problem]:
    if get(v, "metrics.enabled") is True or get(v, "serving.metrics.enabled") is True:
        return
    for key, kind in MONITOR_KINDS.items():
        if get(v, f"metrics.{key}.enabled") is True:
            yield Problem(
                f"metrics.{key}.enabled",
                f"the {kind} scrapes the TensorFlow pods (metrics.enabled) and TensorFlow Serving "
                "(serving.metrics.enabled), and both are off, so it would scrape nothing",
                True,
                "--set metrics.enabled=true (or --set serving.metrics.enabled=true, "
                f"or --set metrics.{key}.enabled=false)",
            )


@rule
def serving_metrics_need_serving(v: dict[str, Any]) -> Iterator[Problem]:
    if get(v, "serving.metrics.enabled") is True and get(v, "serving.enabled") is False:
        yield Problem(
            "serving.metrics.enabled",
            "TensorFlow Serving's metrics need TensorFlow Serving",
            True,
            "--set serving.enabled=true (or --set serving.metrics.enabled=false)",
        )


def grpc_roles(v: dict[str, Any]) -> list[str]:
    """The TensorFlow roles that run a gRPC server (port <role>.service.port), in the chart's order."""
    return [role for role, _ in claim_pods(v) if role in (PS, WORKER, CHIEF)]


@rule
def metrics_port_is_free(v: dict[str, Any]) -> Iterator[Problem]:
    """The metrics server and the TensorFlow server share a container: their ports must differ."""
    port = integer(get(v, "metrics.port"))
    if get(v, "metrics.enabled") is not True or port is None:
        return
    ports = {role: integer(get(v, f"{role}.service.port")) for role in grpc_roles(v)}
    taken = [role for role, grpc in ports.items() if grpc == port]
    if not taken:
        return
    free = next(candidate for candidate in itertools.count(DEFAULT_METRICS_PORT) if candidate not in ports.values())
    yield Problem(
        "metrics.port",
        f"{port} is also the TensorFlow gRPC port (<role>.service.port) of {', '.join(taken)}; the metrics "
        "server and the TensorFlow server of one container cannot both listen on it",
        port,
        f"--set metrics.port={free}",
    )


@rule
def monitors_scrape_each_target_once(v: dict[str, Any]) -> Iterator[Problem]:
    """Both monitors select the same pods (the ServiceMonitor through their Services): every target twice.
    With nothing to scrape, monitors_have_targets says so instead."""
    if get(v, "metrics.enabled") is not True and get(v, "serving.metrics.enabled") is not True:
        return
    if get(v, "metrics.serviceMonitor.enabled") is True and get(v, "metrics.podMonitor.enabled") is True:
        yield Problem(
            "metrics.podMonitor.enabled",
            "metrics.serviceMonitor.enabled is on too, and both monitors scrape the same targets (the ServiceMonitor "
            "through the pods' Services, the PodMonitor the pods directly), so Prometheus would scrape every target "
            "twice: each series twice under two job labels, and sums doubled",
            True,
            "--set metrics.podMonitor.enabled=false (or --set metrics.serviceMonitor.enabled=false)",
        )


#: The flag the chart adds to TensorFlow Serving's own arguments with serving.metrics.enabled (serving/deployment.yaml).
MONITORING_FLAG = "--monitoring_config_file"
MONITORING_CONFIG = f"{MODEL_CONFIG_DIR}/monitoring.config"


@rule
def custom_serving_args_serve_metrics(v: dict[str, Any]) -> Iterator[Problem]:
    """serving.args replaces the chart's arguments, --monitoring_config_file with them; serving.command alone
    keeps them, and the flag in serving.command (a shell line) counts."""
    args, command = get(v, "serving.args"), get(v, "serving.command")
    if get(v, "serving.enabled") is not True or get(v, "serving.metrics.enabled") is not True:
        return
    if not isinstance(args, list) or not args:
        return
    given = [*(command if isinstance(command, list) else []), *args]
    if any(isinstance(arg, str) and MONITORING_FLAG in arg for arg in given):
        return
    yield Problem(
        "serving.args",
        f"serving.metrics.enabled=true, but the chart adds {MONITORING_FLAG}={MONITORING_CONFIG} only to its own "
        "arguments, which serving.args replaces, and neither serving.args nor serving.command has it, so TensorFlow "
        "Serving would not serve serving.metrics.path and the monitors would scrape a 404",
        args,
        f"add {MONITORING_FLAG}={MONITORING_CONFIG} to serving.args (--set cannot append to a list: give the whole "
        "list) (or --set serving.metrics.enabled=false)",
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


# -- gang scheduling and queues: the twin of the scheduling block of validateValues -----------------

GANG_SCHEDULERS = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler"}


@rule
def gang_scheduling_is_consistent(v: dict[str, Any]) -> Iterator[Problem]:
    provider = get(v, "scheduling.gang.provider")
    scheduler = get(v, "schedulerName")
    if provider in GANG_SCHEDULERS and isinstance(scheduler, str):
        wrong = {"default-scheduler", *(name for key, name in GANG_SCHEDULERS.items() if key != provider)}
        if scheduler in wrong:
            yield Problem(
                "schedulerName",
                f"{scheduler} does not schedule the {provider} PodGroup, so scheduling.gang.provider={provider} "
                "would not start the TensorFlow pods together",
                scheduler,
                f'--set schedulerName="" (the {provider} default, {GANG_SCHEDULERS[provider]}, '
                f"or the name your {provider} scheduler runs as)",
            )
    queue = get(v, "scheduling.gang.volcanoQueue")
    if isinstance(queue, str) and queue and provider in ("none", "coscheduling"):
        yield Problem(
            "scheduling.gang.volcanoQueue",
            f"a Volcano Queue needs scheduling.gang.provider=volcano (got {provider})",
            queue,
            '--set scheduling.gang.provider=volcano (or --set scheduling.gang.volcanoQueue="")',
        )
    timeout = integer(get(v, "scheduling.gang.scheduleTimeoutSeconds"))
    if timeout is not None and timeout > 0 and provider in ("none", "volcano"):
        yield Problem(
            "scheduling.gang.scheduleTimeoutSeconds",
            f"only the coscheduling PodGroup has a schedule timeout (scheduling.gang.provider={provider})",
            timeout,
            "--set scheduling.gang.scheduleTimeoutSeconds=0 (or --set scheduling.gang.provider=coscheduling)",
        )
    queue_name = get(v, "scheduling.kueue.queueName")
    if isinstance(queue_name, str) and queue_name and provider in GANG_SCHEDULERS:
        yield Problem(
            "scheduling.kueue.queueName",
            f"Kueue already admits the TensorFlow pods as one group; scheduling.gang.provider={provider} would put "
            "them in a second queue (PodGroup) that Kueue does not see, and each could hold them back",
            queue_name,
            '--set scheduling.gang.provider=none (or --set scheduling.kueue.queueName="")',
        )
    priority = get(v, "scheduling.kueue.priorityClass")
    if isinstance(priority, str) and priority and queue_name == "":
        yield Problem(
            "scheduling.kueue.priorityClass",
            "a Kueue WorkloadPriorityClass needs scheduling.kueue.queueName: without a queue Kueue ignores the pods",
            priority,
            '--set scheduling.kueue.queueName=<LocalQueue> (or --set scheduling.kueue.priorityClass="")',
        )


GANG_LABELS = (
    "kueue.x-k8s.io/queue-name",
    "kueue.x-k8s.io/pod-group-name",
    "kueue.x-k8s.io/priority-class",
    "scheduling.x-k8s.io/pod-group",
)


def labels_set_by_hand(v: dict[str, Any], keys: Iterable[str]) -> Iterator[tuple[str, str, Any]]:
    """(owner, key, value) for each of `keys` set in commonLabels or a component's podLabels."""
    for owner in ("commonLabels", *(f"{role}.podLabels" for role in COMPONENTS)):
        labels = get(v, owner)
        if isinstance(labels, dict):
            for key in keys:
                if key in labels:
                    yield owner, key, labels[key]


@rule
def gang_labels_come_from_scheduling(v: dict[str, Any]) -> Iterator[Problem]:
    for owner, key, value in labels_set_by_hand(v, GANG_LABELS):
        yield Problem(
            f"{owner}.{key}",
            "is set by the chart from scheduling.kueue / scheduling.gang on the TensorFlow pods only; "
            "by hand it would also label their StatefulSets and Jobs or other pods, which Kueue or the gang "
            "scheduler would then admit apart from the group",
            value,
            f"--set {owner}.{_escaped(key)}=null (use scheduling.kueue.queueName, "
            "scheduling.kueue.priorityClass or scheduling.gang.provider)",
        )


# -- object names: the twin of tf-distributed.fullname / namespace (_names.tpl) ----------------------

CHART_NAME = "tf-distributed"
NAME_BUDGET = 45  # tf-distributed.nameBudget: <fullname>-worker-<revision hash> stays a DNS label
NAMESPACE_MAX = 63
NAME_HASH = 8  # hex digits of the SHA-256 that end a truncated name


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def untruncated_fullname(v: dict[str, Any], release_name: str) -> str:
    override = _string(get(v, "fullnameOverride"))
    if override:
        return override
    name = _string(get(v, "nameOverride")) or CHART_NAME
    return release_name if name in release_name else f"{release_name}-{name}"


def fullname(v: dict[str, Any], release_name: str) -> str:
    """The object-name prefix: at most 45 characters; a longer name keeps 36 and ends in -<8 hex of its SHA-256>."""
    full = untruncated_fullname(v, release_name)
    if len(full) <= NAME_BUDGET:
        return full.removesuffix("-")
    digest = hashlib.sha256(full.encode()).hexdigest()[:NAME_HASH]
    return f"{full[: NAME_BUDGET - NAME_HASH - 1].removesuffix('-')}-{digest}"


@dataclass(frozen=True)
class Names:
    """What the rendered names are made of; `assumed` when the release is unknown (see Release)."""

    fullname: str
    namespace: str
    assumed: bool


def names(v: dict[str, Any], release: Release) -> Names:
    assumed = False
    if _string(get(v, "fullnameOverride")):
        prefix = fullname(v, "")
    elif release.name is not None:
        prefix = fullname(v, release.name)
    else:
        prefix, assumed = "x" * NAME_BUDGET, True
    namespace = _string(get(v, "namespaceOverride"))[:NAMESPACE_MAX].removesuffix("-")
    if not namespace:
        if release.namespace is not None:
            namespace = release.namespace[:NAMESPACE_MAX].removesuffix("-")
        else:
            namespace, assumed = "x" * NAMESPACE_MAX, True
    return Names(prefix, namespace, assumed)


def _assumed(found: Names) -> str:
    if not found.assumed:
        return ""
    return (
        " (with the longest release name and namespace: the release is not known here; "
        "fullnameOverride and namespaceOverride make it exact)"
    )


DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@named_rule
def release_name_makes_service_names(v: dict[str, Any], release: Release) -> Iterator[Problem]:
    if release.name is None or _string(get(v, "fullnameOverride")):
        return
    prefix = fullname(v, release.name)
    if DNS_1035_LABEL.fullmatch(prefix):
        return
    suggestion = re.sub(r"[^-a-z0-9]", "-", prefix)
    if not re.match(r"[a-z]", suggestion):
        suggestion = f"tf-{suggestion}"
    suggestion = suggestion[:NAME_BUDGET].removesuffix("-")
    yield Problem(
        "fullnameOverride",
        f'the release name "{release.name}" makes object names such as {prefix}-worker that are not DNS-1035 '
        "labels, which Kubernetes requires of Service names (lower-case letters, digits and '-', starting "
        "with a letter)",
        release.name,
        f"--set fullnameOverride={suggestion} (or a release name that starts with a letter and has no dots)",
    )


# -- the cluster map: the twin of tf-distributed.clusterSpec / clusterMapBytes (_tfcluster.tpl) ------

ENV_LIMIT = 131072  # Linux MAX_ARG_STRLEN: one argument or NAME=value string, NUL included
DNS_NAME_MAX = 253  # a DNS name, without its trailing dot


def digit_sum(count: int) -> int:
    """Characters of the ordinals 0 .. count-1 written in decimal."""
    total, low, high, digits = 0, 0, 10, 1
    while count > low:
        total += (min(count, high) - low) * digits
        low, high, digits = high, high * 10, digits + 1
    return total


@dataclass(frozen=True)
class ClusterShape:
    """What the cluster map's size depends on."""

    prefix: int  # len(fullname)
    namespace: int
    domain: int
    ports: tuple[int, int, int]  # chief, ps, worker
    ps: int  # parameter-server tasks in the map (0: none)
    workers: int  # worker tasks in the map (0: none)
    evaluator: bool

    def map_bytes(self) -> int:
        """len(TFD_CLUSTER's value): {"chief":["<chief>"],"ps":[...],"worker":[...]}, addresses
        <service>-<i>.<service>.<namespace>.svc.<domain>:<port>."""
        chief_service = self.prefix + len("-chief")
        chief_port, ps_port, worker_port = (len(str(port)) for port in self.ports)
        common = self.namespace + self.domain
        size = len('{"chief":["') + 2 * chief_service + common + len("...svc.:") + chief_port + len('"]')
        for key, service, count, port in (
            (PS, self.prefix + len("-ps"), self.ps, ps_port),
            (WORKER, self.prefix + len("-worker"), self.workers, worker_port),
        ):
            if count > 0:
                element = 2 * service + common + len('"-...svc.:"') + port
                size += len(f',"{key}":[]') + count * element + digit_sum(count) + count - 1
        return size + len("}")

    def task_bytes(self) -> int:
        """The longest `"type":"<type>","index":<i>` term of TF_CONFIG among the tasks."""
        terms = [len(CHIEF) + 1]
        if self.ps:
            terms.append(len(PS) + len(str(self.ps - 1)))
        if self.workers:
            terms.append(len(WORKER) + len(str(self.workers - 1)))
        if self.evaluator:
            terms.append(len(EVALUATOR) + 1)
        return max(terms)

    def tf_config_bytes(self) -> int:
        """The largest TF_CONFIG=<value> string the prelude execs with, its NUL included."""
        task = len('{"cluster":,"task":{"type":"","index":}}')
        return len("TF_CONFIG=") + self.map_bytes() + task + self.task_bytes() + 1

    def longest_host(self) -> tuple[str, int]:
        """(task, characters) of the longest task host name in the map."""
        common = self.namespace + self.domain + len("...svc.")
        found = [(CHIEF, 2 * (self.prefix + len("-chief")) + common)]
        for role, suffix, count in ((PS, "-ps", self.ps), (WORKER, "-worker", self.workers)):
            if count > 0:
                found.append(
                    (f"{role} {count - 1}", 2 * (self.prefix + len(suffix)) + 1 + len(str(count - 1)) + common)
                )
        return max(found, key=lambda item: item[1])

    def with_counts(self, ps: int, workers: int) -> ClusterShape:
        return ClusterShape(self.prefix, self.namespace, self.domain, self.ports, ps, workers, self.evaluator)

    def fits(self) -> bool:
        return self.tf_config_bytes() <= ENV_LIMIT


def largest_fitting(fits: Callable[[int], bool], high: int) -> int:
    """The largest n in [0, high] with fits(n) (fits is monotone: true up to some n), -1 if none."""
    low, high = -1, high
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def longest_shape(ps: int, workers: int) -> ClusterShape:
    """The largest map of ps/workers tasks the chart lets start: a 45-character prefix, a 63-character
    namespace, 5-digit ports and the clusterDomain that makes the longest task host exactly 253 characters."""
    shape = ClusterShape(NAME_BUDGET, NAMESPACE_MAX, 0, (65535, 65535, 65535), ps, workers, False)
    domain = DNS_NAME_MAX - shape.longest_host()[1]
    return ClusterShape(NAME_BUDGET, NAMESPACE_MAX, domain, (65535, 65535, 65535), ps, workers, False)


# The schema maxima (scripts/gen_schema.py): the most tasks whose TF_CONFIG still fits one environment
# variable with the longest names: workers under multi_worker_mirrored (chief + workers), parameter
# servers next to the one worker parameter_server needs. Larger combinations are caught by
# cluster_map_fits_one_variable with the real names.
MAX_WORKERS = largest_fitting(lambda n: longest_shape(0, n).fits(), 100000)
MAX_PS = largest_fitting(lambda n: longest_shape(n, 1).fits(), 100000)


def cluster_shape(v: dict[str, Any], found: Names) -> ClusterShape | None:
    strategy = get(v, "training.strategy")
    ps, workers = integer(get(v, "ps.replicas")), integer(get(v, "worker.replicas"))
    domain = get(v, "clusterDomain")
    ports = tuple(integer(get(v, f"{role}.service.port")) for role in (CHIEF, PS, WORKER))
    if ps is None or workers is None or not isinstance(domain, str) or None in ports:
        return None
    ps_tasks = ps if strategy == "parameter_server" and ps > 0 else 0
    worker_tasks = workers if strategy in ("parameter_server", "multi_worker_mirrored") and workers > 0 else 0
    evaluator = get(v, "evaluator.enabled") is True
    chief_port, ps_port, worker_port = (port or 0 for port in ports)
    return ClusterShape(
        len(found.fullname),
        len(found.namespace),
        len(domain),
        (chief_port, ps_port, worker_port),
        ps_tasks,
        worker_tasks,
        evaluator,
    )


@named_rule
def task_names_fit_dns(v: dict[str, Any], release: Release) -> Iterator[Problem]:
    found = names(v, release)
    shape = cluster_shape(v, found)
    if shape is None:
        return
    task, length = shape.longest_host()
    if length > DNS_NAME_MAX:
        yield Problem(
            "clusterDomain",
            f"the host name of TensorFlow task {task} (<task>.<service>.<namespace>.svc.<clusterDomain>) would be "
            f"{length} characters{_assumed(found)}, but DNS names are limited to {DNS_NAME_MAX}, so the task "
            "could not be resolved",
            get(v, "clusterDomain"),
            f"--set clusterDomain=<at most {DNS_NAME_MAX - length + shape.domain} characters> "
            "(or a shorter release name or namespace)",
        )


@named_rule
def cluster_map_fits_one_variable(v: dict[str, Any], release: Release) -> Iterator[Problem]:
    found = names(v, release)
    shape = cluster_shape(v, found)
    if shape is None or shape.fits():
        return
    tasks = 1 + shape.ps + shape.workers
    message = (
        f"the cluster map of {tasks} tasks would be {shape.map_bytes()} bytes and TF_CONFIG "
        f"{shape.tf_config_bytes()} bytes{_assumed(found)}; Linux limits one environment variable to "
        f"{ENV_LIMIT} bytes (MAX_ARG_STRLEN), so the pods would not start (Argument list too long)"
    )
    names_fix = "shorter release/namespace names or clusterDomain"
    workers = largest_fitting(lambda n: shape.with_counts(shape.ps, n).fits(), shape.workers)
    if shape.workers and workers >= 1:
        yield Problem(
            "worker.replicas", message, shape.workers, f"fewer tasks (--set worker.replicas={workers}) or {names_fix}"
        )
        return
    ps = largest_fitting(lambda n: shape.with_counts(n, shape.workers).fits(), shape.ps)
    if shape.ps and ps >= 1:
        yield Problem("ps.replicas", message, shape.ps, f"fewer tasks (--set ps.replicas={ps}) or {names_fix}")
        return
    yield Problem("clusterDomain", message, get(v, "clusterDomain"), names_fix)


# -- labels the chart owns --------------------------------------------------------------------------

RESERVED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/version",
    "helm.sh/chart",
    "apps.kubernetes.io/pod-index",
)


def _escaped(key: str) -> str:
    return key.replace(".", "\\.")


@named_rule
def reserved_labels(v: dict[str, Any], _release: Release) -> Iterator[Problem]:
    for owner, key, value in labels_set_by_hand(v, RESERVED_LABELS):
        yield Problem(
            f"{owner}.{key}",
            "is a label the chart sets itself to select the release's pods (Services, NetworkPolicies, "
            "co-location) or to find the task index; overriding it would let other pods in or break them",
            value,
            f"--set {owner}.{_escaped(key)}=null (choose another label key)",
        )


# -- mounts the chart adds: the twin of tf-distributed.volumes / volumeMounts -----------------------

TMP = "/tmp"
SHM = "/dev/shm"
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount"
RESERVED_MOUNTS = {
    TMP: "an emptyDir for temporary files",
    SHM: "shared memory of GPU pods",
    TOKEN: "the service-account token directory",
}


def _covers(claim: str, reserved: str) -> bool:
    """The claim would sit on a chart mount (duplicate mountPath: the API refuses the pod) or above it
    (hiding /dev, the token's directory...). Below one is fine: the kubelet nests mounts, and
    `tfchart local` puts its run directory wherever the user's --workdir is, /tmp included."""
    return claim == reserved or reserved.startswith(claim.rstrip("/") + "/")


def supervisor_enabled(v: dict[str, Any]) -> bool:
    """The twin of the chart's tf-distributed.supervisorEnabled."""
    strategy = get(v, "training.strategy")
    ps, workers = integer(get(v, "ps.replicas")) or 0, integer(get(v, "worker.replicas")) or 0
    targets = (strategy == "parameter_server" and ps > 0) or (
        strategy in ("parameter_server", "multi_worker_mirrored") and workers > 0 and chief_enabled(v)
    )
    timeout = (integer(get(v, "scheduling.startTimeoutSeconds")) or 0) > 0
    return get(v, "supervisor.enabled") is True and (targets or get(v, "evaluator.enabled") is True or timeout)


@named_rule
def storage_mount_path_is_free(v: dict[str, Any], _release: Release) -> Iterator[Problem]:
    path = get(v, "storage.mountPath")
    if not isinstance(path, str):
        return
    for reserved, what in RESERVED_MOUNTS.items():
        if _covers(path, reserved):
            yield Problem(
                "storage.mountPath",
                f"{path} is or contains {reserved}, where the chart mounts {what}",
                path,
                "--set storage.mountPath=/data",
            )




@named_rule
def working_dir_is_free(v: dict[str, Any], _release: Release) -> Iterator[Problem]:
    storage_path = get(v, "storage.mountPath")
    for role in TF_ROLES:
        path = get(v, f"{role}.workingDir")
        if not isinstance(path, str):
            continue
        taken = dict(RESERVED_MOUNTS)
        if isinstance(storage_path, str):
            taken[storage_path] = "the shared volume (storage.mountPath)"
        for reserved, what in taken.items():
            if _covers(path, reserved):
                yield Problem(
                    f"{role}.workingDir",
                    f"{path} is or contains {reserved}, where the chart mounts {what}; the working directory is "
                    "an emptyDir of its own",
                    path,
                    f"--set {role}.workingDir=/workspace",
                )
                break


@named_rule
def extra_volumes_do_not_collide(v: dict[str, Any], _release: Release) -> Iterator[Problem]:
    storage_path = get(v, "storage.mountPath")
    for role in COMPONENTS:
        gpus = (integer(get(v, f"{role}.gpu.count")) or 0) > 0
        volumes = {"shared": True, "tmp": True, "dshm": gpus, "workdir": role in TF_ROLES}
        volumes["model-config"] = role == SERVING
        used = {TMP: "tmp"}  # mount path -> what the chart mounts there (the chart's $mounts, in its order)
        if role == SERVING:
            used[MODEL_CONFIG_DIR] = "the model config"
        working_dir = get(v, f"{role}.workingDir") if role in TF_ROLES else None
        if isinstance(working_dir, str):
            used[working_dir] = "the working directory"
        if gpus:
            used[SHM] = "dshm"
        if isinstance(storage_path, str):
            used[storage_path] = "the shared volume"
        extra = get(v, f"{role}.extraVolumes")
        for index, volume in enumerate(extra if isinstance(extra, list) else []):
            name = volume.get("name") if isinstance(volume, dict) else None
            if isinstance(name, str) and volumes.get(name):
                yield Problem(
                    f"{role}.extraVolumes.{index}.name",
                    f"the chart already adds a volume named {name} to the {role} pods (Kubernetes rejects duplicates)",
                    name,
                    f"--set {role}.extraVolumes[{index}].name=extra-{name} (and the extraVolumeMounts that use it)",
                )
        mounted = get(v, f"{role}.extraVolumeMounts")
        for index, mount in enumerate(mounted if isinstance(mounted, list) else []):
            path = mount.get("mountPath") if isinstance(mount, dict) else None
            if isinstance(path, str) and path in used:
                yield Problem(
                    f"{role}.extraVolumeMounts.{index}.mountPath",
                    f"the chart already mounts {used[path]} at {path} in the {role} container "
                    "(Kubernetes rejects two mounts at one path)",
                    path,
                    f"--set {role}.extraVolumeMounts[{index}].mountPath=/mnt/{mount.get('name') or 'extra'}",
                )


# -- requests <= limits: Kubernetes quantities compared exactly --------------------------------------

QUANTITY = re.compile(r"\+?([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?")
DECIMAL_SUFFIXES = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
QUANTITY_MAX = 2**63 - 1  # Kubernetes caps a quantity at this many base units
FAR = 10000  # an exponent beyond every quantity the schema admits (at most 64 characters)


def go_float(value: float) -> str:
    """A float as Go's %v writes it: the shortest decimal that reads back as the same float, in
    exponent form (1e+06, 1.5e-05) below 1e-4 and from 1e6 up, as Python's repr is from 1e16."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent  # digits before the decimal point
    scientific = point - 1
    minus = "-" if sign else ""
    if scientific < -4 or scientific >= 6:
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        return f"{minus}{mantissa}e{'+' if scientific >= 0 else '-'}{abs(scientific):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{minus}{digits}{'0' * (point - len(digits))}"
    return f"{minus}{digits[:point]}.{digits[point:]}"


def quantity_nanos(value: Any) -> int | None:
    """A Kubernetes quantity in nano-units, as the API server stores it: rounded up to 1n, capped at 2^63-1."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = go_float(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    match = QUANTITY.fullmatch(text)
    if match is None or not (match.group(1) or match.group(2)):
        return None
    whole, fraction, suffix = match.group(1), match.group(2) or "", match.group(3) or ""
    digits = int(whole + fraction or "0")
    exponent, shift = -len(fraction), 0
    if suffix in BINARY_SUFFIXES:
        shift = BINARY_SUFFIXES[suffix]
    elif suffix in DECIMAL_SUFFIXES:
        exponent += DECIMAL_SUFFIXES[suffix]
    else:
        written = suffix[1:].lstrip("+")
        magnitude = written.lstrip("-").lstrip("0")
        power = FAR if len(magnitude) > 4 else int(magnitude or "0")
        exponent += -power if written.startswith("-") else power
    exponent = max(-FAR, min(FAR, exponent))
    amount = Fraction(digits << shift) * Fraction(10) ** (exponent + 9)
    nanos = -((-amount.numerator) // amount.denominator)  # rounded up, as the API server does
    return min(nanos, QUANTITY_MAX * 10**9)


def shown_quantity(value: Any) -> str:
    """A quantity as messages show it (the twin of tf-distributed.quantityText): strings as written,
    integers below 10^15 in full, other numbers as Go writes a float."""
    if isinstance(value, (str, bool)):
        return str(value)
    number = float(value)
    if number < 1e15 and number == int(number):
        return str(int(number))
    return go_float(number)


def overcommitable(resource: str) -> bool:
    """cpu, memory, ephemeral-storage and kubernetes.io/ names; extended resources and hugepages are not."""
    if resource.startswith("hugepages-"):
        return False
    return "/" not in resource or resource.startswith("kubernetes.io/")


@named_rule
def requests_within_limits(v: dict[str, Any], _release: Release) -> Iterator[Problem]:
    for role in COMPONENTS:
        requests, limits = get(v, f"{role}.resources.requests"), get(v, f"{role}.resources.limits")
        if not isinstance(requests, dict) or not isinstance(limits, dict):
            continue
        for resource, requested in sorted(requests.items()):  # the chart's keys | sortAlpha
            if resource not in limits or resource == get(v, f"{role}.gpu.resourceName"):
                continue
            request, limit = quantity_nanos(requested), quantity_nanos(limits[resource])
            if request is None or limit is None:
                continue
            key = _escaped(resource)
            shown = shown_quantity(limits[resource])
            if request > limit:
                yield Problem(
                    f"{role}.resources.requests.{resource}",
                    f"{shown_quantity(requested)} is more than the limit {shown} "
                    f"({role}.resources.limits.{resource}); Kubernetes rejects a request above its limit",
                    requested,
                    f"--set {role}.resources.requests.{key}={shown} (or raise the limit)",
                )
            elif request != limit and not overcommitable(resource):
                yield Problem(
                    f"{role}.resources.requests.{resource}",
                    f"{shown_quantity(requested)} differs from the limit {shown}; Kubernetes requires "
                    f"the request of {resource} to equal its limit",
                    requested,
                    f"--set {role}.resources.requests.{key}={shown}",
                )


def check(values: dict[str, Any], release: Release | None = None) -> list[Problem]:
    names = release or Release()
    return [problem for function in RULES.values() for problem in function(values, names)]
