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

from tfchart.cluster.objects import job_info, name_of, role_of
from tfchart.cluster.runs import Run, find_run
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
    run = find_run(api, release, namespace, jobs)
    if run.jobset:
        return stop_jobset(api, run, release, namespace, end_run, [d for d in deployments if role_of(d) == SUPERVISOR],
                           now, done)  # fmt: skip
    chief = run.info
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
    stamp = stamp_of(now)
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


def stamp_of(now: datetime | None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stop_jobset(api: KubeApi, run: Run, release: str, namespace: str, end_run: bool, supervisors: list[Any],
                now: datetime | None, done: Stopped) -> Stopped:  # fmt: skip
    """A JobSet run: JobSet deletes its running Jobs when it ends, so there is nothing to scale. A running one is
    ended (`end_run`) through a Job's deadline: activeDeadlineSeconds 1 fails the Job (DeadlineExceeded), the
    JobSet's DeadlineEndsTheRun rule fails the run and JobSet deletes the other Jobs; the ending is recorded on
    the JobSet."""
    chief, name = run.info, str(run.info.name)
    running = chief.state not in ("Succeeded", "Failed", "Suspended")
    if running and not end_run:
        raise TfchartError(
            f"the JobSet {name} of release {release} has not ended: stopping now ends its training",
            f"wait for it (`tfchart status {release} -n {namespace}`), or end the run now: "
            f"`tfchart stop {release} -n {namespace} --end-run` (the project's trainer saves a checkpoint on SIGTERM)",
        )
    if running:
        active = [job for job in run.jobs if job_info(role_of(job), [job], []).state not in ("Succeeded", "Failed")]
        job = run.child(chief.role) if run.child(chief.role) in active else next(iter(active), None)
        if job is not None:
            api.patch("Job", name_of(job), namespace, {"spec": {"activeDeadlineSeconds": 1}})
            done.actions.append(f"set Job {name_of(job)}'s activeDeadlineSeconds to 1: it fails (DeadlineExceeded), "
                                f"JobSet {name}'s DeadlineEndsTheRun rule fails the run and JobSet deletes its other "
                                "Jobs; the chief's pod gets SIGTERM and saves a checkpoint")
        else:
            api.patch("JobSet", name, namespace, {"spec": {"suspend": True}})
            done.actions.append(f"suspended JobSet {name}: none of its Jobs runs yet, and none will")
    elif chief.state != "Suspended":
        done.unchanged.append(f"JobSet {name} has ended ({chief.state}): JobSet deleted its Jobs still running, so "
                              "nothing of the run is left to scale down")
    for deployment in supervisors:
        scale_to_zero(api, "Deployment", deployment, namespace, done)
    if chief.ending:
        done.unchanged.append(f"JobSet {name} already records its ending ({chief.ending})")
    elif chief.state not in ("Succeeded", "Failed"):  # the record comes last, as the supervisor writes it
        what = "training ended early" if running else f"JobSet {chief.state}"
        body = ending_annotations(STOPPED, f"stopped by tfchart stop ({what})", stamp_of(now))
        api.patch("JobSet", name, namespace, {"metadata": {"annotations": body}})
        done.actions.append(f"recorded the ending on JobSet {name}: upgrading the same run keeps it stopped")
    return done
