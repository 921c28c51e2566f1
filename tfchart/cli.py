"""The tfchart command line: a thin layer over the modules that do the work.

Every command imports what it needs when it runs, so `tfchart validate` stays fast. Errors are
translated into messages and exit codes here and only here (see tfchart.errors); --debug shows
tracebacks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from tfchart.errors import Problem, TfchartError, UsageError, ValidationFailed

REPO_CHART = Path(__file__).resolve().parent.parent / "charts" / "tf-distributed"
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Settings:
    """Options shared by every command."""

    def __init__(self, debug: bool, chart: Path | None, helm: str | None) -> None:
        self.debug = debug
        self._chart = chart
        self._helm = helm

    @property
    def chart(self) -> Path:
        chart = self._chart or Path(os.environ.get("TFCHART_CHART", REPO_CHART))
        if not (chart / "Chart.yaml").is_file():
            raise UsageError(f"no chart at {chart}", "pass --chart PATH (or set TFCHART_CHART) to the tf-distributed chart directory")
        return chart

    @property
    def helm(self) -> str:
        from tfchart.helm import find_helm

        return find_helm(self._helm)


def values_options(function: Any) -> Any:
    """-f/--values and helm's --set family, in the order given."""
    function = click.option("--set-string", "set_strings", multiple=True, metavar="KEY=VAL", help="Like --set, values stay strings.")(function)
    function = click.option("--set", "sets", multiple=True, metavar="KEY=VAL", help="Set values with helm's --set syntax (a.b=c, a={x,y}, a[0]=x, a\\.b=c).")(function)
    function = click.option("-f", "--values", "files", multiple=True, type=click.Path(path_type=Path), metavar="FILE", help="Values file (repeatable; later files win).")(function)
    return function


def ordered_sets(sets: tuple[str, ...], set_strings: tuple[str, ...]) -> list[tuple[str, str]]:
    """--set and --set-string in command-line order (helm applies --set before --set-string)."""
    return [("--set", item) for item in sets] + [("--set-string", item) for item in set_strings]


def check_files(files: tuple[Path, ...]) -> list[Path]:
    for file in files:
        if not file.is_file():
            raise UsageError(f"values file not found: {file}", "check the path given to -f/--values")
    return list(files)


@click.group(context_settings=CONTEXT)
@click.option("--debug", is_flag=True, help="Show tracebacks and the commands run.")
@click.option("--chart", type=click.Path(path_type=Path, file_okay=False), help="The tf-distributed chart directory (default: this repository's).")
@click.option("--helm", "helm", metavar="PATH", help="helm binary (default: $TFCHART_HELM, helm on PATH, or the repository's .tools/bin/helm).")
@click.version_option(package_name="tf-distributed", prog_name="tfchart")
@click.pass_context
def main_group(ctx: click.Context, debug: bool, chart: Path | None, helm: str | None) -> None:
    """Validate, render, install and watch distributed TensorFlow training on Kubernetes."""
    ctx.obj = Settings(debug, chart, helm)


@main_group.command(context_settings=CONTEXT)
@values_options
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_obj
def validate(settings: Settings, files: tuple[Path, ...], sets: tuple[str, ...], set_strings: tuple[str, ...], output: str) -> None:
    """Check values against the chart's schema and cross-field rules, without a cluster.

    Merges like helm (chart defaults, files in order, --set last) and reports every problem at
    once with file:line, key path, offending value and the fix. Exit 0 valid, 1 invalid, 2 usage.
    """
    from tfchart.validate import validate as run_validation

    report = run_validation(settings.chart, check_files(files), ordered_sets(sets, set_strings))
    if output == "json":
        click.echo(json.dumps(report.as_dict(), indent=2, default=str))
        if not report.valid:
            sys.exit(1)
        return
    for warning in report.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    if not report.valid:
        raise ValidationFailed(report.problems)
    what = ", ".join(report.inputs) or "chart defaults"
    click.secho(f"✓ valid: {what}", fg="green")


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_options
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
@click.pass_obj
def template(settings: Settings, name: str, files: tuple[Path, ...], sets: tuple[str, ...], set_strings: tuple[str, ...], namespace: str | None) -> None:
    """Render the manifests, exactly as `helm template NAME CHART` would, after validating."""
    from tfchart import render
    from tfchart.validate import validate as run_validation

    checked = check_files(files)
    report = run_validation(settings.chart, checked, ordered_sets(sets, set_strings))
    if not report.valid:
        raise ValidationFailed(report.problems)
    sys.stdout.write(render.template(settings.helm, settings.chart, name, checked, ordered_sets(sets, set_strings), namespace))


def release_options(function: Any) -> Any:
    function = click.option("--dry-run", "dry_run", type=click.Choice(["client", "server"]), default=None, is_flag=False, flag_value="client", help="Simulate: client (no cluster writes) or server.")(function)
    function = click.option("--atomic", is_flag=True, help="Roll back if the operation fails (helm 4: --rollback-on-failure).")(function)
    function = click.option("--timeout", default=None, metavar="DURATION", help="How long helm waits, e.g. 10m.")(function)
    function = click.option("--wait", is_flag=True, help="Wait until the pods are ready (not until training ends).")(function)
    function = click.option("-n", "--namespace", default=None, help="Release namespace.")(function)
    return function


def kube_options(function: Any) -> Any:
    function = click.option("--kube-context", default=None, help="kubeconfig context to use.")(function)
    function = click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False), default=None, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")(function)
    return function


def validated(settings: Settings, files: tuple[Path, ...], sets: tuple[str, ...], set_strings: tuple[str, ...]) -> tuple[list[Path], list[tuple[str, str]], dict[str, Any]]:
    from tfchart.validate import validate as run_validation

    checked = check_files(files)
    ordered = ordered_sets(sets, set_strings)
    report = run_validation(settings.chart, checked, ordered)
    if not report.valid:
        raise ValidationFailed(report.problems)
    return checked, ordered, report.values


def helm_runner(settings: Settings, kubeconfig: Path | None, context: str | None) -> Any:
    from tfchart.helm import PyHelm3Runner

    return PyHelm3Runner(settings.helm, kubeconfig, context)


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_options
@release_options
@kube_options
@click.option("--create-namespace", is_flag=True, help="Create the namespace if it does not exist.")
@click.option("--skip-preflight", is_flag=True, help="Do not check GPUs, storage and quota on the cluster first.")
@click.pass_obj
def install(settings: Settings, name: str, files: tuple[Path, ...], sets: tuple[str, ...], set_strings: tuple[str, ...], namespace: str | None, wait: bool, timeout: str | None, atomic: bool, dry_run: str | None, kubeconfig: Path | None, kube_context: str | None, create_namespace: bool, skip_preflight: bool) -> None:
    """Validate, run the preflight checks, then `helm install NAME`."""
    from tfchart import release

    checked, ordered, values = validated(settings, files, sets, set_strings)
    if not skip_preflight and dry_run != "client":
        run_preflight(values, name, namespace, kubeconfig, kube_context)
    options = release.Options(namespace, wait, timeout, atomic, dry_run, create_namespace)
    output = release.install(helm_runner(settings, kubeconfig, kube_context), name, settings.chart, checked, ordered, options)
    click.echo(output)


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_options
@release_options
@kube_options
@click.option("--recreate", is_flag=True, help="Delete and recreate StatefulSets/Jobs whose immutable fields change (StatefulSet pods are kept).")
@click.pass_obj
def upgrade(settings: Settings, name: str, files: tuple[Path, ...], sets: tuple[str, ...], set_strings: tuple[str, ...], namespace: str | None, wait: bool, timeout: str | None, atomic: bool, dry_run: str | None, kubeconfig: Path | None, kube_context: str | None, recreate: bool) -> None:
    """Validate, refuse immutable StatefulSet/Job changes (unless --recreate), then `helm upgrade NAME`."""
    from tfchart import release

    checked, ordered, _ = validated(settings, files, sets, set_strings)
    options = release.Options(namespace, wait, timeout, atomic, dry_run)
    deleter = release.KubernetesDeleter(kubeconfig, kube_context) if recreate and not dry_run else None
    plan = release.upgrade(helm_runner(settings, kubeconfig, kube_context), name, settings.chart, checked, ordered, options, recreate, deleter)
    for change in plan.changes:
        click.secho(f"recreated {change.kind}/{change.name} ({change.field} changed)", fg="yellow", err=True)
    click.secho(f"✓ upgraded {name}", fg="green")


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace.")
@click.option("--wait", is_flag=True, help="Wait until the objects are deleted.")
@click.option("--timeout", default=None, metavar="DURATION")
@click.option("--delete-data", is_flag=True, help="Also delete the shared PersistentVolumeClaim (checkpoints, logs, exported models).")
@kube_options
@click.pass_obj
def uninstall(settings: Settings, name: str, namespace: str | None, wait: bool, timeout: str | None, delete_data: bool, kubeconfig: Path | None, kube_context: str | None) -> None:
    """`helm uninstall NAME`, keeping the shared volume unless --delete-data."""
    from tfchart import release

    deleter = release.KubernetesDeleter(kubeconfig, kube_context) if delete_data else None
    claims = release.uninstall(helm_runner(settings, kubeconfig, kube_context), name, namespace, wait, timeout, delete_data, deleter)
    click.secho(f"✓ uninstalled {name}", fg="green")
    for claim in claims:
        if delete_data:
            click.echo(f"deleted PersistentVolumeClaim {claim}")
        else:
            click.echo(f"kept PersistentVolumeClaim {claim} (checkpoints, logs, models); delete it with --delete-data or kubectl delete pvc {claim}")


def run_preflight(values: dict[str, Any], release_name: str, namespace: str | None, kubeconfig: Path | None, context: str | None) -> None:
    from rich.console import Console

    from tfchart import kube, preflight

    api = kube.KubeApi.from_config(kubeconfig, context)
    findings = preflight.run(api, values, release_name, namespace or api.default_namespace())
    preflight.render(findings, Console(stderr=True))
    if preflight.has_failures(findings):
        raise TfchartError("preflight checks failed", "fix the failures above, or pass --skip-preflight to install anyway")


def print_problems(problems: list[Problem]) -> None:
    """Every problem: where it came from, the key path, what is wrong, and the fix to copy."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False)
    count = len(problems)
    console.print(f"[bold red]✗ {count} problem{'s' if count != 1 else ''} in values[/]")
    for problem in problems:
        where = problem.location or "chart default"
        console.print(f"  [cyan]{escape(where)}[/]  [bold]{escape(problem.path)}[/]: {escape(problem.message)}")
        if problem.fix:
            console.print(f"      fix: [green]{escape(problem.fix)}[/]")


def fail(error: TfchartError, debug: bool) -> NoReturn:
    if isinstance(error, ValidationFailed):
        print_problems(error.problems)
    else:
        click.secho(f"error: {error.message}", fg="red", err=True)
        if error.hint:
            click.echo(f"  hint: {error.hint}", err=True)
    if debug:
        import traceback

        traceback.print_exception(error)
    sys.exit(error.exit_code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place where errors become messages and exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        main_group.main(args=argv, prog_name="tfchart", standalone_mode=False)
    except TfchartError as error:
        fail(error, debug)
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
