"""`tfchart status`: what a release is doing, from its objects (found by the chart's labels) and the
chief's log. The chief Job owns completion (Complete = Succeeded, Failed condition = Failed); training
progress comes from the last `tfd-status: {json}` line of the chief pod's log (the same document as
<storage>/status.json), else from the last `step N, loss = L (X examples/sec; Y sec/batch)` line, else
from the record the run supervisor wrote on the chief's Job (tf-distributed.io/progress), which also
gives the ETA and the last checkpoint.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tfchart.cluster.objects import (
    GpuRequest,
    JobInfo,
    condition_true,
    container_statuses,
    has_started,
    is_chief_pod,
    job_info,
    main_container,
    name_of,
    newest,
    pod_gpus,
    pod_reason,
    role_of,
)
from tfchart.cluster.runs import find_run, in_jobset
from tfchart.cluster.servingconfig import serving_versions
from tfchart.errors import KubernetesError
from tfdcontract import (
    CHIEF,
    DISPLAY_ORDER,
    ENDING_ANNOTATION,
    EVALUATOR,
    HOLDING_ROLES,
    MODEL_VERSION_POLICY_ANNOTATION,
    SERVING,
    TENSORBOARD,
    JobProgress,
    Status,
    parse_job_progress,
    parse_status_line,
    parse_step_line,
    release_selector,
)

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

LOG_TAIL_LINES = 2000
NO_PROGRESS = "no progress reported yet"
#: `kubectl wait --for=jsonpath=` of the run's ending, written on the run's object however the run ends (lifecycle.md)
ENDED = "jsonpath='{.metadata.annotations." + ENDING_ANNOTATION.replace(".", "\\.") + "}'"
# Fields of a tfd-status document where "" or 0 means not reported.
UNSET_WHEN_EMPTY = ("strategy", "train_steps", "export_path", "model_name", "started_at", "updated_at", "message")


# -- what status reports ------------------------------------------------------------------------
@dataclass(frozen=True)
class PodInfo:
    role: str
    name: str
    phase: str
    ready: bool
    restarts: int
    node: str | None
    gpus: tuple[GpuRequest, ...]
    age_seconds: int | None
    reason: str = ""  # CrashLoopBackOff, Unschedulable, ImagePullBackOff, OOMKilled, ...
    message: str = ""

    @property
    def display_status(self) -> str:
        return f"{self.phase}: {self.reason}" if self.reason and self.reason != self.phase else self.phase


@dataclass(frozen=True)
class StatefulSetInfo:
    role: str
    name: str
    ready: int
    desired: int


@dataclass(frozen=True)
class Progress:
    """What the trainer reported: a tfd-status document or a step line."""

    source: str  # "tfd-status" or "step-line"
    state: str | None = None
    strategy: str | None = None
    step: int | None = None
    train_steps: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    examples_per_sec: float | None = None
    export_path: str | None = None
    exported_versions: list[int] | None = None  # every SavedModel version of the model, ascending
    model_name: str | None = None
    started_at: str | None = None
    updated_at: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Training:
    state: str  # Running | Succeeded | Failed | Pending | Suspended | Unknown
    detail: str
    progress: Progress | None


@dataclass(frozen=True)
class Endpoint:
    component: str
    service: str
    dns: str
    ports: tuple[tuple[str, int], ...]  # (port name, port)
    ready_pods: int
    port_forward: str


@dataclass
class ReleaseStatus:
    release: str
    namespace: str
    training: Training
    chief: JobInfo
    evaluator: JobInfo | None
    stateful_sets: list[StatefulSetInfo] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    endpoints: list[Endpoint] = field(default_factory=list)
    serving: dict[str, Any] | None = None  # the versions exported and those Serving is configured to load
    job_progress: JobProgress | None = None  # the record on the chief's Job: ETA, last checkpoint
    notes: list[str] = field(default_factory=list)  # what could not be read
    warnings: list[str] = field(default_factory=list)  # what needs the user: GPUs held after the run ended

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data for `--output json`."""
        data = asdict(self)
        for pod, info in zip(data["pods"], self.pods, strict=True):
            pod["status"] = info.display_status
        for endpoint in data["endpoints"]:
            endpoint["ports"] = [{"name": name, "port": port} for name, port in endpoint["ports"]]
        run = f"{self.chief.kind.lower()}/{self.chief.name}" if self.chief.name else None  # the one object to wait on
        wait = f"kubectl wait {run} -n {self.namespace} --for={ENDED}"
        data["run"] = {"object": run, "wait": run and f"{wait} --timeout=24h", "succeeded": run and f"{wait}=succeeded "
                       "--timeout=0"}  # fmt: skip
        return data


# -- collecting -------------------------------------------------------------------------------
def collect(api: KubeApi, release: str, namespace: str, *, now: datetime | None = None) -> ReleaseStatus:
    """Everything `tfchart status` shows, from four list calls (five with Serving: its ConfigMap) and one
    log read of the chief pod."""
    selector = release_selector(release)
    pods, stateful_sets, jobs, services = (
        api.list_objects(kind, namespace, selector) for kind in ("Pod", "StatefulSet", "Job", "Service")
    )
    if not (pods or stateful_sets or jobs or services):
        raise KubernetesError(f"no release {release} in namespace {namespace}: no pods, StatefulSets, Jobs or "
                              "Services carry its labels",
                              f"check the release name and namespace: `helm list -n {namespace}` (or `helm list -A`)")
    run = find_run(api, release, namespace, jobs, [pod for pod in pods if is_chief_pod(pod)])
    chief, role = run.info, run.info.role
    chief_pods = [pod for pod in pods if role_of(pod) == role and is_chief_pod(pod) and in_jobset(pod) == run.jobset]
    evaluator_jobs = [job for job in jobs if role_of(job) == EVALUATOR]
    evaluator_pods = [pod for pod in pods if role_of(pod) == EVALUATOR]
    progress, recorded, log_note = read_progress(api, namespace, chief, chief_pods)
    moment = now or datetime.now(timezone.utc)
    pod_infos = sorted((pod_info(pod, moment) for pod in pods), key=pod_sort_key)
    set_infos = sorted((stateful_set_info(s) for s in stateful_sets), key=lambda s: role_rank(s.role))
    versions, config_note = versions_served(api, release, namespace, services, progress)
    held = held_after_the_end(release, namespace, chief, set_infos, pod_infos)
    client_services = sorted((s for s in services if role_of(s) in (TENSORBOARD, SERVING)),
                             key=lambda s: (role_rank(role_of(s)), name_of(s)))
    return ReleaseStatus(
        release=release, namespace=namespace, training=training_state(chief, progress), chief=chief,
        evaluator=job_info(EVALUATOR, evaluator_jobs, evaluator_pods) if evaluator_jobs else None,
        stateful_sets=set_infos, pods=pod_infos, serving=versions,
        notes=[note for note in (log_note, config_note) if note],
        warnings=[*held, *pinned_but_missing(release, versions)],
        endpoints=[endpoint(service, namespace, pods) for service in client_services], job_progress=recorded,
    )


def role_rank(role: str) -> int:
    return DISPLAY_ORDER.index(role) if role in DISPLAY_ORDER else len(DISPLAY_ORDER)


def pod_sort_key(pod: PodInfo) -> tuple[int, int, str]:
    ordinal = re.search(r"-(\d+)$", pod.name)
    return (role_rank(pod.role), int(ordinal.group(1)) if ordinal else 0, pod.name)


def pod_info(pod: Any, now: datetime) -> PodInfo:
    reason, message = pod_reason(pod)
    created = pod.metadata.creation_timestamp
    phase = (pod.status.phase if pod.status else None) or "Unknown"
    return PodInfo(
        role=role_of(pod), name=name_of(pod), phase="Terminating" if pod.metadata.deletion_timestamp else phase,
        ready=condition_true(pod, "Ready"), restarts=sum(s.restart_count or 0 for s in container_statuses(pod)),
        node=pod.spec.node_name if pod.spec else None, gpus=pod_gpus(pod),
        age_seconds=int((now - created).total_seconds()) if created else None, reason=reason, message=message,
    )


def stateful_set_info(stateful_set: Any) -> StatefulSetInfo:
    replicas = stateful_set.spec.replicas if stateful_set.spec else None
    ready = (stateful_set.status.ready_replicas if stateful_set.status else None) or 0
    return StatefulSetInfo(role_of(stateful_set), name_of(stateful_set), ready, 1 if replicas is None else replicas)


def held_after_the_end(
    release: str, namespace: str, chief: JobInfo, stateful_sets: list[StatefulSetInfo], pods: list[PodInfo]
) -> list[str]:
    """A warning when the chief Job ended but ps/worker/evaluator pods still run (and hold their GPUs)."""
    suspended = chief.state == "Suspended" and not chief.ending
    if (chief.state not in ("Succeeded", "Failed", "Missing") and not suspended) or chief.role != CHIEF:
        return []
    if chief.kind == "JobSet" and not suspended:  # JobSet deletes its running Jobs when it ends: nothing to free
        return []
    holding = [p for p in pods if p.role in HOLDING_ROLES and p.phase not in ("Succeeded", "Failed", "Terminating")]
    up = [s for s in stateful_sets if s.desired > 0]
    if not holding and not up:
        return []
    gpus: Counter[str] = Counter()
    for pod in holding:
        gpus.update({gpu.resource: gpu.count for gpu in pod.gpus})
    held = ", ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))
    what = f"{len(holding)} pod(s) still run" + (f" and hold {held}" if held else "")
    names = ", ".join(p.name for p in holding[:4]) + (", ..." if len(holding) > 4 else "")
    listed = f" ({names})" if names else ""
    if suspended:
        return [f"the run is suspended but {what}{listed}: the suspension is under way or was interrupted; "
                f"`tfchart suspend {release} -n {namespace}` finishes it"]
    if chief.ending:
        policy = "onSuccess" if chief.state == "Succeeded" else "onFailure"
        why = f"kept by the cleanup policy (training.cleanup.{policy}=keep)"
    else:
        why = "nothing freed them (supervisor.enabled=false, or the supervisor is not running)"
    ended = "is gone" if chief.state == "Missing" else f"ended ({chief.state})"
    return [f"the chief Job {ended} but {what}{listed}: {why}; free them with `tfchart stop {release} -n {namespace}`"]


# -- model versions ---------------------------------------------------------------------------
def versions_served(
    api: KubeApi, release: str, namespace: str, services: list[Any], progress: Progress | None
) -> tuple[dict[str, Any] | None, str]:
    """When the release serves: the versions the chief reported exported and those Serving's model config (the policy
    recorded on its ConfigMap) loads of them; a note when the ConfigMap cannot be read (403 on configmaps)."""
    if not any(role_of(service) == SERVING for service in services):
        return None, ""
    try:
        config_maps = api.list_objects("ConfigMap", namespace, release_selector(release, SERVING))
    except KubernetesError as error:
        return None, f"cannot read Serving's model config: {error.message} ({error.hint})"
    if not config_maps:
        return None, ""
    config_map = sorted(config_maps, key=name_of)[0]
    text = (config_map.metadata.annotations or {}).get(MODEL_VERSION_POLICY_ANNOTATION)
    exported = progress.exported_versions if progress and progress.source == "tfd-status" else None
    return serving_versions(name_of(config_map), text, exported), ""


def pinned_but_missing(release: str, versions: dict[str, Any] | None) -> list[str]:
    """A warning when serving.modelVersionPolicy pins versions that were never exported."""
    if versions is None or not versions["missing"] or versions["exported"] is None:
        return []
    missing, model, exported = ", ".join(map(str, versions["missing"])), versions["model"], versions["exported"]
    if not exported:
        return [f"Serving is configured to load version(s) {missing} of {model}, but no version was exported "
                f"yet: it answers nothing until one is (or use `--set serving.modelVersionPolicy.type=latest`)"]
    have, pins = ", ".join(map(str, exported)), ",".join(map(str, versions["loaded"] or exported[-1:]))
    return [f"Serving is configured to load version(s) {missing} of {model}, which were never exported "
            f"(exported: {have}): it answers nothing for them; pin exported versions only, e.g. "
            f"`tfchart upgrade {release} ... --set serving.modelVersionPolicy.versions={{{pins}}}`"]


# -- progress from the chief's log --------------------------------------------------------------
def read_progress(
    api: KubeApi, namespace: str, chief: JobInfo, pods: list[Any]
) -> tuple[Progress | None, JobProgress | None, str]:
    """The progress the chief reported in the log of its newest started pod of `pods`, else as the supervisor last
    recorded it on the Job (the log gone or unreadable); the record; a note when the log could not be read (403 on
    pods/log, a race)."""
    pod, recorded, note = newest([pod for pod in pods if has_started(pod)]), parse_job_progress(chief.progress), ""
    progress = None
    if pod is not None:
        try:
            log = api.read_pod_log(namespace, name_of(pod), main_container(pod, CHIEF), LOG_TAIL_LINES)
            progress = parse_progress(log)
        except KubernetesError as error:
            note = f"cannot read the chief's log: {error.message} ({error.hint})"
    if progress is None and recorded is not None:
        progress = Progress(source="job-record", state=recorded.state, step=recorded.step, train_steps=recorded.target,
                            loss=recorded.loss, accuracy=recorded.accuracy, updated_at=recorded.updated_at or None)
    return progress, recorded, note


def parse_progress(log: str) -> Progress | None:
    """The last tfd-status document, else the last step line, else None."""
    lines = log.splitlines()[::-1]
    status = next((status for status in map(parse_status_line, lines) if status is not None), None)
    if status is not None:
        return progress_from_status(status)
    step = next((step for step in map(parse_step_line, lines) if step), None)
    if step is None:
        return None
    return Progress(source="step-line", step=step.step, loss=step.loss, examples_per_sec=step.examples_per_sec)


def progress_from_status(status: Status) -> Progress:
    return Progress(
        source="tfd-status", state=status.state, step=status.step, loss=status.loss, accuracy=status.accuracy,
        examples_per_sec=status.examples_per_sec,
        exported_versions=None if status.exported_versions is None else list(status.exported_versions),
        **{key: getattr(status, key) or None for key in UNSET_WHEN_EMPTY},
    )


def training_state(chief: JobInfo, progress: Progress | None) -> Training:
    """The chief Job decides completion; the trainer's report adds the numbers and its message."""
    reported = progress.message if progress and progress.message else ""
    what = "JobSet" if chief.kind == "JobSet" else "chief Job"
    if chief.state in ("Running", "Pending") and chief.ending and chief.ending != "succeeded":
        # ended by the supervisor (start timeout, stall) or `tfchart stop`, the Job not failed yet
        return Training("Failed", f"the run ended ({chief.ending}): {chief.end_reason or reported}", progress)
    if chief.state == "Succeeded":
        return Training("Succeeded", reported or f"the {what} completed", progress)
    if chief.state == "Failed":
        job = f"{what} failed: {chief.reason}" + (f" ({chief.message})" if chief.message else "")
        return Training("Failed", f"{job}; trainer: {reported}" if reported else job, progress)
    if chief.state == "Running":
        if progress and progress.state == "Failed":
            retried = f"the last attempt failed ({reported}); the {chief.kind} retries from the checkpoint"
            return Training("Running", retried, progress)
        return Training("Running", reported or ("training in progress" if progress else NO_PROGRESS), progress)
    if chief.state == "Suspended" and chief.ending:  # `tfchart stop --end-run`: suspended to end it
        return Training("Failed", f"the run ended ({chief.ending}): {chief.end_reason}", progress)
    if chief.state == "Suspended":
        saved = f" at step {progress.step}" if progress and progress.step is not None else ""
        return Training("Suspended", f"suspended since {chief.suspended_since or '(unknown)'}: its pods are "
                        f"released; resuming continues from the checkpoint{saved}", progress)
    if chief.state == "Pending":
        why = f"{chief.reason}: {chief.message}" if chief.message else chief.reason
        return Training("Pending", f"the chief pod has not started: {why}", progress)
    return Training("Unknown", f"{chief.message}; training progress is in <storage>/status.json", progress)


# -- endpoints ----------------------------------------------------------------------------------
def endpoint(service: Any, namespace: str, pods: list[Any]) -> Endpoint:
    role, name = role_of(service), name_of(service)
    ports = tuple((p.name or str(p.port), int(p.port)) for p in (service.spec.ports if service.spec else None) or [])
    forwards = " ".join(f"{port}:{port}" for _, port in ports)
    return Endpoint(component=role, service=name, dns=f"{name}.{namespace}.svc", ports=ports,
                    ready_pods=sum(1 for pod in pods if role_of(pod) == role and condition_true(pod, "Ready")),
                    port_forward=f"kubectl -n {namespace} port-forward svc/{name} {forwards}")
