"""What `tfchart local` shows while a run goes: one progress bar for the chief and one status line per
pod on a terminal; on anything else (CI, a pipe) a plain progress line at most once per tenth of the
run. Pod output never reaches the screen here: processes.run writes it to one file per pod."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tfdcontract import SUCCEEDED, StepLine, parse_status_line, parse_step_line

LISTENING = ("server listening on", "TensorBoard ")
STYLES = {"training": "cyan", "listening": "blue", "done": "green", "succeeded": "green"}  # else yellow; exited: red


@dataclass
class PodState:
    name: str
    role: str
    state: str = "starting"
    restarts: int = 0

    def line(self) -> str:
        restarted = f", restarted {self.restarts}" if self.restarts else ""
        return f"{self.name}: {self.state}{restarted}"


@dataclass
class Board:
    """The run as the user wants it: is it training, how fast, how good, when is it done."""

    train_steps: int
    pods: dict[str, PodState] = field(default_factory=dict)
    progress: StepLine | None = None
    accuracy: float | None = None
    started: float = field(default_factory=time.monotonic)
    first_step: tuple[float, int] | None = None  # when the first progress line came, and its step
    tenths_shown: int = 0

    def add(self, name: str, role: str) -> None:
        self.pods[name] = PodState(name, role)

    def observe(self, name: str, chief: bool, line: str) -> None:
        pod = self.pods[name]
        if chief:
            step = parse_step_line(line)
            if step:
                self.progress = step
                self.first_step = self.first_step or (time.monotonic(), step.step)
                pod.state = "training"
            status = parse_status_line(line)
            if status and status.accuracy is not None:
                self.accuracy = status.accuracy
            if status and status.state == SUCCEEDED:
                pod.state = "succeeded"
        elif "replica(s) in sync" in line:
            pod.state = "training"  # a synchronous worker
        elif pod.state == "starting" and any(marker in line for marker in LISTENING):
            pod.state = "listening"  # a ps/worker server, TensorBoard

    def exited(self, name: str, code: int | None, restarts: int = 0) -> None:
        pod = self.pods[name]
        pod.restarts = restarts
        if code is not None and not (code == 0 and pod.state == "succeeded"):
            pod.state = "done" if code == 0 else f"exited {code}"

    def summary(self) -> str:
        """One line: step/total, loss, held-out accuracy, examples/sec, ETA (at the rate since the first step)."""
        step, first = self.progress, self.first_step
        if step is None:
            return f"starting ({time.monotonic() - self.started:.0f} s)"
        accuracy = [] if self.accuracy is None else [f"accuracy {self.accuracy:.4f}"]
        eta = []
        if first and step.step > first[1]:
            rate = (step.step - first[1]) / max(1e-6, time.monotonic() - first[0])
            eta = [f"ETA {max(0.0, (self.train_steps - step.step) / rate):.0f} s"]
        return "  ".join([f"step {step.step}/{self.train_steps}", f"loss {step.loss:.4f}", *accuracy,
                          f"{step.examples_per_sec:.0f} examples/sec", *eta])

    def plain_update(self) -> str | None:
        """A progress line when the run crossed another tenth since the last one shown, else None."""
        if self.progress is None or self.train_steps <= 0:
            return None
        tenths = min(10, self.progress.step * 10 // self.train_steps)
        if tenths <= self.tenths_shown:
            return None
        self.tenths_shown = tenths
        return f"{tenths * 10:3d}% {self.summary()}"

    def renderable(self) -> Any:
        """The live view: the chief's progress bar, then a line per pod."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        done = self.progress.step if self.progress else 0
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=max(1, self.train_steps), completed=done, width=30), Text(self.summary()))
        pods = Table.grid(padding=(0, 2))
        for pod in self.pods.values():
            style = STYLES.get(pod.state, "red" if pod.state.startswith("exited") else "yellow")
            restarted = f" (restarted {pod.restarts})" if pod.restarts else ""
            pods.add_row(Text(f"  {pod.name}"), Text(pod.state + restarted, style=style))
        return Group(bar, pods)

