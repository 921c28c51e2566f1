"""`tfchart local`'s run of a plan (processes.py or containers.py) to its end, on either engine: every pod's output
to <run directory>/pod-logs/<pod>.log, the terminal's board (terminal.py), the ending (the chief's Job, or with
workload.kind=jobset the JobSet, as jobsetrun.py runs it: its events go to <run directory>/events.log), a
suspension (`tfchart suspend --local`), and the closing summary."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import nullcontext, suppress
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from tfchart.local.jobsetrun import COMPLETED, Event, JobSetRun
from tfchart.local.processes import (
    PALETTE,
    Cluster,
    LocalPlan,
    LocalPod,
    await_end,
    running,
    serving_notes,
    tensorboard_command,
)
from tfchart.local.runstate import SUSPENDED_EXIT
from tfdcontract import LOGS_DIR, TENSORBOARD, WORKER, read_status_file

EVENTS_FILE = "events.log"  # a JobSet run's events, as `kubectl get events` would list them


def run(plan: LocalPlan, timeout: float | None, keep_tensorboard: bool, follow_logs: bool = False,
        console: Any = None, suspend: threading.Event | None = None) -> int:  # fmt: skip
    """Runs a plan (processes or containers) to the end; the exit code. Every pod's output goes to <run
    directory>/pod-logs/<pod>.log; the terminal gets a progress bar and a line per pod (on a TTY), plain progress
    lines at most once per tenth of the run (elsewhere), or every pod's output prefixed by its name (follow_logs).
    A JobSet's pods start as its controllers would start them, and its state ends the run (jobsetrun.py). Once
    `suspend` is set, the chief is stopped first (SIGTERM: the trainer saves a checkpoint), then every other pod,
    and SUSPENDED_EXIT is returned (`tfchart suspend --local`)."""
    from rich.console import Console
    from rich.live import Live
    from rich.markup import escape

    from tfchart.local.terminal import Board, PodState

    console = console or Console(highlight=False)
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
    if plan.jobset is not None:
        console.print(f"  JobSet {plan.jobset.name}: its events in {plan.workdir / EVENTS_FILE}")
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
    events = (plan.workdir / EVENTS_FILE).open("a", encoding="utf-8", buffering=1) if plan.jobset else None

    def on_event(event: Event) -> None:
        """A JobSet's event: into events.log; its Jobs' and its own on the terminal too (every one with
        --follow-logs)."""
        at = datetime.fromtimestamp(event.at, timezone.utc).isoformat(timespec="milliseconds")
        assert events is not None
        events.write(f"{at} {event.line()}\n")
        if event.job_level or follow_logs:
            console.print(escape(f"[jobset] {event.line()}"), soft_wrap=True)

    def poll() -> None:
        if suspend is not None and suspend.is_set() and not suspending:
            suspending.append(chief.name)
            console.print("suspending: the chief saves a checkpoint at its next step boundary, then every pod stops")
            if controller is not None:
                controller.suspend()
            if chief.name in cluster.processes:  # the servers stay up for the save; running() stops them after
                cluster.kill(chief.name, signal.SIGTERM)
        with lock:
            for name, process in list(cluster.processes.items()):
                managed = controller is not None and controller.manages(name)
                board.exited(name, None if process.running else process.exit_code,
                             controller.restarts_of(name) if controller and managed else process.restarts)  # fmt: skip
            if controller is not None:
                board.workload = controller.describe()
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
    controller = None if plan.jobset is None else JobSetRun(plan.jobset, cluster, {p.name: p for p in plan.pods},
                                                             on_event)  # fmt: skip
    started = time.monotonic()
    try:
        with running(cluster):
            with live if live is not None else nullcontext():
                if controller is None:
                    code = run_jobs(plan, cluster, chief, timeout, poll)
                else:
                    code = run_jobset(plan, cluster, controller, chief, timeout, poll, suspending)
                poll()
                if suspending and code != 0 and not (controller is not None and controller.finished):
                    return SUSPENDED_EXIT
            return finish(plan, cluster, chief.name, code, time.monotonic() - started, keep_tensorboard, console,
                          controller)  # fmt: skip
    finally:
        for handle in [*files.values(), *([events] if events else [])]:
            handle.close()


def run_jobs(plan: LocalPlan, cluster: Cluster, chief: LocalPod, timeout: float | None, poll: Any) -> int:
    """Native workloads: every pod at once; the chief's exit code (worker 0's, then every worker's, without one)."""
    cluster.start(plan.pods)
    code = cluster.wait_for(chief.name, timeout, poll=poll)
    if code == 0 and chief.role == WORKER:
        # worker 0 is the chief: the workers' Job completes when every worker has exited 0
        workers = [pod for pod in plan.pods if pod.role == WORKER]
        code = max((cluster.wait_for(pod.name, 120, poll=poll) for pod in workers), default=0)
    return code


def run_jobset(plan: LocalPlan, cluster: Cluster, controller: JobSetRun, chief: LocalPod, timeout: float | None,
               poll: Any, suspending: list[str]) -> int:  # fmt: skip
    """workload.kind=jobset: the pods outside the JobSet (TensorBoard) at once, the JobSet's as its controllers
    start them; 0 once the JobSet Completed, 1 once it Failed, or (suspending) the chief's exit code once it has
    stopped."""
    cluster.start([pod for pod in plan.pods if not controller.manages(pod.name)])

    def step() -> None:
        controller.reconcile()
        poll()

    def chief_stopped() -> bool:
        process = cluster.processes.get(chief.name)
        return bool(suspending) and (process is None or not process.running)

    assert plan.jobset is not None
    await_end(f"JobSet {plan.jobset.name}", lambda: controller.finished or chief_stopped(), timeout, step)
    controller.reconcile()  # a chief that succeeded while the run was being suspended completes it
    if controller.finished:
        return 0 if controller.state == COMPLETED else 1
    process = cluster.processes.get(chief.name)
    return 1 if process is None or process.exit_code is None else int(process.exit_code) or 1


def reported(result: dict[str, Any]) -> str:
    """`: step 300, accuracy 0.97, 1234.5 examples/sec on average`: what status.json holds, never a None."""
    shown = {"step {}": "step", "accuracy {}": "accuracy", "{} examples/sec on average": "average_examples_per_sec"}
    if result.get("average_examples_per_sec") is None:  # a run too short for an average: the last interval's rate
        shown |= {"{} examples/sec (the last interval)": "examples_per_sec"}
    parts = [form.format(result[key]) for form, key in shown.items() if result.get(key) is not None]
    return ": " + ", ".join(parts) if parts else ""


def finish(plan: LocalPlan, cluster: Cluster, chief: str, code: int, elapsed: float, keep_tensorboard: bool,
           console: Any, controller: JobSetRun | None = None) -> int:  # fmt: skip
    """The final summary (and TensorBoard kept on request, until Ctrl-C)."""
    from rich.markup import escape

    result = asdict(status) if (status := read_status_file(plan.workdir)) else {}
    if code != 0:
        if controller is not None:
            first = controller.first_failed
            culprit = first.culprit if first and first.culprit else chief
            console.print(f"[bold red]✗ training failed[/] after {elapsed:.0f} s: {escape(controller.outcome())}; "
                          f"{escape(str(result.get('message', '')))} (its log: "
                          f"{plan.workdir / 'pod-logs' / culprit}.log)", soft_wrap=True)  # fmt: skip
            return 1
        console.print(f"[bold red]✗ training failed[/]: {chief} exited with {code} after {elapsed:.0f} s; "
                      f"{escape(str(result.get('message', '')))} (its log: {plan.workdir / 'pod-logs' / chief}.log)")
        return 1
    console.print(f"[bold green]✓ training {result.get('state', 'finished')}[/] in {elapsed:.0f} s{reported(result)}")
    if controller is not None:
        console.print(f"  {escape(controller.outcome())}", soft_wrap=True)
    console.print(f"  export: {plan.host_path(result.get('export_path'))}")
    kept = keep_tensorboard and plan.tensorboard_url
    if plan.tensorboard_url:
        console.print(f"  TensorBoard: {plan.tensorboard_url} is kept running until Ctrl-C" if kept else
                      "  TensorBoard: stopped with the run (--keep-tensorboard keeps it)")  # fmt: skip
    console.print(f"  later: {tensorboard_command(plan.workdir / LOGS_DIR)}", soft_wrap=True)
    chief_pod = next(pod for pod in plan.pods if pod.is_chief)
    trainer, engine = "trainer" in " ".join(chief_pod.argv), getattr(plan, "engine", "docker")  # a container run's own
    for note in serving_notes(plan.values, plan.workdir, trainer, engine):
        console.print(escape(note), soft_wrap=True)
    if kept:
        for name in [name for name, process in cluster.processes.items() if process.pod.role != TENSORBOARD]:
            cluster.kill(name, signal.SIGTERM)
        with suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)
    return 0
