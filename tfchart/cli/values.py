"""Commands that only render: validate, template, images (no cluster needed)."""

from __future__ import annotations

import json
import sys

import click

from tfchart.cli.options import CONTEXT, ValuesInputs, values_inputs

DEFAULT_RELEASE = "release-name"  # helm template's own default name


@click.command(context_settings=CONTEXT)
@click.argument("name", default=DEFAULT_RELEASE, required=False)
@values_inputs()
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def validate(name: str, values: ValuesInputs, namespace: str | None, output: str) -> None:
    """Check values as helm does (the chart's schema and its own rules), without a cluster.

    helm renders the chart with the inputs; every problem it reports is listed at once with the
    file:line (or --set argument) that set the key, the message and the fix. NAME (default
    release-name) and -n are the release the names are rendered for. Exit 0 valid, 1 invalid, 2 usage.
    """
    report = values.report(name, namespace)
    if output == "json":
        click.echo(json.dumps(report.as_dict(), indent=2, default=str))
        if not report.valid:
            sys.exit(1)
        return
    for warning in report.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    if not report.valid:
        raise report.failure()
    click.secho(f"✓ valid: {', '.join(report.inputs) or 'chart defaults'}", fg="green")
    for note in report.notes:
        click.echo(note)


@click.command(context_settings=CONTEXT)
@click.argument("name")
@values_inputs()
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
def template(name: str, values: ValuesInputs, namespace: str | None) -> None:
    """Render the manifests exactly as `helm template NAME CHART` does; invalid values are reported as by validate."""
    from tfchart.values.validate import rendered

    sys.stdout.write(rendered(values.settings.helm, values.chart, values.inputs, name, namespace))


@click.command("images", context_settings=CONTEXT)
@values_inputs()
@click.option("--release", default="tf-distributed", show_default=True, help="Release name to render for.")
@click.option("-n", "--namespace", default="default", show_default=True, help="Namespace to render for.")
@click.option("-o", "--output", type=click.Choice(["list", "json"]), default="list", show_default=True)
def list_images(values: ValuesInputs, release: str, namespace: str, output: str) -> None:
    """Every image the release pulls (with its digest where set), one per line or as JSON, to mirror."""
    from tfchart.manifests.images import pulled_images

    pulled = pulled_images(values.manifests(release, namespace))
    click.echo(json.dumps([p.as_dict() for p in pulled], indent=2) if output == "json"
               else "\n".join(p.image for p in pulled))  # fmt: skip
