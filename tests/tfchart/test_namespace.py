"""Every command without -n acts in the kubeconfig context's namespace: helm's --namespace and every API call.

The real CLI runs (in this process) with a kubeconfig whose current context's namespace is `team-a`
(not `default`). Its API server is the fake on the loopback (tests/kubeapi.py), so the kubeconfig
loading, URL building and deserialisation of the real client all run, and every request (DELETE
too) is recorded. helm is the real binary for `version` and `template` (and `get manifest`, answered
by a real `helm template` of the deployed values); the calls that need a cluster (install, upgrade,
uninstall) are recorded by a wrapper given with --helm.

The same server, answering like a proxy instead (an HTML login page, an empty body), checks that
such an answer is one line naming the URL, never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import kubeapi as kf
from tests.chartlib import CHART, REPO, helm_path
from tests.kubeapi import Call, KubeServer, kube_server

NS = "team-a"
RELEASE = "mnist"
CLAIM = "mnist-tf-distributed-data"


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as running:
        yield running


def deletes(server: KubeServer) -> list[Call]:
    return [call for call in server.calls if call.verb == "delete"]


HELM_WRAPPER = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
real = {real!r}
if args[:1] in (["version"], ["template"]):
    os.execv(real, [real, *args])
if args[:1] == ["history"]:  # HISTORY: helm's JSON answer; unset: no such release
    if "HISTORY" not in os.environ:
        sys.exit("Error: release: not found")
    print(os.environ["HISTORY"])
    sys.exit(0)
if args[:2] == ["get", "values"]:
    print(os.environ.get("DEPLOYED_VALUES", "{{}}"))
    sys.exit(0)
if args[:2] == ["get", "manifest"]:
    namespace = args[args.index("--namespace") + 1] if "--namespace" in args else "default"
    deployed = json.loads(os.environ.get("DEPLOYED_SETS", "[]"))
    os.execv(real, [real, "template", args[2], {chart!r}, "--namespace", namespace, "--no-hooks", *deployed])
"""


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    helm_calls: list[list[str]]


Tfchart = Callable[..., Run]


@pytest.fixture
def tfchart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Tfchart:
    """The real CLI in this process (no interpreter to start), `config` its kubeconfig (KUBECONFIG), the helm wrapper
    its helm; `deployed`: the values of the release's deployed revision (none: no such release)."""
    from tfchart.cli.app import main

    log, wrapper = tmp_path / "helm-calls.jsonl", tmp_path / "helm"
    wrapper.write_text(
        HELM_WRAPPER.format(python=sys.executable, log=str(log), real=str(helm_path("4")), chart=str(CHART))
    )
    wrapper.chmod(0o755)
    monkeypatch.chdir(REPO)
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "HELM_NAMESPACE"):
        monkeypatch.delenv(proxy, raising=False)

    def run(config: Path, *args: str, deployed: list[str] | None = None, helm_env: dict[str, str] | None = None) -> Run:
        log.unlink(missing_ok=True)
        env = {"KUBECONFIG": str(config), "HOME": str(tmp_path), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
               "DEPLOYED_SETS": json.dumps(deployed or []), **(helm_env or {}),
               **({"HISTORY": json.dumps([{"revision": 1, "status": "deployed"}])} if deployed is not None else {})}
        monkeypatch.delenv("HISTORY", raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        try:
            main(["--helm", str(wrapper), *args])
            code = 0
        except SystemExit as exit_info:
            code = int(exit_info.code or 0)
        captured = capsys.readouterr()
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return Run(code, captured.out, captured.err, calls)

    return run


def cluster_calls(run: Run) -> list[list[str]]:
    return [call for call in run.helm_calls if call[0] not in ("version", "template")]


def namespaced(server: KubeServer) -> list[Call]:
    """Namespaced calls about the release: preflight's look for the CNI's DaemonSets in kube-system is not one."""
    return [call for call in server.calls
            if call.namespace is not None and not (call.resource == "daemonsets" and call.namespace == "kube-system")]


def add_release(cluster: KubeServer, namespace: str = NS) -> None:
    """The release's objects as a running training leaves them, in `namespace`."""
    docs = kf.rendered(namespace=namespace)
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            cluster.add(kf.stateful_set(doc))
        elif doc["kind"] == "Service":
            cluster.add(kf.service(doc))
        elif doc["kind"] == "PersistentVolumeClaim":
            cluster.add(kf.claim(doc["metadata"]["name"], namespace))
        elif doc["kind"] == "ConfigMap":
            cluster.add(doc)
    chief = kf.manifest(docs, "Job", "chief")
    cluster.add(kf.job(chief, "running"), kf.pod(chief))
    cluster.add(kf.node("cpu-node-1"), kf.storage_class("nfs", "nfs.csi.k8s.io", default=True))


def test_uninstall_delete_data_deletes_the_claim_in_the_context_namespace(tfchart: Tfchart, server: KubeServer) -> None:
    add_release(server)
    run = tfchart(server.kubeconfig(NS), "uninstall", RELEASE, "--delete-data")
    assert run.returncode == 0, run.stderr
    assert cluster_calls(run) == [
        ["get", "manifest", RELEASE, "--namespace", NS],
        ["uninstall", RELEASE, "--namespace", NS],
    ]
    assert deletes(server) == [Call("delete", "persistentvolumeclaims", NS, CLAIM)]
    assert f"deleted PersistentVolumeClaim {CLAIM}" in run.stdout


@pytest.mark.parametrize(("context", "given", "used"), [(NS, ["-n", "other"], "other"), (None, [], "default")],
                         ids=["explicit-namespace-wins", "context-without-namespace-means-default"])
def test_the_namespace_without_the_contexts(context: str | None, given: list[str], used: str, tfchart: Tfchart,
                                            server: KubeServer) -> None:  # fmt: skip
    server.add(kf.claim(CLAIM, used))
    run = tfchart(server.kubeconfig(context), "uninstall", RELEASE, *given, "--delete-data")
    assert run.returncode == 0, run.stderr
    assert ["uninstall", RELEASE, "--namespace", used] in cluster_calls(run)
    assert deletes(server) == [Call("delete", "persistentvolumeclaims", used, CLAIM)]


def test_upgrade_recreate_deletes_the_chief_job_in_the_context_namespace(tfchart: Tfchart, server: KubeServer) -> None:
    add_release(server)
    run = tfchart(server.kubeconfig(NS), "upgrade", RELEASE, "--set", "training.trainSteps=500", "--recreate",
                  "--skip-image-check", deployed=["--set", "training.trainSteps=2000"])
    assert run.returncode == 0, run.stderr
    foreground = (("propagationPolicy", "Foreground"),)
    assert Call("delete", "jobs", NS, "mnist-tf-distributed-chief", params=foreground) in deletes(server)
    assert all(call.namespace == NS for call in deletes(server)), deletes(server)
    calls = cluster_calls(run)
    assert calls[:2] == [["history", RELEASE, "--namespace", NS, "--output", "json"],
                         ["get", "manifest", RELEASE, "--namespace", NS, "--revision", "1"]]
    assert calls[-1][:5] == ["upgrade", RELEASE, str(CHART), "--namespace", NS]
    rendered = [call for call in run.helm_calls if call[0] == "template"]
    assert rendered and all(call[call.index("--namespace") + 1] == NS for call in rendered)


def test_install_gives_helm_the_context_namespace(tfchart: Tfchart, server: KubeServer) -> None:
    run = tfchart(server.kubeconfig(NS), "install", RELEASE, "--skip-preflight", "--skip-image-check")
    assert run.returncode == 0, run.stderr
    assert cluster_calls(run) == [["install", RELEASE, str(CHART), "--namespace", NS]]


def test_install_preflight_reads_the_context_namespace(tfchart: Tfchart, server: KubeServer) -> None:
    add_release(server)
    run = tfchart(server.kubeconfig(NS), "install", RELEASE)
    reads = namespaced(server)
    assert reads, server.calls
    assert {call.namespace for call in reads} == {NS}, reads
    if run.returncode == 0:
        assert cluster_calls(run) == [["install", RELEASE, str(CHART), "--namespace", NS]]


@pytest.mark.parametrize("args", [
    ["status", RELEASE], ["status", RELEASE, "-o", "json"], ["logs", RELEASE, "--role", "chief"], ["logs", RELEASE],
    ["list"], ["wait", RELEASE, "--timeout", "1s"], ["preflight", RELEASE],
    ["preflight", RELEASE, "--set", f"storage.create=false,storage.existingClaim={CLAIM}"],
], ids=lambda args: "-".join(args[:2] + args[3:4]))  # fmt: skip
def test_reads_land_in_the_context_namespace(args: list[str], tfchart: Tfchart, server: KubeServer) -> None:
    add_release(server)
    run = tfchart(server.kubeconfig(NS), *args)
    assert "Traceback" not in run.stderr
    reads = namespaced(server)
    assert reads, server.calls
    assert {call.namespace for call in reads} == {NS}, reads
    if args[0] in ("status", "logs"):
        assert run.returncode == 0, run.stderr


def test_status_reports_what_it_found_in_the_context_namespace(tfchart: Tfchart, server: KubeServer) -> None:
    add_release(server)
    run = tfchart(server.kubeconfig(NS), "status", RELEASE, "-o", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["namespace"] == NS
    # Serving's model config is read back from the same namespace (the "Serving loads" line)
    assert report["serving"]["config_map"] == "mnist-tf-distributed-serving", report["serving"]
    assert [c.namespace for c in server.calls if c.resource == "configmaps"] == [NS]


# -- answers that are not from a Kubernetes API server ---------------------------------------------

PROXY_ANSWERS = {
    "html-login-page": (200, "text/html; charset=utf-8", b"<html><head><title>Sign in</title></head><body>...</body>"),
    "empty-body": (200, "application/json", b""),
    "json-not-kubernetes": (200, "application/json", b'{"status": "ok", "items": "none"}'),
    "html-error-page": (502, "text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
}


@pytest.mark.parametrize("answer", sorted(PROXY_ANSWERS))
@pytest.mark.parametrize("args", [["status", RELEASE], ["logs", RELEASE, "--role", "chief"], ["preflight", RELEASE],
                                  ["install", RELEASE], ["uninstall", RELEASE, "--delete-data"]],
                         ids=lambda args: args[0])  # fmt: skip
def test_an_answer_that_is_not_kubernetes_is_one_line_naming_the_url(
    args: list[str], answer: str, tfchart: Tfchart, server: KubeServer
) -> None:
    server.proxy_answer = PROXY_ANSWERS[answer]
    run = tfchart(server.kubeconfig(NS), *args)
    assert run.returncode == 69, run.stdout + run.stderr  # not an answer: the cluster could not be asked
    assert "Traceback" not in run.stderr and "validation error" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    status, content_type, _ = PROXY_ANSWERS[answer]
    assert server.url in errors[0] and f"HTTP {status}" in errors[0], errors[0]
    assert "did not answer like a Kubernetes API server" in errors[0]
    assert content_type.split(";")[0] in errors[0]
    assert "hint: is this the API server?" in run.stderr
    assert "command failed" not in run.stderr
