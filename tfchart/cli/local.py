"""Commands that run on this machine: local (the release as processes or containers), build (images), and the
--local side of suspend and resume."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from tfchart.cli.app import DURATION, console, main_group
from tfchart.cli.options import ValuesInputs, values_inputs
from tfchart.errors import TfchartError
from tfchart.local import runstate
from tfdcontract import RUN_SPEC_ANNOTATION, read_status_file
from tfdcontract.runstate import FAILED, RUNNING, SUCCEEDED, SUSPENDED, annotations_of

LOCAL_RELEASE = "local"  # runs/local-<time>, pods local-tf-distributed-*


@main_group.command()
@click.option("--cpu", "variants", flag_value="cpu", multiple=True, help="Build the CPU image (Dockerfile.cpu).")
@click.option("--gpu", "variants", flag_value="gpu", multiple=True, help="Build the GPU image (Dockerfile.gpu).")
@click.option("--all", "variants", flag_value="all", multiple=True, help="Build both images (the default).")
@click.option("--tag", default=None, help="Image tag (default: the project version; the GPU image gets -gpu).")
@click.option("--registry", default="ghcr.io", show_default=True, help="Registry of the images (where --push pushes).")
@click.option("--repository", default="tf-distributed/trainer", show_default=True, help="Repository of the images.")
@click.option("--push", is_flag=True, help="Push the images after building them.")
@click.option("--platform", default=None, help="Target platform, e.g. linux/amd64.")
@click.option("--engine", type=click.Choice(["docker", "buildx", "podman", "buildah"]), default=None,
              help="Container engine (default: the first of docker buildx, docker, podman, buildah found).")
@click.option("--base-image", default=None, metavar="IMAGE", help="Build on IMAGE instead of the official "
              "python:3.11-slim-bookworm (CPU) and tensorflow/tensorflow:2.21.0-gpu (GPU) (BASE_IMAGE build argument).")
@click.option("--gpu-base-image", default=None, metavar="IMAGE",
              help="Build the GPU image on IMAGE (default: --base-image when given, else the official one).")
@click.option("--tls-verify/--no-tls-verify", default=True, show_default=True,
              help="Push over HTTPS (--no-tls-verify: a plain-HTTP registry; podman and buildah only).")
@click.option("--source", type=click.Path(path_type=Path, file_okay=False), default=None, metavar="DIR",
              help="The repository checkout to build from (default: the one at or above the working directory).")
@click.option("--context", "old_source", type=click.Path(path_type=Path, file_okay=False), default=None, hidden=True,
              callback=lambda ctx, param, value: deprecated_source(value))  # kubectl's --context is a kube context
@click.option("--dry-run", is_flag=True, help="Print the exact commands without running them.")
def build(variants: tuple[str, ...], source: Path | None, old_source: Path | None, dry_run: bool, **image: Any) -> None:
    """Build (and push) the trainer images from Dockerfile.cpu / Dockerfile.gpu."""
    from tfchart.helm.chart import BUNDLED_CHART
    from tfchart.images import build as images

    if source and old_source and source != old_source:
        raise click.UsageError("--source and --context (its old name) name different directories: give --source")
    checkout = images.build_context(source or old_source, Path.cwd(), BUNDLED_CHART.parent.parent)
    steps = images.plan(list(variants) or ["all"], repo_root=checkout, **image)
    images.run(steps, dry_run, click.echo, progress=lambda line: click.secho(line, fg="cyan", err=True))


def deprecated_source(value: Path | None) -> Path | None:
    if value is not None:
        click.secho("warning: build --context is deprecated (kubectl's --context names a kube context): use "
                    "--source DIR", fg="yellow", err=True)  # fmt: skip
    return value


@main_group.command()
@click.argument("name", default=LOCAL_RELEASE, required=False)
@values_inputs
@click.option("-n", "--namespace", default="default", show_default=True,
              help="Namespace the chart is rendered for (DNS names follow it).")
@click.option("--workdir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Run directory standing in for the shared volume (default: runs/NAME-<time>).")
@click.option("--timeout", type=DURATION, default=None,
              help="Give up if training takes longer: 90s, 10m, 1h30m or seconds.")
@click.option("--clean", is_flag=True, help="Remove NAME's old run directories under runs/ (all but the newest "
              "--keep-runs) and exit; nothing is run.")
@click.option("--keep-runs", type=click.IntRange(min=0), default=1, show_default=True, metavar="N",
              help="With --clean: how many of the newest runs/NAME-<time> directories to keep.")
@click.option("--keep-tensorboard", is_flag=True, help="Leave TensorBoard running after training, until Ctrl-C.")
@click.option("--follow-logs", is_flag=True,
              help="Stream every pod's output here, prefixed by its name (always kept in <run>/pod-logs/).")
@click.option("--engine", type=click.Choice(["process", "podman", "docker"]), default="process", show_default=True,
              help="Run each pod as a local process, or as a container of its rendered image (podman or docker).")
@click.option("--allow-privileged", is_flag=True,
              help="With --engine: run privileged containers and uid 0 (root on this machine, or your user's).")
@click.option("--host-network", is_flag=True,
              help="As processes, without a private network namespace (where user namespaces are unavailable, "
                   "e.g. macOS): TensorFlow's servers then listen on every interface. Trusted networks only.")
def local(name: str, values: ValuesInputs, namespace: str, workdir: Path | None, timeout: float | None, clean: bool,
          keep_runs: int, **options: Any) -> None:  # fmt: skip
    """Run the rendered release NAME (default local: pod names follow it) on this machine, one process (or
    container) per pod, no cluster needed.

    Each pod's command, args and env come from the rendered manifests. As processes, only the
    cluster map (TFD_CLUSTER) is pointed at local ports. As containers (--engine podman|docker),
    each pod runs its image with its securityContext and volumes, on one network where the chart's
    DNS names resolve; the run directory is the shared volume. Pod logs go to <run>/pod-logs/;
    everything is stopped and removed on success, failure and Ctrl-C. As processes, datasets are kept in
    one cache per user ($XDG_CACHE_HOME/tf-distributed/datasets) unless training.dataDir is set.
    """
    if clean:
        click.echo("\n".join(runstate.clean(name, keep_runs)))
        return
    start(name, values, namespace, workdir, timeout, options)


def start(name: str, values: ValuesInputs, namespace: str, workdir: Path | None, timeout: float | None,
          options: dict[str, Any], resumed: runstate.LocalRun | None = None) -> NoReturn:  # fmt: skip
    """Renders the release for this machine and runs it to its end, recording the run in its directory (a resumed
    run: again, in the same directory, refused when it no longer renders the same run)."""
    from tfchart.helm.chart import Inputs, manifests, merged_values
    from tfchart.local import containers, processes, session
    from tfchart.values.validate import rendered

    engine = options["engine"]
    if engine == "process":
        processes.require_tensorflow()  # before anything is written or started
    values.manifests(name, namespace)  # every problem of the user's values, as validate lists them
    run_dir = (workdir or runstate.RUNS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    requested = runstate.begin(name, run_dir)  # suspend is answered, and the directory held, before it says Running
    if resumed is not None:
        click.echo(f"resuming the local run of {name} in {run_dir} from its last checkpoint"
                   + (f" (step {resumed.step})" if resumed.step is not None else ""))
    helm, chart = values.settings.helm, values.chart
    merged = merged_values(helm, chart, values.inputs)  # merged, typed and coalesced by helm

    cached = engine == "process" and not merged.get("training", {}).get("dataDir")  # a container sees the run only
    shared = [("--set-string", f"training.dataDir={runstate.dataset_cache()}")] if cached else []
    docs: list[dict[str, Any]] = []

    def render_for_local(extra: list[tuple[str, str]]) -> list[dict[str, Any]]:
        inputs = Inputs(values.inputs.files, [*values.inputs.sets, *shared, *extra])
        docs[:] = manifests(rendered(helm, chart, inputs, name, namespace))
        return docs

    plan = (processes.plan(render_for_local, merged, run_dir, namespace, options["host_network"]) if engine == "process"
            else containers.plan(render_for_local, merged, run_dir, namespace, engine, options["allow_privileged"]))
    record = resumed or recorded(name, namespace, options, values, run_dir)
    spec = next((str(a[RUN_SPEC_ANNOTATION]) for a in map(annotations_of, docs) if RUN_SPEC_ANNOTATION in a), "")
    if resumed is not None and resumed.run_spec != spec:
        raise TfchartError(f"the release no longer renders the run suspended in {run_dir} (its run-spec changed: "
                           "the chart, or a file it was rendered from)",
                           f"restore the chart it ran with, or start a new run: `tfchart local {name} ...`")
    record.run_spec = spec
    (record := record.moved(RUNNING)).save(run_dir)
    state = runstate.INTERRUPTED  # Ctrl-C, SIGTERM, --timeout: resumable from the last checkpoint
    try:
        code = session.run(plan, timeout, options["keep_tensorboard"], options["follow_logs"], console=console(),
                           suspend=requested, resumed=resumed is not None)  # fmt: skip
        state = {runstate.SUSPENDED_EXIT: SUSPENDED, 0: SUCCEEDED}.get(code, FAILED)
    finally:
        saved = read_status_file(run_dir)
        step = saved.step if saved and state != SUCCEEDED else None
        record.moved(state, step).save(run_dir)
    if state == SUSPENDED:
        console().print(f"[bold magenta]⏸ suspended[/] at step {step} (checkpoint saved); no process of the run is "
                        f"left. Continue with: tfchart resume {name} --local --workdir {run_dir}", soft_wrap=True)
    sys.exit(code)


def recorded(name: str, namespace: str, options: dict[str, Any], values: ValuesInputs,
             run_dir: Path) -> runstate.LocalRun:  # fmt: skip
    """The record of a new run: the inputs it is rendered from, copied into its run directory."""
    files, sets = runstate.keep_inputs(run_dir, [file.path for file in values.inputs.files], values.inputs.sets)
    chart = values.chart_reference
    if chart and Path(chart).exists():
        chart = str(Path(chart).resolve())
    return runstate.LocalRun(name, namespace, options, chart, values.chart_version, values.plain_http, files, sets)


def resume_local(name: str, workdir: Path | None, timeout: float | None) -> NoReturn:
    """`tfchart resume NAME --local`: the suspended local run started again in its run directory, to its end."""
    run_dir, run = runstate.find(name, workdir, "resume")
    values = ValuesInputs(click.get_current_context().obj, tuple(str(run_dir / file) for file in run.files),
                          list(run.sets), None, run.chart, run.chart_version, run.plain_http)  # fmt: skip
    start(name, values, run.namespace, run_dir, timeout, run.options, resumed=run)
