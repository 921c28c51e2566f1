"""Commands on a release: validate, template and images only render it (no cluster needed); install, upgrade,
uninstall and preflight change or check it on the cluster."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from tfchart.cli.app import console, emit, main_group, output_option, print_problems, timeout_option
from tfchart.cli.options import ValuesInputs, image_check, kube_inputs, release_flags, values_inputs

if TYPE_CHECKING:
    from tfchart.cli.options import KubeInputs
    from tfchart.cluster.kube import KubeApi
    from tfchart.helm.runner import Options

DEFAULT_RELEASE = "release-name"  # helm template's own default name


@main_group.command()
@click.argument("name", default=DEFAULT_RELEASE, required=False)
@values_inputs
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
@output_option("text")
def validate(name: str, values: ValuesInputs, namespace: str | None, output: str) -> None:
    """Check values as helm does (the chart's schema and its own rules), without a cluster.

    helm renders the chart with the inputs; every problem (the schema's, the chart's rules', the --policy file's) is
    listed at once with the file:line (or --set argument) that set the key, the message and the fix where one keeps
    what was meant. NAME (default release-name) and -n are the release the names are rendered for. The report,
    problems included, is the output (stdout). Exit 0 valid, 1 invalid, 2 usage.
    """
    report = values.report(name, namespace)
    if not emit(report.as_dict(), output):
        for warning in report.warnings:
            click.secho(f"warning: {warning}", fg="yellow")
        for failure in report.failures():
            print_problems(failure)
        if report.valid:
            click.secho(f"✓ valid: {', '.join(report.inputs) or 'chart defaults'}", fg="green")
            for note in report.notes:
                click.echo(note)
    if not report.valid:
        sys.exit(1)


@main_group.command()
@click.argument("name")
@values_inputs
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
def template(name: str, values: ValuesInputs, namespace: str | None) -> None:
    """Render the manifests exactly as `helm template NAME CHART` does; invalid values are reported as by validate."""
    from tfchart.values.validate import rendered

    sys.stdout.write(rendered(values.settings.helm, values.chart, values.inputs, name, namespace))


@main_group.command("images")
@click.argument("name", default=DEFAULT_RELEASE, required=False)
@values_inputs
@click.option("-n", "--namespace", default="default", show_default=True, help="Namespace to render for.")
@output_option("text")
def list_images(name: str, values: ValuesInputs, namespace: str, output: str) -> None:
    """Every image release NAME pulls (with its digest where set), one per line, or as JSON / YAML, to mirror."""
    from tfchart.manifests.images import pulled_images

    pulled = pulled_images(values.manifests(name, namespace))
    if not emit(pulled, output):
        click.echo("\n".join(p["image"] for p in pulled))


def namespace_after_values(kube: KubeInputs, values: ValuesInputs, name: str) -> str:
    """The release's namespace; where the kubeconfig cannot say it, the values' problems are reported first."""
    from tfchart.errors import KubernetesError

    try:
        return kube.namespace()
    except KubernetesError:
        values.manifests(name, kube.given_namespace)
        raise


@main_group.command()
@click.argument("name")
@values_inputs
@release_flags
@kube_inputs
@click.option("--create-namespace", is_flag=True, help="Create the namespace if it does not exist.")
@click.option("--skip-preflight", is_flag=True, help="Do not check GPUs, storage and quota on the cluster first.")
@image_check
def install(name: str, values: ValuesInputs, flags: Options, kube: KubeInputs, create_namespace: bool,
            skip_preflight: bool, registries: frozenset[str] | None) -> None:  # fmt: skip
    """Validate, run the preflight checks (the images' too), then `helm install NAME`."""
    from tfchart.helm import chart as release

    namespace = namespace_after_values(kube, values, name)
    manifests = values.manifests(name, namespace)
    checked(None if skip_preflight else kube.api(), manifests, name, namespace, registries, dry_run=flags.dry_run)
    options = replace(flags, namespace=namespace, create_namespace=create_namespace)
    click.echo(release.install(kube.helm(), name, values.chart, values.inputs, options))


@main_group.command()
@click.argument("name")
@values_inputs
@release_flags
@kube_inputs
@click.option("-i", "--install", is_flag=True, help="Install the release if helm holds none of this name (helm's).")
@click.option("--create-namespace", is_flag=True, help="With --install: create the namespace if it does not exist.")
@click.option("--reuse-values", "reuse", flag_value="reuse", default=None,
              help="Start from the last release's values, then -f and --set (helm's --reuse-values).")
@click.option("--reset-then-reuse-values", "reuse", flag_value="reset-then-reuse",
              help="Start from this chart's defaults and the values the last release was given, then -f and --set.")
@click.option("--recreate", is_flag=True, help="Delete StatefulSets, Jobs and Deployments whose immutable fields "
              "change, wait until they are gone (at most --timeout, default 5m), then let helm create them "
              "(StatefulSet pods are kept and adopted). Never a PersistentVolumeClaim.")  # fmt: skip
@image_check
def upgrade(name: str, values: ValuesInputs, flags: Options, kube: KubeInputs, install: bool, create_namespace: bool,
            reuse: str | None, recreate: bool, registries: frozenset[str] | None) -> None:  # fmt: skip
    """Validate, check the changes against the cluster, then `helm upgrade NAME`.

    Changes the API server refuses (asked with a server-side dry run: StatefulSet fields, a Job's pod template, a
    Deployment's selector, a claim's class, access modes or a smaller size) are refused before helm runs, each with
    its field, live and new value. --recreate deletes the StatefulSets, Jobs and Deployments concerned and waits
    until they are gone; a claim is never recreated. An object already gone from the cluster (a finished chief Job
    removed by chief.ttlSecondsAfterFinished) is no conflict: helm creates it. Every image must resolve in its
    registry first (--skip-image-check not to ask). With --reuse-values the values checked are the deployed ones
    with -f and --set over them, as helm merges them.
    """
    from tfchart.cluster import upgrade as guard
    from tfchart.helm import chart as release
    from tfchart.helm import runner

    namespace = namespace_after_values(kube, values, name)
    options = replace(flags, namespace=namespace, install=install, create_namespace=create_namespace,
                      reuse_values=reuse)  # fmt: skip
    manifests = [] if reuse else values.manifests(name, namespace)  # the values' problems before the cluster's
    helm = kube.helm()
    existing = not install or runner.deployed(helm, name, namespace)
    if reuse:  # --reuse-values: the deployed values with the user's over them, as helm merges them
        reused = values.over(helm, name, namespace, reuse) if existing else values
        manifests = reused.manifests(name, namespace)
    checked(None, manifests, name, namespace, registries, dry_run=flags.dry_run)
    if not existing:  # nothing deployed to compare with: helm installs it
        click.echo(release.install(helm, name, values.chart, values.inputs, options, verb="upgrade"))
        return
    plan = guard.upgrade(helm, name, values.chart, values.inputs, manifests, options, kube.api(), recreate,
                         report=lambda line: click.secho(line, fg="yellow", err=True),
                         timeout=guard.TIMEOUT if flags.timeout is None else flags.timeout)  # fmt: skip
    if flags.dry_run:
        for kind, object_name in plan.objects(recreatable=True):
            click.secho(f"would recreate {kind} {object_name} (dry run: nothing deleted)", fg="yellow", err=True)
    click.secho(f"✓ upgraded {name}", fg="green")


@main_group.command()
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait until the objects are deleted.")
@timeout_option("How long helm waits: 90s, 10m, 1h30m or seconds.")
@click.option("--keep-history", is_flag=True, help="Keep the release's history (`helm history` lists it).")
@click.option("--delete-data", is_flag=True, help="Also delete the shared claim (checkpoints, logs, exported models).")
@kube_inputs
def uninstall(name: str, wait: bool, timeout: float | None, keep_history: bool, delete_data: bool,
              kube: KubeInputs) -> None:  # fmt: skip
    """`helm uninstall NAME`, keeping the shared volume unless --delete-data."""
    from tfchart.helm import chart as release

    namespace, api = kube.namespace(), kube.api() if delete_data else None  # the API asked for before helm runs
    claims = release.uninstall(kube.helm(), name, namespace, wait, timeout, keep_history)
    click.secho(f"✓ uninstalled {name}", fg="green")
    for claim in claims:
        if api:
            api.delete("PersistentVolumeClaim", claim, namespace)
            click.echo(f"deleted PersistentVolumeClaim {claim}")
        else:
            click.echo(f"kept PersistentVolumeClaim {claim} (checkpoints, logs, models); "
                       f"delete it with --delete-data or kubectl -n {namespace} delete pvc {claim}")


@main_group.command()
@click.argument("name", default=DEFAULT_RELEASE, required=False)
@values_inputs
@kube_inputs
@image_check
@output_option("table")
def preflight(name: str, values: ValuesInputs, kube: KubeInputs, registries: frozenset[str] | None,
              output: str) -> None:  # fmt: skip
    """Check the live cluster can run these values as release NAME (GPUs, storage, quota, NetworkPolicy
    enforcement) and that every image resolves in its registry. Exit 0 passed, 1 a check failed."""
    namespace = kube.namespace()
    checked(kube.api(), values.manifests(name, namespace), name, namespace, registries, output)
    if output == "table":
        click.secho("✓ preflight passed", fg="green")


def checked(api: KubeApi | None, manifests: list[dict[str, Any]], name: str, namespace: str,
            registries: frozenset[str] | None, output: str = "", dry_run: str | None = None) -> None:  # fmt: skip
    """The preflight checks (the cluster's with an api, the images' with registries): their report as -o asks, or
    on stderr where install and upgrade run them on their way (a client dry run asks no one, and says what it leaves
    out); a failed check stops the command."""
    from tfchart.cluster import preflight as checks

    if dry_run == "client" and (api or registries is not None):
        asked = ("neither the cluster nor a registry: no preflight, no image check (--dry-run=server runs both)" if api
                 else "no registry: no image check (--dry-run=server runs it)")  # fmt: skip
        return click.secho(f"note: --dry-run=client asks {asked}", fg="yellow", err=True)
    if api is None and registries is None:
        return None
    findings = checks.run(api, manifests, name, namespace, registries)
    if not emit(checks.report(findings, name, namespace), output):
        checks.render(findings, console(stderr=not output))
    if (error := checks.refusal(findings)) is not None:
        raise error
