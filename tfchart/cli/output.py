"""How tfchart's errors look on the terminal (the CLI's one boundary, tfchart.cli.main, calls this)."""

from __future__ import annotations

import click

from tfchart.errors import Problem, TfchartError, ValidationFailed


def print_problems(problems: list[Problem], title: str = "", note: str = "") -> None:
    """Every problem: where it came from, the key path, what is wrong (and the policy rule it breaks),
    and the fix to copy. `title` heads the list (default: N problems in values); `note` ends it."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    count = len(problems)
    console.print(f"[bold red]✗ {escape(title or f'{count} problem' + ('s' if count != 1 else '') + ' in values')}[/]")
    for problem in problems:
        where = problem.location or "chart default"
        rule = getattr(problem, "rule", "")
        broken = f"  [magenta](rule {escape(rule)})[/]" if rule else ""
        console.print(
            f"  [cyan]{escape(where)}[/]  [bold]{escape(problem.path)}[/]: {escape(problem.message)}{broken}"
        )
        if problem.fix:
            console.print(f"      fix: [green]{escape(problem.fix)}[/]")
    if note:
        console.print(f"  [dim]{escape(note)}[/]")


def show_error(error: TfchartError, debug: bool) -> None:
    """The error on stderr: every values problem, or one line with its hint (and the traceback with --debug)."""
    if isinstance(error, ValidationFailed):
        print_problems(error.problems, error.message, error.note)
    else:
        click.secho(f"error: {error.message}", fg="red", err=True)
        if error.hint:
            click.echo(f"  hint: {error.hint}", err=True)
    if debug:
        import traceback

        traceback.print_exception(error)
