"""The CLI boundary: exit codes, one-line errors without tracebacks (every command's --help: test_vocabulary)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chartlib import CHART, REPO, helm_path


def tfchart(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfchart", *args], cwd=REPO, capture_output=True, text=True, timeout=120, env=env
    )


def test_build_dry_run_prints_the_exact_commands_for_both_images() -> None:
    result = tfchart("build", "--all", "--dry-run", "--engine", "docker")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("docker build")]
    assert len(lines) == 2
    assert f"-f {REPO / 'Dockerfile.cpu'} -t ghcr.io/tf-distributed/trainer:0.1.0 " in lines[0]
    assert f"-f {REPO / 'Dockerfile.gpu'} -t ghcr.io/tf-distributed/trainer:0.1.0-gpu " in lines[1]


def test_build_without_an_engine_exits_1_with_a_clear_message(tmp_path: Path) -> None:
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    fake_docker = tmp_path / "docker"
    fake_docker.write_text(
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\nexit 1\n"
    )
    fake_docker.chmod(0o755)
    result = tfchart("build", "--cpu", "--engine", "docker", env=env)
    assert result.returncode == 1
    assert "no Docker engine answers" in result.stderr and "hint:" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message", "stream"),
    [  # validate's report of the values' problems is its output (stdout); an error of the invocation is stderr's
        (["validate", "--set", "worker.replicas=lots"], 1, "worker.replicas", "stdout"),
        (["validate", "-f", "missing.yaml"], 1, "missing.yaml: no such file or directory", "stderr"),
        (["validate", "--bogus"], 2, "No such option", "stderr"),
        (["status", "mnist", "--kubeconfig", "/nonexistent"], 69, "cannot load the kubeconfig", "stderr"),
        (["logs", "mnist", "--role", "master"], 2, "Invalid value for '--role'", "stderr"),
        (["upgrade", "mnist", "--set", "ps.replicas=0"], 1, "ps.replicas", "stderr"),
        (["validate", "--chart", "/tmp"], 2, "no chart at /tmp", "stderr"),
        (["validate", "--chart", "no/such-chart-dir", "--version", "1.0"], 1, "no/such-chart-dir", "stderr"),
        (["--helm", "/no/helm", "validate"], 2, "helm binary not found: /no/helm", "stderr"),
        (["validate", "--helm", "/no/helm"], 2, "helm binary not found: /no/helm", "stderr"),
        (["template", "charts/tf-distributed"], 2, "is a chart, not a release name", "stderr"),
        (["validate", "values/gpu.yaml"], 2, "is a values file, not a release name or a chart", "stderr"),
        (["local", "--timeout", "ten"], 2, "not a duration such as 90s, 10m or 1h30m", "stderr"),
    ],
)
def test_errors_are_one_clear_message_with_the_right_exit_code(
    args: list[str], code: int, message: str, stream: str, tmp_path: Path
) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no kubeconfig anywhere
    result = tfchart(*args, env=env)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in getattr(result, stream)
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = tfchart(
        "--debug",
        "status",
        "mnist",
        "--kubeconfig",
        "/nonexistent",
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 69  # the cluster could not be asked (docs/cli.md, "Exit codes")
    assert "Traceback" in result.stderr


def test_a_packaged_chart_is_checked_as_its_directory_is(tmp_path: Path) -> None:
    """A .tgz is unpacked once per command, so --policy is checked also where the chart's rules refuse the values (on
    a render without its rules), as for the directory."""
    subprocess.run([str(helm_path("4")), "package", str(CHART), "-d", str(tmp_path)], check=True, capture_output=True)
    rule = "tests/fixtures/policy/rules/maxGpus.perPod"
    result = tfchart("validate", "--chart", str(next(tmp_path.glob("*.tgz"))), "-f", f"{rule}/fail.yaml", "--set",
                     "ps.replicas=0", "--policy", f"{rule}/policy.yaml", "-o", "json")  # fmt: skip
    report = json.loads(result.stdout)
    assert result.returncode == 1 and [problem["kind"] for problem in report["problems"]] == ["rule"], result.stderr
    assert report["policy"]["checked"] is True and report["policy"]["violations"], report["warnings"]
