"""The command line (click): tfchart.cli.app holds the group and the error boundary."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    from tfchart.cli.app import main as run

    run(argv)
