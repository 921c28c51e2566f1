"""What `tfchart local` shows while a run goes: one progress bar for the chief and one status line per
pod on a terminal; on anything else (CI, a pipe) a plain progress line at most once per tenth of the
run. Pod output never reaches the screen here: session.run writes it to one file per pod. Each pod's line
says what it waits for, read from the trainer's own log lines (tfdcontract.phases); every line fits the width."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tfdcontract import SUCCEEDED, StepLine, parse_status_line, parse_step_line
from tfdcontract import phases as said

ENDED = ("done", "succeeded")
STYLES = {said.TRAINING: "cyan", said.LISTENING: "blue"} | dict.fromkeys(ENDED, "green")  # else yellow; exited: red


@dataclass
class PodState:
    name: str
    role: str
    state: str = "starting"
    restarts: int = 0


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
    chief: str = ""  # the chief pod's name, known from its first line
    phases: list[tuple[bool, str]] = field(default_factory=list)  # the chief's, not yet shown: (after a step?, it)
    phase_since: float = field(default_factory=time.monotonic)  # when the chief's state last changed
    workload: str = ""  # a JobSet's state, under the bar (workload.kind=jobset)

    def observe(self, name: str, chief: bool, line: str) -> None:
        pod = self.pods[name]
        before = pod.state
        phase = said.parse_phase(line)
        if phase not in (None, said.LISTENING, said.IN_SYNC) and pod.state not in ENDED and not (
                pod.state == said.LISTENING and phase == said.WAITING_FOR_PEERS):  # fmt: skip
            pod.state = str(phase)
        if chief:
            self.chief = name
            step = parse_step_line(line)
            if step:
                self.progress = step
                self.first_step = self.first_step or (time.monotonic(), step.step)
                pod.state = said.TRAINING
            status = parse_status_line(line)
            if status and status.accuracy is not None:
                self.accuracy = status.accuracy
            if status and status.state == SUCCEEDED:
                pod.state = said.SUCCEEDED
            if pod.state != before:
                self.phase_since = time.monotonic()
                if (waiting := self.waiting()) and not waiting.startswith(said.TRAINING):
                    self.phases.append((self.progress is not None, waiting))
        elif phase == said.IN_SYNC:
            pod.state = said.TRAINING  # a synchronous worker
        elif pod.state in ("starting", said.IMPORTING) and (phase == said.LISTENING or "TensorBoard " in line):
            pod.state = said.LISTENING  # a ps/worker server (its first line said it imports TensorFlow), TensorBoard

    def exited(self, name: str, code: int | None, restarts: int = 0) -> None:
        pod = self.pods[name]
        pod.restarts = restarts
        if code is not None:
            succeeded = code == 0 and pod.state.startswith("succeeded")
            pod.state = "succeeded" if succeeded else "done" if code == 0 else f"exited {code}"

    def waiting(self) -> str | None:
        """What the run waits for while there is no step to show (before the first, after success): the chief's
        phase, else None."""
        chief = self.pods.get(self.chief)
        state = chief.state if chief else "starting"
        if self.progress is not None and not state.endswith("shutting down"):
            return None
        return state.replace("succeeded, ", "")

    def fields(self, width: int | None = None, phase: bool = True) -> list[str]:
        """The summary's fields, most important first, as many as fit in ``width`` (joined by two spaces):
        step/total, loss, held-out accuracy, examples/sec, ETA (at the rate since the first step)."""
        step, first = self.progress, self.first_step
        waiting = [f"{now} ({time.monotonic() - self.phase_since:.0f} s)"] if phase and (now := self.waiting()) else []
        if step is None:
            return waiting
        accuracy = [] if self.accuracy is None else [f"accuracy {self.accuracy:.4f}"]
        eta = []
        if first and step.step > first[1]:
            rate = (step.step - first[1]) / max(1e-6, time.monotonic() - first[0])
            eta = [f"ETA {max(0.0, (self.train_steps - step.step) / rate):.0f} s"]
        shown = [*waiting, f"step {step.step}/{self.train_steps}", f"loss {step.loss_text}", *accuracy,
                 f"{step.examples_per_sec:.0f} examples/sec", *eta]  # fmt: skip
        while width is not None and len(shown) > 1 and len("  ".join(shown)) > width:
            shown.pop()  # ETA goes first, then examples/sec, accuracy, loss
        return shown

    def summary(self, width: int | None = None, phase: bool = True) -> str:
        return "  ".join(self.fields(width, phase))

    def plain_update(self) -> str | None:
        """Off a terminal: each wait of the chief once, as it came (importing TensorFlow, waiting for peers,
        shutting down), and a progress line when the run crossed another tenth since the last one shown; None
        when there is nothing new."""
        lines = [f"     {phase}" for after_step, phase in self.phases if not after_step]
        if self.progress is not None and self.train_steps > 0:
            tenths = min(10, self.progress.step * 10 // self.train_steps)
            if tenths > self.tenths_shown:
                self.tenths_shown = tenths
                lines.append(f"{tenths * 10:3d}% {self.summary(phase=False)}")
        lines += [f"     {phase}" for after_step, phase in self.phases if after_step]
        self.phases.clear()
        return "\n".join(lines) or None

    def renderable(self, width: int = 80) -> Any:
        """The live view in ``width`` columns: the chief's progress bar, then a line per pod (each cut to fit)."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        done = self.progress.step if self.progress else 0
        bar_width = max(10, min(30, width // 4))
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=max(1, self.train_steps), completed=done, width=bar_width),
                    Text(self.summary(width - bar_width - 1), no_wrap=True, overflow="ellipsis"))  # fmt: skip
        names = {pod.name: pod.name for pod in self.pods.values()}
        longest = max((len(pod.state) + 16 for pod in self.pods.values()), default=0)  # + " (restarted N)"
        if len(names) > 1 and max(map(len, names)) + 4 + longest > width:  # narrow: drop the release prefix
            words = [name.split("-") for name in names]
            common = 0
            while all(len(w) > common + 1 and w[common] == words[0][common] for w in words):
                common += 1
            names = {name: "-".join(name.split("-")[common:]) for name in names}
        name_width = max(map(len, names.values()), default=0)
        lines = [Text(self.workload, no_wrap=True, overflow="ellipsis")] if self.workload else []
        for pod in self.pods.values():
            style = STYLES.get(pod.state.split(",")[0], "red" if pod.state.startswith("exited") else "yellow")
            restarted = f" (restarted {pod.restarts})" if pod.restarts else ""
            line = Text(f"  {names[pod.name]:<{name_width}}  ", no_wrap=True, overflow="ellipsis")
            line.append(pod.state + restarted, style=style)
            lines.append(line)
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return Group(bar, *lines)

