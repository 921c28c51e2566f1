"""Commands that watch or end a run on the cluster: status, stop, logs."""

from __future__ import annotations

import sys

import click

from tfchart.cli.formats import emit, output_option
from tfchart.cli.options import CONTEXT, KubeInputs, kube_inputs
from tfdcontract import CHIEF, EVALUATOR, PS, SERVING, TENSORBOARD, WORKER


@click.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace (default: the kubeconfig context's).")
@output_option("table")
@kube_inputs
def status(name: str, namespace: str | None, output: str, kube: KubeInputs) -> None:
    """Pods per role, the chief Job, training progress and endpoints of release NAME."""
    from tfchart.cluster import status as release_status
    from tfchart.cluster import status_view
    from tfchart.console import console

    collected = release_status.collect(kube.api(), name, kube.namespace(namespace))
    if output == "table":
        status_view.render(collected, console())
    else:
        emit(collected.as_dict(), output)


@click.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace (default: the kubeconfig context's).")
@click.option("--end-run", is_flag=True, help="Also end a chief that is still training (its Job is suspended).")
@kube_inputs
def stop(name: str, namespace: str | None, end_run: bool, kube: KubeInputs) -> None:
    """Free what release NAME's ps, worker and evaluator pods hold once its run ended (scale to 0)."""
    from tfchart.cluster import stop as run_stop

    stopped = run_stop.stop(kube.api(), name, kube.namespace(namespace), end_run=end_run)
    for line in stopped.unchanged:
        click.echo(f"  {line}")
    for line in stopped.actions:
        click.secho(f"✓ {line}", fg="green")
    if not stopped.actions:
        click.echo(f"nothing to stop: release {name} holds no ps/worker/evaluator pods")


@click.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("--role", required=True, type=click.Choice([CHIEF, PS, WORKER, EVALUATOR, TENSORBOARD, SERVING]))
@click.option("--index", default=0, show_default=True, type=int, help="Task index (StatefulSet ordinal).")
@click.option("-f", "--follow", is_flag=True, help="Stream new lines until Ctrl-C.")
@click.option("--tail", type=int, default=None, help="Only the last N lines.")
@click.option("-n", "--namespace", default=None, help="Release namespace.")
@kube_inputs
def logs(name: str, role: str, index: int, follow: bool, tail: int | None, namespace: str | None,
         kube: KubeInputs) -> None:  # fmt: skip
    """The log of one task of release NAME, e.g. --role worker --index 1."""
    from tfchart.cluster import logs as pod_logs

    pod_logs.stream(kube.api(), name, kube.namespace(namespace), role, index, follow, tail, sys.stdout)
