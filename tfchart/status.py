"""`tfchart status`: what a release is doing, from the Kubernetes API and the chief's log.

Objects are found by the chart's labels (app.kubernetes.io/name=tf-distributed,
app.kubernetes.io/instance=<release>, app.kubernetes.io/component=<role>), never by computed names.
The chief Job owns completion (Complete = Succeeded, Failed condition = Failed); training progress
comes from the last `tfd-status: {json}` line of the chief pod's log (the same document as
<storage>/status.json), else from the last `step N, loss = L (X examples/sec; Y sec/batch)` line.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tfchart.errors import KubernetesError
from tfdcontract import (
    CHIEF,
    COMPLETION_INDEX_ANNOTATION,
    COMPONENT_LABEL,
    DISPLAY_ORDER,
    END_REASON_ANNOTATION,
    ENDING_ANNOTATION,
    EVALUATOR,
    HOLDING_ROLES,
    SERVING,
    TENSORBOARD,
    WORKER,
    Status,
    parse_status_line,
    parse_step_line,
    release_selector,
)

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.kube import KubeApi

LOG_TAIL_LINES = 2000
NO_PROGRESS = "no progress reported yet"


def is_gpu_resource(name: str) -> bool:
    """Extended resources that are GPUs: nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, nvidia.com/mig-..."""
    return "/" in name and ("gpu" in name.lower() or name.startswith("nvidia.com/"))


# -- what status reports ------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuRequest:
    resource: str
    count: int


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
    ending: str = ""  # tf-distributed.io/ending: how the run ended, written by the supervisor or tfchart stop
    end_reason: str = ""


@dataclass(frozen=True)
class JobInfo:
    role: str
    name: str | None
    state: str  # Running | Succeeded | Failed | Pending | Missing
    reason: str = ""
    message: str = ""
    active: int = 0
    succeeded: int = 0
    failed: int = 0


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
    started_at: str | None = None
    updated_at: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Training:
    state: str  # Running | Succeeded | Failed | Pending | Unknown
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
    notes: list[str] = field(default_factory=list)  # what could not be read
    warnings: list[str] = field(default_factory=list)  # what needs the user: GPUs held after the run ended

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data for `--output json`."""
        data = asdict(self)
        for pod, info in zip(data["pods"], self.pods, strict=True):
            pod["status"] = info.display_status
        for endpoint in data["endpoints"]:
            endpoint["ports"] = [{"name": name, "port": port} for name, port in endpoint["ports"]]
        return data


# -- collecting -------------------------------------------------------------------------------


def collect(api: KubeApi, release: str, namespace: str, *, now: datetime | None = None) -> ReleaseStatus:
    """Everything `tfchart status` shows, from four list calls and one log read of the chief pod."""
    selector = release_selector(release)
    pods = api.list_pods(namespace, selector)
    stateful_sets = api.list_stateful_sets(namespace, selector)
    jobs = api.list_jobs(namespace, selector)
    services = api.list_services(namespace, selector)
    if not (pods or stateful_sets or jobs or services):
        raise KubernetesError(
            f"no release {release} in namespace {namespace}: no pods, StatefulSets, Jobs or Services carry its labels",
            f"check the release name and namespace: `helm list -n {namespace}` (or `helm list -A`)",
        )
    moment = now or datetime.now(timezone.utc)
    pod_infos = sorted((pod_info(pod, moment) for pod in pods), key=pod_sort_key)
    chief_pods = [pod for pod in pods if role_of(pod) == run_role(jobs) and is_chief_pod(pod)]
    chief = job_info(run_role(jobs), jobs, chief_pods)
    evaluator_jobs = [job for job in jobs if role_of(job) == EVALUATOR]
    evaluator = (
        job_info(EVALUATOR, evaluator_jobs, [p for p in pods if role_of(p) == EVALUATOR])
        if evaluator_jobs
        else None
    )
    progress, log_note = read_progress(api, namespace, newest(started(chief_pods)))
    set_infos = sorted((stateful_set_info(s) for s in stateful_sets), key=lambda s: role_rank(s.role))
    return ReleaseStatus(
        release=release,
        namespace=namespace,
        training=training_state(chief, progress),
        notes=[log_note] if log_note else [],
        chief=chief,
        evaluator=evaluator,
        stateful_sets=set_infos,
        pods=pod_infos,
        warnings=held_after_the_end(release, namespace, chief, set_infos, pod_infos),
        endpoints=[
            endpoint(service, namespace, pods)
            for service in sorted(services, key=lambda s: (role_rank(role_of(s)), name_of(s)))
            if is_client_service(service)
        ],
    )


def run_role(jobs: list[Any]) -> str:
    """The role whose Job owns completion: the chief, or the workers' Indexed Job when worker 0 is the
    chief (chief.replicas=0)."""
    roles = {role_of(job) for job in jobs}
    return WORKER if WORKER in roles and CHIEF not in roles else CHIEF


def is_chief_pod(pod: Any) -> bool:
    """The chief's pod, or worker 0's in a workers' Job (its completion index)."""
    if role_of(pod) == CHIEF:
        return True
    annotations = pod.metadata.annotations or {}
    return str(annotations.get(COMPLETION_INDEX_ANNOTATION, "")) == "0"


def role_of(obj: Any) -> str:
    labels = obj.metadata.labels or {}
    return str(labels.get(COMPONENT_LABEL, "?"))


def name_of(obj: Any) -> str:
    return str(obj.metadata.name)


def role_rank(role: str) -> int:
    return DISPLAY_ORDER.index(role) if role in DISPLAY_ORDER else len(DISPLAY_ORDER)


def pod_sort_key(pod: PodInfo) -> tuple[int, int, str]:
    ordinal = re.search(r"-(\d+)$", pod.name)
    return (role_rank(pod.role), int(ordinal.group(1)) if ordinal else 0, pod.name)


def newest(pods: list[Any]) -> Any | None:
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return max(pods, key=lambda pod: (pod.metadata.creation_timestamp or epoch, name_of(pod)), default=None)


def started(pods: list[Any]) -> list[Any]:
    """Pods whose main container has run at least once (so they have a log)."""
    return [pod for pod in pods if has_started(pod)]


def has_started(pod: Any) -> bool:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    for status in statuses:
        state = status.state
        if (state and (state.running or state.terminated)) or (status.restart_count or 0) > 0:
            return True
        if status.last_state and status.last_state.terminated:
            return True
    return False


def pod_info(pod: Any, now: datetime) -> PodInfo:
    reason, message = pod_reason(pod)
    created = pod.metadata.creation_timestamp
    return PodInfo(
        role=role_of(pod),
        name=name_of(pod),
        phase=(
            "Terminating"
            if pod.metadata.deletion_timestamp
            else (pod.status.phase if pod.status else None) or "Unknown"
        ),
        ready=condition_true(pod, "Ready"),
        restarts=sum(status.restart_count or 0 for status in container_statuses(pod)),
        node=pod.spec.node_name if pod.spec else None,
        gpus=pod_gpus(pod),
        age_seconds=int((now - created).total_seconds()) if created else None,
        reason=reason,
        message=message,
    )


def container_statuses(pod: Any) -> list[Any]:
    status = pod.status
    if not status:
        return []
    return list(status.init_container_statuses or []) + list(status.container_statuses or [])


def condition_true(pod: Any, kind: str) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == kind and c.status == "True" for c in conditions)


def pod_reason(pod: Any) -> tuple[str, str]:
    """Why a pod is not simply Running/Succeeded: scheduling, waiting or terminated containers, eviction."""
    status = pod.status
    if status is None:
        return "", ""
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return condition.reason or "Unschedulable", condition.message or ""
    for container in container_statuses(pod):
        state = container.state
        if state and state.waiting and state.waiting.reason not in (None, "PodInitializing"):
            last = container.last_state.terminated if container.last_state else None
            detail = state.waiting.message or ""
            if last is not None:
                detail = f"last exit: {last.reason or 'Error'}, code {last.exit_code}" + (
                    f"; {detail}" if detail else ""
                )
            return str(state.waiting.reason), detail
        if state and state.terminated and state.terminated.exit_code:
            return state.terminated.reason or "Error", f"exit code {state.terminated.exit_code}"
    if status.reason:
        return str(status.reason), status.message or ""
    return "", ""


def pod_gpus(pod: Any) -> tuple[GpuRequest, ...]:
    """GPUs requested by the pod's containers (limits; requests when no limit), per resource name."""
    totals: dict[str, int] = {}
    for container in (pod.spec.containers if pod.spec else None) or []:
        for resource, count in container_gpus(container).items():
            totals[resource] = totals.get(resource, 0) + count
    return tuple(GpuRequest(resource, count) for resource, count in sorted(totals.items()))


def container_gpus(container: Any) -> dict[str, int]:
    resources = container.resources
    if resources is None:
        return {}
    merged = {**(resources.requests or {}), **(resources.limits or {})}
    found: dict[str, int] = {}
    for name, value in merged.items():
        if is_gpu_resource(name):
            try:
                found[name] = int(str(value))
            except ValueError:
                continue
    return found


def stateful_set_info(stateful_set: Any) -> StatefulSetInfo:
    spec_replicas = stateful_set.spec.replicas if stateful_set.spec else None
    status = stateful_set.status
    annotations = stateful_set.metadata.annotations or {}
    return StatefulSetInfo(
        role=role_of(stateful_set),
        name=name_of(stateful_set),
        ready=(status.ready_replicas if status else None) or 0,
        desired=1 if spec_replicas is None else int(spec_replicas),
        ending=str(annotations.get(ENDING_ANNOTATION, "")),
        end_reason=str(annotations.get(END_REASON_ANNOTATION, "")),
    )


def held_after_the_end(
    release: str, namespace: str, chief: JobInfo, stateful_sets: list[StatefulSetInfo], pods: list[PodInfo]
) -> list[str]:
    """A warning when the chief Job ended but ps/worker/evaluator pods still run (and hold their GPUs)."""
    if chief.state not in ("Succeeded", "Failed", "Missing") or chief.role != CHIEF:
        return []
    holding = [p for p in pods if p.role in HOLDING_ROLES and p.phase not in ("Succeeded", "Failed", "Terminating")]
    up = [s for s in stateful_sets if s.desired > 0]
    if not holding and not up:
        return []
    gpus: dict[str, int] = {}
    for pod in holding:
        for gpu in pod.gpus:
            gpus[gpu.resource] = gpus.get(gpu.resource, 0) + gpu.count
    held = ", ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))
    what = f"{len(holding)} pod(s) still run" + (f" and hold {held}" if held else "")
    names = ", ".join(p.name for p in holding[:4]) + (", ..." if len(holding) > 4 else "")
    kept = [s for s in up if s.ending]
    if kept:
        policy = "onSuccess" if chief.state == "Succeeded" else "onFailure"
        why = f"kept by the cleanup policy (training.cleanup.{policy}=keep)"
    else:
        why = "nothing freed them (supervisor.enabled=false, or the supervisor is not running)"
    ended = "is gone" if chief.state == "Missing" else f"ended ({chief.state})"
    listed = f" ({names})" if names else ""
    return [f"the chief Job {ended} but {what}{listed}: {why}; free them with `tfchart stop {release} -n {namespace}`"]


def job_info(role: str, jobs: list[Any], pods: list[Any]) -> JobInfo:
    """The state of the role's Job: its conditions first, then its newest pod."""
    mine = [job for job in jobs if role_of(job) == role]
    if not mine:
        return JobInfo(
            role, None, "Missing", "NotFound", f"no {role} Job (deleted, or removed by ttlSecondsAfterFinished)"
        )
    job: Any = newest(mine)
    status = job.status
    counts = {
        "active": (status.active if status else None) or 0,
        "succeeded": (status.succeeded if status else None) or 0,
        "failed": (status.failed if status else None) or 0,
    }
    conditions = {c.type: c for c in ((status.conditions if status else None) or []) if c.status == "True"}
    for kind, state in (
        ("Complete", "Succeeded"),
        ("SuccessCriteriaMet", "Succeeded"),
        ("Failed", "Failed"),
        ("FailureTarget", "Failed"),
    ):
        if kind in conditions:
            condition = conditions[kind]
            return JobInfo(role, name_of(job), state, condition.reason or kind, condition.message or "", **counts)
    if "Suspended" in conditions:
        return JobInfo(role, name_of(job), "Pending", "Suspended", conditions["Suspended"].message or "", **counts)
    pod = newest(pods)
    if pod is not None and pod.status and pod.status.phase == "Running":
        return JobInfo(role, name_of(job), "Running", "", "", **counts)
    if pod is None:
        return JobInfo(role, name_of(job), "Pending", "NoPod", "the Job controller has not created a pod yet", **counts)
    reason, message = pod_reason(pod)
    return JobInfo(role, name_of(job), "Pending", reason or "Pending", message, **counts)


# -- progress from the chief's log --------------------------------------------------------------


def read_progress(api: KubeApi, namespace: str, chief_pod: Any | None) -> tuple[Progress | None, str]:
    """The chief's reported progress, and a note when its log could not be read (403 on pods/log, a race)."""
    if chief_pod is None:
        return None, ""
    container = main_container(chief_pod, CHIEF)
    try:
        text = api.read_pod_log(namespace, name_of(chief_pod), container, LOG_TAIL_LINES)
    except KubernetesError as error:
        return None, f"cannot read the chief's log: {error.message} ({error.hint})"
    return parse_progress(text), ""


def main_container(pod: Any, role: str) -> str | None:
    """The container named after the role (the chart's convention), else the first one."""
    names = [c.name for c in (pod.spec.containers if pod.spec else None) or []]
    if role in names:
        return role
    return names[0] if names else None


def parse_progress(log: str) -> Progress | None:
    """The last tfd-status document, else the last step line, else None."""
    lines = log.splitlines()
    for line in reversed(lines):
        status = parse_status_line(line)
        if status is not None:
            return progress_from_status(status)
    for line in reversed(lines):
        step = parse_step_line(line)
        if step:
            return Progress(source="step-line", step=step.step, loss=step.loss, examples_per_sec=step.examples_per_sec)
    return None


def progress_from_status(status: Status) -> Progress:
    return Progress(
        source="tfd-status",
        state=status.state,
        strategy=status.strategy or None,
        step=status.step,
        train_steps=status.train_steps or None,
        loss=status.loss,
        accuracy=status.accuracy,
        examples_per_sec=status.examples_per_sec,
        export_path=status.export_path or None,
        started_at=status.started_at or None,
        updated_at=status.updated_at or None,
        message=status.message or None,
    )


def training_state(chief: JobInfo, progress: Progress | None) -> Training:
    """The chief Job decides completion; the trainer's report adds the numbers and its message."""
    reported = progress.message if progress and progress.message else ""
    if chief.state == "Succeeded":
        return Training("Succeeded", reported or "the chief Job completed", progress)
    if chief.state == "Failed":
        job = f"chief Job failed: {chief.reason}" + (f" ({chief.message})" if chief.message else "")
        return Training("Failed", f"{job}; trainer: {reported}" if reported else job, progress)
    if chief.state == "Running":
        if progress and progress.state == "Failed":
            return Training(
                "Running", f"the last attempt failed ({reported}); the Job retries from the checkpoint", progress
            )
        return Training("Running", reported or ("training in progress" if progress else NO_PROGRESS), progress)
    if chief.state == "Pending":
        why = f"{chief.reason}: {chief.message}" if chief.message else chief.reason
        return Training("Pending", f"the chief pod has not started: {why}", progress)
    return Training("Unknown", f"{chief.message}; training progress is in <storage>/status.json", progress)


# -- endpoints ----------------------------------------------------------------------------------


def is_client_service(service: Any) -> bool:
    return role_of(service) in (TENSORBOARD, SERVING)


def endpoint(service: Any, namespace: str, pods: list[Any]) -> Endpoint:
    role = role_of(service)
    name = name_of(service)
    ports = tuple((p.name or str(p.port), int(p.port)) for p in (service.spec.ports if service.spec else None) or [])
    forwards = " ".join(f"{port}:{port}" for _, port in ports)
    return Endpoint(
        component=role,
        service=name,
        dns=f"{name}.{namespace}.svc",
        ports=ports,
        ready_pods=sum(1 for pod in pods if role_of(pod) == role and condition_true(pod, "Ready")),
        port_forward=f"kubectl -n {namespace} port-forward svc/{name} {forwards}",
    )


# -- rendering ----------------------------------------------------------------------------------

STATE_STYLE = {
    "Running": "cyan",
    "Succeeded": "green",
    "Failed": "red",
    "Interrupted": "yellow",  # the chief saved on SIGTERM (preemption, drain) and will resume
    "Pending": "yellow",
    "Unknown": "yellow",
    "Missing": "yellow",
}


def render(status: ReleaseStatus, console: Console) -> None:
    """A summary panel (training, chief Job, workloads, endpoints) and a pods table."""
    from rich.markup import escape
    from rich.panel import Panel

    console.print(Panel(summary_lines(status), title=f"{status.release} ({status.namespace})", expand=False))
    console.print(pods_table(status))
    for warning in status.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(warning)}")
    for note in status.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")


def summary_lines(status: ReleaseStatus) -> Any:
    from rich.markup import escape
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    training = status.training
    style = STATE_STYLE.get(training.state, "white")
    grid.add_row("Training", f"[{style}]{training.state}[/]  {escape(training.detail)}")
    progress = training.progress
    if progress is None:
        grid.add_row("Progress", NO_PROGRESS)
    else:
        grid.add_row("Progress", escape(progress_text(progress)))
        if progress.export_path:
            grid.add_row("Export", escape(progress.export_path))
    chief = status.chief
    chief_text = chief.state + (f" ({chief.reason})" if chief.reason else "")
    label = "Chief Job" if chief.role == CHIEF else "Workers' Job"  # worker 0 is the chief
    grid.add_row(label, f"[{STATE_STYLE.get(chief.state, 'white')}]{escape(chief_text)}[/]")
    if status.evaluator:
        grid.add_row(
            "Evaluator Job",
            escape(status.evaluator.state + (f" ({status.evaluator.reason})" if status.evaluator.reason else "")),
        )
    if status.stateful_sets:
        grid.add_row(
            "StatefulSets", escape(", ".join(f"{s.role} {s.ready}/{s.desired} ready" for s in status.stateful_sets))
        )
        ended = next((s for s in status.stateful_sets if s.ending), None)
        if ended:
            text = f"{ended.ending}: {ended.end_reason}" if ended.end_reason else ended.ending
            grid.add_row("Run ended", escape(text))
    for point in status.endpoints:
        ports = ", ".join(f"{name} {port}" for name, port in point.ports)
        label = "TensorBoard" if point.component == TENSORBOARD else "Serving"
        grid.add_row(label, escape(f"{point.dns} ({ports}); {point.ready_pods} ready pod(s)"))
        grid.add_row("", f"[dim]{escape(point.port_forward)}[/]")
    return grid


def progress_text(progress: Progress) -> str:
    parts = []
    if progress.step is not None:
        if progress.train_steps:
            percent = 100 * progress.step / progress.train_steps
            parts.append(f"step {progress.step}/{progress.train_steps} ({percent:.0f}%)")
        else:
            parts.append(f"step {progress.step}")
    if progress.loss is not None:
        parts.append(f"loss {progress.loss:.4f}")
    if progress.accuracy is not None:
        parts.append(f"accuracy {progress.accuracy:.4f}")
    if progress.examples_per_sec is not None:
        parts.append(f"{progress.examples_per_sec:.1f} examples/sec")
    if progress.updated_at:
        parts.append(f"updated {progress.updated_at}")
    return ", ".join(parts) or "reported, without numbers"


def pods_table(status: ReleaseStatus) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Pods", title_justify="left", show_lines=False)
    for column in ("ROLE", "POD", "STATUS", "READY", "RESTARTS", "NODE", "GPUS", "AGE", "DETAIL"):
        table.add_column(column, overflow="fold")
    if not status.pods:
        table.add_row("-", "(no pods)", "", "", "", "", "", "", "")
    for pod in status.pods:
        style = "red" if pod.reason and pod.phase != "Succeeded" else ""
        table.add_row(
            pod.role,
            pod.name,
            f"[{style}]{escape(pod.display_status)}[/]" if style else escape(pod.display_status),
            "yes" if pod.ready else "no",
            str(pod.restarts),
            pod.node or "-",
            ", ".join(f"{g.count} {g.resource}" for g in pod.gpus) or "-",
            human_age(pod.age_seconds),
            escape(pod.message),
        )
    return table


def human_age(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{hours // 24}d"
