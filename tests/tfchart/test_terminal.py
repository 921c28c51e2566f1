"""The calm terminal of `tfchart local` (tfchart/local/terminal.py), line by line from the pods' output."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tfchart.local.terminal import Board, PodState
from tfdcontract import RUNNING, SUCCEEDED, Status, format_status_line, format_step_line


def status_line(state: str, step: int, accuracy: float | None) -> str:
    return format_status_line(Status(state, "parameter_server", step, 2000, 0.1, accuracy, 900.0, None, "t0", "t1",
                                     "training"))  # fmt: skip


def board() -> Board:
    return Board(2000, {name: PodState(name, role) for name, role in (
        ("chief", "chief"), ("ps-0", "ps"), ("worker-0", "worker"), ("sync-1", "worker"),
        ("tensorboard-0", "tensorboard"))})  # fmt: skip


def test_plain_progress_is_at_most_one_line_per_tenth_of_the_run() -> None:
    run = board()
    shown = []
    for step in range(50, 2001, 50):
        run.observe("chief", True, f"INFO {format_step_line(step, 0.5, 1000.0, 0.1)}")
        run.observe("chief", True, status_line(RUNNING, step, 0.97 if step >= 100 else None))
        line = run.plain_update()
        if line:
            shown.append(line)
    assert len(shown) == 10
    assert shown[0].startswith(" 10% step 200/2000  loss 0.5000  accuracy 0.9700  1000 examples/sec")
    assert shown[-1].startswith("100% step 2000/2000")
    assert run.plain_update() is None


def test_pod_states_from_their_output_and_exits() -> None:
    run = board()
    run.observe("ps-0", False, "INFO trainer ps:0: ps:0 server listening on 127.0.0.1:2222")
    run.observe("sync-1", False, "INFO trainer worker:1: multi_worker_mirrored: 3 replica(s) in sync")
    run.observe("tensorboard-0", False, "TensorBoard 2.21.0 at http://localhost:6006/ (Press CTRL+C to quit)")
    run.observe("chief", True, "tfd-status: {not json")
    assert [p.state for p in run.pods.values()] == ["starting", "listening", "starting", "training", "listening"]
    run.observe("chief", True, format_step_line(10, 2.3, 500.0, 0.2))
    run.observe("chief", True, status_line(SUCCEEDED, 2000, 0.99))
    run.exited("chief", 0)
    run.exited("worker-0", 137, restarts=2)
    assert run.pods["chief"].state == "succeeded"
    assert (run.pods["worker-0"].state, run.pods["worker-0"].restarts) == ("exited 137", 2)


def test_the_live_view_draws_the_bar_and_a_line_per_pod() -> None:
    run = board()
    run.observe("chief", True, format_step_line(500, 0.25, 1500.0, 0.1))
    console = Console(record=True, width=120, color_system=None)
    console.print(run.renderable())
    text = console.export_text()
    assert "━" in text and "step 500/2000  loss 0.2500  1500 examples/sec" in text
    assert len([line for line in text.splitlines() if line.strip()]) == 1 + len(run.pods)


CHIEF_LINES = [  # what the trainer logs at each phase (trainer/roles.py, strategy.py), as a pod log has it
    "2026-11-25 04:54:51,850 INFO trainer chief:0: role chief:0, strategy parameter_server, run 6af3, storage /r "
    "(cluster from TF_CONFIG)",
    "2026-11-25 04:55:00,183 INFO trainer chief:0: waiting for worker:1 (127.0.0.1:40159)",
    "2026-11-25 04:55:02,431 INFO trainer chief:0: no checkpoint in /r/checkpoints, starting at step 0",
]


def test_each_pod_says_what_it_waits_for() -> None:
    run = board()
    phases = []
    for line in CHIEF_LINES:
        run.observe("chief", True, line)
        phases.append((run.pods["chief"].state, run.summary().split(" (")[0]))
    assert phases == [("importing TensorFlow", "importing TensorFlow"), ("waiting for peers", "waiting for peers"),
                      ("training", "training")]  # fmt: skip
    run.observe("ps-0", False, "INFO trainer ps:0: role ps:0, strategy parameter_server (cluster from TF_CONFIG)")
    assert run.pods["ps-0"].state == "importing TensorFlow"
    run.observe("ps-0", False, "INFO trainer ps:0: ps:0 server listening on 127.0.0.1:2222")
    assert run.pods["ps-0"].state == "listening"
    run.observe("ps-0", False, "WARNING trainer ps:0: SIGTERM received: stopping within 55s (--shutdown-grace-seconds)")
    assert run.pods["ps-0"].state == "shutting down"
    run.observe("chief", True, format_step_line(2000, 0.1, 900.0, 0.1))
    assert run.summary().startswith("step 2000/2000")
    run.observe("chief", True, status_line(SUCCEEDED, 2000, 0.99))
    assert run.pods["chief"].state == "succeeded, shutting down"
    assert run.summary().startswith("shutting down (") and "step 2000/2000" in run.summary()
    run.exited("chief", 0)
    assert run.pods["chief"].state == "succeeded" and run.summary().startswith("step 2000/2000")


def test_plain_output_names_each_wait_once_in_order_however_often_it_is_polled() -> None:
    for polls in (0, 1, 2):  # between two lines: however fast the pods write, nothing is lost or repeated
        run = board()
        shown = [run.plain_update()]
        for line in [*CHIEF_LINES, format_step_line(2000, 0.1, 900.0, 0.1), status_line(SUCCEEDED, 2000, 0.99)]:
            run.observe("chief", True, line)
            shown += [run.plain_update() for _ in range(polls)]
        shown.append(run.plain_update())
        lines = "\n".join(line for line in shown if line).splitlines()
        assert [line.strip().split("  ")[0] for line in lines] == [
            "importing TensorFlow", "waiting for peers", "100% step 2000/2000", "shutting down"], lines


@pytest.mark.parametrize("width", [100, 60])
def test_every_line_of_the_live_view_fits_the_terminal(width: int) -> None:
    run = Board(2000, {name: PodState(name, role) for name, role in (
        ("local-tf-distributed-chief", "chief"), ("local-tf-distributed-tensorboard-0", "tensorboard"),
        ("local-tf-distributed-worker-1", "worker"))})  # fmt: skip
    for step in (1200, 1234):  # two step lines: a rate, so an ETA
        run.observe("local-tf-distributed-chief", True, format_step_line(step, 0.123456, 123456.0, 0.1))
    run.observe("local-tf-distributed-chief", True, status_line(RUNNING, 1234, 0.987654))
    run.observe("local-tf-distributed-worker-1", False, "INFO trainer worker:1: worker:1 finished its steps; waiting "
                "for the chief to report success, then idling")  # fmt: skip
    run.exited("local-tf-distributed-tensorboard-0", 137, restarts=12)
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    console.print(run.renderable(width))
    lines = console.export_text().rstrip("\n").splitlines()
    assert len(lines) == 1 + len(run.pods) and max(len(line) for line in lines) <= width, lines
    assert "step 1234/2000  loss 0.1235" in lines[0] and "waiting for the chief" in lines[3]
    assert ("ETA" in lines[0]) == (width >= 100)  # what does not fit is left out, least important first
