"""The tfchart command line: a thin layer over the modules that do the work.

Commands parse options (tfchart.options turns each family into one object) and call the modules
with keyword arguments. Every command imports what it needs when it runs, so `tfchart validate`
stays fast. Errors are translated into messages and exit codes here and only here (see
tfchart.errors); --debug shows tracebacks.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tfchart.errors import TfchartError
from tfchart.messages import show_error
from tfchart.options import (
    REPO_CHART,
    KubeInputs,
    Settings,
    ValuesInputs,
    image_options,
    kube_inputs,
    local_options,
    release_flags,
    settings_options,
    values_inputs,
)
from tfdcontract import CHIEF, EVALUATOR, PS, SERVING, TENSORBOARD, WORKER

if TYPE_CHECKING:
    from tfchart.release import Options

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT)
@settings_options
@click.version_option(package_name="tf-distributed", prog_name="tfchart")
@click.pass_context
def main_group(ctx: click.Context, debug: bool, chart: Path | None, helm: str | None) -> None:
    """Validate, render, install and watch distributed TensorFlow training on Kubernetes."""
    ctx.obj = Settings(debug, chart, helm)


@main_group.command(context_settings=CONTEXT)
@values_inputs()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_obj
def validate(settings: Settings, values: ValuesInputs, output: str) -> None:
    """Check values against the chart's schema and cross-field rules, without a cluster.

    Merges like helm (chart defaults, files in order, --set last) and reports every problem at
    once with file:line, key path, offending value and the fix. Exit 0 valid, 1 invalid, 2 usage.
    """
    report = values.read(settings).validate()
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


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_inputs()
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
@click.pass_obj
def template(settings: Settings, name: str, values: ValuesInputs, namespace: str | None) -> None:
    """Render the manifests, exactly as `helm template NAME CHART` would, after validating."""
    from tfchart import render

    checked = values.validated(settings)
    sys.stdout.write(render.template(settings.helm, settings.chart, name, checked.files, checked.sets, namespace))


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_inputs()
@release_flags
@kube_inputs
@click.option("--create-namespace", is_flag=True, help="Create the namespace if it does not exist.")
@click.option("--skip-preflight", is_flag=True, help="Do not check GPUs, storage and quota on the cluster first.")
@click.pass_obj
def install(
    settings: Settings, name: str, values: ValuesInputs, flags: Options, kube: KubeInputs, create_namespace: bool,
    skip_preflight: bool,
) -> None:  # fmt: skip
    """Validate, run the preflight checks, then `helm install NAME`."""
    from dataclasses import replace

    from tfchart import preflight, release

    checked = values.validated(settings)
    namespace = kube.namespace(flags.namespace)
    if not skip_preflight and flags.dry_run != "client":
        preflight.enforce(kube.api(), checked.values, checked.manifests(settings, name, namespace), name, namespace)
    options = replace(flags, namespace=namespace, create_namespace=create_namespace)
    click.echo(release.install(kube.helm(settings), name, settings.chart, checked.files, checked.sets, options))


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_inputs()
@release_flags
@kube_inputs
@click.option(
    "--recreate",
    is_flag=True,
    help="Delete StatefulSets, Jobs and Deployments whose immutable fields change, wait until they are gone "
    "(at most --timeout, default 5m), then let helm create them (StatefulSet pods are kept and adopted). "
    "Never a PersistentVolumeClaim.",
)
@click.pass_obj
def upgrade(
    settings: Settings, name: str, values: ValuesInputs, flags: Options, kube: KubeInputs, recreate: bool
) -> None:
    """Validate, check the changes against the cluster, then `helm upgrade NAME`.

    Changes Kubernetes forbids (StatefulSet fields, a Job's pod template, a Deployment's selector, a
    claim's class, access modes or a smaller size) are refused before helm runs, each with its field,
    deployed and new value. --recreate deletes the StatefulSets, Jobs and Deployments concerned and
    waits until they are gone; a claim is never recreated. An object already gone from the cluster (a
    finished chief Job removed by chief.ttlSecondsAfterFinished) is no conflict: helm creates it.
    """
    from dataclasses import replace

    from tfchart import release

    checked = values.validated(settings)
    options = replace(flags, namespace=kube.namespace(flags.namespace))
    api = kube.api()
    waiting = release.Waiting(release.parse_duration(flags.timeout)) if flags.timeout else release.Waiting()
    plan = release.upgrade(
        kube.helm(settings), name, settings.chart, checked.files, checked.sets, options, recreate,
        deleter=api if recreate and not flags.dry_run else None, live=api, waiting=waiting,
        report=lambda line: click.secho(line, fg="yellow", err=True),
    )  # fmt: skip
    if flags.dry_run:
        for kind, object_name in plan.objects(recreatable=True):
            click.secho(f"would recreate {kind} {object_name} (dry run: nothing deleted)", fg="yellow", err=True)
    click.secho(f"✓ upgraded {name}", fg="green")


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace.")
@click.option("--wait", is_flag=True, help="Wait until the objects are deleted.")
@click.option("--timeout", default=None, metavar="DURATION")
@click.option("--delete-data", is_flag=True, help="Also delete the shared claim (checkpoints, logs, exported models).")
@kube_inputs
@click.pass_obj
def uninstall(
    settings: Settings, name: str, namespace: str | None, wait: bool, timeout: str | None, delete_data: bool,
    kube: KubeInputs,
) -> None:  # fmt: skip
    """`helm uninstall NAME`, keeping the shared volume unless --delete-data."""
    from tfchart import release

    namespace = kube.namespace(namespace)
    claims = release.uninstall(
        kube.helm(settings), name, namespace, wait=wait, timeout=timeout, delete_data=delete_data,
        deleter=kube.api() if delete_data else None,
    )  # fmt: skip
    click.secho(f"✓ uninstalled {name}", fg="green")
    for claim in claims:
        if delete_data:
            click.echo(f"deleted PersistentVolumeClaim {claim}")
        else:
            click.echo(
                f"kept PersistentVolumeClaim {claim} (checkpoints, logs, models); "
                f"delete it with --delete-data or kubectl -n {namespace} delete pvc {claim}"
            )


@main_group.command(context_settings=CONTEXT)
@image_options
def build(variants: tuple[str, ...], context: Path | None, dry_run: bool, **image: Any) -> None:
    """Build (and push) the trainer images from Dockerfile.cpu / Dockerfile.gpu."""
    from tfchart import images

    checkout = images.build_context(context, Path.cwd(), REPO_CHART.parent.parent)
    steps = images.plan(list(variants) or ["all"], repo_root=checkout, **image)
    images.run(steps, dry_run, click.echo, progress=lambda line: click.secho(line, fg="cyan", err=True))


@main_group.command(context_settings=CONTEXT)
@values_inputs(more=False)
@local_options
@click.pass_obj
def local(
    settings: Settings, values: ValuesInputs, release: str, namespace: str, workdir: Path | None,
    timeout: float | None, keep_tensorboard: bool, engine: str, follow_logs: bool,
) -> None:  # fmt: skip
    """Run the rendered release on this machine: one process (or container) per pod, no cluster needed.

    Each pod's command, args and env come from the rendered manifests. As processes, only the
    cluster map (TFD_CLUSTER) is pointed at local ports. As containers (--engine podman|docker),
    each pod runs its image with its securityContext and volumes, on one network where the chart's
    DNS names resolve; the run directory is the shared volume. Pod logs go to <run>/pod-logs/;
    everything is stopped and removed on success, failure and Ctrl-C.
    """
    from tfchart import local as local_run
    from tfchart import render

    checked = values.validated(settings)
    run_dir = (workdir or Path("runs") / f"{release}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    helm, chart = settings.helm, settings.chart

    def render_for_local(extra: list[tuple[str, str]]) -> list[dict[str, Any]]:
        sets = [*checked.sets, *extra]
        return render.manifests(render.template(helm, chart, release, checked.files, sets, namespace))

    if engine == "process":
        plan = local_run.plan(render_for_local, checked.values, run_dir, namespace)
    else:
        from tfchart import containers

        plan = containers.plan(render_for_local, checked.values, run_dir, namespace, engine)
    sys.exit(local_run.run(plan, timeout, keep_tensorboard, follow_logs))


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace (default: the kubeconfig context's).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@kube_inputs
def status(name: str, namespace: str | None, output: str, kube: KubeInputs) -> None:
    """Pods per role, the chief Job, training progress and endpoints of release NAME."""
    from rich.console import Console

    from tfchart import status as release_status
    from tfchart import status_view

    collected = release_status.collect(kube.api(), name, kube.namespace(namespace))
    if output == "json":
        click.echo(json.dumps(collected.as_dict(), indent=2, default=str))
    else:
        status_view.render(collected, Console())


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace (default: the kubeconfig context's).")
@click.option("--end-run", is_flag=True, help="Also end a chief that is still training (its Job is suspended).")
@kube_inputs
def stop(name: str, namespace: str | None, end_run: bool, kube: KubeInputs) -> None:
    """Free what release NAME's ps, worker and evaluator pods hold once its run ended (scale to 0)."""
    from tfchart import stop as run_stop

    stopped = run_stop.stop(kube.api(), name, kube.namespace(namespace), end_run=end_run)
    for line in stopped.unchanged:
        click.echo(f"  {line}")
    for line in stopped.actions:
        click.secho(f"✓ {line}", fg="green")
    if not stopped.actions:
        click.echo(f"nothing to stop: release {name} holds no ps/worker/evaluator pods")


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("--role", required=True, type=click.Choice([CHIEF, PS, WORKER, EVALUATOR, TENSORBOARD, SERVING]))
@click.option("--index", default=0, show_default=True, type=int, help="Task index (StatefulSet ordinal).")
@click.option("-f", "--follow", is_flag=True, help="Stream new lines until Ctrl-C.")
@click.option("--tail", type=int, default=None, help="Only the last N lines.")
@click.option("-n", "--namespace", default=None, help="Release namespace.")
@kube_inputs
def logs(
    name: str, role: str, index: int, follow: bool, tail: int | None, namespace: str | None, kube: KubeInputs
) -> None:
    """The log of one task of release NAME, e.g. --role worker --index 1."""
    from tfchart import logs as pod_logs

    pod_logs.stream(kube.api(), name, kube.namespace(namespace), role, index, follow, tail, sys.stdout)


@main_group.command("images", context_settings=CONTEXT)
@values_inputs()
@click.option("--release", default="tf-distributed", show_default=True, help="Release name to render for.")
@click.option("-n", "--namespace", default="default", show_default=True, help="Namespace to render for.")
@click.option("-o", "--output", type=click.Choice(["list", "json"]), default="list", show_default=True)
@click.pass_obj
def list_images(settings: Settings, values: ValuesInputs, release: str, namespace: str, output: str) -> None:
    """Every image the release pulls (with its digest where set), one per line or as JSON, to mirror."""
    from tfchart import imagelist

    pulled = imagelist.pulled_images(values.validated(settings).manifests(settings, release, namespace))
    click.echo(json.dumps([p.as_dict() for p in pulled], indent=2) if output == "json" else "\n".join(
        p.image for p in pulled))


@main_group.command(context_settings=CONTEXT)
@values_inputs()
@click.option("--release", default="tf-distributed", show_default=True, help="Release name the install would use.")
@click.option("-n", "--namespace", default=None, help="Namespace the install would use.")
@kube_inputs
@click.pass_obj
def preflight(settings: Settings, values: ValuesInputs, release: str, namespace: str | None, kube: KubeInputs) -> None:
    """Check the live cluster can run these values: GPUs, storage, quota, NetworkPolicy enforcement."""
    from tfchart import preflight as checks

    checked, namespace = values.validated(settings), kube.namespace(namespace)
    checks.enforce(kube.api(), checked.values, checked.manifests(settings, release, namespace), release, namespace)
    click.secho("✓ preflight passed", fg="green")


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


if __name__ == "__main__":
    main()
