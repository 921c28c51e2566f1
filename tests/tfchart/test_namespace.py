"""Every command without -n acts in the kubeconfig context's namespace: helm's --namespace and every API call.

The real CLI runs as a subprocess with a kubeconfig whose current context's namespace is `team-a`
(not `default`). Its API server is the recording fake (tests/tfchart/kubefake.py) served over HTTP
on the loopback, so the kubeconfig loading, URL building and deserialisation of the real client all
run; DELETE requests are recorded too. helm is the real binary for `version` and `template` (and
`get manifest`, answered by a real `helm template` of the deployed values); the calls that need a
cluster (install, upgrade, uninstall) are recorded by a wrapper given with --helm.

The same server, answering like a proxy instead (an HTML login page, an empty body), checks that
such an answer is one line naming the URL, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import CHART, REPO, helm_path
from tests.tfchart import kubefake as kf
from tests.tfchart.kubefake import Call

NS = "team-a"
RELEASE = "mnist"
CLAIM = "mnist-tf-distributed-data"


@dataclass
class Server:
    """The fake API server on 127.0.0.1; `answer` overrides every response (a proxy in the way)."""

    cluster: kf.FakeCluster
    url: str = ""
    answer: tuple[int, str, bytes] | None = None
    deletes: list[Call] = field(default_factory=list)


def handler_for(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if server.answer is not None:
                self.reply(*server.answer)
                return
            response = server.cluster.answer("GET", self.path)
            body = response.read()
            self.reply(response.status, response.headers.get("Content-Type", "application/json"), body)

        def do_DELETE(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if server.answer is not None:
                self.reply(*server.answer)
                return
            resource, namespace, name, _ = kf.parse_path(self.path.split("?", 1)[0])
            call = Call("delete", resource, namespace, name)
            server.cluster.calls.append(call)
            server.deletes.append(call)
            document: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}}
            if resource == "persistentvolumeclaims":
                document = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "metadata": {"name": name}}
            self.reply(200, "application/json", json.dumps(document).encode())

    return Handler


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(kf.FakeCluster())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def kubeconfig(tmp_path: Path, url: str, namespace: str | None = NS) -> Path:
    context: dict[str, Any] = {"cluster": "fake", "user": "someone"}
    if namespace:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "someone", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "team", "context": context}],
        "current-context": "team",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(document))
    return path


HELM_WRAPPER = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
real = {real!r}
if args[:1] in (["version"], ["template"]):
    os.execv(real, [real, *args])
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


def tfchart(tmp_path: Path, config: Path, *args: str, deployed: list[str] | None = None) -> Run:
    log = tmp_path / "helm-calls.jsonl"
    log.unlink(missing_ok=True)
    wrapper = tmp_path / "helm"
    wrapper.write_text(
        HELM_WRAPPER.format(python=sys.executable, log=str(log), real=str(helm_path("4")), chart=str(CHART))
    )
    wrapper.chmod(0o755)
    env = {
        **os.environ,
        "KUBECONFIG": str(config),
        "HOME": str(tmp_path),
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
        "DEPLOYED_SETS": json.dumps(deployed or []),
    }
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "HELM_NAMESPACE"):
        env.pop(proxy, None)
    result = subprocess.run(
        [sys.executable, "-m", "tfchart", "--helm", str(wrapper), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Run(result.returncode, result.stdout, result.stderr, calls)


def cluster_calls(run: Run) -> list[list[str]]:
    return [call for call in run.helm_calls if call[0] not in ("version", "template")]


def namespaced(server: Server) -> list[Call]:
    """Namespaced calls about the release: preflight's look for the CNI's DaemonSets in kube-system is not one."""
    return [
        call
        for call in server.cluster.calls
        if call.namespace is not None and not (call.resource == "daemonsets" and call.namespace == "kube-system")
    ]


def add_release(cluster: kf.FakeCluster, namespace: str = NS) -> None:
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


def test_uninstall_delete_data_deletes_the_claim_in_the_context_namespace(tmp_path: Path, server: Server) -> None:
    add_release(server.cluster)
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url), "uninstall", RELEASE, "--delete-data")
    assert run.returncode == 0, run.stderr
    assert cluster_calls(run) == [
        ["get", "manifest", RELEASE, "--namespace", NS],
        ["uninstall", RELEASE, "--namespace", NS],
    ]
    assert server.deletes == [Call("delete", "persistentvolumeclaims", NS, CLAIM)]
    assert f"deleted PersistentVolumeClaim {CLAIM}" in run.stdout


def test_an_explicit_namespace_wins_over_the_context(tmp_path: Path, server: Server) -> None:
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url), "uninstall", RELEASE, "-n", "other", "--delete-data")
    assert run.returncode == 0, run.stderr
    assert ["uninstall", RELEASE, "--namespace", "other"] in cluster_calls(run)
    assert server.deletes == [Call("delete", "persistentvolumeclaims", "other", CLAIM)]


def test_a_context_without_namespace_means_default(tmp_path: Path, server: Server) -> None:
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url, namespace=None), "uninstall", RELEASE, "--delete-data")
    assert run.returncode == 0, run.stderr
    assert ["uninstall", RELEASE, "--namespace", "default"] in cluster_calls(run)
    assert server.deletes == [Call("delete", "persistentvolumeclaims", "default", CLAIM)]


def test_upgrade_recreate_deletes_the_chief_job_in_the_context_namespace(tmp_path: Path, server: Server) -> None:
    add_release(server.cluster)
    config = kubeconfig(tmp_path, server.url)
    run = tfchart(
        tmp_path,
        config,
        "upgrade",
        RELEASE,
        "--set",
        "training.trainSteps=500",
        "--recreate",
        deployed=["--set", "training.trainSteps=2000"],
    )
    assert run.returncode == 0, run.stderr
    assert Call("delete", "jobs", NS, "mnist-tf-distributed-chief") in server.deletes
    assert all(call.namespace == NS for call in server.deletes), server.deletes
    calls = cluster_calls(run)
    assert calls[0] == ["get", "manifest", RELEASE, "--namespace", NS]
    assert calls[-1][:5] == ["upgrade", RELEASE, str(CHART), "--namespace", NS]
    rendered = [call for call in run.helm_calls if call[0] == "template"]
    assert rendered and all(call[call.index("--namespace") + 1] == NS for call in rendered)


def test_install_gives_helm_the_context_namespace(tmp_path: Path, server: Server) -> None:
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url), "install", RELEASE, "--skip-preflight")
    assert run.returncode == 0, run.stderr
    assert cluster_calls(run) == [["install", RELEASE, str(CHART), "--namespace", NS]]


def test_install_preflight_reads_the_context_namespace(tmp_path: Path, server: Server) -> None:
    add_release(server.cluster)
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url), "install", RELEASE)
    reads = namespaced(server)
    assert reads, server.cluster.calls
    assert {call.namespace for call in reads} == {NS}, reads
    if run.returncode == 0:
        assert cluster_calls(run) == [["install", RELEASE, str(CHART), "--namespace", NS]]


@pytest.mark.parametrize(
    "args",
    [
        ["status", RELEASE],
        ["status", RELEASE, "-o", "json"],
        ["logs", RELEASE, "--role", "chief"],
        ["preflight", "--release", RELEASE],
        ["preflight", "--release", RELEASE, "--set", f"storage.create=false,storage.existingClaim={CLAIM}"],
    ],
    ids=lambda args: "-".join(args[:2] + args[3:4]),
)
def test_reads_land_in_the_context_namespace(args: list[str], tmp_path: Path, server: Server) -> None:
    add_release(server.cluster)
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url), *args)
    assert "Traceback" not in run.stderr
    reads = namespaced(server)
    assert reads, server.cluster.calls
    assert {call.namespace for call in reads} == {NS}, reads
    if args[0] in ("status", "logs"):
        assert run.returncode == 0, run.stderr


def test_status_reports_what_it_found_in_the_context_namespace(tmp_path: Path, server: Server) -> None:
    add_release(server.cluster)
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url), "status", RELEASE, "-o", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["namespace"] == NS
    # Serving's model config is read back from the same namespace (the "Serving loads" line)
    assert report["serving"]["config_map"] == "mnist-tf-distributed-serving", report["serving"]
    assert [c.namespace for c in server.cluster.calls if c.resource == "configmaps"] == [NS]


# -- answers that are not from a Kubernetes API server ---------------------------------------------

PROXY_ANSWERS = {
    "html-login-page": (200, "text/html; charset=utf-8", b"<html><head><title>Sign in</title></head><body>...</body>"),
    "empty-body": (200, "application/json", b""),
    "json-not-kubernetes": (200, "application/json", b'{"status": "ok", "items": "none"}'),
    "html-error-page": (502, "text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
}


@pytest.mark.parametrize("answer", sorted(PROXY_ANSWERS))
@pytest.mark.parametrize(
    "args",
    [
        ["status", RELEASE],
        ["logs", RELEASE, "--role", "chief"],
        ["preflight", "--release", RELEASE],
        ["install", RELEASE],
        ["uninstall", RELEASE, "--delete-data"],
    ],
    ids=lambda args: args[0],
)
def test_an_answer_that_is_not_kubernetes_is_one_line_naming_the_url(
    args: list[str], answer: str, tmp_path: Path, server: Server
) -> None:
    server.answer = PROXY_ANSWERS[answer]
    run = tfchart(tmp_path, kubeconfig(tmp_path, server.url), *args)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "validation error" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    status, content_type, _ = PROXY_ANSWERS[answer]
    assert server.url in errors[0] and f"HTTP {status}" in errors[0], errors[0]
    assert "did not answer like a Kubernetes API server" in errors[0]
    assert content_type.split(";")[0] in errors[0]
    assert "hint: is this the API server?" in run.stderr
    assert "command failed" not in run.stderr
