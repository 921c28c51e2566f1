"""The phase vocabulary (tfdcontract.phases): each line the trainer writes through it parses back to its phase,
with or without the trainer's log prefix, and a phrase inside another message is no phase."""

from __future__ import annotations

import logging

import pytest

from tfchart.local.terminal import Board, PodState
from tfdcontract import phases
from trainer.runtime import LOGGER_NAME, setup_logging

WRITTEN = [
    (phases.role_line("chief:0", "parameter_server", "3f2a", "/data", "TF_CONFIG"), phases.IMPORTING),
    (phases.role_line("worker:0", "mirrored", "r", "/d", "the environment (TF_CONFIG unset, no --job_name)"),
     phases.IMPORTING),
    (phases.waiting_for_peers_line({"ps:0": "10.0.0.7:2222", "worker:1": "[::1]:2222"}), phases.WAITING_FOR_PEERS),
    (phases.waiting_for_chief_line("worker:1", "exiting"), phases.WAITING_FOR_CHIEF),
    (phases.fresh_start_line("/data/checkpoints"), phases.TRAINING),
    (phases.resumed_line(300, "/data/checkpoints/ckpt-300"), phases.TRAINING),
    (phases.stopping_line("SIGTERM", 55.0), phases.SHUTTING_DOWN),
    (phases.stopping_line("SIGINT", 2.5), phases.SHUTTING_DOWN),
    (phases.succeeded_line(2000), phases.SUCCEEDED),
    (phases.listening_line("ps:0", "0.0.0.0:2222"), phases.LISTENING),
    (phases.in_sync_line("multi_worker_mirrored", 3), phases.IN_SYNC),
]  # fmt: skip


def logged(message: str, task: str = "chief:0") -> str:
    """The line the trainer's own log handler prints for ``message`` (the trainer's logger is left as it was)."""
    logger = logging.getLogger(LOGGER_NAME)
    handlers, propagate, level = logger.handlers[:], logger.propagate, logger.level
    try:
        handler = setup_logging(task).handlers[0]
    finally:
        logger.handlers[:], logger.propagate = handlers, propagate
        logger.setLevel(level)
    return handler.format(logging.LogRecord(LOGGER_NAME, logging.INFO, __file__, 1, "%s", (message,), None))


@pytest.mark.parametrize(("line", "phase"), WRITTEN)
def test_each_written_line_parses_back_to_its_phase(line: str, phase: str) -> None:
    assert phases.parse_phase(line) == phase
    assert phases.parse_phase(logged(line)) == phase and logged(line).endswith(line)
    assert phase in phases.PHASES


def test_the_lines_read_as_written() -> None:
    """The wording users and tests read in the logs (docs/trainer.md quotes the checkpoint line)."""
    assert phases.resumed_line(300, "/data/checkpoints/ckpt-300") == (
        "resumed from checkpoint at step 300 (/data/checkpoints/ckpt-300)")
    assert phases.waiting_for_peers_line({"ps:0": "a:1", "worker:0": "b:2"}) == "waiting for ps:0 (a:1), worker:0 (b:2)"
    assert phases.stopping_line("SIGTERM", 55.0) == "SIGTERM received: stopping within 55s (--shutdown-grace-seconds)"


@pytest.mark.parametrize("line", [
    # the grace period's end names what the process was doing: no peers are waited for
    "ERROR trainer chief:0: SIGTERM: --shutdown-grace-seconds=5 ran out while waiting for the in-flight steps: "
    "exiting now; a restart resumes from the latest checkpoint on disk",
    "waiting for 2 workers",
    "already completed: run 3f2a Succeeded at step 2000 (export /data/export/mnist/1); nothing to do",
    "step 10, loss = 2.3000 (500.0 examples/sec; 0.200 sec/batch)",
    "",
])  # fmt: skip
def test_other_lines_are_no_phase(line: str) -> None:
    assert phases.parse_phase(line) is None


def test_tfchart_local_shows_the_phase_the_trainer_logged() -> None:
    """The reader: tfchart local's board, fed the trainer's own lines; the grace period's end keeps the chief
    shutting down (it read 'waiting for peers' when the board matched phrases)."""
    run = Board(train_steps=2000, pods={name: PodState(name, name) for name in ("chief", "ps-0", "sync-1")})
    run.observe("chief", True, logged(phases.role_line("chief:0", "parameter_server", "r", "/d", "TF_CONFIG")))
    assert run.pods["chief"].state == phases.IMPORTING
    run.observe("chief", True, logged(phases.waiting_for_peers_line({"ps:0": "127.0.0.1:2222"})))
    run.observe("ps-0", False, logged(phases.listening_line("ps:0", "127.0.0.1:2222"), "ps:0"))
    run.observe("sync-1", False, logged(phases.in_sync_line("multi_worker_mirrored", 2), "worker:1"))
    assert [pod.state for pod in run.pods.values()] == [phases.WAITING_FOR_PEERS, phases.LISTENING, phases.TRAINING]
    run.observe("chief", True, logged(phases.stopping_line("SIGTERM", 5.0)))
    run.observe("chief", True, "ERROR trainer chief:0: SIGTERM: --shutdown-grace-seconds=5 ran out while waiting "
                               "for the in-flight steps: exiting now")  # fmt: skip
    assert run.pods["chief"].state == phases.SHUTTING_DOWN
