"""Error messages: one line from tfchart (no stray helm log line), and hints that are valid commands."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from tests.chartlib import REPO, helm_path
from tfchart.cli import app
from tfchart.cli.run import status
from tfchart.cluster import logs
from tfchart.errors import HelmError, TfchartError
from tfchart.helm.runner import Helm
from tfdcontract import POD_INDEX_LABEL


def test_a_failing_helm_command_is_reported_once(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(HelmError) as failure:
        Helm(str(helm_path("4")))(["template", "x", "/nonexistent/chart"])
    captured = capfd.readouterr()
    assert "command failed" not in captured.err + captured.out
    assert "/nonexistent/chart" in failure.value.message


def test_the_cli_prints_one_error_line_for_a_helm_failure(tmp_path: Path) -> None:
    chart = tmp_path / "broken"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: broken\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("{}\n")
    (chart / "values.schema.json").write_text("{}\n")
    (chart / "templates" / "x.yaml").write_text('{{ fail "the chart refuses" }}\n')
    result = subprocess.run(
        [sys.executable, "-m", "tfchart", "--helm", str(helm_path("4")), "template", "x", "--chart", str(chart)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "command failed" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        line for line in result.stderr.splitlines() if "the chart refuses" in line
    ]
    assert "Traceback" not in result.stderr


def command_in(hint: str) -> list[str]:
    """The `tfchart ...` command quoted in a hint."""
    quoted = [part for part in hint.split("`")[1::2] if part.startswith("tfchart ")]
    assert quoted, hint
    return shlex.split(quoted[0])[1:]


def assert_parses(args: list[str]) -> None:
    """The command line is valid for tfchart's parser (options, arguments, choices)."""
    name, *rest = args
    command = app.main_group.get_command(click.Context(app.main_group), name)
    assert command is not None, name
    command.make_context(name, [arg.replace("RELEASE", "mnist") for arg in rest])


def pod(name: str, index: int) -> Any:
    labels = {POD_INDEX_LABEL: str(index)}
    return {"metadata": {"name": name, "labels": labels, "namespace": "team-a"}}


@pytest.mark.parametrize(
    "make",
    [
        lambda: logs.check_arguments("worker", -1, None),
        lambda: logs.pick_pod([pod("mnist-w-0", 0), pod("mnist-w-1", 1)], "mnist", "team-a", "worker", 5),
    ],
    ids=["negative-index", "index-out-of-range"],
)
def test_logs_hints_are_valid_tfchart_commands(make: Any) -> None:
    with pytest.raises(TfchartError) as failure:
        make()
    assert_parses(command_in(failure.value.hint))


def test_kubeconfig_context_hint_names_the_real_flag() -> None:
    from tfchart.cluster.kubeconfig import config_error

    error = config_error(ValueError("context 'nope' not found"), "/tmp/kubeconfig", "nope")
    assert "--kube-context" in error.hint
    flag = error.hint.split("pass one of them with ")[1].split()[0]
    assert any(flag in option.opts for option in status.params if isinstance(option, click.Option))


def test_a_long_set_argument_is_shortened_in_messages() -> None:
    argument = ",".join(f"k{i}=[" for i in range(2000)) + ",x[a]=1"
    result = subprocess.run([sys.executable, "-m", "tfchart", "validate", "--set", argument], cwd=REPO,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) < 400, result.stdout  # validate's report
    assert "--set k0=[,k1=[" in result.stdout


@pytest.mark.parametrize("plugin, limit, said", [
    ("import time; time.sleep(600)", "2", "did not answer within 2 s"),
    # a generous limit where the plugin answers: a busy machine must not turn its failure into a timeout
    ("import sys; sys.stderr.write('token expired: run login\\n'); sys.exit(1)", "60",
     "exec: process returned 1. token expired: run login"),
])  # fmt: skip
def test_a_kubeconfig_exec_plugin_that_hangs_or_fails_is_one_error(tmp_path: Path, plugin: str, limit: str,
                                                                   said: str) -> None:  # fmt: skip
    """A credential plugin is given a time limit, and its failure ends the command: not a hang, not `ERROR:root:`
    and a request without credentials."""
    kubeconfig = tmp_path / "kubeconfig"
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                          "args": ["-c", plugin], "interactiveMode": "Never"}}  # fmt: skip
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": exec_user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    env = {**os.environ, "TFCHART_EXEC_PLUGIN_TIMEOUT": limit}
    argv = [sys.executable, "-m", "tfchart", "status", "mnist", "-n", "ml", "--kubeconfig", str(kubeconfig)]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert result.returncode == 69, result.stderr  # the cluster could not be asked
    assert "the kubeconfig's credential plugin failed" in result.stderr and said in result.stderr, result.stderr
    assert "ERROR:root" not in result.stderr and "Traceback" not in result.stderr
