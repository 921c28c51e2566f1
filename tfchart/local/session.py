"""`tfchart local`'s run of a plan (processes.py or containers.py) to its end, on either engine: every pod's output
to <run directory>/pod-logs/<pod>.log, the terminal's board (terminal.py), the pods started (again) and the run
ended as their controllers would (jobsetrun.py: the chief's Job and the StatefulSets, or with workload.kind=jobset
the JobSet, whose events go to <run directory>/events.log), a suspension (`tfchart suspend --local`), and the
closing summary. Endings, suspend and resume are tfdcontract.lifecycle's plan, the planner the run supervisor and
tfchart use: it reads the controllers' objects as it reads a cluster's (`view`), and its actions, merge patches,
apply to them as the API server applies them, each answered by its controller (`advance`)."""

from __future__ import annotations

import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping
from contextlib import nullcontext, suppress
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tfchart.errors import TfchartError
from tfchart.local.jobset import COMPLETE, condition, waits_for
from tfchart.local.jobsetrun import COMPLETED, JobSetRun
from tfchart.local.pods import LocalPod
from tfchart.local.processes import PALETTE, LocalCluster, LocalPlan, python_bin_dir, running
from tfchart.local.runstate import SUSPENDED_EXIT
from tfdcontract import (
    COMPONENT_LABEL,
    EVALUATOR,
    FAILED,
    LOGS_DIR,
    PREDICT_REQUEST_FILE,
    RUNNING,
    SERVING,
    SUCCEEDED,
    SUSPENDED,
    TENSORBOARD,
    lifecycle,
    read_status_file,
)
from tfdcontract.runstate import now_text

EVENTS_FILE = "events.log"  # a JobSet run's events, as `kubectl get events` would list them


def run(plan: LocalPlan, timeout: float | None, keep_tensorboard: bool, follow_logs: bool = False, console: Any = None,
        suspend: threading.Event | None = None, resumed: bool = False) -> int:  # fmt: skip
    """Runs a plan (processes or containers) to the end; the exit code. Every pod's output goes to <run
    directory>/pod-logs/<pod>.log; the terminal gets a progress bar and a line per pod (on a TTY), plain progress
    lines at most once per tenth of the run (elsewhere), or every pod's output prefixed by its name (follow_logs).
    The pods start (again) as their controllers would start them, and the run's Job or JobSet ends it. Once
    `suspend` is set, the run is suspended as tfdcontract.lifecycle plans it (the chief first: the trainer saves a
    checkpoint), and SUSPENDED_EXIT is returned (`tfchart suspend --local`); a `resumed` run starts suspended."""
    from rich.console import Console
    from rich.live import Live
    from rich.markup import escape

    from tfchart.local.terminal import Board, PodState

    console = console or Console(highlight=False)
    jobset = plan.workload["kind"] == "JobSet"  # else a native release's Jobs and StatefulSets (jobset.native)
    width = max(len(pod.name) for pod in plan.pods)
    chief = next(pod for pod in plan.pods if pod.is_chief)
    logs_dir = plan.workdir / "pod-logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    files = {pod.name: (logs_dir / f"{pod.name}.log").open("a", encoding="utf-8", buffering=1) for pod in plan.pods}
    board = Board(int(plan.values["training"]["trainSteps"]), {p.name: PodState(p.name, p.role) for p in plan.pods})
    lock = threading.Lock()

    def on_line(pod: LocalPod, line: str) -> None:
        with lock:
            files[pod.name].write(line + "\n")
            board.observe(pod.name, pod.is_chief, line)
        if follow_logs:
            colour = PALETTE[sum(map(ord, pod.name)) % len(PALETTE)]
            console.print(f"[{colour}]{escape(pod.name):<{width}}[/] | {escape(line)}", soft_wrap=True)

    console.print(f"[bold]tfchart local[/]: {plan.headline}")
    console.print(f"  pod logs: {logs_dir}/<pod>.log" + ("" if follow_logs else " (--follow-logs shows them here)"))
    if jobset:
        console.print(f"  JobSet {plan.workload['metadata']['name']}: its events in {plan.workdir / EVENTS_FILE}")
    if plan.tensorboard_url:
        console.print(f"  TensorBoard: {plan.tensorboard_url}" + (" (kept after training)" if keep_tensorboard else
                                                                 " (while the run lasts; --keep-tensorboard keeps it)"))
    if plan.metrics_ports.get(chief.name):
        console.print(f"  metrics: http://127.0.0.1:{plan.metrics_ports[chief.name]}/metrics")
    if follow_logs:
        for address, local_address in plan.addresses.items():
            console.print(f"  {address} -> {local_address}")
        for name, port in plan.metrics_ports.items():
            console.print(f"  {name} metrics -> http://127.0.0.1:{port}/metrics")
    show_live = console.is_terminal and not follow_logs
    live = Live(board.renderable(console.width), console=console, refresh_per_second=4) if show_live else None

    suspending: list[str] = []
    events = (plan.workdir / EVENTS_FILE).open("a", encoding="utf-8", buffering=1) if jobset else None
    pods = {pod.name: pod for pod in plan.pods}

    def on_event(kind: str, name: str, reason: str, message: str, job_level: bool = True) -> None:
        """A JobSet's event: into events.log; its Jobs' and its own on the terminal too (every one with
        --follow-logs). A native run's failures: into the pod's log ([tfchart] ...)."""
        if events is None:
            if reason == "Failed" and (pod := pods.get(first_pod.get(name, name))):
                on_line(pod, f"[tfchart] {message}")
            return
        line = f"{kind} {name} {reason}: {message}"
        events.write(f"{datetime.now(timezone.utc).isoformat(timespec='milliseconds')} {line}\n")
        if job_level or follow_logs:
            console.print(escape(f"[jobset] {line}"), soft_wrap=True)

    def poll() -> None:
        if suspend is not None and suspend.is_set() and not suspending:
            suspending.append(chief.name)
            console.print("suspending: the chief saves a checkpoint at its next step boundary, then every pod stops")
        with lock:
            for name, process in list(cluster.processes.items()):
                board.exited(name, None if process.running else process.exit_code, controller.restarts_of(name))
            board.workload = describe(controller) if jobset else ""
            for pod in plan.pods:
                if (waiting := controller.pending(pod.name)) is not None:
                    board.pods[pod.name].state = waiting
                elif board.pods[pod.name].state.startswith("pending"):
                    board.pods[pod.name].state = "starting"
            if live is not None:
                live.update(board.renderable(console.width))
            elif not follow_logs and (line := board.plain_update()):
                console.print(line)

    cluster = plan.cluster(on_line)
    controller = JobSetRun(plan.workload, cluster, pods, on_event)
    first_pod = {job.name: job.pods[0].name for job in controller.jobs.values()}
    if resumed:
        as_suspended(controller)
    started = time.monotonic()
    try:
        with running(cluster):
            with live if live is not None else nullcontext():
                cluster.start([pod for pod in plan.pods if not controller.manages(pod.name)])  # TensorBoard, at once
                while True:  # the others as their controllers start them, the plan carried out until the end
                    controller.reconcile()
                    state, lines = advance(controller, bool(suspending))
                    for line in lines if not controller.finished else []:
                        console.print(f"  {line}", soft_wrap=True)
                    poll()
                    if state in (SUCCEEDED, FAILED) or (suspending and state == SUSPENDED):
                        break
                    if timeout is not None and time.monotonic() > started + timeout:
                        raise TfchartError(f"{'JobSet' if jobset else 'Job'} {controller.name} did not finish "
                                           f"within {timeout:.0f} s",
                                           "raise --timeout, or look at the logs above")
                    time.sleep(0.2)
                if state == SUSPENDED:
                    return SUSPENDED_EXIT
            return finish(plan, cluster, controller, state == SUCCEEDED, time.monotonic() - started, keep_tensorboard,
                          console)  # fmt: skip
    finally:
        for handle in [*files.values(), *([events] if events else [])]:
            handle.close()


def serving_notes(values: dict[str, Any], workdir: Path, trainer: bool = True, engine: str = "docker") -> list[str]:
    """How to serve the export: TensorFlow Serving runs under neither engine. The trainer (`trainer`: the chief
    runs `python -m trainer`) writes a predict request of one held-out example beside status.json; a program of
    one's own exports its own signature."""
    if not values.get(SERVING, {}).get("enabled"):
        return []
    model = values["training"]["modelName"]
    image = values[SERVING]["image"]
    reference = f"{image.get('registry') + '/' if image.get('registry') else ''}{image['repository']}:{image['tag']}"
    request = workdir / PREDICT_REQUEST_FILE
    predict = [f"  curl -d @{shlex.quote(str(request))} http://127.0.0.1:8501/v1/models/{model}:predict",
               "(one held-out example; signature serving_default: input `images`, outputs `probabilities`, "
               "`classes`: docs/trainer.md)"] if trainer and request.is_file() else [
               f"(the signature: saved_model_cli show --all --dir {workdir}/export/{model}/<N>)"]  # fmt: skip
    return [
        "TensorFlow Serving cannot run on this machine (no tensorflow_model_server binary); on a machine with "
        f"{engine.capitalize()}:", f"  {engine} run --rm -p 8501:8501 -v {workdir}/export/{model}:/models/{model}:ro "
        f"-e MODEL_NAME={model} {reference}",
        f"  curl http://127.0.0.1:8501/v1/models/{model}",
        *predict,
    ]


def tensorboard_command(logdir: Path) -> str:
    """`tensorboard --logdir` as it runs from any shell: this interpreter's own, by its full path."""
    installed = Path(python_bin_dir()) / TENSORBOARD  # the console script is named as the role
    if installed.is_file():
        return shlex.join([str(installed), "--logdir", str(logdir)])
    from importlib.util import find_spec

    if find_spec(TENSORBOARD) is None:  # containers: TensorBoard is in the image, maybe not on this machine
        return f"pip install tensorboard, then: tensorboard --logdir {shlex.quote(str(logdir))}"
    return shlex.join([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)])


def reported(result: dict[str, Any]) -> str:
    """`: step 300, accuracy 0.97, 1234.5 examples/sec on average`: what status.json holds, never a None."""
    shown = {"step {}": "step", "accuracy {}": "accuracy", "{} examples/sec on average": "average_examples_per_sec"}
    if result.get("average_examples_per_sec") is None:  # a run too short for an average: the last interval's rate
        shown |= {"{} examples/sec (the last interval)": "examples_per_sec"}
    parts = [form.format(result[key]) for form, key in shown.items() if result.get(key) is not None]
    return ": " + ", ".join(parts) if parts else ""


def finish(plan: LocalPlan, cluster: LocalCluster, controller: JobSetRun, succeeded: bool, elapsed: float,
           keep_tensorboard: bool, console: Any) -> int:  # fmt: skip
    """The final summary (and TensorBoard kept on request, until Ctrl-C); the exit code: 0, else 1."""
    from rich.markup import escape

    result = asdict(status) if (status := read_status_file(plan.workdir)) else {}
    chief_pod = next(pod for pod in plan.pods if pod.is_chief)
    if not succeeded:  # the pod whose exit failed the run (its exit code, else 1), else the chief
        culprit = controller.first_failed.culprit if controller.first_failed else None
        code = getattr(cluster.processes.get(culprit or ""), "exit_code", None) or 1
        why = outcome(controller) if controller.is_jobset else f"{culprit or chief_pod.name} exited with {code}"
        message = escape(str(result.get("message", "")))
        console.print(f"[bold red]✗ training failed[/] after {elapsed:.0f} s: {escape(why)}; {message} (its log: "
                      f"{plan.workdir / 'pod-logs' / (culprit or chief_pod.name)}.log)", soft_wrap=True)  # fmt: skip
        return 1
    console.print(f"[bold green]✓ training {result.get('state', 'finished')}[/] in {elapsed:.0f} s{reported(result)}")
    if controller.is_jobset:
        console.print(f"  {escape(outcome(controller))}", soft_wrap=True)
    console.print(f"  export: {plan.host_path(result.get('export_path'))}")
    kept = keep_tensorboard and plan.tensorboard_url
    if plan.tensorboard_url:
        console.print(f"  TensorBoard: {plan.tensorboard_url} is kept running until Ctrl-C" if kept else
                      "  TensorBoard: stopped with the run (--keep-tensorboard keeps it)")  # fmt: skip
    console.print(f"  later: {tensorboard_command(plan.workdir / LOGS_DIR)}", soft_wrap=True)
    trainer, engine = "trainer" in " ".join(chief_pod.argv), plan.engine or "docker"  # a container run's own
    for note in serving_notes(plan.values, plan.workdir, trainer, engine):
        console.print(escape(note), soft_wrap=True)
    if kept:
        for name in [name for name, process in cluster.processes.items() if process.pod.role != TENSORBOARD]:
            cluster.kill(name, signal.SIGTERM, 10.0)
        with suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)
    return 0


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A JSON merge patch (RFC 7386) applied to `target` in place, as the API server applies one."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            if not isinstance(target.get(key), dict):  # RFC 7386: a value that is not an object becomes {} first
                target[key] = {}
            merge(target[key], value)
        else:
            target[key] = value


def view(run: JobSetRun) -> lifecycle.RunView:
    """What an executor reads of a cluster: the objects (a StatefulSet's Ready pods counted, as its controller does)
    and the running pods."""
    pods = [{"metadata": {"name": name, "labels": {COMPONENT_LABEL: process.pod.role}}, "status": {"phase": RUNNING}}
            for name, process in run.engine.processes.items() if process.running and run.manages(name)]  # fmt: skip
    for job in run.jobs.values():
        if job.doc["kind"] == "StatefulSet":
            job.doc["status"]["readyReplicas"] = sum(pod.ready and job.runs(pod) for pod in job.pods)
    docs = [job.doc for job in run.jobs.values()]
    if run.is_jobset:
        return lifecycle.RunView("JobSet", run.doc, pods=pods, jobs=docs)
    evaluator = next((doc for doc in docs if doc["kind"] == "Job" and lifecycle.role_of(doc) == EVALUATOR), None)
    return lifecycle.RunView("Job", run.jobs[run.name].doc, [doc for doc in docs if doc["kind"] == "StatefulSet"],
                   evaluator, pods=pods)  # fmt: skip


def advance(run: JobSetRun, suspend: bool) -> tuple[str, list[str]]:
    """Carries out the plan's next step towards the wanted state (suspended, else running; once the run has ended,
    its ending: stopped); the run's state once that is reached (tfdcontract's Running, Suspended, Succeeded,
    Failed), else "", and the lines of what was done. (A Deployment or a Kueue Workload is never planned: no
    supervisor runs here, no Kueue.)"""
    current = view(run)
    state = lifecycle.run_state(current)
    ended = state in lifecycle.TERMINAL
    wanted = lifecycle.STOPPED_WANTED if ended else lifecycle.SUSPENDED_WANTED if suspend else lifecycle.RUNNING_WANTED
    step = lifecycle.plan(current, wanted, now=now_text(), ending=lifecycle.ending_of(current.run) if ended else None)
    for action in step.actions:  # as the API server merges it; its controller answers in its next pass
        merge(run.doc if action.kind == "JobSet" else run.jobs[action.name].doc, action.patch)
        if action.kind == "JobSet" and "suspend" in action.patch.get("spec", {}):
            run.suspend(run.suspended)
    return ("" if step.actions or step.pending else state), [action.line for action in step.actions]


def as_suspended(run: JobSetRun) -> None:
    """The objects as `tfchart suspend` left them (the plan's suspension, carried out before any pod runs: the
    run's Job or JobSet suspended with its record, ps/worker at 0), so that the plan's resume brings the servers
    back Ready before the chief."""
    for _ in range(4):  # suspend, scale down, reached
        if advance(run, suspend=True)[0] == SUSPENDED:
            return


def describe(run: JobSetRun) -> str:
    """The JobSet's state and each replicatedJob's, in one line."""
    parts = []
    for rjob in run.doc["spec"]["replicatedJobs"]:
        name, jobs = rjob["name"], [job for job in run.jobs.values() if job.rjob == rjob["name"]]
        if not any(job.created is not None for job in jobs):
            parts.append(f"{name} waits for {waits_for(rjob)}")
        elif failed := next((job for job in jobs if job.state == FAILED), None):
            parts.append(f"{name} Failed ({condition(failed.doc)['reason']})")
        elif all(job.state == COMPLETE for job in jobs):
            parts.append(f"{name} Complete")
        else:
            alive = any(pod.alive for job in jobs for pod in job.pods)
            state = "Ready" if all(job.ready for job in jobs) else "Active" if alive else "starting"
            parts.append(f"{name} {state}")
    state = SUSPENDED if run.suspended and not run.finished else run.state
    restarts = f" (restart {run.restarts})" if run.restarts else ""
    return f"JobSet {run.name} {state}{restarts}: {', '.join(parts)}"


def outcome(run: JobSetRun) -> str:
    """How the run ended, for the closing summary: the state, its reason, and on failure the rule and Job."""
    spec, first = run.doc["spec"], run.first_failed
    if run.state == COMPLETED:
        targets = ", ".join(run.targets) or "every replicatedJob"
        return f"JobSet {run.name} Completed: successPolicy {spec['successPolicy']['operator']} of {targets}"
    by = (f" by failure policy rule {run.rule['name']} ({run.rule['action']})" if run.rule else
          f": no failure policy rule matched, and JobSet's default, RestartJobSet, had used up maxRestarts "
          f"{spec['failurePolicy']['maxRestarts']}")  # fmt: skip
    failed = condition(first.doc) if first else {}
    job = f"; Job {first.name} failed: {failed['reason']}: {failed['message']}" if first else ""
    return f"JobSet {run.name} {run.state} ({condition(run.doc)['reason']}){by}{job}"
