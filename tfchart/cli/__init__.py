"""The command line (click): tfchart.cli.app holds the group, its entry point main and the error boundary; the
commands of each family (.release, .run, .local) join the group as their modules are imported, here."""

from tfchart.cli import local, release, run  # noqa: F401 (imported for their commands)
