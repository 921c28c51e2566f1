"""`tfchart logs`: the log of one task of a release (the chief by default), or of all its pods merged, each
pod found by the chart's labels. The chief is found as `tfchart status` finds it: the run's Job's (worker
0's with chief.replicas=0) newest pod. StatefulSet tasks (ps, worker) are picked by their ordinal (the
`apps.kubernetes.io/pod-index` label, else the name's `-<ordinal>` suffix); Job tasks (chief, evaluator) by
the Job's newest pod; Deployments (tensorboard, serving) by position in name order.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Generator, Iterator, Sequence
from contextlib import closing, suppress
from typing import TYPE_CHECKING, Any, TextIO

from tfchart.cluster import objects
from tfchart.cluster.objects import role_of
from tfchart.cluster.status import ordinal, pod_order
from tfchart.errors import KubernetesError, UsageError
from tfdcontract import CHIEF, JOB_ROLES, STATEFUL_ROLES, release_selector
from tfdcontract.runstate import name_of

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

def stream(
    api: KubeApi, release: str, namespace: str, role: str | None, index: int, follow: bool, tail: int | None,
    out: TextIO, err: TextIO = sys.stderr, *, all_roles: bool = False, **options: Any,
) -> None:  # fmt: skip
    """Write the log of task `role`/`index` (None: the chief) to `out`; with `follow`, until the container ends
    or Ctrl-C. `all_roles`: every started pod's log instead, each line prefixed `[pod/NAME/CONTAINER] ` as kubectl's
    --prefix, one pod after the other, or with `follow` interleaved line by line as they arrive; a pod without a log
    (not started; no previous container) is named on `err`. `options`: kubectl's --previous, --since, --timestamps
    (previous, since_seconds, timestamps)."""
    check_arguments(role or CHIEF, index, tail)
    chief = role is None and not all_roles
    if chief:  # the chief's newest pod: the chief Job's, or worker 0's of the workers' Job (under a JobSet, of
        # Job `<jobset>-chief-0`, or worker 0 of `<jobset>-worker-0`: the role its success policy targets)
        jobs = api.items("Job", namespace, release_selector(release))
        role = objects.find_run(api, release, namespace, jobs).info.role  # lists JobSets only where it may be one
    pods = api.items("Pod", namespace, release_selector(release, None if all_roles else role))
    if all_roles and not pods:
        raise KubernetesError(f"release {release} has no pods in namespace {namespace}",
                              f"see `tfchart status {release} -n {namespace}`, or check the release and namespace "
                              f"(`tfchart list -A`)")  # fmt: skip
    if not all_roles:
        pods = [pick_pod([pod for pod in pods if objects.is_chief_pod(pod)] if chief else pods, release, namespace,
                         CHIEF if chief else str(role), index)]  # fmt: skip
    streams = []
    for pod in sorted(pods, key=pod_order):  # as status lists them
        try:
            lines = open_log(api, namespace, pod, tail, follow, options)
        except KubernetesError as error:
            if not all_roles:
                raise
            err.write(f"skipped: {error.message}\n")
            continue
        prefix = f"[pod/{name_of(pod)}/{objects.main_container(pod, role_of(pod))}] " if all_roles else ""
        streams.append((prefix, lines))
    for prefix, lines in [("", merged(streams))] if follow and all_roles else streams:  # followed: as they arrive
        try:
            with closing(lines), suppress(KeyboardInterrupt):  # frees the HTTP connection; Ctrl-C ends a followed log
                for line in lines:
                    out.write(prefix + line + "\n")
                    if follow:
                        out.flush()
        finally:
            out.flush()


def open_log(api: KubeApi, namespace: str, pod: Any, tail: int | None, follow: bool,
             options: dict[str, Any]) -> Generator[str, None, None]:
    """The lines of the pod's main container's log. A pod whose container never ran has no log, nor one that never
    restarted a previous log: that is said, instead of the API server's 400."""
    role, name = role_of(pod), name_of(pod)
    container = objects.main_container(pod, role)
    if options.get("previous"):
        statuses = [s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s.get("name") == container]
        if not any((s.get("lastState") or {}).get("terminated") for s in statuses):
            raise KubernetesError(f"{role} pod {name} has no previous log: its container has not restarted",
                                  "leave out --previous for the current container's log")
    elif not objects.has_started(pod):
        phase = (pod.get("status") or {}).get("phase") or "Unknown"
        reason, message = objects.pod_reason(pod)
        why = f"{reason}: {message}" if message else reason or "waiting to start"
        raise KubernetesError(f"{role} pod {name} has not started yet (phase {phase}, {why})",
                              f"wait and retry, or see why with `kubectl -n {namespace} describe pod {name}`")
    return api.stream_pod_log(namespace, name, container, tail, follow, **options)


def merged(streams: Sequence[tuple[str, Iterator[str]]]) -> Generator[str, None, None]:
    """The lines of every stream, prefixed, in the order they arrive (a reader thread per stream)."""
    arrived: queue.Queue[str | None] = queue.Queue()

    def read(prefix: str, lines: Iterator[str]) -> None:
        try:
            for line in lines:
                arrived.put(prefix + line)
        finally:
            arrived.put(None)

    for prefix, lines in streams:  # daemon threads: Ctrl-C ends the command without waiting for quiet logs
        threading.Thread(target=read, args=(prefix, lines), daemon=True, name=prefix).start()
    for _ in streams:  # until every stream said it ended (its None); the lines between are yielded as they came
        yield from iter(arrived.get, None)


def check_arguments(role: str, index: int, tail: int | None) -> None:
    """What the CLI's choices do not check (the role is one of its --role choices)."""
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
        return objects.newest(pods)
    # StatefulSet tasks by their ordinal, Deployments' pods by position in name order
    stateful = role in STATEFUL_ROLES
    by_index = {ordinal(pod): pod for pod in pods} if stateful else dict(enumerate(sorted(pods, key=name_of)))
    if index in by_index:
        return by_index[index]
    known = sorted(i for i in by_index if i is not None)
    raise UsageError(f"{role} index {index} is out of range: release {release} has {len(pods)} {role} pod(s)"
                     + (f" (indices {', '.join(map(str, known))})" if known else ""),
                     f"pick one of those indices, e.g. "
                     f"`tfchart logs {release} -n {namespace} --role {role} --index {known[0] if known else 0}`")
