"""The small things of issue 37: "did you mean" for a mistyped command, `tfchart --help` summaries whole, every option
described, `install --dry-run` saying what it skips, `build --dry-run` on the engine that works, the local run's
summary and Serving hint, and a small loss that is not shown as 0.0000."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from tests.chartlib import REPO
from tests.kubeapi import kube_server
from tfchart.cli.app import main, main_group
from tfchart.local.session import reported, serving_notes
from tfchart.local.terminal import Board, PodState
from tfdcontract import format_step_line


def tfchart(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfchart", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=120)  # fmt: skip


def test_a_mistyped_command_gets_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["instal", "mnist"])
    assert exit_info.value.code == 2
    assert "No such command 'instal'. Did you mean 'install'?" in capsys.readouterr().err


@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_help_lists_every_summary_whole(columns: str) -> None:
    shown = tfchart("--help", env={"COLUMNS": columns}).stdout.split("Commands:", 1)[1]
    entries = " ".join(shown.split()).split(" ")
    assert "..." not in shown and "…" not in shown, shown
    summaries = " ".join(shown.split())
    assert summaries.count("`") % 2 == 0 and summaries.count("(") == summaries.count(")"), shown
    assert set(main_group.commands) <= set(entries), shown


def test_every_option_of_every_command_says_what_it_does() -> None:
    context = click.Context(main_group)
    missing = [f"{name} {'/'.join(param.opts)}" for name in main_group.commands
               for param in main_group.get_command(context, name).params  # type: ignore[union-attr]
               if isinstance(param, click.Option) and not param.hidden and not param.help]  # fmt: skip
    assert missing == []


def test_install_client_dry_run_says_it_skips_the_preflight_and_the_image_check() -> None:
    with kube_server() as server:
        run = tfchart("install", "mnist", "--dry-run", "--kubeconfig", str(server.kubeconfig("team-a")))
    assert run.returncode == 0, run.stderr
    assert "note: --dry-run=client asks neither the cluster nor a registry: no preflight, no image check" in run.stderr


def test_build_dry_run_takes_podman_where_docker_has_no_engine(tmp_path: Path) -> None:
    """The real docker CLI (a stand-in that answers as it does where none is installed), whose engine does not answer
    (DOCKER_HOST at a socket nobody listens on), beside podman: the commands printed are podman's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = shutil.which("docker")
    if docker:
        (bin_dir / "docker").symlink_to(docker)
    else:
        (bin_dir / "docker").write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at "
                                        "unix:///nonexistent.sock. Is the docker daemon running?' >&2\nexit 1\n")
        (bin_dir / "docker").chmod(0o755)
    podman = shutil.which("podman")
    assert podman, "podman is among the tools `make setup` installs"
    (bin_dir / "podman").symlink_to(podman)
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}", "DOCKER_HOST": f"unix://{tmp_path}/nobody.sock"}
    run = tfchart("build", "--cpu", "--dry-run", env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("podman build "), run.stdout


def test_the_summary_says_what_was_reported_and_never_none() -> None:
    assert reported({"step": 300, "accuracy": None, "examples_per_sec": None}) == ": step 300"
    assert reported({"step": 300, "accuracy": 0.97, "average_examples_per_sec": 1234.5}) == (
        ": step 300, accuracy 0.97, 1234.5 examples/sec on average")
    assert reported({"step": 5, "examples_per_sec": 99.0}) == ": step 5, 99.0 examples/sec (the last interval)"
    assert reported({}) == ""


def test_the_serving_hint_names_the_engine_the_run_used(tmp_path: Path) -> None:
    values = yaml.safe_load((REPO / "charts" / "tf-distributed" / "values.yaml").read_text(encoding="utf-8"))
    values["serving"]["enabled"] = True
    podman = "\n".join(serving_notes(values, tmp_path, engine="podman"))
    assert "on a machine with Podman:" in podman and "  podman run --rm -p 8501:8501" in podman
    assert "docker run" not in podman and "Docker" not in podman
    assert "  docker run --rm" in "\n".join(serving_notes(values, tmp_path))  # a process run: Docker's, as before


def test_a_small_loss_is_not_shown_as_zero() -> None:
    """The chief's step line (tfdcontract) and the progress bar: 4 decimals, but a loss that would read 0.0000 in e
    notation."""
    assert "loss = 1.234e-05 (" in format_step_line(1000, 0.00001234, 1000.0, 0.1)
    run = Board(train_steps=2000, pods={"chief": PodState("chief", "chief")})
    run.observe("chief", True, f"INFO {format_step_line(1000, 0.00001234, 1000.0, 0.1)}")
    assert "loss 1.234e-05" in run.summary(), run.summary()
    run.observe("chief", True, f"INFO {format_step_line(1100, 0.25, 1000.0, 0.1)}")
    assert "loss 0.2500" in run.summary(), run.summary()
