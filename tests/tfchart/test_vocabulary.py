"""tfchart speaks helm's and kubectl's language: every flag spelled as theirs means what it means there (checked
on the click parameters of every command), tfchart's own options work after the command too, every command that
reports answers `-o json` and `-o yaml` with the same data, timeouts take durations, and output piped into a file
or a CI log is never wrapped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from tests.chartlib import CHART, REPO
from tests.kubeapi import KubeServer, kube_server
from tests.tfchart.test_namespace import NS, RELEASE, Tfchart, add_release, cluster_calls, tfchart  # noqa: F401 (a fixture)
from tfchart.cli.app import Duration, main, main_group

# command: its human format
REPORTING = {"validate": "text", "images": "text", "status": "table", "preflight": "table", "list": "table",
             "suspend": "text", "resume": "text"}  # fmt: skip
TIMEOUTS = {"install", "upgrade", "uninstall", "local", "wait", "suspend", "resume", "stop"}  # each with --timeout


def command(name: str) -> click.Command:
    with click.Context(main_group) as ctx:
        found = main_group.get_command(ctx, name)
    assert found is not None
    return found


def option(cmd: click.Command, flag: str) -> click.Option | None:
    return next((p for p in cmd.params if isinstance(p, click.Option) and flag in p.opts), None)


def test_every_command_is_listed_for_this_table() -> None:
    assert set(main_group.commands) >= {"validate", "template", "images", "install", "upgrade", "uninstall",
                                        "preflight", "status", "stop", "logs", "local", "build", "suspend", "resume"}


@pytest.mark.parametrize("name", sorted(main_group.commands))
def test_each_flag_spelled_as_helm_or_kubectl_means_the_same(name: str) -> None:
    cmd = command(name)
    for flag in ("-n", "--namespace"):  # helm's and kubectl's namespace: one value, both spellings
        found = option(cmd, flag)
        if found is not None:
            assert found.opts == ["-n", "--namespace"] and not found.multiple and found.type == click.STRING, name
    if (found := option(cmd, "-f")) is not None:  # helm's values files; kubectl logs -f follows
        assert found.opts == (["-f", "--follow"] if name == "logs" else ["-f", "--values"]), name
        assert found.multiple == (name != "logs") and found.is_flag == (name == "logs"), name
    for flag in ("--set", "--set-string", "--set-json", "--set-file"):
        if (found := option(cmd, flag)) is not None:
            assert found.multiple, (name, flag)
    if (found := option(cmd, "--kube-context")) is not None:
        assert found.type == click.STRING and found.default is None and not found.multiple, name
        assert option(cmd, "--kubeconfig") is not None, name
    assert option(cmd, "--context") is None or option(cmd, "--context").hidden, f"{name}: --context is kubectl's"  # type: ignore[union-attr]
    if (found := option(cmd, "-o")) is not None:
        assert found.opts == ["-o", "--output"] and isinstance(found.type, click.Choice), name
        assert {"json", "yaml"} <= set(found.type.choices) and found.default not in ("json", "yaml"), name
    if name in REPORTING:  # every command that reports: its human format by default, json and yaml on demand
        found = option(cmd, "-o")
        assert found is not None and found.default == REPORTING[name], name
    if (found := option(cmd, "--timeout")) is not None:  # one type reads them all (tests/tfchart/test_wait.py)
        assert isinstance(found.type, Duration) and found.default is None, name
    if name in TIMEOUTS:
        assert option(cmd, "--timeout") is not None, name
    for flag in ("--wait", "--install", "--reuse-values", "--keep-history", "--create-namespace", "--atomic"):
        if (found := option(cmd, flag)) is not None:
            assert found.is_flag and not found.multiple, (name, flag)
    if (found := option(cmd, "--version")) is not None:  # helm's --version: the chart's version
        assert found.name == "chart_version" and found.type == click.STRING, name
    for flag in ("--debug", "--helm"):  # tfchart's own options, after the command too
        assert option(cmd, flag) is not None, (name, flag)


def test_helm_verbs_have_helms_flags() -> None:
    for name, flags in {
        "install": ["--wait", "--timeout", "--atomic", "--dry-run", "--create-namespace"],
        "upgrade": ["--install", "-i", "--reuse-values", "--reset-then-reuse-values", "--wait", "--timeout",
                    "--atomic", "--dry-run", "--create-namespace"],
        "uninstall": ["--keep-history", "--wait", "--timeout"],
    }.items():  # fmt: skip
        cmd = command(name)
        assert [flag for flag in flags if option(cmd, flag) is None] == [], name


@pytest.mark.parametrize("name", sorted(main_group.commands))
def test_global_options_are_accepted_after_the_command(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, name, "--debug", "--helm", "helm", "--help")
    assert code == 0 and f"Usage: tfchart {name}" in out, err


def test_debug_after_the_command_shows_the_helm_commands() -> None:
    result = subprocess.run([sys.executable, "-m", "tfchart", "validate", "--debug"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "helm: " in result.stderr and " template release-name " in result.stderr


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exit_info:
        code = int(exit_info.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_validate_and_images_answer_json_and_yaml_with_the_same_data(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parse = json.loads if output == "json" else yaml.safe_load
    for args, valid in ((["validate", "-f", "values/cpu.yaml"], True), (["validate", "--set", "ps.replicas=0"], False)):
        code, out, err = run_main(capsys, *args, "-o", output)
        report = parse(out)
        assert code == (0 if valid else 1), err
        assert report["valid"] is valid and report == json.loads(run_main(capsys, *args, "-o", "json")[1])
    code, out, err = run_main(capsys, "images", "-f", "values/cpu.yaml", "-o", output)
    assert code == 0, err
    images = parse(out)
    assert images and all({"image", "registry", "repository", "tag", "digest", "components"} <= set(i) for i in images)


def test_template_is_yaml_and_takes_the_chart_as_helm_does(capsys: pytest.CaptureFixture[str]) -> None:
    code, positional, err = run_main(capsys, "template", "mnist", "charts/tf-distributed", "-f", "values/cpu.yaml")
    assert code == 0, err
    by_option = run_main(capsys, "template", "mnist", "--chart", "charts/tf-distributed", "-f", "values/cpu.yaml")
    assert by_option[1] == positional
    assert [doc["kind"] for doc in yaml.safe_load_all(positional) if doc]
    code, _, err = run_main(capsys, "template", "mnist", "charts/tf-distributed", "--chart", "values")
    assert code == 2 and "the CHART argument 'charts/tf-distributed' and --chart 'values' name different" in err
    code, _, err = run_main(capsys, "template", "charts/tf-distributed")  # helm template's habit needs a NAME here
    assert code == 2 and "NAME 'charts/tf-distributed' is a chart, not a release name: give the name first" in err
    lone = run_main(capsys, "images", "charts/tf-distributed", "-f", "values/cpu.yaml")  # NAME has a default here
    assert lone[0] == 0 and lone[1] == run_main(capsys, "images", "-f", "values/cpu.yaml")[1], lone[2]


@pytest.fixture
def cluster() -> KubeServer:
    with kube_server() as running:
        add_release(running)
        yield running  # type: ignore[misc]


STATUS_KEYS = {"release", "namespace", "training", "chief", "evaluator", "stateful_sets", "pods", "endpoints",
               "serving", "job_progress", "notes", "warnings", "run"}  # fmt: skip
PREFLIGHT_KEYS = {"release", "namespace", "passed", "counts", "findings"}


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_status_and_preflight_answer_their_documented_shape(
    output: str, cluster: KubeServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    parse = json.loads if output == "json" else yaml.safe_load
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig(NS))]
    code, out, err = run_main(capsys, "status", RELEASE, "-o", output, *kubeconfig)
    assert code == 0, err
    status = parse(out)
    assert set(status) == STATUS_KEYS and status["release"] == RELEASE and status["namespace"] == NS
    assert status["training"]["state"] in ("Running", "Succeeded", "Failed", "Pending", "Unknown")
    assert {"role", "name", "phase", "ready", "restarts", "status"} <= set(status["pods"][0])

    code, out, err = run_main(capsys, "preflight", RELEASE, "-f", "values/cpu.yaml", "--skip-image-check", "-o", output,
                              *kubeconfig)  # fmt: skip
    report = parse(out)
    assert set(report) == PREFLIGHT_KEYS and (report["release"], report["namespace"]) == (RELEASE, NS)
    assert code == (0 if report["passed"] else 1), err
    assert set(report["counts"]) == {"ok", "warn", "fail"} and report["findings"]
    assert all(set(f) == {"check", "severity", "message", "hint"} for f in report["findings"])
    assert sum(report["counts"].values()) == len(report["findings"])


THREE_PROBLEMS = """\
worker:
  replicas: -1
ps:
  replicas: many
training:
  strategy: mirror
"""


@pytest.mark.parametrize("columns", ["200", "40"])
def test_a_piped_validate_prints_one_line_per_problem_whatever_the_width(columns: str, tmp_path: Path) -> None:
    values = tmp_path / "team.yaml"
    values.write_text(THREE_PROBLEMS)
    env = {**os.environ, "COLUMNS": columns, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "tfchart", "validate", "-f", str(values)]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)  # stdout: a pipe
    assert result.returncode == 1 and result.stderr == "", result.stderr
    lines = result.stdout.splitlines()
    problems = [line for line in lines if line.startswith(f"  {values}:")]
    fixes = [line for line in lines if line.startswith("      fix: ")]
    notes = [line for line in lines if line.startswith(("  helm checks the values against the chart's schema",
                                                         "  the chart's rules ran with"))]  # fmt: skip
    assert lines[0] == "✗ 3 problems in values"
    assert len(problems) == 3, result.stdout
    assert len(lines) == 1 + len(problems) + len(fixes) + len(notes), f"a line was wrapped:\n{result.stdout}"
    assert {line.split()[1] for line in problems} == {"worker.replicas:", "ps.replicas:", "training.strategy:"}


def test_upgrade_install_of_a_release_helm_does_not_hold_installs_it(tfchart: Tfchart) -> None:  # noqa: F811
    with kube_server() as server:
        run = tfchart(server.kubeconfig(NS), "upgrade", RELEASE, "--install", "--create-namespace",
                      "--skip-image-check", "--set", "worker.replicas=3")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert cluster_calls(run) == [
        ["history", RELEASE, "--namespace", NS, "--max", "1", "--output", "json"],
        ["upgrade", RELEASE, str(CHART), "--namespace", NS, "--create-namespace", "--install",
         "--set", "worker.replicas=3"],
    ]  # fmt: skip


def test_upgrade_reuse_values_checks_the_deployed_values_under_the_new_ones(tfchart: Tfchart) -> None:  # noqa: F811
    """Deployed with the mirrored strategy: checked against chart defaults (parameter_server), the chief Job's
    template would change and the upgrade be refused; over the deployed values it is a plain upgrade."""
    with kube_server() as server:
        add_release(server)
        deployed = {"training": {"strategy": "mirrored"}, "ps": {"replicas": 0}, "worker": {"replicas": 0}}
        history = json.dumps([{"revision": 1, "status": "deployed"}])
        run = tfchart(server.kubeconfig(NS), "upgrade", RELEASE, "--install", "--reuse-values",
                      "--skip-image-check", "--set", "serving.replicas=2",
                      deployed=["--set", "training.strategy=mirrored,ps.replicas=0,worker.replicas=0"],
                      helm_env={"HISTORY": history, "DEPLOYED_VALUES": json.dumps(deployed)})  # fmt: skip
    assert run.returncode == 0, run.stderr
    calls = cluster_calls(run)
    assert calls[:4] == [
        ["history", RELEASE, "--namespace", NS, "--max", "1", "--output", "json"],
        ["get", "values", RELEASE, "--namespace", NS, "--all", "--output", "yaml"],
        ["history", RELEASE, "--namespace", NS, "--output", "json"],
        ["get", "manifest", RELEASE, "--namespace", NS, "--revision", "1"],
    ]
    assert calls[4] == ["upgrade", RELEASE, str(CHART), "--namespace", NS, "--install", "--reuse-values",
                        "--set", "serving.replicas=2"]  # fmt: skip


def test_build_takes_its_directory_as_source_and_context_once_with_a_warning() -> None:
    """kubectl's --context names a kube context: build's directory is --source; the old spelling still works."""
    def build(*flags: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tfchart", "build", "--cpu", "--dry-run", "--engine", "docker", *flags]
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)

    new, old = build("--source", str(REPO)), build("--context", str(REPO))
    assert new.returncode == old.returncode == 0, new.stderr + old.stderr
    assert new.stdout == old.stdout and "docker build" in new.stdout
    assert "deprecated" not in new.stderr
    assert old.stderr.count("warning: build --context is deprecated") == 1 and "use --source DIR" in old.stderr
