"""`tfchart stop`: what the run supervisor does on an ending (docs/architecture.md, "Run supervisor"),
done by hand when it cannot (`supervisor.enabled=false`, `training.cleanup.*=keep`, no Role) or has not
yet. The ps/worker StatefulSets and the supervisor are scaled to 0, the evaluator Job is suspended, and
the run's Job gets the supervisor's record of the ending (so `helm upgrade` of the same run keeps them
at 0). A chief still training is only ended with `end_run` (its Job suspended: the pod gets SIGTERM
and the project's trainer saves a checkpoint). Objects are found by the chart's labels. Nothing is
deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tfchart.cluster.objects import job_info, name_of, role_of, run_role
from tfchart.errors import KubernetesError, TfchartError
from tfdcontract import (
    CHIEF,
    EVALUATOR,
    PS,
    SUPERVISOR,
    WORKER,
    ending_annotations,
    release_selector,
)

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

STOPPED = "stopped"
JOB_OF = {CHIEF: "chief Job", WORKER: "workers' Job"}


@dataclass
class Stopped:
    """What `stop` changed, in order, as lines for the user."""

    actions: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def stop(api: KubeApi, release: str, namespace: str, *, end_run: bool, now: datetime | None = None) -> Stopped:
    selector = release_selector(release)
    stateful_sets, jobs, deployments = (
        api.list_objects(kind, namespace, selector) for kind in ("StatefulSet", "Job", "Deployment")
    )
    if not (stateful_sets or jobs or deployments):
        raise KubernetesError(f"no release {release} in namespace {namespace}: no StatefulSets, Jobs or Deployments "
                              "carry its labels",
                              f"check the release name and namespace: `helm list -n {namespace}` (or `helm list -A`)")
    done = Stopped()
    chief = job_info(run_role(jobs), jobs, [])
    running = chief.state not in ("Succeeded", "Failed", "Missing", "Suspended")
    if running and not end_run:
        raise TfchartError(
            f"the {JOB_OF[chief.role]} {chief.name} of release {release} has not ended: stopping now ends its training",
            f"wait for it (`tfchart status {release} -n {namespace}`), or end the run now: "
            f"`tfchart stop {release} -n {namespace} --end-run` (the project's trainer saves a checkpoint on SIGTERM)",
        )
    reason = f"stopped by tfchart stop ({'training ended early' if running else f'chief Job {chief.state}'})"
    if running and chief.name:
        api.patch("Job", chief.name, namespace, {"spec": {"suspend": True}})
        done.actions.append(f"suspended Job {chief.name}: its pod gets SIGTERM and saves a checkpoint")
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for stateful_set in [s for s in stateful_sets if role_of(s) in (PS, WORKER)]:
        scale_to_zero(api, "StatefulSet", stateful_set, namespace, done)
    for job in [job for job in jobs if role_of(job) == EVALUATOR]:
        suspend_evaluator(api, job, namespace, done)
    for deployment in [d for d in deployments if role_of(d) == SUPERVISOR]:
        scale_to_zero(api, "Deployment", deployment, namespace, done)
    if chief.name and not chief.ending:  # the record comes last, as the supervisor writes it
        body = {"metadata": {"annotations": ending_annotations(STOPPED, reason, stamp)}}
        api.patch("Job", chief.name, namespace, body)
        done.actions.append(f"recorded the ending on Job {chief.name}: upgrading the same run keeps it stopped")
    return done


def scale_to_zero(api: KubeApi, kind: str, obj: Any, namespace: str, done: Stopped) -> None:
    name = name_of(obj)
    replicas = obj.spec.replicas if obj.spec else None
    if replicas == 0:
        done.unchanged.append(f"{kind} {name} is already at 0 replicas")
        return
    api.scale(kind, name, namespace, 0)
    done.actions.append(f"scaled {kind} {name} from {1 if replicas is None else replicas} to 0 replicas")


def suspend_evaluator(api: KubeApi, job: Any, namespace: str, done: Stopped,
                      why: str = "the evaluator ends with the run") -> None:  # fmt: skip
    name = name_of(job)
    state = job_info(EVALUATOR, [job], [])
    if state.state in ("Succeeded", "Failed") or (job.spec and job.spec.suspend):
        done.unchanged.append(f"Job {name} has already ended or is suspended")
        return
    api.patch("Job", name, namespace, {"spec": {"suspend": True}})
    done.actions.append(f"suspended Job {name}: {why}")
