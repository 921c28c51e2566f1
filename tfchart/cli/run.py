"""Commands that watch, pause or end a run: status, stop, logs, wait, list, suspend, resume."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tfchart.cli.app import DURATION, console, emit, main_group, output_option, timeout_option
from tfchart.cli.options import KubeInputs, kube_inputs
from tfdcontract import CHIEF, EVALUATOR, PS, SERVING, TENSORBOARD, WORKER

# --force: tfchart carries the plan out itself, also where the run supervisor runs (it did not in time)
force_flag = click.option("--force", is_flag=True, help="Carry the steps out here, not through the run supervisor "
                          "(for one that does not reach the wanted state in time).")  # fmt: skip


def lifecycle(timeout_help: str) -> Callable[[Callable[..., None]], Any]:  # makes a click.Command
    """suspend and resume: NAME, --timeout, --force, --local and --workdir (a `tfchart local` run of NAME on this
    machine), -o and the cluster's options."""
    declared = [
        main_group.command(), click.argument("name"), timeout_option(timeout_help), force_flag,
        click.option("--local", "on_this_machine", is_flag=True,
                     help="A `tfchart local` run of NAME on this machine, not a release."),
        click.option("--workdir", type=click.Path(path_type=Path, file_okay=False), default=None,
                     help="With --local: the run directory (default: the newest runs/NAME-<time>)."),
        output_option("text"), kube_inputs,
    ]  # fmt: skip
    return lambda function: functools.reduce(lambda command, option: option(command), reversed(declared), function)


@main_group.command()
@click.argument("name")
@output_option("table")
@kube_inputs
def status(name: str, output: str, kube: KubeInputs) -> None:
    """Pods per role, the chief Job, training progress and endpoints of release NAME."""
    from tfchart.cluster import status as release_status

    collected = release_status.collect(kube.api(), name, kube.namespace())
    if not emit(collected, output):
        release_status.render(collected, console())


@main_group.command()
@click.argument("name")
@click.option("--end-run", is_flag=True, help="Also end a chief that is still training (its Job is suspended).")
@timeout_option("How long to wait for the stop to be carried out (default 60s; --end-run: plus the grace period).")
@force_flag
@kube_inputs
def stop(name: str, end_run: bool, timeout: float | None, force: bool, kube: KubeInputs) -> None:
    """Free what release NAME's ps, worker and evaluator pods hold once its run ended (scale to 0). Asks the run
    supervisor and waits; without one running (or with --force) tfchart does it."""
    from tfchart.cluster import suspend as lifecycle

    stopped = lifecycle.stop(kube.api(), name, kube.namespace(), end_run=end_run, timeout=timeout, force=force)
    report(stopped, "text", "" if stopped.actions else f"nothing to stop: release {name} holds no ps/worker/"
                                                       "evaluator pods")  # fmt: skip


@main_group.command()
@click.argument("name")
@click.option("--role", default=None, type=click.Choice([CHIEF, PS, WORKER, EVALUATOR, TENSORBOARD, SERVING]),
              help="The task's role (default: the chief; worker 0 with chief.replicas=0).")
@click.option("--index", default=0, show_default=True, type=int, help="Task index (StatefulSet ordinal).")
@click.option("--all-roles", is_flag=True, help="Every pod's log, each line prefixed [pod/NAME/CONTAINER].")
@click.option("-f", "--follow", is_flag=True, help="Stream new lines until Ctrl-C (--all-roles: interleaved).")
@click.option("--tail", type=int, default=None, help="Only the last N lines.")
@click.option("-p", "--previous", is_flag=True, help="The log of the previous (restarted) container.")
@click.option("--since", type=DURATION, default=None, help="Only lines newer than this, e.g. 5m.")
@click.option("--timestamps", is_flag=True, help="Prefix each line with the time it was written (RFC 3339).")
@kube_inputs
def logs(name: str, role: str | None, index: int, all_roles: bool, follow: bool, tail: int | None, previous: bool,
         since: float | None, timestamps: bool, kube: KubeInputs) -> None:  # fmt: skip
    """The log of the chief of release NAME, of one task (--role worker --index 1), or of all (--all-roles)."""
    from tfchart.cluster import logs as pod_logs
    from tfchart.errors import UsageError

    if all_roles and (role is not None or index != 0):
        raise UsageError("--all-roles shows every pod: it takes no --role or --index",
                         f"leave them out, or drop --all-roles: `tfchart logs {name} --role {role or WORKER}`")
    seconds = None if since is None else max(1, math.ceil(since))  # the API counts whole seconds
    options: dict[str, Any] = {"previous": previous, "since_seconds": seconds, "timestamps": timestamps}
    pod_logs.stream(kube.api(), name, kube.namespace(), role, index, follow, tail, sys.stdout, all_roles=all_roles,
                    **options)  # fmt: skip


@main_group.command()
@click.argument("name")
@timeout_option("Give up after this long (90s, 10m, 1h30m, or seconds); default: wait until the run ends.")
@kube_inputs
def wait(name: str, timeout: float | None, kube: KubeInputs) -> None:
    """Block until release NAME's run ends. Exit 0 Succeeded, 1 Failed (the reason on stderr), 3 no run
    (never there, or deleted while waiting), 124 --timeout passed."""
    from tfchart.cluster import suspend as run_wait

    state, reason = run_wait.wait(kube.api(), name, kube.namespace(), timeout,
                                  notice=lambda line: click.secho(f"note: {line}", fg="yellow", err=True))
    click.echo(f"{name}: {state}")
    if state != "Succeeded":
        click.secho(f"error: release {name}'s run failed: {reason}", fg="red", err=True)
        sys.exit(1)


@main_group.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Releases in every namespace.")
@output_option("table")
@kube_inputs
def list_releases(all_namespaces: bool, output: str, kube: KubeInputs) -> None:
    """This chart's releases: run state, step, GPUs their pods hold and age."""
    from tfchart.cluster import releases
    from tfchart.cluster.status import human_age

    where = None if all_namespaces else kube.namespace()
    runs = releases.list_runs(kube.api(), where)
    if emit(runs, output):
        return
    if not runs:
        return click.echo(f"no tf-distributed releases {f'in namespace {where}' if where else 'in any namespace'}",
                          err=True)  # fmt: skip
    rows = [("NAME", "NAMESPACE", "STATE", "STEP", "GPUS", "AGE")]
    for run in runs:
        step, total = run["step"], run["train_steps"]
        step = "-" if step is None else f"{step}/{total}" if total else str(step)
        gpus = ",".join(f"{count} {resource}" for resource, count in run["gpus"].items()) or "0"
        rows.append((run["release"], run["namespace"], run["state"], step, gpus, human_age(run["age_seconds"])))
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    for row in rows:
        click.echo("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


@lifecycle("How long to wait for the pods to stop (default: their terminationGracePeriodSeconds plus 60s).")
def suspend(name: str, timeout: float | None, force: bool, on_this_machine: bool, workdir: Path | None, output: str,
            kube: KubeInputs) -> None:  # fmt: skip
    """Pause release NAME's run: the chief saves a checkpoint at its next step boundary, then every pod is
    released (ps/workers scaled to 0, the evaluator suspended). `tfchart resume NAME` continues."""
    if on_this_machine:
        from tfchart.local import runstate  # the running local run asked to suspend, waited for

        outcome: Any = runstate.request_suspend(name, *runstate.find(name, workdir, "suspend"), timeout)
        resume = f"tfchart resume {name} --local --workdir {outcome.run_directory}"
    else:
        from tfchart.cluster import suspend as run_suspend

        outcome = run_suspend.suspend(kube.api(), name, no_workdir(workdir, kube), timeout, force=force)
        resume = f"tfchart resume {name} -n {outcome.namespace}"
    report(outcome, output, f"{name} is suspended (since {outcome.since}): `{resume}` continues from the checkpoint")


@lifecycle("How long to wait for the ps/worker pods to be Ready (default 10m); with --local, for training.")
def resume(name: str, timeout: float | None, force: bool, on_this_machine: bool, workdir: Path | None, output: str,
           kube: KubeInputs) -> None:  # fmt: skip
    """Continue release NAME's suspended run from its checkpoint: ps/workers back to their replicas, then, once
    they are Ready, the chief. With --local: the local run, again in its run directory, to its end."""
    if on_this_machine:
        from tfchart.cli.local import resume_local

        if output != "text":
            raise click.UsageError("resume --local trains here, as tfchart local does: it has no -o report")
        resume_local(name, workdir, timeout)
    from tfchart.cluster import suspend as run_suspend

    outcome = run_suspend.resume(kube.api(), name, where := no_workdir(workdir, kube), timeout, force=force)
    report(outcome, output, f"{name} runs again: follow it with `tfchart logs {name} -n {where} -f`")


def no_workdir(workdir: Path | None, kube: KubeInputs) -> str:
    """The release's namespace; --workdir (a local run's) is refused without --local."""
    if workdir is not None:
        raise click.UsageError("--workdir names a local run's directory: give --local too")
    return kube.namespace()


def report(outcome: Any, output: str, closing: str) -> None:
    """One line per thing done (then per thing already done), and where the run stands; or the outcome as data."""
    if emit(outcome, output):
        return
    for line in outcome.unchanged:
        click.echo(f"  {line}")
    for line in outcome.actions:
        click.secho(f"✓ {line}", fg="green")
    if closing:
        click.echo(closing)
