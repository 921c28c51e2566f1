"""The tfchart command line: the click group, and the one place where errors become messages and exit codes
(docs/cli.md, "Exit codes"; --debug shows tracebacks and the helm commands run). The commands live by family in
tfchart.cli.release (validate, template, images, install, upgrade, uninstall, preflight), .run (status, stop,
logs, wait, list, suspend, resume) and .local (local, build), each `@main_group.command()`, and join the group as
tfchart/cli/__init__.py imports them; `completion` is here. A command imports what it needs when it runs, so
`tfchart validate` costs little more than its helm run. Here too, what the commands share: Settings (tfchart's own
--debug and --helm), helm's and kubectl's conventions (durations, `--timeout 90s`; `-o json|yaml` beside each
command's human format), the problem report of invalid values and the one rich Console.
"""

from __future__ import annotations

import difflib
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tfchart.errors import TfchartError, ValidationFailed

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.helm.runner import Helm

F = TypeVar("F", bound=Callable[..., Any])
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
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
        where = click.style(f"{problem.file}:{problem.line}" if problem.file and problem.line is not None
                            else problem.file or "chart default", fg="cyan")  # fmt: skip
        broken = click.style(f"  (rule {problem.rule})", fg="magenta") if problem.rule else ""
        click.echo(f"  {where}  {click.style(problem.path, bold=True)}: {problem.message}{broken}", err=err)
        if problem.fix:
            click.echo(f"      fix: {click.style(problem.fix, fg='green')}", err=err)
    if error.note:
        click.secho(f"  {error.note}", dim=True, err=err)


@dataclass
class Settings:
    """Options shared by every command: --debug, and which helm runs."""

    debug: bool = False
    helm_binary: str | None = None

    @cached_property
    def helm(self) -> Helm:
        from tfchart.helm.runner import find_helm

        return find_helm(self.helm_binary, self.debug)


class Group(click.Group):
    """tfchart's group: each command gets tfchart's own options (after the command too) and its help up to the first
    sentence as its summary in `tfchart --help`, never cut; a mistyped command gets "did you mean" the closest one."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params += GLOBAL_OPTIONS
        cmd.short_help = summary(" ".join((cmd.help or "").split()))
        super().add_command(cmd, name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and (close := difflib.get_close_matches(args[0], self.commands, 1)):
            ctx.fail(f"No such command {args[0]!r}. Did you mean {close[0]!r}?")
        return super().resolve_command(ctx, args)


def summary(text: str) -> str:
    """A command's help up to its first `. ` or `: ` outside brackets and backticks, for `tfchart --help`."""
    depth = quoted = 0
    for i, char in enumerate(text):
        quoted, depth = quoted ^ (char == "`"), depth + (char == "(") - (char == ")")
        if not quoted and not depth and text.startswith((". ", ": "), i):
            return text[:i]
    return text.rstrip(".")


def setting(ctx: click.Context, param: click.Parameter, value: bool | str | None) -> None:
    if value:  # --debug sets Settings.debug, --helm Settings.helm_binary
        setattr(ctx.ensure_object(Settings), "debug" if param.name == "global_debug" else "helm_binary", value)


GLOBAL_OPTIONS: tuple[click.Parameter, ...] = (  # tfchart's own, before and after the subcommand, as helm's are
    click.Option(["--debug", "global_debug"], is_flag=True, expose_value=False, callback=setting,
                 help="Show tracebacks and the helm commands run."),
    click.Option(["--helm", "global_helm"], metavar="PATH", expose_value=False, callback=setting,
                 help="helm binary (default: $TFCHART_HELM, helm on PATH, or the repository's .tools/bin/helm)."),
)  # fmt: skip


@click.group(cls=Group, context_settings=CONTEXT, params=list(GLOBAL_OPTIONS))
@click.version_option(package_name="tf-distributed", prog_name="tfchart")
def main_group() -> None:
    """Validate, render, install and watch distributed TensorFlow training on Kubernetes."""


SHELLS = ("bash", "zsh", "fish")


@main_group.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script of SHELL: `source <(tfchart completion bash)` in ~/.bashrc,
    `tfchart completion zsh > "${fpath[1]}/_tfchart"`,
    `tfchart completion fish > ~/.config/fish/completions/tfchart.fish`."""
    from click.shell_completion import get_completion_class

    script_class = get_completion_class(shell)
    assert script_class is not None  # click ships all of SHELLS
    click.echo(script_class(main_group, {}, "tfchart", "_TFCHART_COMPLETE").source())


def main(argv: list[str] | None = None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    if debug:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        main_group.main(args=argv, prog_name="tfchart", standalone_mode=False, obj=Settings())
    except TfchartError as error:  # on stderr: one line with its hint, or every values problem
        if isinstance(error, ValidationFailed):
            print_problems(error, err=True)
        else:
            click.secho(f"error: {error.message}", fg="red", err=True)
            if error.hint:
                click.echo(f"  hint: {error.hint}", err=True)
        if debug:  # and the traceback
            import traceback

            traceback.print_exception(error)
        sys.exit(error.exit_code)
    except click.ClickException as error:  # a usage error exits 2, any other 1
        error.show()
        sys.exit(error.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt) as stopped:  # Ctrl-C: 130, as a shell says it
        click.echo("aborted" if isinstance(stopped, click.exceptions.Abort) else "interrupted", err=True)
        sys.exit(130)
