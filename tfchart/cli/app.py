"""The tfchart command line: the click group, and the one place where errors become messages and exit codes
(docs/cli.md, "Exit codes"; --debug shows tracebacks and the helm commands run). The commands live by family in
tfchart.cli.release (validate, template, images, install, upgrade, uninstall, preflight), .run (status, stop,
logs, wait, list, suspend, resume) and .local (local, build); `completion` is here; a command's module is imported only
when that command runs, and imports what it needs then, so `tfchart validate` costs little more than its helm run.
"""

from __future__ import annotations

import difflib
import importlib
import sys

import click

from tfchart.cli.formats import print_problems
from tfchart.cli.options import CONTEXT, Settings
from tfchart.errors import TfchartError, ValidationFailed

COMMANDS = {  # each command, as <family>.<function> of tfchart.cli.<family>
    "validate": "release.validate", "template": "release.template", "images": "release.list_images",
    "install": "release.install", "upgrade": "release.upgrade", "uninstall": "release.uninstall",
    "preflight": "release.preflight", "status": "run.status", "stop": "run.stop", "logs": "run.logs",
    "wait": "run.wait", "list": "run.list_releases", "suspend": "run.suspend", "resume": "run.resume",
    "completion": "app.completion",
    "local": "local.local", "build": "local.build",
}  # fmt: skip


class LazyGroup(click.Group):
    """Imports a command's module (tfchart.cli.<family>) when the command is used or listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        family, _, function = COMMANDS[cmd_name].partition(".")
        command: click.Command = getattr(importlib.import_module(f"tfchart.cli.{family}"), function)
        if not any(param.name == "global_debug" for param in command.params):  # once per command object
            command.params += global_options()  # and `tfchart --help` lists its first sentence whole, never cut
            command.short_help = summary(" ".join((command.help or "").split()))
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:  # a mistyped command gets "did you mean"
        if args and args[0] not in COMMANDS and (close := difflib.get_close_matches(args[0], COMMANDS, n=1)):
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


def global_options() -> list[click.Parameter]:
    """tfchart's own options, accepted before and after the subcommand (`tfchart validate --debug`), as helm's are."""

    def setting(ctx: click.Context, param: click.Parameter, value: bool | str | None) -> None:
        if value:  # --debug sets Settings.debug, --helm Settings.helm_binary
            setattr(ctx.ensure_object(Settings), "debug" if param.name == "global_debug" else "helm_binary", value)

    return [
        click.Option(["--debug", "global_debug"], is_flag=True, expose_value=False, callback=setting,
                     help="Show tracebacks and the helm commands run."),
        click.Option(["--helm", "global_helm"], metavar="PATH", expose_value=False, callback=setting,
                     help="helm binary (default: $TFCHART_HELM, helm on PATH, or the repository's .tools/bin/helm)."),
    ]  # fmt: skip


@click.group(cls=LazyGroup, context_settings=CONTEXT, params=global_options())
@click.version_option(package_name="tf-distributed", prog_name="tfchart")
def main_group() -> None:
    """Validate, render, install and watch distributed TensorFlow training on Kubernetes."""


SHELLS = ("bash", "zsh", "fish")


@click.command(context_settings=CONTEXT)
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
