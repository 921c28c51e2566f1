"""`tfchart completion`: the shell completion script, as `_TFCHART_COMPLETE=<shell>_source tfchart` prints it."""

from __future__ import annotations

import click

from tfchart.cli.options import CONTEXT

SHELLS = ("bash", "zsh", "fish")


@click.command(context_settings=CONTEXT)
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script of SHELL: `source <(tfchart completion bash)` in ~/.bashrc,
    `tfchart completion zsh > "${fpath[1]}/_tfchart"`,
    `tfchart completion fish > ~/.config/fish/completions/tfchart.fish`."""
    from click.shell_completion import get_completion_class

    from tfchart.cli.app import main_group

    script_class = get_completion_class(shell)
    assert script_class is not None  # click ships all of SHELLS
    click.echo(script_class(main_group, {}, "tfchart", "_TFCHART_COMPLETE").source())
