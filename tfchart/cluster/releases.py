"""`tfchart list`: this chart's releases in a namespace (or all of them), found by the chart's part-of label, each
with its run state as `tfchart status` derives it (the run's Job, its chief pod's reported progress, else the record on
the Job), the GPUs its unfinished pods request and its age. Pods and Services are read a page at a time: a large
cluster's pods are never all held at once, and only the chief pods are kept.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tfchart.cluster import objects
from tfchart.cluster.status import read_progress, training_state
from tfchart.manifests.workloads import gpus
from tfdcontract import CHART_NAME, INSTANCE_LABEL, PART_OF_LABEL
from tfdcontract.runstate import parse_time, pod_ended, spec

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

def list_runs(api: KubeApi, namespace: str | None, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """The releases in `namespace` (None: every namespace), sorted by namespace and name, each as `list -o json` shows
    it: release, namespace, state (as `tfchart status`: Running | Succeeded | Failed | Pending | Suspended | Unknown),
    step, train_steps, gpus (requested by its pods that are scheduled and not finished, per resource), age_seconds,
    suspended_since (a Suspended run: since when) and kind (the run's object: Job, or JobSet)."""
    selector = f"{PART_OF_LABEL}={CHART_NAME}"
    # per release: its Jobs, Services and JobSets, its candidate chief pods ("Pod"), and the GPUs of its pods
    found: dict[tuple[str, str], dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))

    def read(kind: str, pages: Iterable[list[dict[str, Any]]]) -> None:
        for obj in (obj for page in pages for obj in page):
            metadata = obj["metadata"]
            if not (instance := (metadata.get("labels") or {}).get(INSTANCE_LABEL)):
                continue
            each = found[(metadata.get("namespace") or "", instance)]
            if kind != "Pod":
                each[kind].append(obj)
            elif spec(obj).get("nodeName") and not pod_ended(obj) and not metadata.get("deletionTimestamp"):
                each["gpus"].append(gpus(obj.get("spec") or {}))
            if kind == "Pod" and objects.role_of(obj) == objects.run_role(each["Job"]) and objects.is_chief_pod(obj):
                each["Pod"].append(obj)  # a candidate chief

    read("Job", [api.items("Job", namespace, selector)])  # a release has one or two
    read("Service", api.pages("Service", namespace, selector))
    read("Pod", api.pages("Pod", namespace, selector))
    if any(objects.may_be_jobset(each["Job"]) for each in found.values()):  # JobSet releases (workload.kind=jobset)
        read("JobSet", [objects.jobsets(api, namespace, selector)])
    moment = now or datetime.now(timezone.utc)
    return [release_run(api, release, ns, each, moment) for (ns, release), each in sorted(found.items())]


def release_run(api: KubeApi, release: str, namespace: str, each: dict[str, list[Any]], now: datetime
                ) -> dict[str, Any]:  # fmt: skip
    chief = objects.run_of(objects.newest(each["JobSet"]), each["Job"], each["Pod"]).info
    own = [pod for pod in each["Pod"] if objects.role_of(pod) == chief.role]
    progress = read_progress(api, namespace, chief, own)[0]
    state = training_state(chief, progress)["state"]
    created = [at for kind in ("Job", "Service", "JobSet") for obj in each[kind]  # of its Jobs, Services and JobSet
               if (at := parse_time(obj["metadata"].get("creationTimestamp"))) is not None]  # fmt: skip
    gpus = sum((Counter(gpus) for gpus in each["gpus"]), Counter[str]())
    return {"release": release, "namespace": namespace, "state": state, "step": (progress or {}).get("step"),
            "train_steps": (progress or {}).get("train_steps"), "gpus": dict(sorted(gpus.items())),
            "age_seconds": int(now.timestamp() - min(created)) if created else None,
            "suspended_since": chief.suspended_since if state == "Suspended" else None, "kind": chief.kind}
