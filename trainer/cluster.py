"""Who am I? TF_CONFIG and classic-flag parsing and validation.

The result is one :class:`Task`: the cluster map (job name -> ordered host:port list, in
the exact TF_CONFIG shape), this process's job name and index. Both sources (TF_CONFIG,
or ``--job_name --task_index --ps_hosts --worker_hosts [--chief_hosts]``) produce the same
Task, validated against the chosen strategy. No TensorFlow import here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfdcontract import CHIEF, CLUSTER_JOBS, EVALUATOR, PS, WORKER
from trainer.config import JOB_NAMES, ClassicFlags, TrainConfig
from trainer.errors import ClusterError


@dataclass(frozen=True)
class Task:
    """This process's place in the cluster.

    ``cluster`` is empty for a process that is not part of a TF cluster (mirrored,
    single_device, or TF_CONFIG absent). ``task_type`` is one of chief, worker, ps,
    evaluator.
    """

    task_type: str
    task_index: int
    cluster: dict[str, list[str]] = field(default_factory=dict)
    source: str = "none"

    @property
    def is_chief(self) -> bool:
        """The chief writes checkpoints, logs, status.json and exports.

        Without a chief job in the cluster, worker 0 is the chief (TensorFlow convention).
        """
        if self.task_type == CHIEF:
            return True
        return self.task_type == WORKER and self.task_index == 0 and CHIEF not in self.cluster

    @property
    def name(self) -> str:
        """``type:index`` for log lines."""
        return f"{self.task_type}:{self.task_index}"

    def tf_config(self) -> dict[str, Any]:
        """The TF_CONFIG dictionary equivalent to this task."""
        return {"cluster": self.cluster, "task": {"type": self.task_type, "index": self.task_index}}


def _check_address(job: str, i: int, addr: object, where: str) -> str:
    if not isinstance(addr, str) or ":" not in addr:
        raise ClusterError(f"{where}: {job}[{i}] = {addr!r} is not a 'host:port' string")
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(f"{where}: {job}[{i}] = {addr!r} is not a valid 'host:port'")
    return addr


def _check_cluster(cluster: object, where: str) -> dict[str, list[str]]:
    if not isinstance(cluster, dict):
        raise ClusterError(f"{where}: 'cluster' must be an object mapping job names to lists")
    out: dict[str, list[str]] = {}
    for job, addrs in cluster.items():
        if job not in CLUSTER_JOBS:
            hint = " (TF 1.x 'master' is called 'chief')" if job == "master" else ""
            if job == EVALUATOR:
                hint = " (the evaluator is a task type only; it is never in the cluster map)"
            raise ClusterError(
                f"{where}: unknown job name {job!r} in the cluster: valid job names are "
                f"{', '.join(CLUSTER_JOBS)}{hint}"
            )
        if not isinstance(addrs, list):
            raise ClusterError(f"{where}: cluster[{job!r}] must be a list of 'host:port'")
        if not addrs:
            continue
        out[job] = [_check_address(job, i, a, where) for i, a in enumerate(addrs)]
    if len(out.get(CHIEF, [])) > 1:
        raise ClusterError(f"{where}: at most one chief is allowed, got {len(out[CHIEF])}")
    seen: dict[str, str] = {}
    for job, addrs in out.items():
        for i, a in enumerate(addrs):
            if a in seen:
                raise ClusterError(f"{where}: address {a} is used by both {seen[a]} and {job}[{i}]")
            seen[a] = f"{job}[{i}]"
    return out


def parse_tf_config(raw: str) -> Task:
    """Parse and validate a TF_CONFIG string (structure only, not the strategy)."""
    where = "TF_CONFIG"
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ClusterError(f"TF_CONFIG is not valid JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(doc, dict):
        raise ClusterError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = _check_cluster(doc.get("cluster", {}), where)
    task = doc.get("task")
    if task is None:
        if cluster:
            raise ClusterError(
                "TF_CONFIG has a cluster but no 'task' {\"type\": ..., \"index\": N}"
            )
        return Task(CHIEF, 0, {}, "TF_CONFIG")
    if not isinstance(task, dict):
        raise ClusterError("TF_CONFIG 'task' must be an object {\"type\": ..., \"index\": N}")
    ttype = task.get("type")
    index = task.get("index", 0)
    if ttype not in JOB_NAMES:
        hint = " (TF 1.x 'master' is called 'chief')" if ttype == "master" else ""
        raise ClusterError(
            f"TF_CONFIG task type {ttype!r} is unknown: valid types are "
            f"{', '.join(JOB_NAMES)}{hint}"
        )
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ClusterError(f"TF_CONFIG task index {index!r} must be a non-negative integer")
    return _checked_task(ttype, index, cluster, "TF_CONFIG")


def _checked_task(ttype: str, index: int, cluster: dict[str, list[str]], source: str) -> Task:
    where = "TF_CONFIG" if source == "TF_CONFIG" else "classic flags"
    if ttype == EVALUATOR:
        if index != 0:
            raise ClusterError(f"{where}: at most one evaluator: its index must be 0, got {index}")
    elif cluster or source != "TF_CONFIG" or ttype != CHIEF:
        n = len(cluster.get(ttype, []))
        if n == 0:
            raise ClusterError(
                f"{where}: this task is {ttype}:{index} but the cluster has no {ttype!r} job; "
                f"add it to the cluster"
            )
        if index >= n:
            raise ClusterError(
                f"{where}: task index {index} is out of range: the cluster has {n} "
                f"{ttype!r} task(s) (valid: 0..{n - 1})"
            )
    return Task(ttype, index, cluster, source)


def from_classic_flags(flags: ClassicFlags, strategy: str) -> Task:
    """Build the Task from ``--job_name --task_index --ps_hosts --worker_hosts --chief_hosts``.

    Without ``--chief_hosts``, worker 0 is the chief. Under parameter_server (whose chief
    is a coordinator, not a server) worker_hosts[0] then becomes the chief address and the
    remaining workers are the server workers, re-indexed from 0.
    """
    assert flags.job_name is not None
    cluster: dict[str, list[str]] = {}
    raw = {CHIEF: list(flags.chief_hosts), WORKER: list(flags.worker_hosts),
           PS: list(flags.ps_hosts)}
    ttype, index = flags.job_name, flags.task_index
    if strategy == "parameter_server" and not raw[CHIEF] and raw[WORKER]:
        raw[CHIEF], raw[WORKER] = raw[WORKER][:1], raw[WORKER][1:]
        if ttype == WORKER:
            ttype, index = (CHIEF, 0) if index == 0 else (WORKER, index - 1)
    for job, addrs in raw.items():
        if addrs:
            cluster[job] = addrs
    cluster = _check_cluster(cluster, "classic flags")
    if ttype == EVALUATOR:
        return Task(EVALUATOR, 0, cluster, "flags")
    return _checked_task(ttype, index, cluster, "flags")


def resolve_task(cfg: TrainConfig, env: Mapping[str, str]) -> Task:
    """This process's Task from TF_CONFIG or classic flags, validated for cfg.strategy."""
    raw = env.get("TF_CONFIG", "").strip()
    if cfg.classic.given and raw:
        raise ClusterError(
            "both TF_CONFIG and --job_name are set: describe the cluster one way only "
            "(unset TF_CONFIG or drop the classic flags)"
        )
    if cfg.classic.given:
        task = from_classic_flags(cfg.classic, cfg.strategy)
    elif raw:
        task = parse_tf_config(raw)
    else:
        task = Task(CHIEF, 0, {}, "none")
    validate_for_strategy(task, cfg.strategy)
    return task


def validate_for_strategy(task: Task, strategy: str) -> None:
    """Check that the cluster fits the strategy; raise ClusterError naming the fix.

    The evaluator only reads checkpoints and never joins the cluster, so its TF_CONFIG
    may carry the full cluster map, an empty one, or none.
    """
    if task.task_type == EVALUATOR:
        return
    c = task.cluster
    src = {"TF_CONFIG": "TF_CONFIG", "flags": "the classic cluster flags"}.get(
        task.source, "the environment (TF_CONFIG unset, no --job_name)"
    )
    if strategy == "parameter_server":
        missing = [j for j in CLUSTER_JOBS if not c.get(j)]
        if missing:
            raise ClusterError(
                f"--strategy=parameter_server needs chief, ps and worker tasks in the cluster, "
                f"but {src} gives no {', '.join(missing)}: add them or choose "
                f"--strategy=multi_worker_mirrored|mirrored|single_device"
            )
    elif strategy == "multi_worker_mirrored":
        if c.get(PS):
            raise ClusterError(
                f"--strategy=multi_worker_mirrored does not use ps tasks but {src} has "
                f"{len(c[PS])}: remove them or use --strategy=parameter_server"
            )
        if task.task_type == PS:
            raise ClusterError("a ps task cannot run --strategy=multi_worker_mirrored")
    else:
        extra = {j: len(a) for j, a in c.items() if j != CHIEF}
        if extra or task.task_type not in (CHIEF, EVALUATOR):
            raise ClusterError(
                f"--strategy={strategy} runs on one machine: TF_CONFIG must be absent or "
                f"contain only the chief, but this task is {task.name} in a cluster with "
                f"{extra or c}: use --strategy=multi_worker_mirrored or parameter_server"
            )
