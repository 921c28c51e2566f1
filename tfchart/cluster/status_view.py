"""What `tfchart status` shows: a summary panel and a pods table, drawn with rich from status.collect's JSON."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from tfchart.cluster.status import NO_PROGRESS
from tfdcontract import CHIEF, EVALUATOR, SERVING, TENSORBOARD

# Interrupted: the chief saved on SIGTERM (preemption, drain) and will resume; any other state is white.
STATE_STYLE = defaultdict(lambda: "white", {"Running": "cyan", "Succeeded": "green", "Failed": "red",
                                            "Interrupted": "yellow", "Pending": "yellow", "Unknown": "yellow",
                                            "Missing": "yellow", "Suspended": "magenta"})  # fmt: skip


def render(status: dict[str, Any], console: Console) -> None:
    """A summary panel (training, chief Job, workloads, endpoints) and a pods table."""
    console.print(Panel(summary_lines(status), title=f"{status['release']} ({status['namespace']})", expand=False))
    console.print(pods_table(status["pods"]))
    for warning in status["warnings"]:
        console.print(f"[bold yellow]warning:[/] {escape(warning)}")
    for note in status["notes"]:
        console.print(f"[yellow]note:[/] {escape(note)}")


def summary_lines(status: dict[str, Any]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    training, chief, record = status["training"], status[CHIEF], status["job_progress"] or {}
    progress, release, namespace = training["progress"] or {}, status["release"], status["namespace"]
    checkpoint = record.get("checkpoint_step")
    rows = [  # a row with nothing to say ("") is left out
        ("Training", f"[{STATE_STYLE[training['state']]}]{training['state']}[/]  {escape(training['detail'])}"),
        ("Progress", escape(progress_text(progress)) if progress else NO_PROGRESS),
        ("ETA", escape(record.get("eta") or "")),
        ("Checkpoint", "" if checkpoint is None else f"step {checkpoint}"),
        ("Export", escape(progress.get("export_path") or "")),
        ("JobSet" if chief["kind"] == "JobSet" else "Chief Job" if chief["role"] == CHIEF else "Workers' Job",
         f"[{STATE_STYLE[chief['state']]}]{escape(job_text(chief))}[/]"),
        ("Run ended", escape(": ".join(filter(None, (chief["ending"], chief["end_reason"]))))
         if chief["ending"] else ""),
        ("Suspended", escape(f"since {chief['suspended_since']}; `tfchart resume {release} -n {namespace}` continues")
         if chief["state"] == "Suspended" and not chief["ending"] else ""),
        ("Evaluator Job", escape(job_text(status[EVALUATOR])) if status[EVALUATOR] else ""),
        ("StatefulSets", escape(", ".join(f"{s['role']} {s['ready']}/{s['desired']} ready"
                                          for s in status["stateful_sets"]))),
        *((label, escape(text)) for label, text in versions_rows(status[SERVING], progress)),
    ]  # fmt: skip
    for point in status["endpoints"]:
        ports = ", ".join(f"{port['name']} {port['port']}" for port in point["ports"])
        rows += [("TensorBoard" if point["component"] == TENSORBOARD else "Serving",
                  escape(f"{point['dns']} ({ports}); {point['ready_pods']} ready pod(s)")),
                 ("", f"[dim]{escape(point['port_forward'])}[/]")]  # fmt: skip
    for label, text in rows:
        if text:
            grid.add_row(label, text)
    return grid


def versions_rows(versions: dict[str, Any] | None, progress: dict[str, Any]) -> list[tuple[str, str]]:
    """'Exported' (every version of the model) and 'Serving loads' (those the model config selects)."""
    exported = versions["exported"] if versions else progress.get("exported_versions")
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


def job_text(job: dict[str, Any]) -> str:
    text: str = job["state"] + (f" ({job['reason']})" if job["reason"] else "")
    if job["kind"] == "JobSet":  # the JobSet's name and how often its failure policy restarted every Job
        text = f"{job['name']} {text}" + (f", restarted {job['restarts']} time(s)" if job["restarts"] else "")
    return text


def progress_text(progress: dict[str, Any]) -> str:
    parts = []
    if progress["step"] is not None:
        steps = progress["train_steps"]
        parts.append(f"step {progress['step']}" + (f"/{steps} ({100 * progress['step'] / steps:.0f}%)" if steps
                                                   else ""))
    numbers = (("loss {:.4f}", "loss"), ("accuracy {:.4f}", "accuracy"), ("{:.1f} examples/sec", "examples_per_sec"))
    parts += [form.format(progress[key]) for form, key in numbers if progress[key] is not None]
    parts += [f"updated {progress['updated_at']}"] if progress["updated_at"] else []
    return ", ".join(parts) or "reported, without numbers"


def pods_table(pods: list[dict[str, Any]]) -> Table:
    table = Table(title="Pods", title_justify="left", show_lines=False)
    for column in ("ROLE", "POD", "STATUS", "READY", "RESTARTS", "NODE", "GPUS", "AGE", "DETAIL"):
        table.add_column(column, overflow="fold")
    if not pods:
        table.add_row("-", "(no pods)", "", "", "", "", "", "", "")
    for pod in pods:
        shown = escape(pod["status"])
        gpus = ", ".join(f"{gpu['count']} {gpu['resource']}" for gpu in pod["gpus"]) or "-"
        table.add_row(pod["role"], pod["name"], f"[red]{shown}[/]" if pod["reason"] and pod["phase"] != "Succeeded"
                      else shown, "yes" if pod["ready"] else "no", str(pod["restarts"]), pod["node"] or "-", gpus,
                      human_age(pod["age_seconds"]), escape(pod["message"]))  # fmt: skip
    return table


def human_age(seconds: int | None) -> str:
    """As kubectl shows an age: 90s, 5m, 3h20m, 2d."""
    if seconds is None:
        return "-"
    minutes, hours = seconds // 60, seconds // 3600
    if hours >= 48:
        return f"{hours // 24}d"
    if minutes >= 120:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{minutes}m" if seconds >= 120 else f"{seconds}s"
