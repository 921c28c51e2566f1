"""What `tfchart status` shows: a summary panel and a pods table, drawn with rich."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfchart.cluster.objects import JobInfo
from tfchart.cluster.status import NO_PROGRESS, Progress, ReleaseStatus
from tfdcontract import CHIEF, TENSORBOARD

if TYPE_CHECKING:
    from rich.console import Console


# Interrupted: the chief saved on SIGTERM (preemption, drain) and will resume.
STATE_STYLE = {"Running": "cyan", "Succeeded": "green", "Failed": "red", "Interrupted": "yellow", "Pending": "yellow",
               "Unknown": "yellow", "Missing": "yellow", "Suspended": "magenta"}


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
    grid.add_row("Progress", escape(progress_text(progress)) if progress else NO_PROGRESS)
    record = status.job_progress
    if record and record.eta:
        grid.add_row("ETA", escape(record.eta))
    if record and record.checkpoint_step is not None:
        grid.add_row("Checkpoint", f"step {record.checkpoint_step}")
    if progress and progress.export_path:
        grid.add_row("Export", escape(progress.export_path))
    chief = status.chief
    label = "JobSet" if chief.kind == "JobSet" else "Chief Job" if chief.role == CHIEF else "Workers' Job"
    grid.add_row(label, f"[{STATE_STYLE.get(chief.state, 'white')}]{escape(job_text(chief))}[/]")
    if chief.ending:
        grid.add_row("Run ended", escape(f"{chief.ending}: {chief.end_reason}" if chief.end_reason else chief.ending))
    if chief.state == "Suspended" and not chief.ending:
        resume = f"tfchart resume {status.release} -n {status.namespace}"
        grid.add_row("Suspended", escape(f"since {chief.suspended_since}; `{resume}` continues"))
    if status.evaluator:
        grid.add_row("Evaluator Job", escape(job_text(status.evaluator)))
    if status.stateful_sets:
        sets = ", ".join(f"{s.role} {s.ready}/{s.desired} ready" for s in status.stateful_sets)
        grid.add_row("StatefulSets", escape(sets))
    for label, text in versions_rows(status):
        grid.add_row(label, escape(text))
    for point in status.endpoints:
        ports = ", ".join(f"{name} {port}" for name, port in point.ports)
        label = "TensorBoard" if point.component == TENSORBOARD else "Serving"
        grid.add_row(label, escape(f"{point.dns} ({ports}); {point.ready_pods} ready pod(s)"))
        grid.add_row("", f"[dim]{escape(point.port_forward)}[/]")
    return grid


def versions_rows(status: ReleaseStatus) -> list[tuple[str, str]]:
    """'Exported' (every version of the model) and 'Serving loads' (those the model config selects)."""
    versions = status.serving
    exported = versions["exported"] if versions else (status.training.progress or Progress("")).exported_versions
    rows = [] if exported is None else [("Exported", ", ".join(f"v{v}" for v in exported) or "no version yet")]
    if versions is None:
        return rows
    if not versions["policy"]:
        return [*rows, ("Serving loads", f"unknown: {versions['note']}")]
    configured = f"{versions['model']} ({versions['policy']}, {versions['config_map']})"
    if versions["loaded"] is None:
        return [*rows, ("Serving loads", f"{configured}; {versions['note']}")]
    loaded = ", ".join(f"v{v}" for v in versions["loaded"]) or "nothing"
    missing = "; not exported: " + ", ".join(f"v{v}" for v in versions["missing"]) if versions["missing"] else ""
    return [*rows, ("Serving loads", f"{loaded} of {configured}{missing}")]


def job_text(job: JobInfo) -> str:
    text = job.state + (f" ({job.reason})" if job.reason else "")
    if job.kind == "JobSet":  # the JobSet's name and how often its failure policy restarted every Job
        text = f"{job.name} {text}" + (f", restarted {job.restarts} time(s)" if job.restarts else "")
    return text


def progress_text(progress: Progress) -> str:
    parts = []
    if progress.step is not None:
        steps = progress.train_steps
        share = f"/{steps} ({100 * progress.step / steps:.0f}%)" if steps else ""
        parts.append(f"step {progress.step}{share}")
    numbers = (("loss {:.4f}", progress.loss), ("accuracy {:.4f}", progress.accuracy),
               ("{:.1f} examples/sec", progress.examples_per_sec))
    parts += [form.format(value) for form, value in numbers if value is not None]
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
        shown = f"[{style}]{escape(pod.display_status)}[/]" if style else escape(pod.display_status)
        gpus = ", ".join(f"{g.count} {g.resource}" for g in pod.gpus) or "-"
        table.add_row(pod.role, pod.name, shown, "yes" if pod.ready else "no", str(pod.restarts), pod.node or "-",
                      gpus, human_age(pod.age_seconds), escape(pod.message))
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
