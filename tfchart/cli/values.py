"""Commands that only render: validate, template, images (no cluster needed)."""

from __future__ import annotations

import sys

import click

from tfchart.cli.formats import emit, output_option
from tfchart.cli.options import CONTEXT, ValuesInputs, values_inputs

DEFAULT_RELEASE = "release-name"  # helm template's own default name


@click.command(context_settings=CONTEXT)
@click.argument("name", default=DEFAULT_RELEASE, required=False)
@values_inputs
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
@output_option("text")
def validate(name: str, values: ValuesInputs, namespace: str | None, output: str) -> None:
    """Check values as helm does (the chart's schema and its own rules), without a cluster.

    helm renders the chart with the inputs; every problem (the schema's, the chart's rules', the --policy
    file's) is listed at once with the file:line (or --set argument) that set the key, the message and the
    fix where one keeps what was meant. NAME (default
    release-name) and -n are the release the names are rendered for. The report, problems
    included, is the output (stdout). Exit 0 valid, 1 invalid, 2 usage.
    """
    report = values.report(name, namespace)
    if output != "text":
        emit(report.as_dict(), output)
    else:
        for warning in report.warnings:
            click.secho(f"warning: {warning}", fg="yellow")
        if not report.valid:  # rich only here: a valid report costs no more than the helm it runs
            from tfchart.cli.formats import print_problems
            from tfchart.console import console

            for failure in report.failures():
                print_problems(failure, console())
        else:
            click.secho(f"✓ valid: {', '.join(report.inputs) or 'chart defaults'}", fg="green")
            for note in report.notes:
                click.echo(note)
    if not report.valid:
        sys.exit(1)


@click.command(context_settings=CONTEXT)
@click.argument("name")
@values_inputs
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
def template(name: str, values: ValuesInputs, namespace: str | None) -> None:
    """Render the manifests exactly as `helm template NAME CHART` does; invalid values are reported as by validate."""
    from tfchart.values.validate import rendered

    sys.stdout.write(rendered(values.settings.helm, values.chart, values.inputs, name, namespace))


@click.command("images", context_settings=CONTEXT)
@click.argument("name", default=DEFAULT_RELEASE, required=False)
@values_inputs
@click.option("-n", "--namespace", default="default", show_default=True, help="Namespace to render for.")
@output_option("text")
def list_images(name: str, values: ValuesInputs, namespace: str, output: str) -> None:
    """Every image release NAME pulls (with its digest where set), one per line, or as JSON / YAML, to mirror."""
    from tfchart.manifests.images import pulled_images

    pulled = pulled_images(values.manifests(name, namespace))
    if output == "text":
        click.echo("\n".join(p.image for p in pulled))
    else:
        emit([p.as_dict() for p in pulled], output)
