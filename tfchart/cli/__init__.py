"""The command line (click): tfchart.cli.app holds the group and the error boundary."""

from tfchart.cli.app import main

__all__ = ["main"]
