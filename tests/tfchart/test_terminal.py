"""The calm terminal of `tfchart local` (tfchart/local/terminal.py), line by line from the pods' output."""

from __future__ import annotations

from rich.console import Console

from tfchart.local.terminal import Board
from tfdcontract import RUNNING, SUCCEEDED, Status, format_status_line, format_step_line


def status_line(state: str, step: int, accuracy: float | None) -> str:
    return format_status_line(Status(state, "parameter_server", step, 2000, 0.1, accuracy, 900.0, None, "t0", "t1",
                                     "training"))  # fmt: skip


def board() -> Board:
    run = Board(train_steps=2000)
    for name, role in (("chief", "chief"), ("ps-0", "ps"), ("worker-0", "worker"), ("sync-1", "worker"),
                       ("tensorboard-0", "tensorboard")):  # fmt: skip
        run.add(name, role)
    return run


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
    assert run.pods["worker-0"].line() == "worker-0: exited 137, restarted 2"


def test_the_live_view_draws_the_bar_and_a_line_per_pod() -> None:
    run = board()
    run.observe("chief", True, format_step_line(500, 0.25, 1500.0, 0.1))
    console = Console(record=True, width=120, color_system=None)
    console.print(run.renderable())
    text = console.export_text()
    assert "━" in text and "step 500/2000  loss 0.2500  1500 examples/sec" in text
    assert len([line for line in text.splitlines() if line.strip()]) == 1 + len(run.pods)
