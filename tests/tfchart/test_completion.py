"""`tfchart completion`: each shell's script is click's, and bash takes it and completes with it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.chartlib import REPO
from tests.tfchart.test_vocabulary import run_main
from tfchart.cli.app import SHELLS


@pytest.mark.parametrize("shell", SHELLS)
def test_each_script_calls_back_tfchart(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "completion", shell)
    assert code == 0 and err == ""
    assert "_TFCHART_COMPLETE" in out and f"{shell}_complete" in out


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


def test_an_unknown_shell_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys, "completion", "powershell")
    assert code == 2 and "'powershell' is not one of 'bash', 'zsh', 'fish'" in err
