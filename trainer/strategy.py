"""tf.distribute strategies and servers for each --strategy, built from a Task."""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import tensorflow as tf

from tfdcontract import PS, WORKER
from tfdcontract.phases import waiting_for_peers_line
from trainer.cluster import Task
from trainer.errors import ClusterFailure

log = logging.getLogger("trainer.strategy")


def _resolver(task: Task) -> Any:
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(task.cluster),
        task_type=task.task_type,
        task_id=task.task_index,
        rpc_layer="grpc",
    )


def make_strategy(strategy: str, task: Task) -> Any:
    """The tf.distribute.Strategy for ``strategy`` (the PS one only on the chief)."""
    if strategy == "parameter_server":
        return tf.distribute.experimental.ParameterServerStrategy(_resolver(task))
    if strategy == "multi_worker_mirrored":
        if not task.cluster:
            return tf.distribute.MultiWorkerMirroredStrategy()
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=_resolver(task))
    if strategy == "mirrored":
        return tf.distribute.MirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


def start_server(task: Task) -> Any:
    """Start this task's gRPC tf.distribute.Server (ps and worker under parameter_server)."""
    return tf.distribute.Server(
        tf.train.ClusterSpec(task.cluster),
        job_name=task.task_type,
        task_index=task.task_index,
        protocol="grpc",
        start=True,
    )


def wait_for_cluster(task: Task, timeout_secs: float, poll_secs: float = 2.0) -> None:
    """Wait until every ps and worker accepts TCP connections (pods start in parallel).

    Only for the parameter_server chief: its peers are plain servers. Raises
    ClusterFailure naming the missing tasks after ``timeout_secs``.
    """
    deadline = time.monotonic() + timeout_secs
    pending = {
        f"{job}:{i}": addr
        for job in (PS, WORKER)
        for i, addr in enumerate(task.cluster.get(job, []))
    }
    reported = 0.0
    while pending:
        for name, addr in list(pending.items()):
            host, _, port = addr.rpartition(":")
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
                    del pending[name]
            except OSError:
                pass
        if not pending:
            break
        now = time.monotonic()
        if now >= deadline:
            missing = ", ".join(f"{n} ({a})" for n, a in pending.items())
            raise ClusterFailure(
                f"cluster tasks not reachable after {timeout_secs:.0f}s: {missing}; check that "
                f"the ps/worker pods run and that the addresses in TF_CONFIG are right"
            )
        if now - reported >= 30:
            log.info("%s", waiting_for_peers_line(pending))
            reported = now
        time.sleep(poll_secs)
