"""helm's and kubectl's conventions the commands share: durations (`--timeout 90s`), `-o json|yaml`
beside each command's human format; the problem report of invalid values, and the one rich Console."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.errors import ValidationFailed

F = TypeVar("F", bound=Callable[..., Any])
DURATION_FORMS = "a duration such as 90s, 10m or 1h30m (helm's), or plain seconds (90)"


class Duration(click.ParamType[float, Any]):
    """A timeout as helm and kubectl write it (Go's 300ms, 90s, 10m, 1h30m, read by durationpy, the kubernetes
    client's parser), or plain seconds; in seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        import durationpy

        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = durationpy.from_str(str(value).strip()).total_seconds()
            except durationpy.DurationError:
                self.fail(f"{value!r} is not {DURATION_FORMS}", param, ctx)
        if not math.isfinite(seconds) or seconds < 0:
            self.fail(f"{value!r} is not {DURATION_FORMS}", param, ctx)
        return seconds


DURATION = Duration()


def timeout_option(help: str) -> Callable[[F], F]:
    """--timeout DURATION, in seconds (None when not given)."""
    return click.option("--timeout", type=DURATION, default=None, help=help)


def output_option(human: str) -> Callable[[F], F]:
    """-o/--output: `human` (the default, for people), json or yaml (the same data, for programs)."""
    return click.option("-o", "--output", type=click.Choice([human, "json", "yaml"]), default=human,
                        show_default=True, help=f"Report format: {human}, or json / yaml for programs.")  # fmt: skip


def emit(data: Any, output: str) -> bool:
    """The report (a dataclass as its fields) as JSON or YAML on stdout; YAML is the very data JSON gets. False (and
    nothing printed) for the command's human format, which the command draws itself."""
    if output not in ("json", "yaml"):
        return False
    plain = json.loads(json.dumps(data, default=lambda o: asdict(o) if is_dataclass(o) and not isinstance(o, type)
                                  else str(o)))
    if output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True), nl=False)
    else:
        click.echo(json.dumps(plain, indent=2))
    return True


def console(stderr: bool = False) -> Console:
    """A rich Console on stdout (or stderr) that soft-wraps (the terminal folds long lines, copying keeps them whole);
    off a terminal (a pipe, a file, a CI log) it is as wide as any line, whatever COLUMNS says, so a problem and a table
    row stay one line and a printed command can be pasted whole."""
    from rich.console import Console

    terminal = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=None if terminal else 10_000)


def print_problems(error: ValidationFailed, err: bool = False) -> None:
    """Every values problem, one line each (click never wraps): where it was set, the key path, what is wrong (and the
    policy rule it breaks), then the fix to copy on a line of its own."""
    click.secho(f"✗ {error.message}", fg="red", bold=True, err=err)
    for problem in error.problems:
        rule = getattr(problem, "rule", "")
        where = click.style(f"{problem.file}:{problem.line}" if problem.file and problem.line is not None
                            else problem.file or "chart default", fg="cyan")  # fmt: skip
        broken = click.style(f"  (rule {rule})", fg="magenta") if rule else ""
        click.echo(f"  {where}  {click.style(problem.path, bold=True)}: {problem.message}{broken}", err=err)
        if problem.fix:
            click.echo(f"      fix: {click.style(problem.fix, fg='green')}", err=err)
    if error.note:
        click.secho(f"  {error.note}", dim=True, err=err)
