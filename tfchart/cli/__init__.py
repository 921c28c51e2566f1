"""The command line (click): tfchart.cli.app holds the group, its entry point main and the error boundary."""
