"""The trainer's log lines that say what its process does next, and the phase each one means: `tfchart local`
shows every pod's phase from them (tfchart/local/terminal.py). One writer per line (the trainer logs through
these) and one parser (:func:`parse_phase`), like the step line's.

A line is read after the trainer's log prefix (`<time> INFO trainer chief:0: `) or at the start of the line,
so a phrase inside another message (`... ran out while waiting for the in-flight steps`) is no phase.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: The phases, as `tfchart local` shows them.
IMPORTING = "importing TensorFlow"  # the trainer's first line: TensorFlow's import comes next
WAITING_FOR_PEERS = "waiting for peers"  # the parameter_server chief: the cluster is not all up yet
WAITING_FOR_CHIEF = "waiting for the chief"  # a synchronous worker done with its steps
TRAINING = "training"
SHUTTING_DOWN = "shutting down"
SUCCEEDED = "succeeded, shutting down"  # TensorFlow's teardown takes a while
#: What a ps/worker server or a synchronous worker says once up (shown as listening, training).
LISTENING = "listening"
IN_SYNC = "in sync"
#: Every phase a line can mean.
PHASES = (IMPORTING, WAITING_FOR_PEERS, WAITING_FOR_CHIEF, TRAINING, SHUTTING_DOWN, SUCCEEDED, LISTENING, IN_SYNC)


def role_line(task: str, strategy: str, run_id: str, storage: str, source: str) -> str:
    return f"role {task}, strategy {strategy}, run {run_id}, storage {storage} (cluster from {source})"


def waiting_for_peers_line(pending: Mapping[str, str]) -> str:
    """``pending``: task name (ps:0) -> its address."""
    return "waiting for " + ", ".join(f"{name} ({address})" for name, address in pending.items())


def waiting_for_chief_line(task: str, then: str) -> str:
    return f"{task} finished its steps; waiting for the chief to report success, then {then}"


def fresh_start_line(directory: object) -> str:
    return f"no checkpoint in {directory}, starting at step 0"


def resumed_line(step: int, path: object) -> str:
    return f"resumed from checkpoint at step {step} ({path})"


def stopping_line(signal_name: str, grace_seconds: float) -> str:
    return f"{signal_name} received: stopping within {grace_seconds:g}s (--shutdown-grace-seconds)"


def succeeded_line(step: int) -> str:
    return f"training Succeeded at step {step}"


def listening_line(task: str, address: str) -> str:
    return f"{task} server listening on {address}"


def in_sync_line(strategy: str, replicas: int) -> str:
    return f"{strategy}: {replicas} replica(s) in sync"


_START = r"(?:^|: )"  # the message's start: the line's, or after the log prefix
_LINES = tuple((re.compile(pattern), phase) for pattern, phase in (
    (_START + r"role \S+, strategy \S+.* \(cluster from .+\)", IMPORTING),
    (_START + r"waiting for \S+:\d+ \(", WAITING_FOR_PEERS),
    (_START + r"\S+ finished its steps; waiting for the chief ", WAITING_FOR_CHIEF),
    (_START + r"no checkpoint in .+, starting at step 0", TRAINING),
    (_START + r"resumed from checkpoint at step \d+ ", TRAINING),
    (_START + r"SIG[A-Z]+ received: stopping within ", SHUTTING_DOWN),
    (_START + r"training Succeeded at step \d+", SUCCEEDED),
    (_START + r"\S+ server listening on \S+", LISTENING),
    (r": \d+ replica\(s\) in sync", IN_SYNC),
))  # fmt: skip


def parse_phase(line: str) -> str | None:
    """The phase (one of PHASES) a trainer's log line says its process is in, else None."""
    return next((phase for pattern, phase in _LINES if pattern.search(line)), None)
