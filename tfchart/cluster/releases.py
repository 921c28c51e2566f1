"""`tfchart list`: this chart's releases in a namespace (or all of them), found by the chart's part-of label, each
with its run state as `tfchart status` derives it (the run's Job, its chief pod's reported progress, else the record on
the Job), the GPUs its unfinished pods request and its age. Pods and Services are read a page at a time: a large
cluster's pods are never all held at once, and only the chief pods are kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tfchart.cluster import objects
from tfchart.cluster.status import read_progress, training_state
from tfdcontract import CHART_NAME, INSTANCE_LABEL, PART_OF_LABEL
from tfdcontract.runstate import parse_time

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class ReleaseRun:
    release: str
    namespace: str
    state: str  # as `tfchart status`: Running | Succeeded | Failed | Pending | Suspended | Unknown
    step: int | None
    train_steps: int | None
    gpus: dict[str, int]  # requested by its pods that are scheduled and not finished, per resource
    age_seconds: int | None
    suspended_since: str | None = None  # a Suspended run: since when
    kind: str = "Job"  # the run's object: Job, or JobSet (workload.kind=jobset)


@dataclass
class Found:
    """What the pages said of one release."""

    jobs: list[Any] = field(default_factory=list)
    jobsets: list[dict[str, Any]] = field(default_factory=list)
    chief_pods: list[Any] = field(default_factory=list)
    gpus: Counter[str] = field(default_factory=Counter)
    created: float | None = None  # seconds since the epoch: of its oldest Job, Service or JobSet


def list_runs(api: KubeApi, namespace: str | None, *, now: datetime | None = None) -> list[ReleaseRun]:
    """The releases in `namespace` (None: every namespace), sorted by namespace and name."""
    selector = f"{PART_OF_LABEL}={CHART_NAME}"
    found: dict[tuple[str, str], Found] = {}

    def release_of(obj: dict[str, Any]) -> Found | None:
        metadata = obj["metadata"]
        instance = (metadata.get("labels") or {}).get(INSTANCE_LABEL)
        return found.setdefault((metadata.get("namespace") or "", instance), Found()) if instance else None

    def read(kind: str, pages: Iterable[list[dict[str, Any]]]) -> None:
        for obj in (obj for page in pages for obj in page):
            if (each := release_of(obj)) is None:
                continue
            if kind == "Pod":
                count_pod(each, obj)
            elif (at := parse_time(obj["metadata"].get("creationTimestamp"))) is not None:
                each.created = at if each.created is None else min(each.created, at)
            {"Job": each.jobs, "JobSet": each.jobsets}.get(kind, []).append(obj)

    read("Job", [api.items("Job", namespace, selector)])  # a release has one or two
    read("Service", api.pages("Service", namespace, selector))
    read("Pod", api.pages("Pod", namespace, selector))
    if any(objects.may_be_jobset(each.jobs) for each in found.values()):  # JobSet releases (workload.kind=jobset)
        read("JobSet", [objects.jobsets(api, namespace, selector)])
    moment = now or datetime.now(timezone.utc)
    return [release_run(api, release, ns, each, moment) for (ns, release), each in sorted(found.items())]


def count_pod(each: Found, pod: dict[str, Any]) -> None:
    scheduled, phase = (pod.get("spec") or {}).get("nodeName"), (pod.get("status") or {}).get("phase")
    if scheduled and phase not in FINISHED and not pod["metadata"].get("deletionTimestamp"):
        each.gpus.update(objects.pod_gpus(pod))
    if objects.role_of(pod) == objects.run_role(each.jobs) and objects.is_chief_pod(pod):  # a candidate chief
        each.chief_pods.append(pod)


def release_run(api: KubeApi, release: str, namespace: str, each: Found, now: datetime) -> ReleaseRun:
    chief = objects.run_of(objects.newest(each.jobsets), each.jobs, each.chief_pods).info
    own = [pod for pod in each.chief_pods if objects.role_of(pod) == chief.role]
    progress = read_progress(api, namespace, chief, own)[0]
    training = training_state(chief, progress)
    age = None if each.created is None else int(now.timestamp() - each.created)
    step, total = (progress["step"], progress["train_steps"]) if progress else (None, None)
    since = chief.suspended_since if training["state"] == "Suspended" else None
    return ReleaseRun(release, namespace, training["state"], step, total, dict(sorted(each.gpus.items())), age, since,
                      chief.kind)
