"""`tfchart logs`: the log of one task of a release, its pod found by the chart's labels. StatefulSet
tasks (ps, worker) are picked by their ordinal (the `apps.kubernetes.io/pod-index` label, else the name's
`-<ordinal>` suffix); Job tasks (chief, evaluator) by the Job's newest pod; Deployments (tensorboard,
serving) by position in name order.
"""

from __future__ import annotations

import re
from contextlib import closing, suppress
from typing import TYPE_CHECKING, Any, TextIO

from tfchart.cluster.objects import has_started, main_container, name_of, newest, pod_reason
from tfchart.errors import KubernetesError, UsageError
from tfdcontract import CLIENT_ROLES, JOB_ROLES, POD_INDEX_LABEL, STATEFUL_ROLES, release_selector

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

ROLES = JOB_ROLES + STATEFUL_ROLES + CLIENT_ROLES  # CLIENT_ROLES run as Deployments


def stream(
    api: KubeApi, release: str, namespace: str, role: str, index: int, follow: bool, tail: int | None, out: TextIO
) -> None:
    """Write the log of task `role`/`index` to `out`; with `follow`, until the container ends or Ctrl-C."""
    check_arguments(role, index, tail)
    pods = api.list_objects("Pod", namespace, release_selector(release, role))
    pod = pick_pod(pods, release, namespace, role, index)
    check_started(pod, role)
    lines = api.stream_pod_log(namespace, name_of(pod), main_container(pod, role), tail, follow)
    try:
        with closing(lines), suppress(KeyboardInterrupt):  # frees the HTTP connection; Ctrl-C ends a followed log
            for line in lines:
                out.write(line + "\n")
                if follow:
                    out.flush()
    finally:
        out.flush()


def check_arguments(role: str, index: int, tail: int | None) -> None:
    if role not in ROLES:
        raise UsageError(f"unknown role {role!r}", f"valid roles: {', '.join(ROLES)}")
    if index < 0:
        raise UsageError(f"invalid index {index}: task indices start at 0",
                         f"e.g. `tfchart logs RELEASE --role {role} --index 0`")
    if role in JOB_ROLES and index != 0:
        raise UsageError(f"a release has one {role}: index {index} is out of range", f"use index 0 for the {role}")
    if tail is not None and tail < 0:
        raise UsageError(f"invalid --tail {tail}", "pass a number of lines >= 0, or leave it out for the whole log")


def pick_pod(pods: list[Any], release: str, namespace: str, role: str, index: int) -> Any:
    if not pods:
        raise KubernetesError(f"release {release} has no {role} pods in namespace {namespace}",
                              f"see `tfchart status {release} -n {namespace}`: the role may be disabled, scaled down "
                              "after success, or the release/namespace may be wrong")
    if role in JOB_ROLES:
        return newest(pods)
    if role in STATEFUL_ROLES:
        by_index = {ordinal(pod): pod for pod in pods}
        if index in by_index:
            return by_index[index]
        known = sorted(i for i in by_index if i is not None)
        raise UsageError(f"{role} index {index} is out of range: release {release} has {len(pods)} {role} pod(s)"
                         + (f" (indices {', '.join(map(str, known))})" if known else ""),
                         f"pick one of those indices, e.g. "
                         f"`tfchart logs {release} -n {namespace} --role {role} --index {known[0] if known else 0}`")
    ordered = sorted(pods, key=name_of)
    if index >= len(ordered):
        raise UsageError(f"{role} index {index} is out of range: release {release} has {len(ordered)} {role} pod(s)",
                         f"use an index from 0 to {len(ordered) - 1}")
    return ordered[index]


def ordinal(pod: Any) -> int | None:
    """The StatefulSet ordinal: the pod-index label (Kubernetes 1.28+), else the name suffix."""
    label = (pod.metadata.labels or {}).get(POD_INDEX_LABEL)
    if label is not None and str(label).isdigit():
        return int(label)
    match = re.search(r"-(\d+)$", name_of(pod))
    return int(match.group(1)) if match else None


def check_started(pod: Any, role: str) -> None:
    """A pod whose container never ran has no log: say why instead of the API server's 400."""
    if has_started(pod):
        return
    phase = (pod.status.phase if pod.status else None) or "Unknown"
    reason, message = pod_reason(pod)
    why = f"{reason}: {message}" if message else reason or "waiting to start"
    raise KubernetesError(f"{role} pod {name_of(pod)} has not started yet (phase {phase}, {why})",
                          f"wait and retry, or see why with `kubectl -n {pod.metadata.namespace} describe pod "
                          f"{name_of(pod)}`")
