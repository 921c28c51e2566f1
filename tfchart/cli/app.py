"""The tfchart command line: the click group, and the one place where errors become messages and exit
codes (exit 1 for errors, 2 for usage; --debug shows tracebacks and the helm commands run).

The commands live by family in tfchart.cli.values (validate, template, images), .release (install,
upgrade, uninstall, preflight), .run (status, stop, logs) and .local (local, build). A command's
module is imported only when that command runs, and each imports what it needs when it runs, so
`tfchart validate` costs little more than the `helm template` it runs.
"""

from __future__ import annotations

import importlib
import sys

import click

from tfchart.cli.options import CONTEXT, Settings, settings_options
from tfchart.cli.output import show_error
from tfchart.errors import TfchartError

COMMANDS = {
    "validate": "values", "template": "values", "images": "values",
    "install": "release", "upgrade": "release", "uninstall": "release", "preflight": "release",
    "status": "run", "stop": "run", "logs": "run", "local": "local", "build": "local",
}  # fmt: skip


class LazyGroup(click.Group):
    """Imports a command's module (tfchart.cli.<family>) when the command is used or listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        family = COMMANDS.get(cmd_name)
        if family is None:
            return None
        module = importlib.import_module(f"tfchart.cli.{family}")
        return next(c for c in module.COMMANDS if c.name == cmd_name)  # type: ignore[no-any-return]


@click.group(cls=LazyGroup, context_settings=CONTEXT)
@settings_options
@click.version_option(package_name="tf-distributed", prog_name="tfchart")
@click.pass_context
def main_group(ctx: click.Context, debug: bool, helm: str | None) -> None:
    """Validate, render, install and watch distributed TensorFlow training on Kubernetes."""
    ctx.obj = Settings(debug, helm)


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place where errors become messages and exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    if debug:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        main_group.main(args=argv, prog_name="tfchart", standalone_mode=False)
    except TfchartError as error:
        show_error(error, debug)
        sys.exit(error.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as error:
        error.show()
        sys.exit(2)
    except click.ClickException as error:
        error.show()
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
