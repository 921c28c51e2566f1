"""`tfchart suspend` and `tfchart resume`: a run paused at a checkpoint with every pod released, and continued.

The state lives on the run's object (docs/architecture.md, "3. Lifecycle"): native, the run's Job (the chief
Job, or the workers' Job without a chief). Suspend writes `spec.suspend: true` together with the suspension
record (tfdcontract.Suspension: since when, the ps/worker replicas to restore, whether the evaluator ran) in
one PATCH: the Job controller deletes the chief's pod, whose SIGTERM makes the project's trainer save a
checkpoint at its next step boundary. Once that pod is gone, the ps/worker StatefulSets go to 0 and the
evaluator Job is suspended (as `tfchart stop` does), and the command waits for their pods too. Resume scales
the StatefulSets back to the recorded replicas, waits until they are Ready (a chief started against missing
servers would wait for them), lets the evaluator run again and, last, unsuspends the Job and drops the record
in one PATCH. Pods in a gang are admitted only all together: there the Job is unsuspended with the servers,
their readiness waited for after, and the record dropped last. Each step reads the cluster first, so either
command killed at any point and run again finishes what the first began. Waits poll the API every
POLL_SECONDS within the --timeout.

The kind of the run's object (tfchart.cluster.runs) decides the steps: `Workloads` says what the run is; only
`suspend_native`/`resume_native` know the native objects, and `suspend_jobset`/`resume_jobset` the JobSet (and Kueue's
Workload of it; see their section below).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tfchart.cluster.objects import JobInfo, job_info, name_of, pod_reason, role_of, stamp
from tfchart.cluster.runs import QUEUE_LABEL, Run, find_run
from tfchart.cluster.stop import Stopped, scale_to_zero, suspend_evaluator
from tfchart.errors import KubernetesError, TfchartError
from tfdcontract import (
    EVALUATOR,
    HOLDING_ROLES,
    STATEFUL_ROLES,
    SUSPENDED_ANNOTATION,
    TF_ROLES,
    Suspension,
    parse_suspension,
    release_selector,
    suspension_annotations,
)

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

POLL_SECONDS = 1.0
GRACE_MARGIN_SECONDS = 60  # after the pods' terminationGracePeriodSeconds, for the kubelet to report them gone
RESUME_TIMEOUT_SECONDS = 600.0  # ps/workers scheduled, images pulled, servers listening
TIMED_OUT_EXIT = 124  # as `tfchart wait` and timeout(1)
TERMINAL = ("Succeeded", "Failed")
# A pod template that joins a gang (Volcano, coscheduling, Kueue's plain-pod group): its pods are admitted together
GANG_MARKERS = ("scheduling.k8s.io/group-name", "scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name")


class TimedOut(TfchartError):
    exit_code = TIMED_OUT_EXIT


@dataclass
class Outcome:
    """What suspend or resume did (one line each) and where the run stands; `-o json` prints as_dict()."""

    release: str
    namespace: str
    state: str = ""  # Suspended | Running (resumed)
    since: str = ""  # Suspended: since when
    replicas: dict[str, int] = field(default_factory=dict)  # the ps/worker replicas a resume brings back
    actions: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Workloads:
    """A release's run and the workloads that serve it, found by the chart's labels."""

    kind: str  # the run's object: Job (native) or JobSet
    run: Any  # its client model (a JobSet: its JSON)
    info: JobInfo
    stateful_sets: list[Any]
    evaluators: list[Any]
    found: Run | None = None

    @property
    def name(self) -> str:
        return str(self.info.name)

    @property
    def spec_suspend(self) -> bool:
        """The run object's spec.suspend."""
        return self.found.suspend if self.found else bool(self.run.spec.suspend)

    @property
    def suspension(self) -> Suspension | None:
        return parse_suspension(self.found.annotations if self.found else self.run.metadata.annotations)


@dataclass
class Clock:
    """Time for the waits (injectable in tests)."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc)


def find(api: KubeApi, release: str, namespace: str, verb: str) -> Workloads:
    """The release's run, refused when there is none or it has ended."""
    selector = release_selector(release)
    stateful_sets, jobs = (api.list_objects(kind, namespace, selector) for kind in ("StatefulSet", "Job"))
    run = find_run(api, release, namespace, jobs)  # a JobSet release: its JobSet, also before it made its Jobs
    if not (stateful_sets or jobs or run.jobset):
        raise KubernetesError(f"no release {release} in namespace {namespace}: no StatefulSets, Jobs or JobSet carry "
                              "its labels",
                              f"check the release name and namespace: `helm list -n {namespace}` (or `helm list -A`)")
    info = run.info
    if info.name is None:
        raise TfchartError(f"release {release} has no run to {verb}: its run's Job is gone ({info.message})",
                           f"start a new run: `tfchart upgrade {release} -n {namespace} ...` creates it again")
    if info.state in TERMINAL or info.ending:
        ended = f"{info.ending}: {info.end_reason}" if info.ending else info.state
        raise TfchartError(f"release {release}'s run has ended ({ended}): there is nothing to {verb}",
                           f"free what it holds with `tfchart stop {release} -n {namespace}`; train again with "
                           f"`tfchart upgrade {release} -n {namespace} ... --recreate`")
    if run.jobset:
        return Workloads("JobSet", run.document, info, [], [], run)
    return Workloads("Job", run.document, info, [s for s in stateful_sets if role_of(s) in STATEFUL_ROLES],
                     [job for job in jobs if role_of(job) == EVALUATOR], run)


def suspend(api: KubeApi, release: str, namespace: str, timeout: float | None, clock: Clock | None = None) -> Outcome:
    found = find(api, release, namespace, "suspend")
    act = suspend_jobset if found.kind == "JobSet" else suspend_native
    return act(api, found, release, namespace, timeout, clock or Clock())


def resume(api: KubeApi, release: str, namespace: str, timeout: float | None, clock: Clock | None = None) -> Outcome:
    found = find(api, release, namespace, "resume")
    act = resume_jobset if found.kind == "JobSet" else resume_native
    return act(api, found, release, namespace, timeout, clock or Clock())


# -- native: the run's Job, the ps/worker StatefulSets, the evaluator Job ----------------------------------
def suspend_native(api: KubeApi, found: Workloads, release: str, namespace: str, timeout: float | None,
                   clock: Clock) -> Outcome:  # fmt: skip
    done = Outcome(release, namespace, "Suspended")
    record = found.suspension
    if record is None:
        running = [e for e in found.evaluators if job_info(EVALUATOR, [e], []).state not in (*TERMINAL, "Suspended")]
        record = Suspension(stamp(clock.wall()), {role_of(s): replicas(s) for s in found.stateful_sets}, bool(running))
        api.patch(found.kind, found.name, namespace,
                  {"metadata": {"annotations": suspension_annotations(record)}, "spec": {"suspend": True}})
        kept = ", ".join(f"{role} {count}" for role, count in record.replicas.items())
        done.actions.append(f"suspended {found.kind} {found.name}" + (f", recording the replicas to restore "
                                                                     f"({kept})" if kept else ""))
    elif not found.run.spec.suspend:  # unsuspended by hand since: suspended again
        api.patch(found.kind, found.name, namespace, {"spec": {"suspend": True}})
        done.actions.append(f"suspended {found.kind} {found.name} again (its record says since {record.since})")
    else:
        done.unchanged.append(f"{found.kind} {found.name} is already suspended (since {record.since})")
    done.since, done.replicas = record.since, dict(record.replicas)
    limit = grace_of(found.run) + grace_of(*found.stateful_sets) + GRACE_MARGIN_SECONDS if timeout is None else timeout
    deadline = clock.now() + limit
    gone = wait_gone(api, release, namespace, (found.info.role,), deadline, clock, limit)
    if gone:
        done.actions.append(f"the {found.info.role} pod stopped ({', '.join(gone)}): the project's trainer saved a "
                            "checkpoint at its step boundary")
    stopped = Stopped()
    for stateful_set in found.stateful_sets:
        scale_to_zero(api, "StatefulSet", stateful_set, namespace, stopped)
    for evaluator in found.evaluators:
        suspend_evaluator(api, evaluator, namespace, stopped, "it evaluates again once resumed")
    done.actions += stopped.actions
    done.unchanged += stopped.unchanged
    others = wait_gone(api, release, namespace, HOLDING_ROLES, deadline, clock, limit)
    if others:
        done.actions.append(f"their pods are gone ({', '.join(others)})")
    done.actions.append("every pod of the run is released, with its GPUs and quota; the checkpoints stay on the "
                        "shared volume")
    return done


def resume_native(api: KubeApi, found: Workloads, release: str, namespace: str, timeout: float | None,
                  clock: Clock) -> Outcome:  # fmt: skip
    record = found.suspension
    if record is None:
        how = (f"its {found.kind} {found.name} is suspended, but not by `tfchart suspend` (no {SUSPENDED_ANNOTATION} "
               "record of what to bring back)") if found.run.spec.suspend else f"its {found.kind} {found.name} runs"
        raise TfchartError(f"release {release}'s run is not suspended: {how}",
                           f"suspend it with `tfchart suspend {release} -n {namespace}`" if not found.run.spec.suspend
                           else f"let it run: `kubectl -n {namespace} patch job {found.name} --type merge -p "
                                "'{\"spec\":{\"suspend\":false}}'`")  # fmt: skip
    done = Outcome(release, namespace, "Running", "", dict(record.replicas))
    wanted = {name_of(s): record.replicas[role_of(s)] for s in found.stateful_sets if role_of(s) in record.replicas}
    for stateful_set in found.stateful_sets:
        name, now = name_of(stateful_set), replicas(stateful_set)
        if name not in wanted:
            continue
        if now == wanted[name]:
            done.unchanged.append(f"StatefulSet {name} is already at {now} replicas")
        else:
            api.scale("StatefulSet", name, namespace, wanted[name])
            done.actions.append(f"scaled StatefulSet {name} from {now} to {wanted[name]} replicas")
    limit = RESUME_TIMEOUT_SECONDS if timeout is None else timeout
    deadline = clock.now() + limit
    gang = next((marker for s in found.stateful_sets for marker in GANG_MARKERS if marked(s, marker)), "")
    if wanted and not gang:
        wait_ready(api, release, namespace, wanted, deadline, clock, limit)
        done.actions.append(f"their pods are Ready ({', '.join(f'{n} {c}/{c}' for n, c in wanted.items())})")
    for evaluator in found.evaluators if record.evaluator else []:
        if evaluator.spec.suspend:
            api.patch("Job", name_of(evaluator), namespace, {"spec": {"suspend": False}})
            done.actions.append(f"let Job {name_of(evaluator)} run again: the evaluator follows the checkpoints")
    again = f"a new {found.info.role} pod continues from the last checkpoint"
    if gang:  # the gang admits no pod before all of them exist: the chief's too, so it cannot wait for Ready
        if found.run.spec.suspend:
            api.patch(found.kind, found.name, namespace, {"spec": {"suspend": False}})
            done.actions.append(f"resumed {found.kind} {found.name} with its servers, as one gang ({gang}): {again}")
        if wanted:
            wait_ready(api, release, namespace, wanted, deadline, clock, limit)
            done.actions.append(f"the servers' pods are Ready ({', '.join(f'{n} {c}/{c}' for n, c in wanted.items())})")
        api.patch(found.kind, found.name, namespace, {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}})
        done.actions.append(f"dropped the suspension record from {found.kind} {found.name}")
        return done
    api.patch(found.kind, found.name, namespace,
              {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}, "spec": {"suspend": False}})
    done.actions.append(f"resumed {found.kind} {found.name} and dropped the suspension record: {again}")
    return done


def marked(workload: Any, marker: str) -> bool:
    """Whether the workload's pod template carries this label or annotation."""
    metadata = workload.spec.template.metadata
    return marker in {**(metadata.labels or {}), **(metadata.annotations or {})}


def replicas(stateful_set: Any) -> int:
    value = stateful_set.spec.replicas if stateful_set.spec else None
    return 1 if value is None else int(value)


def grace_of(*workloads: Any) -> float:
    """The longest terminationGracePeriodSeconds of these workloads' pod templates (Kubernetes' default 30)."""
    periods = [w.spec.template.spec.termination_grace_period_seconds for w in workloads]
    return float(max((30 if p is None else p for p in periods), default=0))


def wait_gone(api: KubeApi, release: str, namespace: str, roles: tuple[str, ...], deadline: float, clock: Clock,
              limit: float) -> list[str]:  # fmt: skip
    """Waits until no pod of these roles runs (gone, or ended); the names of those it saw running."""
    seen: list[str] = []
    while True:
        pods = [pod for pod in api.list_objects("Pod", namespace, release_selector(release))
                if role_of(pod) in roles and (pod.status.phase if pod.status else None) not in TERMINAL]
        seen += [name_of(pod) for pod in pods if name_of(pod) not in seen]
        if not pods:
            return seen
        if clock.now() >= deadline:
            names = ", ".join(name_of(pod) for pod in pods)
            raise TimedOut(f"release {release}'s pods still run after {limit:g}s: {names}",
                           f"see why with `tfchart status {release} -n {namespace}`; run `tfchart suspend {release} "
                           f"-n {namespace}` again to finish the suspension (it carries on where this one stopped)")
        clock.sleep(POLL_SECONDS)


def wait_ready(api: KubeApi, release: str, namespace: str, wanted: dict[str, int], deadline: float, clock: Clock,
               limit: float) -> None:  # fmt: skip
    """Waits until each StatefulSet reports its wanted replicas Ready (for the generation it was scaled to)."""
    while True:
        late = []
        for name, count in wanted.items():
            found = api.read_object("StatefulSet", name, namespace) or {}
            status, generation = found.get("status") or {}, (found.get("metadata") or {}).get("generation") or 0
            if (status.get("readyReplicas") or 0) < count or (status.get("observedGeneration") or 0) < generation:
                late.append(f"{name} {status.get('readyReplicas') or 0}/{count} Ready")
        if not late:
            return
        if clock.now() >= deadline:
            raise TimedOut(f"release {release}'s ps/worker pods are not Ready after {limit:g}s ({', '.join(late)})"
                           f"{why_not_ready(api, release, namespace)}; the run stays suspended",
                           f"see why with `tfchart status {release} -n {namespace}`; run `tfchart resume {release} "
                           f"-n {namespace}` again to keep waiting (it carries on where this one stopped)")
        clock.sleep(POLL_SECONDS)


def why_not_ready(api: KubeApi, release: str, namespace: str) -> str:
    """': pod P: Reason: message' for the first ps/worker pod with a reason to show (unschedulable, image pull)."""
    for pod in api.list_objects("Pod", namespace, release_selector(release)):
        reason, message = pod_reason(pod)
        if role_of(pod) in STATEFUL_ROLES and reason:
            return f": pod {name_of(pod)}: {reason}" + (f": {message}" if message else "")
    return ""


# -- jobset: the JobSet, or Kueue's Workload of it -----------------------------------------------------------------
# The JobSet is the run's object: the suspension record (tfdcontract.Suspension, no replicas to restore) goes on it
# together with `spec.suspend: true` in one PATCH. JobSet then suspends every child Job, whose pods all get SIGTERM
# at once: the chief saves a checkpoint at its next step boundary while the ps and worker servers keep serving
# until it has (trainer.roles.serve_until_chief_stops). The command waits until no TensorFlow pod of the release
# runs. Resume drops the record with `spec.suspend: false` in one PATCH; JobSet resumes the Jobs, and its dependsOn
# order starts ps, workers and chief again.
#
# A JobSet that Kueue manages (its kueue.x-k8s.io/queue-name label) is stopped Kueue's way instead: its Workload
# (found by its owner reference to the JobSet) gets `spec.active: false`, and Kueue evicts it, suspends the JobSet
# and releases the quota; `spec.active: true` queues it again, and Kueue unsuspends the JobSet once admitted (Kueue
# would undo a `spec.suspend` written on an admitted JobSet). The record is written first on suspend and dropped
# last on resume, so either command killed in between finishes the work when run again.
KUEUE = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")


def suspend_jobset(api: KubeApi, found: Workloads, release: str, namespace: str, timeout: float | None,
                   clock: Clock) -> Outcome:  # fmt: skip
    done = Outcome(release, namespace, "Suspended")
    queue = queue_of(found.run)
    workload = kueue_workload(api, found, release, namespace) if queue else None
    record = found.suspension
    if record is None:
        record = Suspension(stamp(clock.wall()), {}, False)
        body: dict[str, Any] = {"metadata": {"annotations": suspension_annotations(record)}}
        if workload is None:
            body["spec"] = {"suspend": True}
        api.patch("JobSet", found.name, namespace, body)
        done.actions.append(f"suspended JobSet {found.name}" if workload is None
                            else f"recorded the suspension on JobSet {found.name}")  # fmt: skip
    elif workload is None and not found.spec_suspend:
        api.patch("JobSet", found.name, namespace, {"spec": {"suspend": True}})
        done.actions.append(f"suspended JobSet {found.name} again (its record says since {record.since})")
    elif workload is None:
        done.unchanged.append(f"JobSet {found.name} is already suspended (since {record.since})")
    if workload is not None:
        version, document = workload
        name = str(document["metadata"]["name"])
        if (document.get("spec") or {}).get("active", True):
            api.patch_custom(KUEUE, version, "workloads", name, namespace, {"spec": {"active": False}})
            done.actions.append(f"deactivated Kueue Workload {name} (spec.active: false): Kueue evicts it, suspends "
                                f"JobSet {found.name} and releases its quota in ClusterQueue of queue {queue}")
        else:
            done.unchanged.append(f"Kueue Workload {name} is already deactivated (since {record.since})")
    done.since = record.since
    limit = jobset_grace(found.run) + GRACE_MARGIN_SECONDS if timeout is None else timeout
    gone = wait_gone(api, release, namespace, TF_ROLES, clock.now() + limit, clock, limit)
    if gone:
        done.actions.append(f"every pod of JobSet {found.name} stopped ({', '.join(gone)}): the project's trainer "
                            "saved a checkpoint at its step boundary, its servers serving until it had")
    done.actions.append("every pod of the run is released, with its GPUs and quota; the checkpoints stay on the "
                        "shared volume")
    return done


def resume_jobset(api: KubeApi, found: Workloads, release: str, namespace: str, timeout: float | None,
                  clock: Clock) -> Outcome:  # fmt: skip
    queue = queue_of(found.run)
    workload = kueue_workload(api, found, release, namespace) if queue else None
    record = found.suspension
    if record is None:
        held = found.spec_suspend or (workload is not None and not (workload[1].get("spec") or {}).get("active", True))
        how = (f"its JobSet {found.name} is suspended, but not by `tfchart suspend` (no {SUSPENDED_ANNOTATION} record)"
               if held else f"its JobSet {found.name} runs")  # fmt: skip
        target, field = ((f"workload {workload[1]['metadata']['name']}", '"active":true') if workload is not None
                         else (f"jobset {found.name}", '"suspend":false'))  # fmt: skip
        let_run = f"`kubectl -n {namespace} patch {target} --type merge -p '{{\"spec\":{{{field}}}}}'`"
        raise TfchartError(f"release {release}'s run is not suspended: {how}",
                           f"let it run: {let_run}" if held else f"suspend it with `tfchart suspend {release} -n "
                           f"{namespace}`")  # fmt: skip
    done = Outcome(release, namespace, "Running")
    again = "a new chief pod continues from the last checkpoint"
    if workload is None:
        api.patch("JobSet", found.name, namespace,
                  {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}, "spec": {"suspend": False}})
        done.actions.append(f"resumed JobSet {found.name} and dropped the suspension record: JobSet starts its Jobs "
                            f"again in their dependsOn order; {again}")
        return done
    version, document = workload
    name = str(document["metadata"]["name"])
    if not (document.get("spec") or {}).get("active", True):
        api.patch_custom(KUEUE, version, "workloads", name, namespace, {"spec": {"active": True}})
        done.actions.append(f"activated Kueue Workload {name} (spec.active: true): it queues in {queue} again, and "
                            f"Kueue resumes JobSet {found.name} once admitted; {again}")
    api.patch("JobSet", found.name, namespace, {"metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}})
    done.actions.append(f"dropped the suspension record from JobSet {found.name}")
    return done


def queue_of(jobset: dict[str, Any]) -> str:
    """The Kueue queue that manages the JobSet (the chart puts the label on the JobSet only), else ""."""
    return str(((jobset.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")


def kueue_workload(api: KubeApi, found: Workloads, release: str, namespace: str) -> tuple[str, dict[str, Any]]:
    """Kueue's Workload of the JobSet (API version, JSON): the one whose owner reference is the JobSet."""
    uid = found.run["metadata"].get("uid")
    for version in KUEUE_VERSIONS:
        listed = api.list_namespaced_custom(KUEUE, version, "workloads", namespace)
        if listed is None:
            continue
        for workload in listed:
            owners = (workload.get("metadata") or {}).get("ownerReferences") or []
            if any(owner.get("kind") == "JobSet" and owner.get("uid") == uid for owner in owners):
                return version, workload
        break
    raise TfchartError(f"JobSet {found.name} of release {release} is managed by Kueue (queue {queue_of(found.run)}), "
                       f"but no Kueue Workload in namespace {namespace} is owned by it: Kueue has not admitted it to "
                       "a queue yet, or is not running",
                       f"see `kubectl -n {namespace} get workloads` and `kubectl -n {namespace} describe jobset "
                       f"{found.name}`; suspending needs the Workload (Kueue undoes a spec.suspend it did not write)")


def jobset_grace(jobset: dict[str, Any]) -> float:
    """The longest terminationGracePeriodSeconds of the JobSet's pod templates (Kubernetes' default 30)."""
    periods = [(((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec", {})
               .get("terminationGracePeriodSeconds", 30) for rjob in (jobset.get("spec") or {}).get("replicatedJobs")
               or []]  # fmt: skip
    return float(max(periods, default=30))
