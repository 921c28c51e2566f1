"""A loopback Kubernetes API that keeps objects, for the run supervisor and its Job controller.

A real API server cannot run on the development machine. This one answers the requests the
supervisor sends (GET of objects and of pod/event lists with label and field selectors, JSON
merge-patch of objects and of the /scale subresource) from objects the test puts in, applying each
PATCH as the API server would, and records every request so tests can assert that nothing else
was touched. `JobController` plays Kubernetes' Job controller for one rendered chief Job: it runs
the rendered container (prelude, command and env unchanged) as local processes and writes the
Job's status the way the controller does (backoffLimit with restartPolicy Never, the
podFailurePolicy rules, activeDeadlineSeconds, deletion).
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tfchart.local import LocalCluster, LocalPod

API_PREFIX = {"Job": "/apis/batch/v1", "StatefulSet": "/apis/apps/v1", "Deployment": "/apis/apps/v1",
              "Pod": "/api/v1", "Event": "/api/v1"}
LISTABLE = ("pods", "events", "jobs", "statefulsets", "deployments")
RESOURCE = {"Job": "jobs", "StatefulSet": "statefulsets", "Deployment": "deployments", "Pod": "pods",
            "Event": "events"}


# Every kind the chart renders, by group version: enough discovery for helm's `lookup` and for
# helm 4 mapping each rendered object (helm template --dry-run=server).
SERVED: dict[str, dict[str, str]] = {
    "v1": {"Pod": "pods", "Event": "events", "Service": "services", "ServiceAccount": "serviceaccounts",
           "PersistentVolumeClaim": "persistentvolumeclaims", "ConfigMap": "configmaps", "Secret": "secrets"},
    "apps/v1": {"StatefulSet": "statefulsets", "Deployment": "deployments"},
    "batch/v1": {"Job": "jobs"},
    "networking.k8s.io/v1": {"NetworkPolicy": "networkpolicies", "Ingress": "ingresses"},
    "rbac.authorization.k8s.io/v1": {"Role": "roles", "RoleBinding": "rolebindings"},
    "policy/v1": {"PodDisruptionBudget": "poddisruptionbudgets"},
}


def resource_list(group_version: str) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for kind, name in SERVED[group_version].items():
        verbs = ["get", "list", "patch", "delete"]
        resources.append({"name": name, "singularName": kind.lower(), "namespaced": True, "kind": kind, "verbs": verbs})
        if kind in ("StatefulSet", "Deployment"):
            resources.append({"name": f"{name}/scale", "singularName": "", "namespaced": True, "kind": "Scale",
                              "group": "autoscaling", "version": "v1", "verbs": ["get", "patch"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def group_entry(group_version: str) -> dict[str, Any]:
    group, version = group_version.split("/")
    entry = {"groupVersion": group_version, "version": version}
    return {"name": group, "versions": [entry], "preferredVersion": entry}


DISCOVERY: dict[str, dict[str, Any]] = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "platform": "linux/amd64"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1",
              "groups": [group_entry(gv) for gv in SERVED if gv != "v1"]},
    "/api/v1": resource_list("v1"),
    **{f"/apis/{gv}": resource_list(gv) for gv in SERVED if gv != "v1"},
}


def now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    body: dict[str, Any] | None

    @property
    def writes(self) -> bool:
        return self.method != "GET"


def object_path(doc: dict[str, Any]) -> str:
    kind, meta = doc["kind"], doc["metadata"]
    return f"{API_PREFIX[kind]}/namespaces/{meta['namespace']}/{RESOURCE[kind]}/{meta['name']}"


SELECTOR_TERM = re.compile(r"\s*([^,=!\s]+)\s*(?:(=)\s*([^,]*)|\s+in\s+\(([^)]*)\))\s*(?:,|$)")


def labels_match(labels: dict[str, str], selector: str) -> bool:
    """Equality (`k=v`) and set (`k in (a,b)`) terms, as the API server reads a labelSelector."""
    position = 0
    while position < len(selector):
        term = SELECTOR_TERM.match(selector, position)
        assert term, f"unsupported label selector {selector!r}"
        key, equals, value, members = term.groups()
        allowed = {value} if equals else {m.strip() for m in members.split(",")}
        if labels.get(key) not in allowed:
            return False
        position = term.end()
    return True


def field_value(doc: dict[str, Any], dotted: str) -> Any:
    value: Any = doc
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


class KubeServer:
    """Objects by API path; every request recorded in `requests`."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[Request] = []
        self.lock = threading.RLock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length", "0") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                body = json.loads(raw) if raw else None
                with outer.lock:
                    outer.requests.append(Request(self.command, parts.path, parts.query, body))
                    code, document = outer.answer(self.command, parts.path, dict(parse_qsl(parts.query)), body,
                                                  self.headers.get("Content-Type", ""))
                payload = json.dumps(document).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the test's side -------------------------------------------------------------------------

    def put(self, *docs: dict[str, Any]) -> None:
        with self.lock:
            for doc in docs:
                doc = json.loads(json.dumps(doc))
                doc["metadata"].setdefault("creationTimestamp", now_text())
                self.objects[object_path(doc)] = doc

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            found = self.objects.get(f"{API_PREFIX[kind]}/namespaces/{namespace}/{RESOURCE[kind]}/{name}")
            return json.loads(json.dumps(found)) if found else None

    def update(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> None:
        with self.lock:
            path = f"{API_PREFIX[kind]}/namespaces/{namespace}/{RESOURCE[kind]}/{name}"
            self.objects[path] = merge_patch(self.objects[path], patch)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            self.objects.pop(f"{API_PREFIX[kind]}/namespaces/{namespace}/{RESOURCE[kind]}/{name}", None)

    def writes(self) -> list[tuple[str, str, dict[str, Any] | None]]:
        """Every request that changed something: (method, path, body)."""
        with self.lock:
            return [(r.method, r.path, r.body) for r in self.requests if r.writes]

    # -- the API server's side -------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: dict[str, str], body: Any, content_type: str
    ) -> tuple[int, dict[str, Any]]:
        if method == "GET" and path in DISCOVERY:
            return 200, DISCOVERY[path]
        scale = path.endswith("/scale")
        owner = path[: -len("/scale")] if scale else path
        if method == "GET" and owner not in self.objects and path.rsplit("/", 1)[-1] in LISTABLE:
            return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": self.listing(path, query)}
        if owner not in self.objects:
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
        if method == "GET":
            return 200, self.scale_of(owner) if scale else self.objects[owner]
        if method == "PATCH":
            if content_type != "application/merge-patch+json":
                return 415, {"kind": "Status", "reason": "UnsupportedMediaType", "code": 415}
            if scale:
                replicas = (body.get("spec") or {}).get("replicas")
                self.objects[owner] = merge_patch(self.objects[owner], {"spec": {"replicas": replicas}})
                return 200, self.scale_of(owner)
            self.objects[owner] = merge_patch(self.objects[owner], body)
            return 200, self.objects[owner]
        return 405, {"kind": "Status", "reason": "MethodNotAllowed", "code": 405}

    def scale_of(self, path: str) -> dict[str, Any]:
        doc = self.objects[path]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": doc["metadata"]["name"]},
                "spec": {"replicas": doc["spec"].get("replicas", 1)}}

    def listing(self, path: str, query: dict[str, str]) -> list[dict[str, Any]]:
        prefix = path + "/"
        items = [doc for key, doc in self.objects.items() if key.startswith(prefix) and "/" not in key[len(prefix):]]
        selector = query.get("labelSelector", "")
        items = [d for d in items if labels_match(d["metadata"].get("labels") or {}, selector)]
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            key, _, value = term.partition("=")
            items = [d for d in items if str(field_value(d, key)) == value]
        return items


@contextmanager
def kube_server() -> Iterator[KubeServer]:
    server = KubeServer()
    try:
        yield server
    finally:
        server.close()


def exit_code_rule_matches(rule: dict[str, Any], code: int) -> bool:
    on_exit = rule.get("onExitCodes")
    if not on_exit:
        return False
    values = set(on_exit["values"])
    return code in values if on_exit["operator"] == "In" else code not in values


class JobController:
    """Kubernetes' Job controller for one rendered Job whose pod runs as a local process.

    restartPolicy Never: each failed pod counts against backoffLimit unless a podFailurePolicy rule
    says otherwise (FailJob fails the Job at once); activeDeadlineSeconds (re-read from the stored
    Job every tick, so a PATCH takes effect) kills the pod with SIGTERM and fails the Job with
    DeadlineExceeded; a Job deleted from the server kills its pod. `backoff_seconds`: the delay
    before the replacement of a failed pod, doubling with each failure as the controller's pod
    failure back-off does (10 s in Kubernetes; 0, the default, replaces it at once).
    """

    def __init__(self, server: KubeServer, job: dict[str, Any], pod: LocalPod, cluster: LocalCluster,
                 backoff_seconds: float = 0.0) -> None:
        self.server, self.pod, self.cluster = server, pod, cluster
        self.namespace, self.name = job["metadata"]["namespace"], job["metadata"]["name"]
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        self.failed = 0
        self.pods_started = 0
        self.exit_codes: list[int] = []  # of each pod that ended on its own, in order
        self.backoff_seconds = backoff_seconds
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"job-{self.name}")

    def start(self) -> JobController:
        self.server.update("Job", self.namespace, self.name, {"status": {"startTime": now_text(), "active": 0}})
        self.thread.start()
        return self

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"Job {self.name} did not end within {timeout} s"

    def _finish(self, kind: str, reason: str, message: str) -> None:
        self.server.update("Job", self.namespace, self.name, {"status": {
            "active": 0, "failed": self.failed, "succeeded": 1 if kind == "Complete" else 0,
            "conditions": [{"type": kind, "status": "True", "reason": reason, "message": message,
                            "lastTransitionTime": now_text()}],
        }})

    def _run(self) -> None:
        started = time.monotonic()
        while True:
            job = self.server.get("Job", self.namespace, self.name)
            if job is None:
                return
            self.pods_started += 1
            if self.pod.name in self.cluster.processes:
                self.cluster.restart(self.pod.name)
            else:
                self.cluster.start([self.pod])
            self.server.update("Job", self.namespace, self.name, {"status": {"active": 1}})
            code = None
            while code is None:
                code = self.cluster.processes[self.pod.name].popen.poll()
                if code is not None:
                    break
                job = self.server.get("Job", self.namespace, self.name)
                if job is None:  # deleted: its pod goes too
                    self.cluster.kill(self.pod.name, signal.SIGTERM)
                    return
                deadline = job["spec"].get("activeDeadlineSeconds")
                if deadline is not None and time.monotonic() - started >= deadline:
                    self.cluster.kill(self.pod.name, signal.SIGTERM)
                    self.failed += 1
                    self._finish("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
                    return
                time.sleep(0.1)
            self.cluster.processes[self.pod.name].reader.join(timeout=5)
            self.exit_codes.append(code)
            if code == 0:
                self._finish("Complete", "", "")
                return
            self.failed += 1
            rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
            action = next((r["action"] for r in rules if exit_code_rule_matches(r, code)), "Count")
            if action == "FailJob":
                self._finish("Failed", "PodFailurePolicy",
                             f"Container {job['spec']['template']['spec']['containers'][0]['name']} for pod "
                             f"{self.namespace}/{self.pod.name} failed with exit code {code} matching FailJob rule")
                return
            if action == "Ignore":
                self.failed -= 1
            if self.failed > job["spec"]["backoffLimit"]:
                self._finish("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
                return
            self.server.update("Job", self.namespace, self.name, {"status": {"failed": self.failed, "active": 0}})
            self._back_off()

    def _back_off(self) -> None:
        """Waits before a replacement pod (the controller's 10 s, 20 s, ... capped at 6 minutes), less
        if the Job is deleted meanwhile."""
        until = time.monotonic() + min(360.0, self.backoff_seconds * 2 ** max(0, self.failed - 1))
        while time.monotonic() < until and self.server.get("Job", self.namespace, self.name) is not None:
            time.sleep(0.1)
