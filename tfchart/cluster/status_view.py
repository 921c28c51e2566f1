"""What `tfchart status` shows: a summary panel and a pods table, drawn with rich."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfchart.cluster.status import NO_PROGRESS, Progress, ReleaseStatus
from tfdcontract import CHIEF, TENSORBOARD

if TYPE_CHECKING:
    from rich.console import Console


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
    exported = versions.exported if versions else (status.training.progress or Progress("")).exported_versions
    rows = []
    if exported is not None:
        rows.append(("Exported", ", ".join(f"v{v}" for v in exported) or "no version yet"))
    if versions is None:
        return rows
    if not versions.policy:
        return [*rows, ("Serving loads", f"unknown: {versions.note}")]
    configured = f"{versions.model} ({versions.policy}, {versions.config_map})"
    if versions.loaded is None:
        return [*rows, ("Serving loads", f"{configured}; {versions.note}")]
    loaded = ", ".join(f"v{v}" for v in versions.loaded) or "nothing"
    missing = f"; not exported: {', '.join(f'v{v}' for v in versions.missing)}" if versions.missing else ""
    return [*rows, ("Serving loads", f"{loaded} of {configured}{missing}")]


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
