"""A recording fake of the Kubernetes API server, below the official client.

tfchart.kube.KubeApi talks to the real `kubernetes` client; only the client's HTTP layer
(`ApiClient.rest_client.request`) is replaced. The fake answers every request with the JSON an API
server returns (objects built from the chart's rendered manifests, with server-side defaults,
labels and status), filters lists by label and field selectors like the server does, answers
unknown objects with a 404 Status and injected failures with their Status, and records each request
as a `Call` (verb, resource, namespace, name, selectors, other query parameters). So the URL
building, parameter validation, deserialisation into V1Pod/V1Job/... and ApiException handling
of the pinned client all run in the tests.

Read commands must only GET. A cluster built with `deletes_allowed=True` also answers DELETE like
the API server: with propagationPolicy Orphan or Foreground the object gets a deletionTimestamp
and the orphan/foregroundDeletion finalizer and is answered as is (deletion pending), and stays
readable for `linger[(resource, namespace, name)]` more GETs (default 0, None = never goes), then
404; without such a policy it is removed at once and a Status is answered.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import urllib3
from kubernetes import client
from kubernetes.client import rest

from tests.chartlib import render
from tfchart.kube import KubeApi

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)
HOST = "https://fake-apiserver.test:6443"

# resource -> (API path prefix, kind, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "pods": ("/api/v1", "Pod", True),
    "services": ("/api/v1", "Service", True),
    "configmaps": ("/api/v1", "ConfigMap", True),
    "nodes": ("/api/v1", "Node", False),
    "persistentvolumeclaims": ("/api/v1", "PersistentVolumeClaim", True),
    "resourcequotas": ("/api/v1", "ResourceQuota", True),
    "namespaces": ("/api/v1", "Namespace", False),
    "statefulsets": ("/apis/apps/v1", "StatefulSet", True),
    "deployments": ("/apis/apps/v1", "Deployment", True),
    "daemonsets": ("/apis/apps/v1", "DaemonSet", True),
    "jobs": ("/apis/batch/v1", "Job", True),
    "storageclasses": ("/apis/storage.k8s.io/v1", "StorageClass", False),
    "networkpolicies": ("/apis/networking.k8s.io/v1", "NetworkPolicy", True),
    "customresourcedefinitions": ("/apis/apiextensions.k8s.io/v1", "CustomResourceDefinition", False),
    # Custom resources: served only at the versions of a CustomResourceDefinition added to the cluster.
    "queues": ("/apis/scheduling.volcano.sh/v1beta1", "Queue", False),
    "localqueues": ("/apis/kueue.x-k8s.io/v1beta2", "LocalQueue", True),
    "clusterqueues": ("/apis/kueue.x-k8s.io/v1beta2", "ClusterQueue", False),
    "workloadpriorityclasses": ("/apis/kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass", False),
}
KIND_TO_RESOURCE = {kind: resource for resource, (_, kind, _) in RESOURCES.items()}
API_VERSION = {"/api/v1": "v1", "/apis/apps/v1": "apps/v1", "/apis/batch/v1": "batch/v1"}
POD_FIELDS = {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "status.phase"}
QUANTITY_KEYS = {"limits", "requests", "capacity", "allocatable", "hard", "used"}


@dataclass(frozen=True)
class Call:
    """One request as the API server saw it."""

    verb: str  # list | get | log | delete | discover (API discovery of a group/version)
    resource: str  # plural, e.g. "pods", "statefulsets"
    namespace: str | None = None
    name: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    params: tuple[tuple[str, str], ...] = ()  # other query parameters, sorted (tailLines, follow, container)


@dataclass
class LogBody:
    """A pod log; `interrupt_after` raises KeyboardInterrupt (Ctrl-C) once that many lines were read."""

    lines: list[str]
    interrupt_after: int | None = None


class HttpBody(io.BytesIO):
    """A response body that closes at its end, like an HTTP connection's (urllib3 streams until closed)."""

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if not data:
            self.close()
        return data

    def read1(self, size: int | None = -1) -> bytes:
        return self.read(size)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class InterruptingStream(io.RawIOBase):
    """A response body that delivers lines one read at a time, then raises KeyboardInterrupt."""

    def __init__(self, lines: Sequence[str], interrupt_after: int) -> None:
        self._chunks = [(line + "\n").encode() for line in lines[:interrupt_after]]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._chunks:
            raise KeyboardInterrupt
        chunk = self._chunks.pop(0)
        buffer[: len(chunk)] = chunk
        return len(chunk)


@dataclass
class FakeCluster:
    """Objects by (resource, namespace, name), pod logs, injected failures and the recorded calls."""

    objects: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], LogBody] = field(default_factory=dict)
    failures: dict[tuple[str, str, str | None], tuple[int, str]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    responses: list[urllib3.HTTPResponse] = field(default_factory=list)
    deletes_allowed: bool = False
    linger: dict[tuple[str, str | None, str], int | None] = field(default_factory=dict)
    terminating: dict[tuple[str, str | None, str], int | None] = field(default_factory=dict)
    answered: list[tuple[Call, int]] = field(default_factory=list)  # each call with its HTTP status

    # -- building the cluster -----------------------------------------------------------------

    def add(self, *objects: dict[str, Any] | Any) -> FakeCluster:
        for obj in objects:
            document = obj if isinstance(obj, dict) else client.ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
            document = served(document)
            resource = KIND_TO_RESOURCE[document["kind"]]
            namespaced = RESOURCES[resource][2]
            namespace = document["metadata"].get("namespace") if namespaced else None
            self.objects[(resource, namespace, document["metadata"]["name"])] = document
        return self

    def set_log(self, namespace: str, pod: str, lines: Iterable[str], interrupt_after: int | None = None) -> None:
        self.logs[(namespace, pod)] = LogBody(list(lines), interrupt_after)

    def fail(self, verb: str, resource: str, status: int, message: str, namespace: str | None = None) -> None:
        """Answer `verb resource` (in `namespace`, or anywhere when None) with an error Status."""
        self.failures[(verb, resource, namespace)] = (status, message)

    def api(self) -> KubeApi:
        """A real KubeApi whose kubernetes ApiClient sends its HTTP requests here."""

        def factory() -> client.ApiClient:
            configuration = client.Configuration(host=HOST)
            api_client = client.ApiClient(configuration)
            api_client.rest_client = FakeRest(self)  # type: ignore[assignment]
            return api_client

        return KubeApi(factory, source="fake kubeconfig")

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self.objects[(resource, namespace, name)]

    # -- custom resources and API discovery -----------------------------------------------------

    def crds(self, group: str, version: str) -> list[dict[str, Any]]:
        """The CustomResourceDefinitions of the cluster that serve group/version."""
        return [
            document
            for (resource, _, _), document in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
            if resource == "customresourcedefinitions"
            and document["spec"]["group"] == group
            and any(v["name"] == version and v.get("served") for v in document["spec"]["versions"])
        ]

    def serves(self, path: str) -> bool:
        """Built-in paths always; a custom resource's only at a version its CRD serves (else the server's 404)."""
        match = re.fullmatch(CUSTOM_PATH, path)
        if match is None or match["group"] in BUILT_IN_GROUPS:
            return True
        served = self.crds(match["group"], match["version"])
        return any(crd["spec"]["names"]["plural"] == match["res"] for crd in served)

    def discovery_response(self, group_version: str) -> urllib3.HTTPResponse:
        """GET /apis/<group>/<version>: the APIResourceList of the CRDs serving it, as every user may read it."""
        self.calls.append(Call("discover", group_version))
        failure = self.failures.get(("discover", group_version, None))
        if failure:
            return status_response(*failure)
        group, version = group_version.split("/")
        resources = [entry for crd in self.crds(group, version) for entry in api_resources(crd, version)]
        if not resources:
            return status_response(404, NO_RESOURCE)
        return json_response(
            {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}
        )

    # -- answering ----------------------------------------------------------------------------

    def answer(self, method: str, url: str) -> urllib3.HTTPResponse:
        response = self._answer(method, url)
        self.answered.append((self.calls[-1], int(response.status)))
        return response

    def _answer(self, method: str, url: str) -> urllib3.HTTPResponse:
        if method == "DELETE" and self.deletes_allowed:
            return self.delete(url)
        assert method == "GET", f"tfchart's read commands must only GET, got {method} {url}"
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        group_version = discovery_path(parts.path)
        if group_version is not None:
            return self.discovery_response(group_version)
        resource, namespace, name, subresource = parse_path(parts.path)
        verb = "log" if subresource == "log" else ("get" if name else "list")
        label_selector = query.pop("labelSelector", None)
        field_selector = query.pop("fieldSelector", None)
        self.calls.append(
            Call(verb, resource, namespace, name, label_selector, field_selector, tuple(sorted(query.items())))
        )
        failure = self.failures.get((verb, resource, namespace)) or self.failures.get((verb, resource, None))
        if failure:
            return status_response(*failure)
        if not self.serves(parts.path):
            return status_response(404, NO_RESOURCE)
        if verb == "list":
            return self.list_response(resource, namespace, label_selector, field_selector)
        assert name is not None
        key = (resource, namespace, name)
        if key in self.terminating:
            remaining = self.terminating[key]
            if remaining is not None and remaining <= 0:
                del self.terminating[key], self.objects[key]
            elif remaining is not None:
                self.terminating[key] = remaining - 1
        document = self.objects.get(key)
        if document is None:
            return status_response(404, f'{resource} "{name}" not found')
        if verb == "log":
            return self.log_response(document, query)
        return json_response(document)

    def delete(self, url: str) -> urllib3.HTTPResponse:
        """DELETE as the API server answers it (see the module docstring)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        resource, namespace, name, _ = parse_path(parts.path)
        self.calls.append(Call("delete", resource, namespace, name, params=tuple(sorted(query.items()))))
        failure = self.failures.get(("delete", resource, namespace)) or self.failures.get(("delete", resource, None))
        if failure:
            return status_response(*failure)
        assert name is not None
        key = (resource, namespace, name)
        document = self.objects.get(key)
        if document is None:
            return status_response(404, f'{resource} "{name}" not found')
        finalizer = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}.get(query.get("propagationPolicy", ""))
        if finalizer is None:
            del self.objects[key]
            self.terminating.pop(key, None)
            details = {"name": name, "kind": resource, "uid": document["metadata"]["uid"]}
            if RESOURCES[resource][0] != "/api/v1":
                details["group"] = RESOURCES[resource][0].split("/")[2]
            return json_response(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
            )
        metadata = document["metadata"]
        metadata.setdefault("deletionTimestamp", timestamp(NOW))
        metadata.setdefault("deletionGracePeriodSeconds", 0)
        metadata["finalizers"] = sorted({*metadata.get("finalizers", []), finalizer})
        self.terminating.setdefault(key, self.linger.get(key, 0))
        return json_response(document)

    def list_response(
        self, resource: str, namespace: str | None, label_selector: str | None, field_selector: str | None
    ) -> urllib3.HTTPResponse:
        prefix, kind, _ = RESOURCES[resource]
        if field_selector:
            unsupported = [term for term in split_terms(field_selector) if field_key(term) not in POD_FIELDS]
            if unsupported or resource != "pods":
                return status_response(400, f'field label not supported: "{field_key(unsupported[0])}"')
        items = [
            document
            for (kind_resource, item_namespace, _), document in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
            if kind_resource == resource
            and (namespace is None or item_namespace == namespace)
            and labels_match(document["metadata"].get("labels") or {}, label_selector or "")
            and fields_match(document, field_selector or "")
        ]
        return json_response(
            {
                "apiVersion": API_VERSION.get(prefix, prefix.removeprefix("/apis/")),
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": "1000"},
                "items": items,
            }
        )

    def log_response(self, pod: dict[str, Any], query: dict[str, str]) -> urllib3.HTTPResponse:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        waiting = never_started_reason(pod)
        if waiting:
            container = query.get("container") or pod["spec"]["containers"][0]["name"]
            return status_response(400, f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        body = self.logs.get((namespace, name), LogBody([]))
        lines = body.lines
        if "tailLines" in query:
            tail = int(query["tailLines"])
            lines = lines[-tail:] if tail else []
        stream: Any
        if body.interrupt_after is not None:
            stream = io.BufferedReader(InterruptingStream(lines, body.interrupt_after), buffer_size=1)
        else:
            stream = HttpBody("".join(line + "\n" for line in lines).encode())
        response = urllib3.HTTPResponse(
            body=stream, headers={"Content-Type": "text/plain"}, status=200, reason="OK", preload_content=False
        )
        self.responses.append(response)
        return response


class FakeRest:
    """Stands in for kubernetes.client.rest.RESTClientObject: same request() contract."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> rest.RESTResponse:
        assert url.startswith(HOST), url
        return rest.RESTResponse(self.cluster.answer(method, url[len(HOST) :]))

    def close(self) -> None:
        pass


def parse_path(path: str) -> tuple[str, str | None, str | None, str | None]:
    """(resource, namespace, name, subresource) of an API path."""
    match = re.fullmatch(
        r"/(?:api/v1|apis/[^/]+/v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?",
        path,
    )
    match = match or re.fullmatch(CUSTOM_PATH, path)
    assert match, f"unexpected API path {path}"
    return match["res"], match["ns"], match["name"], match["sub"]


def json_response(document: dict[str, Any]) -> urllib3.HTTPResponse:
    return urllib3.HTTPResponse(
        body=HttpBody(json.dumps(document).encode()),
        headers={"Content-Type": "application/json"},
        status=200,
        reason="OK",
        preload_content=False,
    )


REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 500: "InternalError"}


def status_response(code: int, message: str) -> urllib3.HTTPResponse:
    """A metav1.Status error body, as the API server sends it."""
    document = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": REASONS.get(code, "Unknown"),
        "code": code,
    }
    return urllib3.HTTPResponse(
        body=HttpBody(json.dumps(document).encode()),
        headers={"Content-Type": "application/json"},
        status=code,
        reason=REASONS.get(code, "Error"),
        preload_content=False,
    )


# -- selectors, like the API server ---------------------------------------------------------------


def split_terms(selector: str) -> list[str]:
    """Comma-separated terms, keeping `key in (a,b)` together."""
    return [term.strip() for term in re.findall(r"(?:[^,(]|\([^)]*\))+", selector) if term.strip()]


def labels_match(labels: dict[str, str], selector: str) -> bool:
    for term in split_terms(selector):
        set_match = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term)
        if set_match:
            key, operator, values = set_match.groups()
            options = {value.strip() for value in values.split(",")}
            if (labels.get(key) in options) != (operator == "in"):
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_key(term: str) -> str:
    return re.split(r"!=|==?", term, maxsplit=1)[0]


def field_value(document: dict[str, Any], dotted: str) -> str:
    value: Any = document
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def fields_match(document: dict[str, Any], selector: str) -> bool:
    for term in split_terms(selector):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if field_value(document, key) == value:
                return False
        else:
            key, value = re.split(r"==?", term, maxsplit=1)
            if field_value(document, key) != value:
                return False
    return True


# -- objects as the API server serves them --------------------------------------------------------


def served(document: dict[str, Any]) -> dict[str, Any]:
    """Server-side shape: uid, timestamps, resourceVersion, canonical string quantities."""
    document = canonical_quantities(copy.deepcopy(document))
    metadata = document.setdefault("metadata", {})
    metadata.setdefault("uid", f"uid-{document['kind'].lower()}-{metadata['name']}")
    metadata.setdefault("resourceVersion", "1")
    metadata.setdefault("creationTimestamp", timestamp(NOW - timedelta(hours=1)))
    return document


def canonical_quantities(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        if key in QUANTITY_KEYS:
            return {k: str(v) if isinstance(v, (int, float)) else v for k, v in value.items()}
        return {k: canonical_quantities(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical_quantities(item, key) for item in value]
    return value


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(**delta: float) -> str:
    return timestamp(NOW - timedelta(**delta))


def never_started_reason(pod: dict[str, Any]) -> str | None:
    statuses = pod.get("status", {}).get("containerStatuses")
    if not statuses:
        return "ContainerCreating" if pod.get("status", {}).get("phase", "Pending") == "Pending" else None
    for status in statuses:
        state = status.get("state", {})
        if "waiting" in state and not status.get("restartCount") and not status.get("lastState", {}).get("terminated"):
            return str(state["waiting"].get("reason", "ContainerCreating"))
    return None


# -- the chart's objects ----------------------------------------------------------------------


@cache
def _rendered(values: tuple[str, ...], sets: tuple[str, ...], release: str, namespace: str) -> str:
    return json.dumps(render("4", [Path(v) for v in values], list(sets), release, namespace))


def rendered(
    values: Sequence[str] = (), sets: Sequence[str] = (), release: str = "mnist", namespace: str = "ml-training"
) -> list[dict[str, Any]]:
    """The chart's manifests (helm 4 template), cached per argument set; a fresh copy each call."""
    docs: list[dict[str, Any]] = json.loads(_rendered(tuple(values), tuple(sets), release, namespace))
    return docs


def manifest(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        if doc["kind"] == kind and labels.get("app.kubernetes.io/component") == component:
            return doc
    raise AssertionError(f"no {kind} for component {component}")


def stateful_set(doc: dict[str, Any], ready: int | None = None, replicas: int | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(doc)
    if replicas is not None:
        obj["spec"]["replicas"] = replicas
    desired = obj["spec"]["replicas"]
    ready_count = desired if ready is None else ready
    obj["metadata"]["generation"] = 1
    obj["status"] = {
        "observedGeneration": 1,
        "replicas": desired,
        "currentReplicas": desired,
        "updatedReplicas": desired,
        "availableReplicas": ready_count,
        **({"readyReplicas": ready_count} if ready_count else {}),
        "currentRevision": f"{obj['metadata']['name']}-6d4b7c9f8",
        "updateRevision": f"{obj['metadata']['name']}-6d4b7c9f8",
        "collisionCount": 0,
    }
    return obj


def job(
    doc: dict[str, Any], state: str = "running", reason: str = "", message: str = "", failed: int = 0
) -> dict[str, Any]:
    """A Job with the status the Job controller writes: running, complete or failed."""
    obj = copy.deepcopy(doc)
    obj["metadata"]["generation"] = 1
    obj["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid_of(obj)}}
    status: dict[str, Any] = {"startTime": ago(hours=1), "failed": failed} if failed else {"startTime": ago(hours=1)}
    if state == "running":
        status.update(active=1, ready=1, terminating=0, uncountedTerminatedPods={})
    elif state == "pending":
        status.update(active=1, ready=0, terminating=0, uncountedTerminatedPods={})
    elif state == "complete":
        status.update(succeeded=1, completionTime=ago(minutes=5), ready=0, terminating=0)
        status["conditions"] = [
            condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
            condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
        ]
    elif state == "failed":
        status.update(ready=0, terminating=0)
        status["conditions"] = [
            condition(
                "FailureTarget",
                reason or "BackoffLimitExceeded",
                message or "Job has reached the specified backoff limit",
            ),
            condition(
                "Failed", reason or "BackoffLimitExceeded", message or "Job has reached the specified backoff limit"
            ),
        ]
    else:
        raise ValueError(state)
    obj["status"] = status
    return obj


def condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": ago(minutes=5),
        "lastTransitionTime": ago(minutes=5),
    }


def uid_of(obj: dict[str, Any]) -> str:
    return f"uid-{obj['kind'].lower()}-{obj['metadata']['name']}"


def pod(
    owner: dict[str, Any],
    name: str | None = None,
    *,
    index: int | None = None,
    phase: str = "Running",
    ready: bool = True,
    restarts: int = 0,
    node: str | None = "gpu-node-1",
    waiting: tuple[str, str] | None = None,
    terminated: tuple[str, int] | None = None,
    last_terminated: tuple[str, int] | None = None,
    unschedulable: str | None = None,
    created: str | None = None,
) -> dict[str, Any]:
    """The pod a controller (StatefulSet, Job, Deployment) creates from `owner`'s template, with a status."""
    template = copy.deepcopy(owner["spec"]["template"])
    owner_name = owner["metadata"]["name"]
    labels = dict(template["metadata"].get("labels", {}))
    kind = owner["kind"]
    if kind == "StatefulSet":
        assert index is not None
        name = f"{owner_name}-{index}"
        labels |= {
            "apps.kubernetes.io/pod-index": str(index),
            "statefulset.kubernetes.io/pod-name": name,
            "controller-revision-hash": f"{owner_name}-6d4b7c9f8",
        }
        owner_kind, owner_api = "StatefulSet", "apps/v1"
    elif kind == "Job":
        name = name or f"{owner_name}-x7k2p"
        labels |= {
            "batch.kubernetes.io/controller-uid": uid_of(owner),
            "batch.kubernetes.io/job-name": owner_name,
            "controller-uid": uid_of(owner),
            "job-name": owner_name,
        }
        owner_kind, owner_api = "Job", "batch/v1"
    else:
        name = name or f"{owner_name}-5f7d8c6b9-abcde"
        labels["pod-template-hash"] = "5f7d8c6b9"
        owner_kind, owner_api = "ReplicaSet", "apps/v1"
        owner_name = f"{owner_name}-5f7d8c6b9"
    spec = template["spec"]
    for container in spec.get("initContainers", []) + spec["containers"]:
        default_requests_from_limits(container)
    if phase != "Pending" or not unschedulable:
        spec["nodeName"] = node
    created = created or ago(minutes=30)
    document = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner["metadata"]["namespace"],
            "labels": labels,
            "annotations": template["metadata"].get("annotations", {}),
            "creationTimestamp": created,
            "ownerReferences": [
                {
                    "apiVersion": owner_api,
                    "kind": owner_kind,
                    "name": owner_name,
                    "uid": f"uid-{owner_name}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": pod_status(
            spec, phase, ready, restarts, waiting, terminated, last_terminated, unschedulable, created
        ),
    }
    return document


def default_requests_from_limits(container: dict[str, Any]) -> None:
    """API server defaulting: a resource with a limit and no request is requested at its limit."""
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    requests = resources.setdefault("requests", {})
    for key, value in limits.items():
        requests.setdefault(key, value)


def pod_status(
    spec: dict[str, Any],
    phase: str,
    ready: bool,
    restarts: int,
    waiting: tuple[str, str] | None,
    terminated: tuple[str, int] | None,
    last_terminated: tuple[str, int] | None,
    unschedulable: str | None,
    created: str,
) -> dict[str, Any]:
    if unschedulable:
        return {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": unschedulable,
                    "lastProbeTime": None,
                    "lastTransitionTime": created,
                }
            ],
        }
    statuses = []
    for container in spec["containers"]:
        state: dict[str, Any]
        if waiting:
            state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        elif terminated:
            state = {
                "terminated": {
                    "reason": terminated[0],
                    "exitCode": terminated[1],
                    "startedAt": created,
                    "finishedAt": ago(minutes=5),
                    "containerID": "containerd://abc",
                }
            }
        else:
            state = {"running": {"startedAt": created}}
        status: dict[str, Any] = {
            "name": container["name"],
            "image": container["image"],
            "imageID": f"{container['image']}@sha256:{'0' * 64}",
            "ready": ready,
            "started": "running" in state,
            "restartCount": restarts,
            "state": state,
            "lastState": {},
        }
        if "running" in state or "terminated" in state:
            status["containerID"] = "containerd://abc"
        if last_terminated:
            status["lastState"] = {
                "terminated": {
                    "reason": last_terminated[0],
                    "exitCode": last_terminated[1],
                    "startedAt": created,
                    "finishedAt": ago(minutes=1),
                }
            }
        statuses.append(status)
    scheduled = "True"
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": created},
        {"type": "Initialized", "status": "True", "lastTransitionTime": created},
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": created},
        {"type": "ContainersReady", "status": "True" if ready else "False", "lastTransitionTime": created},
        {"type": "PodScheduled", "status": scheduled, "lastTransitionTime": created},
    ]
    return {
        "phase": phase,
        "conditions": conditions,
        "hostIP": "10.0.0.11",
        "podIP": "10.244.1.23",
        "startTime": created,
        "qosClass": "Burstable",
        "containerStatuses": statuses,
    }


def deployment(doc: dict[str, Any], ready: int | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(doc)
    replicas = obj["spec"].get("replicas", 1)
    count = replicas if ready is None else ready
    obj["status"] = {
        "observedGeneration": 1,
        "replicas": replicas,
        "updatedReplicas": replicas,
        **({"readyReplicas": count, "availableReplicas": count} if count else {}),
    }
    return obj


def service(doc: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(doc)
    if obj["spec"].get("clusterIP") != "None":
        obj["spec"]["clusterIP"] = "10.96.12.34"
        obj["spec"]["clusterIPs"] = ["10.96.12.34"]
    obj["status"] = {"loadBalancer": {}}
    return obj


# -- cluster-level objects ------------------------------------------------------------------------


def node(
    name: str,
    cpu: str = "16",
    memory: str = "64Gi",
    gpus: dict[str, int] | None = None,
    *,
    unschedulable: bool = False,
    ready: bool = True,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    extended = {resource: str(count) for resource, count in (gpus or {}).items()}
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi", **extended}
    spec: dict[str, Any] = {"podCIDR": "10.244.1.0/24"}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
        "spec": spec,
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": ago(seconds=10),
                    "lastTransitionTime": ago(days=3),
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.33.2",
                "osImage": "Ubuntu 24.04",
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://2.0.5",
                "kernelVersion": "6.8.0",
                "kubeProxyVersion": "",
                "machineID": "m",
                "systemUUID": "s",
                "bootID": "b",
                "operatingSystem": "linux",
            },
        },
    }


def running_pod(
    name: str, namespace: str, node_name: str, requests: dict[str, str], phase: str = "Running"
) -> dict[str, Any]:
    """Someone else's pod, holding resources on a node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}
            ],
        },
        "status": {"phase": phase},
    }


def storage_class(
    name: str, provisioner: str, default: bool = False, allow_volume_expansion: bool | None = None
) -> dict[str, Any]:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    document: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": provisioner,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    if allow_volume_expansion is not None:
        document["allowVolumeExpansion"] = allow_volume_expansion
    return document


def claim(
    name: str,
    namespace: str,
    phase: str = "Bound",
    access_modes: Sequence[str] = ("ReadWriteMany",),
    storage_class_name: str = "nfs",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": list(access_modes),
            "resources": {"requests": {"storage": "20Gi"}},
            "storageClassName": storage_class_name,
            "volumeMode": "Filesystem",
        },
        "status": {
            "phase": phase,
            **({"accessModes": list(access_modes), "capacity": {"storage": "20Gi"}} if phase == "Bound" else {}),
        },
    }


def resource_quota(name: str, namespace: str, hard: dict[str, str], used: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": used},
    }


def daemon_set(name: str, namespace: str = "kube-system") -> dict[str, Any]:
    labels = {"k8s-app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": f"registry.k8s.io/{name}:v1"}]},
            },
        },
        "status": {"currentNumberScheduled": 3, "desiredNumberScheduled": 3, "numberMisscheduled": 0, "numberReady": 3},
    }


# -- custom resources: CRDs, API discovery, Volcano and Kueue objects ----------------------------

CUSTOM_PATH = (
    r"/apis/(?P<group>[^/]+)/(?P<version>v[0-9]+(?:(?:alpha|beta)[0-9]+)?)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?"
)
BUILT_IN_GROUPS = {"apps", "batch", "storage.k8s.io", "networking.k8s.io", "apiextensions.k8s.io"}
NO_RESOURCE = "the server could not find the requested resource"
KUEUE = "kueue.x-k8s.io"
NO_WORKLOADS = {"pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0}


def discovery_path(path: str) -> str | None:
    """`group/version` of a discovery request (GET /apis/<group>/<version>), else None."""
    match = re.fullmatch(r"/apis/([^/]+/v[0-9]+(?:(?:alpha|beta)[0-9]+)?)", path)
    return match[1] if match else None


def api_resources(crd: dict[str, Any], version: str) -> list[dict[str, Any]]:
    """The APIResource entries a CRD adds to the discovery of one version (with its status subresource)."""
    names, namespaced = crd["spec"]["names"], crd["spec"]["scope"] == "Namespaced"
    entry = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    resource = {
        "name": names["plural"],
        "singularName": names.get("singular", names["kind"].lower()),
        "namespaced": namespaced,
        "kind": names["kind"],
        "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
        **({"shortNames": names["shortNames"]} if names.get("shortNames") else {}),
        "storageVersionHash": "fakehash",
    }
    status = {"name": f"{names['plural']}/status", "singularName": "", "namespaced": namespaced}
    status |= {"kind": names["kind"], "verbs": ["get", "patch", "update"]}
    return [resource, status] if "status" in entry.get("subresources", {}) else [resource]


def established(crd: dict[str, Any]) -> dict[str, Any]:
    """A CRD as the API server holds it once installed: names accepted, Established."""
    document = copy.deepcopy(crd)
    document["status"] = {
        "acceptedNames": document["spec"]["names"],
        "storedVersions": [v["name"] for v in document["spec"]["versions"] if v.get("storage")],
        "conditions": [
            {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": ago(days=30)}
            for kind, reason, message in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ],
    }
    return document


def vendored_crd(relative: str, served: Sequence[str] | None = None) -> dict[str, Any]:
    """A CRD vendored under tests/crds (upstream's file), installed; `served` keeps only those versions (an older
    release of the project)."""
    import yaml

    from tests.crds.crdlib import CRD_DIR

    crd: dict[str, Any] = yaml.safe_load((CRD_DIR / relative).read_text(encoding="utf-8"))
    if served is not None:
        crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] in served]
        crd["spec"]["versions"][-1]["storage"] = True
    return established(crd)


def plain_crd(group: str, kind: str, plural: str, scope: str, versions: Sequence[str]) -> dict[str, Any]:
    """A CRD that tests/crds does not vendor (Volcano's Queue, Kueue's WorkloadPriorityClass), with an open schema."""
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return established(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group,
                "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                "scope": scope,
                "versions": [
                    {"name": v, "served": True, "storage": i == len(versions) - 1, "schema": schema}
                    for i, v in enumerate(versions)
                ],
            },
        }
    )


VOLCANO_CRDS = (
    "volcano/v1.15.1/scheduling.volcano.sh_podgroups.yaml",
    "scheduling.volcano.sh Queue queues Cluster v1beta1",
)
COSCHEDULING_CRDS = ("scheduler-plugins/v0.34.7/scheduling.x-k8s.io_podgroups.yaml",)
KUEUE_CRDS = (
    "kueue/v0.19.2/kueue.x-k8s.io_localqueues.yaml",
    "kueue/v0.19.2/kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io WorkloadPriorityClass workloadpriorityclasses Cluster v1beta1 v1beta2",
)


def crds(*specs: str, served: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """CRDs from VOLCANO_CRDS-style specs: a vendored file, or `group Kind plural Scope version...` for plain_crd."""
    documents = []
    for spec in specs:
        if spec.endswith(".yaml"):
            documents.append(vendored_crd(spec, served))
        else:
            group, kind, plural, scope, *versions = spec.split()
            kept = [v for v in versions if served is None or v in served]
            documents.append(plain_crd(group, kind, plural, scope, kept))
    return documents


def assert_served_valid(document: dict[str, Any]) -> dict[str, Any]:
    """The object validates against its vendored CRD (tests/crds); its status is checked too, since the fake serves
    it as the controller wrote it."""
    from tests.crds.crdlib import validate

    subresource = ".status: set in a manifest, but the API server ignores it (status subresource)"
    errors = [error for error in validate(document) if error != subresource]
    assert not errors, errors
    return document


def active_condition(reason: str = "Ready", message: str = "Can admit new workloads") -> dict[str, Any]:
    status = "True" if reason == "Ready" else "False"
    return {"type": "Active", "status": status, "reason": reason, "message": message, "lastTransitionTime": ago(days=1)}


def local_queue(
    name: str, namespace: str, cluster_queue: str, stop_policy: str | None = None, version: str = "v1beta2"
) -> dict[str, Any]:
    """A Kueue LocalQueue with the status Kueue's controller writes."""
    spec: dict[str, Any] = {"clusterQueue": cluster_queue}
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    ready = active_condition("Ready", "Can submit new workloads to localQueue")
    condition = active_condition("Stopped", "LocalQueue is stopped") if stop_policy else ready
    return assert_served_valid(
        {
            "apiVersion": f"{KUEUE}/{version}",
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": spec,
            "status": {"conditions": [condition], **NO_WORKLOADS},
        }
    )


def cluster_queue(
    name: str,
    groups: Sequence[dict[str, dict[str, str]]],
    *,
    cohort: str | None = None,
    borrowing_limit: str | None = None,
    inactive: tuple[str, str] | None = None,
    version: str = "v1beta2",
) -> dict[str, Any]:
    """A Kueue ClusterQueue: each group maps flavor -> {resource: nominalQuota} (every flavor of a group lists the
    same resources, in the same order, as Kueue requires); `borrowing_limit` applies to every resource."""
    resource_groups = []
    for group in groups:
        covered = list(next(iter(group.values())))
        assert all(list(quotas) == covered for quotas in group.values()), "flavors must list the covered resources"
        flavors = [
            {
                "name": flavor,
                "resources": [
                    {"name": resource, "nominalQuota": quota}
                    | ({"borrowingLimit": borrowing_limit} if borrowing_limit is not None else {})
                    for resource, quota in quotas.items()
                ],
            }
            for flavor, quotas in group.items()
        ]
        resource_groups.append({"coveredResources": covered, "flavors": flavors})
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": resource_groups}
    if cohort:
        spec["cohortName" if version == "v1beta2" else "cohort"] = cohort
    return assert_served_valid(
        {
            "apiVersion": f"{KUEUE}/{version}",
            "kind": "ClusterQueue",
            "metadata": {"name": name, "generation": 1},
            "spec": spec,
            "status": {
                "conditions": [active_condition(*inactive) if inactive else active_condition()],
                **NO_WORKLOADS,
            },
        }
    )


def workload_priority_class(name: str, value: int, version: str = "v1beta2") -> dict[str, Any]:
    kind = {"apiVersion": f"{KUEUE}/{version}", "kind": "WorkloadPriorityClass"}
    return {**kind, "metadata": {"name": name}, "value": value}


def volcano_queue(name: str, state: str | None = "Open") -> dict[str, Any]:
    """A Volcano Queue (cluster-scoped); `state` None: not yet reconciled by Volcano's queue controller."""
    status: dict[str, Any] = {"running": 0, "pending": 0, "inqueue": 0, "reservation": {}, "allocated": {}}
    if state:
        status["state"] = state
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": True},
        "status": status,
    }
