"""The tfchart command line: a thin layer over the modules that do the work.

Every command imports what it needs when it runs, so `tfchart validate` stays fast. Errors are
translated into messages and exit codes here and only here (see tfchart.errors); --debug shows
tracebacks.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from tfchart.errors import Problem, TfchartError, UsageError, ValidationFailed
from tfdcontract import CHIEF, EVALUATOR, PS, SERVING, TENSORBOARD, WORKER

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
            raise UsageError(
                f"no chart at {chart}", "pass --chart PATH (or set TFCHART_CHART) to the tf-distributed chart directory"
            )
        return chart

    @property
    def helm(self) -> str:
        from tfchart.helm import find_helm

        return find_helm(self._helm)


def values_options(function: Any) -> Any:
    """-f/--values and helm's --set family, in the order given."""
    function = click.option(
        "--set-string", "set_strings", multiple=True, metavar="KEY=VAL", help="Like --set, values stay strings."
    )(function)
    function = click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VAL",
        help="Set values with helm's --set syntax (a.b=c, a={x,y}, a[0]=x, a\\.b=c).",
    )(function)
    function = click.option(
        "-f",
        "--values",
        "files",
        multiple=True,
        type=click.Path(path_type=Path),
        metavar="FILE",
        help="Values file (repeatable; later files win).",
    )(function)
    return function


def more_values_options(function: Any) -> Any:
    """helm's --set-json and --set-file (applied before --set and after --set-string respectively)."""
    function = click.option(
        "--set-file",
        "set_files",
        multiple=True,
        metavar="KEY=PATH",
        help="Set values to the content of files (helm's --set-file; `-` is standard input).",
    )(function)
    function = click.option(
        "--set-json",
        "set_jsons",
        multiple=True,
        metavar="KEY=JSON",
        help="Set values to JSON values (helm's --set-json: a.b=[1,2]; helm 4 also takes a whole JSON object).",
    )(function)
    return function


def ordered_sets(
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    set_jsons: tuple[str, ...] = (),
    set_files: tuple[str, ...] = (),
) -> list[tuple[str, str]]:
    """The --set family in the order helm applies it: --set-json, --set, --set-string, --set-file."""
    return (
        [("--set-json", item) for item in set_jsons]
        + [("--set", item) for item in sets]
        + [("--set-string", item) for item in set_strings]
        + [("--set-file", item) for item in set_files]
    )


class ValuesRun:
    """The user's values inputs, each read once (helm's order), and the arguments helm gets for them."""

    def __init__(self, settings: Settings, files: tuple[Path, ...], ordered: list[tuple[str, str]]) -> None:
        from tfchart.inputs import Inputs

        self.settings = settings
        self.inputs = Inputs()
        self.sources = [self.inputs.read(str(file)) for file in files]
        self.sets = ordered

    def helm_major(self) -> int:
        from tfchart.helm import binary_major_version

        return binary_major_version(self.settings.helm)

    def validate(self) -> Any:
        from tfchart.validate import validate as run_validation

        return run_validation(self.settings.chart, self.sources, self.sets, self.helm_major, self.inputs)

    def helm_files(self) -> list[str]:
        """What helm reads for each -f: the file itself, or tfchart's private copy of a pipe or stdin."""
        return [source.helm_path for source in self.sources]

    def helm_sets(self) -> list[tuple[str, str]]:
        """The --set family for helm; --set-file paths that were pipes point at tfchart's copies."""
        from tfchart import strvals

        copies = iter(self.inputs.set_files)
        out: list[tuple[str, str]] = []
        for flag, argument in self.sets:
            if flag == "--set-file":
                argument = strvals.replace_file_paths(argument, lambda _: next(copies).helm_path)
            out.append((flag, argument))
        return out


@click.group(context_settings=CONTEXT)
@click.option("--debug", is_flag=True, help="Show tracebacks and the commands run.")
@click.option(
    "--chart",
    type=click.Path(path_type=Path, file_okay=False),
    help="The tf-distributed chart directory (default: this repository's).",
)
@click.option(
    "--helm",
    "helm",
    metavar="PATH",
    help="helm binary (default: $TFCHART_HELM, helm on PATH, or the repository's .tools/bin/helm).",
)
@click.version_option(package_name="tf-distributed", prog_name="tfchart")
@click.pass_context
def main_group(ctx: click.Context, debug: bool, chart: Path | None, helm: str | None) -> None:
    """Validate, render, install and watch distributed TensorFlow training on Kubernetes."""
    ctx.obj = Settings(debug, chart, helm)


@main_group.command(context_settings=CONTEXT)
@values_options
@more_values_options
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_obj
def validate(
    settings: Settings,
    files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    set_jsons: tuple[str, ...],
    set_files: tuple[str, ...],
    output: str,
) -> None:
    """Check values against the chart's schema and cross-field rules, without a cluster.

    Merges like helm (chart defaults, files in order, --set last) and reports every problem at
    once with file:line, key path, offending value and the fix. Exit 0 valid, 1 invalid, 2 usage.
    """
    run = ValuesRun(settings, files, ordered_sets(sets, set_strings, set_jsons, set_files))
    report = run.validate()
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
    for note in report.notes:
        click.echo(note)


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_options
@more_values_options
@click.option("-n", "--namespace", default=None, help="Namespace to render for (default: helm's).")
@click.pass_obj
def template(
    settings: Settings,
    name: str,
    files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    set_jsons: tuple[str, ...],
    set_files: tuple[str, ...],
    namespace: str | None,
) -> None:
    """Render the manifests, exactly as `helm template NAME CHART` would, after validating."""
    from tfchart import render

    checked, ordered, _ = validated(settings, files, sets, set_strings, set_jsons=set_jsons, set_files=set_files)
    sys.stdout.write(render.template(settings.helm, settings.chart, name, checked, ordered, namespace))


def release_options(function: Any) -> Any:
    function = click.option(
        "--dry-run",
        "dry_run",
        type=click.Choice(["client", "server"]),
        default=None,
        is_flag=False,
        flag_value="client",
        help="Simulate: client (no cluster writes) or server.",
    )(function)
    function = click.option(
        "--atomic", is_flag=True, help="Roll back if the operation fails (helm 4: --rollback-on-failure)."
    )(function)
    function = click.option("--timeout", default=None, metavar="DURATION", help="How long helm waits, e.g. 10m.")(
        function
    )
    function = click.option("--wait", is_flag=True, help="Wait until the pods are ready (not until training ends).")(
        function
    )
    function = click.option("-n", "--namespace", default=None, help="Release namespace.")(function)
    return function


def kube_options(function: Any) -> Any:
    function = click.option("--kube-context", default=None, help="kubeconfig context to use.")(function)
    function = click.option(
        "--kubeconfig",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).",
    )(function)
    return function


def validated(
    settings: Settings,
    files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    *,
    set_jsons: tuple[str, ...] = (),
    set_files: tuple[str, ...] = (),
) -> tuple[list[str], list[tuple[str, str]], dict[str, Any]]:
    """Validates the inputs (each read once) and returns helm's -f files and --set family for them."""
    run = ValuesRun(settings, files, ordered_sets(sets, set_strings, set_jsons, set_files))
    report = run.validate()
    if not report.valid:
        raise ValidationFailed(report.problems)
    return run.helm_files(), run.helm_sets(), report.values


def resolve_namespace(namespace: str | None, kubeconfig: Path | None, context: str | None) -> str:
    """The one namespace of a command, for helm's --namespace and every API call alike.

    -n, else the kubeconfig context's namespace (the in-cluster service account's in a pod), else
    `default`: what helm and kubectl would pick, resolved once so that no call lands elsewhere.
    """
    if namespace:
        return namespace
    from tfchart import kube

    return kube.configured_namespace(kubeconfig, context)


def kube_api(kubeconfig: Path | None, context: str | None) -> Any:
    from tfchart import kube

    return kube.KubeApi.from_config(kubeconfig, context)


def helm_runner(settings: Settings, kubeconfig: Path | None, context: str | None) -> Any:
    from tfchart.helm import PyHelm3Runner

    return PyHelm3Runner(settings.helm, kubeconfig, context)


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_options
@more_values_options
@release_options
@kube_options
@click.option("--create-namespace", is_flag=True, help="Create the namespace if it does not exist.")
@click.option("--skip-preflight", is_flag=True, help="Do not check GPUs, storage and quota on the cluster first.")
@click.pass_obj
def install(
    settings: Settings,
    name: str,
    files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    set_jsons: tuple[str, ...],
    set_files: tuple[str, ...],
    namespace: str | None,
    wait: bool,
    timeout: str | None,
    atomic: bool,
    dry_run: str | None,
    kubeconfig: Path | None,
    kube_context: str | None,
    create_namespace: bool,
    skip_preflight: bool,
) -> None:
    """Validate, run the preflight checks, then `helm install NAME`."""
    from tfchart import release

    checked, ordered, values = validated(settings, files, sets, set_strings, set_jsons=set_jsons, set_files=set_files)
    namespace = resolve_namespace(namespace, kubeconfig, kube_context)
    if not skip_preflight and dry_run != "client":
        run_preflight(values, name, namespace, kubeconfig, kube_context)
    options = release.Options(namespace, wait, timeout, atomic, dry_run, create_namespace)
    output = release.install(
        helm_runner(settings, kubeconfig, kube_context), name, settings.chart, checked, ordered, options
    )
    click.echo(output)


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@values_options
@more_values_options
@release_options
@kube_options
@click.option(
    "--recreate",
    is_flag=True,
    help="Delete StatefulSets, Jobs and Deployments whose immutable fields change, wait until they are gone "
    "(at most --timeout, default 5m), then let helm create them (StatefulSet pods are kept and adopted). "
    "Never a PersistentVolumeClaim.",
)
@click.pass_obj
def upgrade(
    settings: Settings,
    name: str,
    files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    set_jsons: tuple[str, ...],
    set_files: tuple[str, ...],
    namespace: str | None,
    wait: bool,
    timeout: str | None,
    atomic: bool,
    dry_run: str | None,
    kubeconfig: Path | None,
    kube_context: str | None,
    recreate: bool,
) -> None:
    """Validate, check the changes against the cluster, then `helm upgrade NAME`.

    Changes Kubernetes forbids (StatefulSet fields, a Job's pod template, a Deployment's selector, a
    claim's class, access modes or a smaller size) are refused before helm runs, each with its field,
    deployed and new value. --recreate deletes the StatefulSets, Jobs and Deployments concerned and
    waits until they are gone; a claim is never recreated. An object already gone from the cluster (a
    finished chief Job removed by chief.ttlSecondsAfterFinished) is no conflict: helm creates it.
    """
    from tfchart import release

    checked, ordered, _ = validated(settings, files, sets, set_strings, set_jsons=set_jsons, set_files=set_files)
    namespace = resolve_namespace(namespace, kubeconfig, kube_context)
    options = release.Options(namespace, wait, timeout, atomic, dry_run)
    waiting = release.Waiting(release.parse_duration(timeout)) if timeout else release.Waiting()
    api = kube_api(kubeconfig, kube_context)
    plan = release.upgrade(
        helm_runner(settings, kubeconfig, kube_context),
        name,
        settings.chart,
        checked,
        ordered,
        options,
        recreate,
        deleter=api if recreate and not dry_run else None,
        live=api,
        waiting=waiting,
        report=lambda line: click.secho(line, fg="yellow", err=True),
    )
    if dry_run:
        for kind, object_name in plan.objects(recreatable=True):
            click.secho(f"would recreate {kind} {object_name} (dry run: nothing deleted)", fg="yellow", err=True)
    click.secho(f"✓ upgraded {name}", fg="green")


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace.")
@click.option("--wait", is_flag=True, help="Wait until the objects are deleted.")
@click.option("--timeout", default=None, metavar="DURATION")
@click.option(
    "--delete-data",
    is_flag=True,
    help="Also delete the shared PersistentVolumeClaim (checkpoints, logs, exported models).",
)
@kube_options
@click.pass_obj
def uninstall(
    settings: Settings,
    name: str,
    namespace: str | None,
    wait: bool,
    timeout: str | None,
    delete_data: bool,
    kubeconfig: Path | None,
    kube_context: str | None,
) -> None:
    """`helm uninstall NAME`, keeping the shared volume unless --delete-data."""
    from tfchart import release

    namespace = resolve_namespace(namespace, kubeconfig, kube_context)
    deleter = kube_api(kubeconfig, kube_context) if delete_data else None
    claims = release.uninstall(
        helm_runner(settings, kubeconfig, kube_context), name, namespace, wait, timeout, delete_data, deleter
    )
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
@click.option("--cpu", "variants", flag_value="cpu", multiple=True, help="Build the CPU image (Dockerfile.cpu).")
@click.option("--gpu", "variants", flag_value="gpu", multiple=True, help="Build the GPU image (Dockerfile.gpu).")
@click.option("--all", "variants", flag_value="all", multiple=True, help="Build both images (the default).")
@click.option("--tag", default=None, help="Image tag (default: the project version; the GPU image gets -gpu).")
@click.option("--registry", default="ghcr.io", show_default=True)
@click.option("--repository", default="tf-distributed/trainer", show_default=True)
@click.option("--push", is_flag=True, help="Push the images after building them.")
@click.option("--platform", default=None, help="Target platform, e.g. linux/amd64.")
@click.option(
    "--engine",
    type=click.Choice(["docker", "buildx", "podman", "buildah"]),
    default=None,
    help="Container engine (default: the first of docker buildx, docker, podman, buildah found).",
)
@click.option(
    "--base-image",
    default=None,
    metavar="IMAGE",
    help="Build on IMAGE instead of the official tensorflow/tensorflow:2.21.0[-gpu] (BASE_IMAGE build argument).",
)
@click.option(
    "--tls-verify/--no-tls-verify",
    default=True,
    show_default=True,
    help="Push over HTTPS (--no-tls-verify: a plain-HTTP registry; podman and buildah only).",
)
@click.option(
    "--context",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The repository checkout to build from (default: the one at or above the working directory).",
)
@click.option("--dry-run", is_flag=True, help="Print the exact commands without running them.")
def build(
    variants: tuple[str, ...],
    tag: str | None,
    registry: str,
    repository: str,
    push: bool,
    platform: str | None,
    engine: str | None,
    base_image: str | None,
    tls_verify: bool,
    context: Path | None,
    dry_run: bool,
) -> None:
    """Build (and push) the trainer images from Dockerfile.cpu / Dockerfile.gpu."""
    from tfchart import images

    steps = images.plan(
        list(variants) or ["all"],
        tag,
        registry,
        repository,
        push,
        platform,
        engine,
        images.build_context(context, Path.cwd(), REPO_CHART.parent.parent),
        base_image=base_image,
        tls_verify=tls_verify,
    )
    images.run(steps, dry_run, click.echo, progress=lambda line: click.secho(line, fg="cyan", err=True))


@main_group.command(context_settings=CONTEXT)
@values_options
@click.option(
    "--release",
    default="local",
    show_default=True,
    help="Release name the chart is rendered with (pod names follow it).",
)
@click.option(
    "-n",
    "--namespace",
    default="default",
    show_default=True,
    help="Namespace the chart is rendered for (DNS names follow it).",
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Run directory standing in for the shared volume (default: runs/<release>-<time>).",
)
@click.option("--timeout", type=float, default=None, metavar="SECONDS", help="Give up if training takes longer.")
@click.option("--keep-tensorboard", is_flag=True, help="Leave TensorBoard running after training, until Ctrl-C.")
@click.option(
    "--engine",
    type=click.Choice(["process", "podman", "docker"]),
    default="process",
    show_default=True,
    help="Run each pod as a local process, or as a container of its rendered image (podman or docker).",
)
@click.pass_obj
def local(
    settings: Settings,
    files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    release: str,
    namespace: str,
    workdir: Path | None,
    timeout: float | None,
    keep_tensorboard: bool,
    engine: str,
) -> None:
    """Run the rendered release on this machine: one process (or container) per pod, no cluster needed.

    Each pod's command, args and env come from the rendered manifests. As processes, only the
    cluster map (TFD_CLUSTER) is pointed at local ports. As containers (--engine podman|docker),
    each pod runs its image with its securityContext and volumes, on one network where the chart's
    DNS names resolve; the run directory is the shared volume. Logs are prefixed by pod name;
    everything is stopped and removed on success, failure and Ctrl-C.
    """
    from tfchart import local as local_run
    from tfchart import render

    checked, ordered, values = validated(settings, files, sets, set_strings)
    run_dir = (workdir or Path("runs") / f"{release}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    helm = settings.helm
    chart = settings.chart

    def render_for_local(extra: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return render.manifests(render.template(helm, chart, release, checked, [*ordered, *extra], namespace))

    if engine == "process":
        plan = local_run.plan(render_for_local, values, run_dir, namespace)
    else:
        from tfchart import containers

        plan = containers.plan(render_for_local, values, run_dir, namespace, engine)
    exit_code = run_local(plan, timeout, keep_tensorboard)
    sys.exit(exit_code)


def run_local(plan: Any, timeout: float | None, keep_tensorboard: bool) -> int:
    from rich.console import Console
    from rich.markup import escape

    from tfchart import local as local_run

    console = Console(highlight=False)
    width = max(len(pod.name) for pod in plan.pods)
    chief = next(pod for pod in plan.pods if pod.is_chief)
    train_steps = plan.values["training"]["trainSteps"]

    def on_line(pod: Any, line: str) -> None:
        console.print(
            f"[{local_run.colour_for(pod.name)}]{escape(pod.name):<{width}}[/] | {escape(line)}", soft_wrap=True
        )

    console.print(f"[bold]tfchart local[/]: {plan.headline}")
    for address, local_address in plan.addresses.items():
        console.print(f"  {address} -> {local_address}")
    cluster = plan.cluster(on_line)
    started = time.monotonic()
    with local_run.running(cluster), console.status("starting...") as status:

        def update() -> None:
            progress = cluster.progress
            if progress:
                status.update(
                    f"step {progress.step}/{train_steps}  loss {progress.loss:.4f}  "
                    f"{progress.examples_per_sec:.0f} examples/sec"
                )

        cluster.start(plan.pods)
        code = cluster.wait_for(chief.name, timeout, poll=update)
        if code == 0 and chief.role == WORKER:
            # worker 0 is the chief: the workers' Job completes when every worker has exited 0
            code = max((cluster.wait_for(pod.name, 120) for pod in plan.pods if pod.role == WORKER), default=0)
        elapsed = time.monotonic() - started
        result = local_run.read_status(plan.workdir)
        if code != 0:
            console.print(
                f"[bold red]✗ training failed[/]: {chief.name} exited with {code} after {elapsed:.0f} s; "
                f"{escape(str(result.get('message', '')))}"
            )
            return 1
        console.print(
            f"[bold green]✓ training {result.get('state', 'finished')}[/] in {elapsed:.0f} s: "
            f"step {result.get('step')}, accuracy {result.get('accuracy')}, "
            f"{result.get('examples_per_sec')} examples/sec"
        )
        console.print(f"  export: {plan.host_path(result.get('export_path'))}")
        if plan.tensorboard_url:
            console.print(
                f"  TensorBoard: {plan.tensorboard_url}  (later: tensorboard --logdir {plan.workdir / 'logs'})"
            )
        for note in plan.serving_notes:
            console.print(escape(note))
        if keep_tensorboard and plan.tensorboard_url:
            status.update("TensorBoard is running; Ctrl-C to stop")
            for process in list(cluster.processes.values()):
                if process.pod.role != TENSORBOARD:
                    cluster.kill(process.pod.name, signal.SIGTERM)
            try:
                while True:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
    return 0


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace (default: the kubeconfig context's).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@kube_options
def status(name: str, namespace: str | None, output: str, kubeconfig: Path | None, kube_context: str | None) -> None:
    """Pods per role, the chief Job, training progress and endpoints of release NAME."""
    from rich.console import Console

    from tfchart import kube
    from tfchart import status as release_status

    api = kube.KubeApi.from_config(kubeconfig, kube_context)
    collected = release_status.collect(api, name, resolve_namespace(namespace, kubeconfig, kube_context))
    if output == "json":
        click.echo(json.dumps(collected.as_dict(), indent=2, default=str))
    else:
        release_status.render(collected, Console())


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", default=None, help="Release namespace (default: the kubeconfig context's).")
@click.option("--end-run", is_flag=True, help="Also end a chief that is still training (its Job is suspended).")
@kube_options
def stop(name: str, namespace: str | None, end_run: bool, kubeconfig: Path | None, kube_context: str | None) -> None:
    """Free what release NAME's ps, worker and evaluator pods hold once its run ended (scale to 0)."""
    from tfchart import kube
    from tfchart import stop as run_stop

    api = kube.KubeApi.from_config(kubeconfig, kube_context)
    namespace = resolve_namespace(namespace, kubeconfig, kube_context)
    stopped = run_stop.stop(api, name, namespace, end_run=end_run)
    for line in stopped.unchanged:
        click.echo(f"  {line}")
    for line in stopped.actions:
        click.secho(f"✓ {line}", fg="green")
    if not stopped.actions:
        click.echo(f"nothing to stop: release {name} holds no ps/worker/evaluator pods")


@main_group.command(context_settings=CONTEXT)
@click.argument("name")
@click.option(
    "--role", required=True, type=click.Choice([CHIEF, PS, WORKER, EVALUATOR, TENSORBOARD, SERVING])
)
@click.option("--index", default=0, show_default=True, type=int, help="Task index (StatefulSet ordinal).")
@click.option("-f", "--follow", is_flag=True, help="Stream new lines until Ctrl-C.")
@click.option("--tail", type=int, default=None, help="Only the last N lines.")
@click.option("-n", "--namespace", default=None, help="Release namespace.")
@kube_options
def logs(
    name: str,
    role: str,
    index: int,
    follow: bool,
    tail: int | None,
    namespace: str | None,
    kubeconfig: Path | None,
    kube_context: str | None,
) -> None:
    """The log of one task of release NAME, e.g. --role worker --index 1."""
    from tfchart import kube
    from tfchart import logs as pod_logs

    api = kube.KubeApi.from_config(kubeconfig, kube_context)
    namespace = resolve_namespace(namespace, kubeconfig, kube_context)
    pod_logs.stream(api, name, namespace, role, index, follow, tail, sys.stdout)


@main_group.command(context_settings=CONTEXT)
@values_options
@more_values_options
@click.option("--release", default="tf-distributed", show_default=True, help="Release name the install would use.")
@click.option("-n", "--namespace", default=None, help="Namespace the install would use.")
@kube_options
@click.pass_obj
def preflight(
    settings: Settings,
    files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    set_jsons: tuple[str, ...],
    set_files: tuple[str, ...],
    release: str,
    namespace: str | None,
    kubeconfig: Path | None,
    kube_context: str | None,
) -> None:
    """Check the live cluster can run these values: GPUs, storage, quota, NetworkPolicy enforcement."""
    _, _, values = validated(settings, files, sets, set_strings, set_jsons=set_jsons, set_files=set_files)
    run_preflight(values, release, resolve_namespace(namespace, kubeconfig, kube_context), kubeconfig, kube_context)
    click.secho("✓ preflight passed", fg="green")


def run_preflight(
    values: dict[str, Any], release_name: str, namespace: str, kubeconfig: Path | None, context: str | None
) -> None:
    from rich.console import Console

    from tfchart import kube, preflight

    api = kube.KubeApi.from_config(kubeconfig, context)
    findings = preflight.run(api, values, release_name, namespace)
    preflight.render(findings, Console(stderr=True))
    if preflight.has_failures(findings):
        raise TfchartError(
            "preflight checks failed", "fix the failures above, or pass --skip-preflight to install anyway"
        )


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
    if debug:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
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
