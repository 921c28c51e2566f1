"""Exit codes mean one thing (docs/cli.md, "Exit codes"): every command a CI job scripts exits 69 when the cluster
could not be asked (no kubeconfig, nothing listening, credentials refused), never 1, which says the answer was no
(a failed run, invalid values, a refusal). The real CLI in this process, against no cluster, a closed loopback port
and the tests' fake API server (tests/kubeapi.py); the table in docs/cli.md lists every code tfchart exits with."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import kubeapi as kf
from tests.chartlib import REPO
from tests.kubeapi import KubeServer, kube_server
from tests.kubeapi_rbac import service_account
from tests.tfchart.test_vocabulary import run_main
from tfchart.cluster.suspend import NO_RUN_EXIT, TIMED_OUT_EXIT
from tfchart.errors import ClusterUnavailable, TfchartError, UsageError

CANNOT_ASK = ClusterUnavailable.exit_code
NS = "team-a"
#: Every command a CI job would script that asks the cluster, with what it needs to get that far (no registry is
#: asked: --skip-image-check).
SCRIPTED = {
    "wait": ["wait", "mnist"],
    "status": ["status", "mnist", "-o", "json"],
    "list": ["list", "-o", "json"],
    "preflight": ["preflight", "mnist"],
    "install": ["install", "mnist", "--skip-image-check"],
    "install --skip-preflight": ["install", "mnist", "--skip-image-check", "--skip-preflight"],
    "upgrade": ["upgrade", "mnist", "--skip-image-check"],
    "upgrade --install": ["upgrade", "mnist", "--install", "--skip-image-check"],
    "suspend": ["suspend", "mnist"],
    "resume": ["resume", "mnist"],
    "stop": ["stop", "mnist"],
    "logs": ["logs", "mnist"],
    "uninstall": ["uninstall", "mnist"],
}


def tfchart(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code, _, err = run_main(capsys, *args)
    return code, err


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No kubeconfig anywhere: KUBECONFIG unset, an empty HOME, not in a pod."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connecting is refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def kubeconfig(folder: Path, server: str, token: str = "t0ken") -> Path:
    path = folder / f"kubeconfig-{token}"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "team",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "team", "context": {"cluster": "c", "user": "u", "namespace": NS}}],
    }))  # fmt: skip
    return path


@pytest.mark.parametrize("command", SCRIPTED)
def test_no_kubeconfig_is_not_a_failed_run(command: str, nowhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = tfchart(capsys, *SCRIPTED[command])
    assert code == CANNOT_ASK, err
    assert "no Kubernetes configuration" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["wait", "status", "list", "install", "upgrade", "suspend", "resume"])
def test_a_kubeconfig_that_names_a_missing_file(command: str, nowhere: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(nowhere / "missing" / "config"))
    code, err = tfchart(capsys, *SCRIPTED[command])
    assert code == CANNOT_ASK, err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", SCRIPTED)
def test_an_unreachable_api_server(command: str, nowhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = kubeconfig(nowhere, f"http://127.0.0.1:{closed_port()}")
    code, err = tfchart(capsys, *SCRIPTED[command], "--kubeconfig", str(config))
    assert code == CANNOT_ASK, err
    assert ("cannot reach the Kubernetes API server" in err or "helm could not reach the cluster" in err), err


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as running:
        yield running


@pytest.mark.parametrize("command", SCRIPTED)
def test_credentials_refused(command: str, server: KubeServer, nowhere: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    server.authenticate({})  # the kubeconfig's token is no longer known: 401 Unauthorized
    config = kubeconfig(nowhere, server.url, token="expired")
    code, err = tfchart(capsys, *SCRIPTED[command], "--kubeconfig", str(config))
    assert code == CANNOT_ASK, err


@pytest.mark.parametrize("command", ["wait", "status", "list", "suspend", "resume"])
def test_rbac_refusing_the_read(command: str, server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.authenticate({"reader": service_account(NS, "nobody")})  # a user no Role binds: 403 on every call
    config = kubeconfig(server.folder, server.url, token="reader")
    code, err = tfchart(capsys, *SCRIPTED[command], "--kubeconfig", str(config))
    assert code == CANNOT_ASK and "forbidden" in err, err


def test_answers_keep_their_codes(server: KubeServer, capsys: pytest.CaptureFixture[str]) -> None:
    """The cluster answered: no such release (wait 3, the others 1), a failed run (wait 1)."""
    config = str(server.kubeconfig(NS))
    assert tfchart(capsys, "wait", "mnist", "--kubeconfig", config)[0] == NO_RUN_EXIT
    for command in ("status", "suspend", "resume"):
        assert tfchart(capsys, *SCRIPTED[command], "--kubeconfig", config)[0] == 1, command
    assert tfchart(capsys, "list", "--kubeconfig", config)[0] == 0
    server.add(kf.job(kf.manifest(kf.rendered(namespace=NS), "Job", "chief"), "failed"))
    assert tfchart(capsys, "wait", "mnist", "--kubeconfig", config)[0] == 1


def exit_codes_of(package: Path) -> set[int]:
    """Every exit code tfchart's code names: an error class's exit_code, a *_EXIT constant, a sys.exit(N)."""
    codes = {1, 2}
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        codes |= {int(n) for n in re.findall(r"(?:(?<![.\w])exit_code =|_EXIT =|sys\.exit\()\s*(\d+)", text)}
    return codes


def test_docs_table_lists_every_code() -> None:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(n) for n in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    assert exit_codes_of(REPO / "tfchart") - {0} <= documented
    assert {CANNOT_ASK, NO_RUN_EXIT, TIMED_OUT_EXIT, UsageError.exit_code, TfchartError.exit_code} <= documented
