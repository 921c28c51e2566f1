"""The command line (click): tfchart.cli.app holds the group, its entry point main and the error boundary; the
commands of each family (.release, .run, .local) join the group here, when the package is first imported."""

from tfchart.cli import app, local, release, run

for command in (release.validate, release.template, release.list_images, release.install, release.upgrade,
                release.uninstall, release.preflight, run.status, run.stop, run.logs, run.wait, run.list_releases,
                run.suspend, run.resume, app.completion, local.local, local.build):  # fmt: skip
    command.params += app.global_options()  # tfchart's own options, after the command too
    command.short_help = app.summary(" ".join((command.help or "").split()))  # `tfchart --help` lists it whole
    app.main_group.add_command(command)
