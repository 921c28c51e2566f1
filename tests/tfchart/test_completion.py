"""`tfchart completion`: each shell's script is click's, and bash takes it and completes with it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.chartlib import REPO
from tests.tfchart.test_cli import tfchart
from tfchart.cli.app import SHELLS


@pytest.mark.parametrize("shell", SHELLS)
def test_each_script_calls_back_tfchart(shell: str) -> None:
    result = tfchart("completion", shell)
    assert result.returncode == 0 and result.stderr == ""
    assert "_TFCHART_COMPLETE" in result.stdout and f"{shell}_complete" in result.stdout


def test_bash_sources_the_script_and_completes_commands(tmp_path: os.PathLike[str]) -> None:
    launcher = os.path.join(tmp_path, "tfchart")  # the `tfchart` the script calls back, as pip installs it
    with open(launcher, "w", encoding="utf-8") as file:
        file.write(f'#!/bin/sh\nexec {sys.executable} -m tfchart "$@"\n')
    os.chmod(launcher, 0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    script = ("source <(tfchart completion bash) && complete -p tfchart && "
              "COMP_WORDS=(tfchart wa) && COMP_CWORD=1 && _tfchart_completion tfchart && "
              "echo \"${COMPREPLY[@]}\"")  # fmt: skip
    result = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
                            check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    registered, completed = result.stdout.splitlines()
    assert registered == "complete -o nosort -F _tfchart_completion tfchart"
    assert completed == "wait"


def test_an_unknown_shell_names_the_choices() -> None:
    result = tfchart("completion", "powershell")
    assert result.returncode == 2
    assert "'powershell' is not one of 'bash', 'zsh', 'fish'" in result.stderr
