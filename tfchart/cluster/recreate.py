"""What `tfchart upgrade --recreate` does to one object and how long it waits: a Job or JobSet marked before it is
deleted (the run supervisor then waits for the new one); upgrade.recreate_objects reads each deletion until it is
gone, and says what is still there when the wait times out."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfchart.cluster.kube import Deletion, KubeApi
from tfchart.errors import KubernetesError
from tfchart.helm.runner import format_duration
from tfdcontract import RECREATING_ANNOTATION

DEFAULT_DELETE_TIMEOUT = 300.0  # seconds, helm's default --timeout (5m)
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Waiting:
    """How long --recreate waits for its deletions, and how (tests pass a fake clock)."""

    timeout: float = DEFAULT_DELETE_TIMEOUT
    interval: float = POLL_SECONDS
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


def delete_to_recreate(deleter: KubeApi, kind: str, name: str, namespace: str, propagation: str) -> Deletion:
    """Deletes one object for --recreate. A Job or JobSet is marked first (RECREATING_ANNOTATION): the run
    supervisor then waits for the new one, where a run's object deleted unmarked ends the run at once."""
    if kind in ("Job", "JobSet") and deleter.read_object(kind, name, namespace) is not None:
        deleter.patch(kind, name, namespace, {"metadata": {"annotations": {RECREATING_ANNOTATION: "true"}}})
    return deleter.delete(kind, name, namespace, propagation)


def deletion_timeout(still: list[tuple[str, str, dict[str, Any]]], namespace: str, timeout: float) -> KubernetesError:
    lines = []
    for kind, name, document in still:
        metadata = document.get("metadata") or {}
        since = metadata.get("deletionTimestamp")
        finalizers = ", ".join(metadata.get("finalizers") or []) or "none"
        state = f"terminating since {since}" if since else "not marked for deletion"
        lines.append(f"  - {kind} {name}: still there ({state}; finalizers: {finalizers})")
    first_kind, first_name, _ = still[0]
    return KubernetesError(f"timed out after {format_duration(timeout)} waiting for the deletions of --recreate to "
                           "finish; helm upgrade was not run:\n" + "\n".join(lines),
                           f"see why with `kubectl -n {namespace} get {first_kind.lower()} {first_name} -o yaml` "
                           "(finalizers are removed by the garbage collector once the pods are stopped or released); "
                           "then run the same `tfchart upgrade --recreate` again (objects already gone are created by "
                           "helm), or raise --timeout")
