"""What tfdcontract.lifecycle's planner returns (the next Step: its Actions, or what must happen first), and how an
executor paces a step that something keeps undoing. Standard library only, no I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: An executor that finds the actions it just carried out planned again (something undoes them: a GitOps tool's
#: self-heal, a controller of its own) waits before each repeat, from BACKOFF_SECONDS doubling up to the most.
BACKOFF_SECONDS, BACKOFF_MOST_SECONDS = 1.0, 60.0


@dataclass(frozen=True)
class Action:
    """One write: a JSON merge patch of an object (of its /scale subresource when `subresource` says so)."""

    kind: str  # "Job" | "StatefulSet" | "JobSet" | "Deployment" | "Workload" ("Pod": only said, never written)
    name: str
    patch: Mapping[str, Any]
    line: str  # one line for the user / the supervisor's log
    subresource: str = ""  # "scale": the patch is of the object's Scale (the supervisor's Role grants only that)


@dataclass(frozen=True)
class Step:
    """The next step: actions to carry out now, in order (then read again and plan again), or what must happen
    first; `unchanged` says what already is as wanted (patch empty), `blocked` why the wanted state cannot be
    reached (the run ended, a suspension not recorded): an executor refuses with it."""

    actions: tuple[Action, ...] = ()
    pending: tuple[str, ...] = ()
    unchanged: tuple[Action, ...] = ()
    blocked: str = ""

    @property
    def reached(self) -> bool:
        return not self.actions and not self.pending and not self.blocked


def describe(step: Step) -> str:
    """The step as JSON (the supervisor's log, a test's failure message)."""
    return json.dumps({"actions": [a.line for a in step.actions], "pending": list(step.pending),
                       "blocked": step.blocked}, separators=(",", ":"))


@dataclass
class Backoff:
    """An executor's memory of the actions it carried out last: planned again, they were undone; each repeat
    waits twice as long as the one before (BACKOFF_SECONDS, up to BACKOFF_MOST_SECONDS) instead of a write loop."""

    key: tuple[str, ...] = ()
    times: int = 0  # carried out, with nothing else planned in between
    until: float = 0.0  # not again before this (the executor's clock, in seconds)

    def wait(self, step: Step, now: float) -> float:
        """Seconds to wait before carrying out the step's actions; 0: carry them out now (counted)."""
        key = tuple(f"{a.kind} {a.name}: {a.line}" for a in step.actions)
        if key != self.key:
            self.key, self.times, self.until = key, 0, 0.0
        if now < self.until:
            return self.until - now
        self.times += 1
        self.until = now + min(BACKOFF_SECONDS * 2 ** (self.times - 1), BACKOFF_MOST_SECONDS)
        return 0.0

    def undone(self, step: Step) -> str:
        """What to add to a pending action's line where the step's actions were undone (else "")."""
        if self.times < 2 or self.key != tuple(f"{a.kind} {a.name}: {a.line}" for a in step.actions):
            return ""
        return (f" (carried out {self.times} times and undone each time: something reverts it, a GitOps tool's "
                "self-heal or a controller of its own? stop that first)")
