"""The tests' one fake Kubernetes API server: a real HTTP server on 127.0.0.1.

No API server runs on the development and CI machines (docs/architecture.md §8). KubeServer stands in
for one over a real socket, so every client runs its whole stack against it: tfchart's KubeApi (the
pinned kubernetes client, reached through a kubeconfig file), the run supervisor in its own process,
and helm (`template --dry-run=server`, its `lookup`). It frames and negotiates as kube-apiserver v1.36.2
does, which tests/test_kube_transcripts.py checks against recordings of a real one (TFD_KUBE_TRANSCRIPTS).
The server

- speaks HTTP/1.1 like Go's net/http (tests/kubeapi_wire.py): keep-alive unless the client asks to close, a
  body up to 2,048 bytes with Content-Length and a longer one chunked (an object in one chunk, a list streamed
  from a first 2,048-byte chunk), a watch and a log chunked whatever their size; compact JSON with a newline;
  406 NotAcceptable for an Accept it does not serve (`text/plain`, pods/log included); errors as metav1.Status
  with the server's reason, message and details (`jobs.batch "x" not found`, plural kind, no group for core);
- keeps objects by (resource, namespace, name) as the API server serves them (uid, resourceVersion,
  creationTimestamp, quantities as strings), built by the helpers below from the chart's render;
- answers GET of an object, of a list (label and field selectors read like the server does, 400 for a field
  it does not index; items without kind and apiVersion; `limit` pages with an opaque continue token and
  remainingItemCount, every page at the first one's resourceVersion; an exact resourceVersion older than the
  history is 410 Gone), of a pod's log (text/plain; 400 for a container the pod lacks, 204 with no body for a
  pod bound to no node; tailLines, previous, sinceSeconds, timestamps; follow: held open while the container
  runs, until the client hangs up), of /scale (autoscaling/v1, spec.replicas omitted when 0), and API
  discovery: the built-in groups, and a custom group/version only where a CustomResourceDefinition added to
  the server serves it (else the server's 404);
- creates (POST: 201, 409 AlreadyExists), replaces (PUT: 409 Conflict for a stale resourceVersion) and patches
  (merge, JSON and strategic merge patches of objects and of /scale: tests/kubeapi_patch.py; 415 for any other
  type), each update checked by the update rules of tests/kubeapi_rules.py (422 Invalid with causes: a Job's
  template or completions, a StatefulSet's selector); `dryRun=All` answers without storing; DELETE like the API
  server: an object with finalizers (a claim's kubernetes.io/pvc-protection; orphan or foregroundDeletion, added
  by propagationPolicy Orphan or Foreground, or orphan for a batch/v1 Job deleted without a policy, with the
  server's Warning header) gets a deletionTimestamp, is answered as it is and stays readable for
  `linger[(resource, namespace, name)]` more GETs (0 by default, None: it never goes); one without goes at once
  and a Status is answered;
- with `authenticate({token: user})`, reads bearer tokens (401 for an unknown one) and authorizes a service
  account by the Roles bound to it on the server, as RBAC does (tests/kubeapi_rbac.py); without it, every
  request is the admin's;
- answers an injected failure (`fail`) with its metav1.Status, and every request with `proxy_answer`
  when set (a proxy's login page in the way);
- records every request with its `Call`, HTTP status, headers and time, before answering it;
- serves list+watch as the API server does: a resourceVersion counter rises on every write (a client's create,
  patch or delete, and a test's or controller's `add`, `update`, `delete`), each stored object carries the one of
  its last write and a list the current one; `?watch=1` streams JSON events, one per chunk (ADDED, MODIFIED,
  DELETED; BOOKMARK with allowWatchBookmarks, the kind's empty object, the first after the initial events marked
  `k8s.io/initial-events-end`) after `resourceVersion` (none or "0": ADDED for what exists first), through the
  same label and field selectors, an object that leaves or enters them seen as DELETED or ADDED, until
  `timeoutSeconds`. Only the last `history` events are kept: a watch from an older resourceVersion gets HTTP 200
  and one ERROR event with a 410 Expired Status, as the API server's watch cache answers it. `cut_watches` breaks
  every open watch mid-stream (a dropped connection, an API server restart), and with `expire` forgets the history.

Where it answers unlike the server (each also named in tests/test_kube_transcripts.py or the sibling module that
holds the rule): no kubelet, so no log request fails to reach one (the server's 500); BOOKMARKs every
BOOKMARK_SECONDS of quiet (the server: about once a minute); JSON whatever else the client accepts (YAML,
protobuf); no server-side apply; strategic merge by `name` only; an exact-resourceVersion list still in the
history answered at the current state; validation only by the update rules; no ClusterRoles.

JobController and StatefulSetController, at the end, play Kubernetes' Job controller for one rendered
chief Job and its StatefulSet controller for one rendered ps/worker StatefulSet, whose pods run as local
processes, for the supervisor and suspend tests; the Job's pods are Pod objects whose log is what the
process printed.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import copy
import functools
import json
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import yaml

from tests.chartlib import render
from tests.crds import crdlib
from tests.kubeapi_http import Raw, decoded, handler
from tests.kubeapi_patch import MERGE_PATCH, merge_patch, patched_document
from tests.kubeapi_rbac import ADMIN, UNAUTHORIZED, authorize
from tests.kubeapi_rules import admission_refusal, update_causes
from tests.kubeapi_wire import (
    acceptable,
    already_exists,
    conflict,
    deleted,
    encoded,
    failure,
    invalid,
    not_acceptable_body,
    not_found,
)
from tfchart.cluster.kube import KubeApi
from tfdcontract.runstate import now_text

if TYPE_CHECKING:
    from tfchart.local.pods import LocalPod
    from tfchart.local.processes import LocalCluster

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)
BOOKMARK_SECONDS = 1.0  # a watch that asked for bookmarks gets one after this long without an event

# group version -> {resource: kind}: what the API server serves without any CRD (every kind the chart renders)
BUILT_IN: dict[str, dict[str, str]] = {
    "v1": {"pods": "Pod", "services": "Service", "configmaps": "ConfigMap", "secrets": "Secret", "events": "Event",
           "serviceaccounts": "ServiceAccount", "persistentvolumeclaims": "PersistentVolumeClaim",
           "resourcequotas": "ResourceQuota", "nodes": "Node", "namespaces": "Namespace",
           "persistentvolumes": "PersistentVolume"},
    "apps/v1": {"statefulsets": "StatefulSet", "deployments": "Deployment", "daemonsets": "DaemonSet"},
    "batch/v1": {"jobs": "Job"},
    "storage.k8s.io/v1": {"storageclasses": "StorageClass"},
    "networking.k8s.io/v1": {"networkpolicies": "NetworkPolicy", "ingresses": "Ingress"},
    "rbac.authorization.k8s.io/v1": {"roles": "Role", "rolebindings": "RoleBinding"},
    "policy/v1": {"poddisruptionbudgets": "PodDisruptionBudget"},
    "apiextensions.k8s.io/v1": {"customresourcedefinitions": "CustomResourceDefinition"},
    # what preflight reads of JobSet's controller: its validating webhook and the endpoints of the Service it calls
    "admissionregistration.k8s.io/v1": {"validatingwebhookconfigurations": "ValidatingWebhookConfiguration"},
    "discovery.k8s.io/v1": {"endpointslices": "EndpointSlice"},
}  # fmt: skip
CLUSTER_SCOPED = {"nodes", "namespaces", "storageclasses", "customresourcedefinitions", "persistentvolumes",
                  "validatingwebhookconfigurations"}  # fmt: skip
# the custom resources tests serve through their CRDs: Volcano's, Kueue's (topology-aware placement too), JobSet's
CUSTOM = {"Queue": "queues", "LocalQueue": "localqueues", "ClusterQueue": "clusterqueues",
          "WorkloadPriorityClass": "workloadpriorityclasses", "ResourceFlavor": "resourceflavors",
          "Topology": "topologies", "HyperNode": "hypernodes", "JobSet": "jobsets", "Workload": "workloads"}
RESOURCE_OF = {kind: resource for kinds in BUILT_IN.values() for resource, kind in kinds.items()} | CUSTOM
KIND_OF = {resource: kind for kind, resource in RESOURCE_OF.items()}
PATH = re.compile(
    r"/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))(?:/namespaces/(?P<namespace>[^/]+))?"
    r"(?:/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?)?"
)
# field selectors the API server supports besides metadata.name and metadata.namespace
FIELDS = {"pods": {"spec.nodeName", "spec.restartPolicy", "status.phase"},
          "events": {"involvedObject.kind", "involvedObject.name", "involvedObject.namespace", "reason", "type"}}
NO_RESOURCE = "the server could not find the requested resource"
QUANTITY_KEYS = {"limits", "requests", "capacity", "allocatable", "hard", "used"}
JOB_ORPHANS = ('299 - "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to '
               'remove them or set propagationPolicy=Orphan to suppress this warning"')
# what a BOOKMARK's object carries besides kind, apiVersion and metadata: the kind's zero value as Go encodes it
BOOKMARK_BODY: dict[str, dict[str, Any]] = {
    "Job": {"spec": {"template": {"metadata": {}, "spec": {"containers": None}}}, "status": {}},
    "Pod": {"spec": {"containers": None}, "status": {}},
}


@dataclass(frozen=True)
class Call:
    """One request as the API server reads it."""

    verb: str  # list | get | log | patch | delete | discover (group/version, or api, apis, version)
    resource: str  # plural (statefulsets/scale for a subresource), or the group/version discovered
    namespace: str | None = None
    name: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    params: tuple[tuple[str, str], ...] = ()  # the other query parameters, sorted (tailLines, propagationPolicy)


@dataclass(frozen=True)
class Request:
    """One HTTP request received, with what it asked and the status it was answered."""

    method: str
    path: str
    query: str
    body: Any
    call: Call
    status: int
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)  # names in lower case
    at: float = field(default_factory=time.monotonic, compare=False)  # when it was answered

    @property
    def writes(self) -> bool:
        """Whether the request may change an object: not a read, nor a dry run (dryRun=All stores nothing)."""
        return self.method != "GET" and "dryRun=All" not in self.query.split("&")


@dataclass
class PodLog:
    """A pod's log. Followed, the lines after `pause_after` wait for `resume` (and are never sent when it does
    not come), and a `running` container's stream stays open after the last line until the client hangs up
    (`hung_up`). Each line was written at its `written` time (the log's creation when not given), which
    sinceSeconds and timestamps read; `previous` is the log of the container that ran before (a restart)."""

    text: str
    running: bool = False
    pause_after: int | None = None
    resume: threading.Event = field(default_factory=threading.Event)
    hung_up: threading.Event = field(default_factory=threading.Event)
    written: Sequence[datetime] = ()
    previous: str = ""
    created: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def lines(self, previous: bool, since_seconds: int | None, timestamps: bool) -> list[str]:
        """The lines the kubelet sends: of the previous container or the current one, those written in the
        last `since_seconds`, each prefixed by its time in RFC 3339 with nanoseconds."""
        lines = (self.previous if previous else self.text).splitlines(keepends=True)
        stamps = [self.written[i] if i < len(self.written) and not previous else self.created
                  for i in range(len(lines))]  # fmt: skip
        if since_seconds is not None:
            oldest = datetime.now(timezone.utc) - timedelta(seconds=since_seconds)
            kept = [(line, at) for line, at in zip(lines, stamps, strict=True) if at >= oldest]
            lines, stamps = [line for line, _ in kept], [at for _, at in kept]
        if timestamps:
            lines = [at.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") + line for line, at in zip(lines, stamps, strict=True)]
        return lines


@dataclass(frozen=True)
class LogStream:
    """The answer to a log request: these lines of `log`, followed or not."""

    log: PodLog
    lines: list[str]
    follow: bool


@dataclass(frozen=True)
class Event:
    """One write: its resourceVersion, the object's key, ADDED | MODIFIED | DELETED, the object after it (its
    last state for DELETED) and before it."""

    revision: int
    key: tuple[str, str | None, str]
    kind: str
    document: dict[str, Any]
    before: dict[str, Any] | None


@dataclass(frozen=True)
class Watched:
    """What a watch asked for: a resource, in a namespace (None: all), through label and field selectors."""

    resource: str
    namespace: str | None
    labels: str
    fields: str

    def covers(self, key: tuple[str, str | None, str]) -> bool:
        return key[0] == self.resource and self.namespace in (None, key[1])

    def matches(self, document: dict[str, Any]) -> bool:
        return labels_match(document["metadata"].get("labels") or {}, self.labels) and fields_match(
            document, self.fields)


@dataclass
class WatchStream:
    """An open watch: the events after `since` as they come (`first` before them), until its timeout, a cut or
    the server closing; a BOOKMARK every BOOKMARK_SECONDS of quiet when asked for."""

    server: KubeServer
    watched: Watched
    since: int
    first: list[dict[str, Any]] | None  # the ADDED events of what exists, for a watch from no resourceVersion
    timeout: float | None
    bookmarks: bool
    cuts: int  # the server's cut count when it opened
    group_version: str = "v1"
    cut: bool = False

    def bookmark(self, revision: int) -> dict[str, Any]:
        """A BOOKMARK as the API server sends it: the kind's empty object at `revision`; the first after the initial
        ADDED events (a watch from no resourceVersion) says so in an annotation."""
        kind = KIND_OF.get(self.watched.resource, "")
        metadata: dict[str, Any] = {"resourceVersion": str(revision)}
        if self.first is not None:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
            self.first = None
        return {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": self.group_version, "metadata": metadata,
                                               **copy.deepcopy(BOOKMARK_BODY.get(kind, {}))}}  # fmt: skip

    def events(self) -> Iterator[dict[str, Any]]:
        yield from self.first or []
        server, ends = self.server, time.monotonic() + (self.timeout if self.timeout is not None else 3600.0)
        quiet_since = time.monotonic()
        while True:
            with server.changed:
                server.changed.wait_for(lambda: server.revision > self.since or server.cuts != self.cuts
                                        or server.closing or time.monotonic() >= ends,
                                        timeout=max(0.0, min(BOOKMARK_SECONDS, ends - time.monotonic())))
                if server.cuts != self.cuts or server.closing:
                    self.cut = True
                    return
                found = server.events_after(self.since, self.watched)
                revision = server.revision
            if found is None:
                yield {"type": "ERROR", "object": failure(410, f"too old resource version: {self.since} ({revision})")}
                return
            self.since = revision
            yield from found
            if found:
                quiet_since = time.monotonic()
            elif self.bookmarks and time.monotonic() - quiet_since >= BOOKMARK_SECONDS:
                quiet_since = time.monotonic()
                yield self.bookmark(revision)
            if time.monotonic() >= ends:
                return


class KubeServer:
    """The fake API server (see the module docstring), listening on 127.0.0.1 until `close`."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], PodLog] = {}
        self.failures: dict[tuple[str, str, str | None], tuple[int, str]] = {}
        self.linger: dict[tuple[str, str | None, str], int | None] = {}
        self.terminating: dict[tuple[str, str | None, str], int | None] = {}
        self.requests: list[Request] = []
        self.proxy_answer: tuple[int, str, bytes] | None = None  # (status, content type, body) for every request
        self.users: dict[str, str] | None = None  # bearer token -> user, once `authenticate` turns tokens on
        self.lock = threading.RLock()
        self.answered_one = threading.Condition(self.lock)  # notified after each request is recorded
        self.folder = Path(tempfile.mkdtemp(prefix="kubeapi-"))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.closing = False
        self.revision = 1000  # the last write's resourceVersion
        self.compacted = 0  # a watch from before this resourceVersion is answered 410 Expired
        self.history: collections.deque[Event] = collections.deque(maxlen=1000)
        self.cuts = 0  # cut_watches calls: a watch that started before one ends mid-stream
        self.changed = threading.Condition(self.lock)  # notified on each write and each cut
        self.thread = threading.Thread(target=self.serve, daemon=True, name="kubeapi")
        self.thread.start()

    def serve(self) -> None:
        while not self.closing:
            self.server.handle_request()

    def close(self) -> None:
        """Stops listening now (serve_forever's shutdown would wait for its next poll)."""
        self.closing = True
        with self.changed:
            self.changed.notify_all()  # open watches end
        for log in self.logs.values():
            log.resume.set()
        with contextlib.suppress(OSError):  # wakes the loop up
            socket.create_connection(("127.0.0.1", self.server.server_address[1]), timeout=5).close()
        self.thread.join(10)
        self.server.server_close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- the test's side -----------------------------------------------------------------------------

    def add(self, *documents: dict[str, Any]) -> KubeServer:
        with self.lock:
            for document in documents:
                document = served(document)
                meta = document["metadata"]
                self.store((RESOURCE_OF[document["kind"]], meta.get("namespace"), meta["name"]), document)
        return self

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of the object as stored, or None."""
        with self.lock:
            return copy.deepcopy(self.objects.get((RESOURCE_OF[kind], namespace, name)))

    def update(self, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> None:
        """A JSON merge patch (a null removes the key), as a controller or kubectl would write it."""
        with self.lock:
            key = (RESOURCE_OF[kind], namespace, name)
            self.store(key, merge_patch(self.objects[key], patch))

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        """Removes the object at once (a controller's or the garbage collector's doing)."""
        with self.lock:
            self.remove((RESOURCE_OF[kind], namespace, name))

    # -- writes, each at the next resourceVersion, and the watches that see them ----------------------------

    def store(self, key: tuple[str, str | None, str], document: dict[str, Any]) -> dict[str, Any]:
        """Creates or replaces an object at the next resourceVersion (ADDED or MODIFIED). The stored document is
        never changed in place afterwards (each write stores a new one), so the history can hold it as it is."""
        with self.changed:
            self.revision += 1
            stamped = {**document, "metadata": {**document["metadata"], "resourceVersion": str(self.revision)}}
            before = self.objects.get(key)
            self.objects[key] = stamped
            self.history.append(Event(self.revision, key, "MODIFIED" if before else "ADDED", stamped, before))
            self.changed.notify_all()
            return stamped

    def remove(self, key: tuple[str, str | None, str]) -> dict[str, Any] | None:
        """Deletes an object (DELETED, its last state at the next resourceVersion); None when there was none."""
        with self.changed:
            self.terminating.pop(key, None)
            before = self.objects.pop(key, None)
            if before is None:
                return None
            self.revision += 1
            gone = {**before, "metadata": {**before["metadata"], "resourceVersion": str(self.revision)}}
            self.history.append(Event(self.revision, key, "DELETED", gone, before))
            self.changed.notify_all()
            return before

    def cut_watches(self, expire: bool = False) -> None:
        """Breaks every open watch mid-stream (no closing chunk), as a dropped connection or an API server restart
        does; `expire`: the event history is forgotten too, so a watch resumed from a resourceVersion seen before
        gets 410 Expired and must list again."""
        with self.changed:
            self.cuts += 1
            if expire:
                self.history.clear()
                self.revision += 1
                self.compacted = self.revision
            self.changed.notify_all()

    def events_after(self, revision: int, watched: Watched) -> list[dict[str, Any]] | None:
        """The events a watch of `watched` sees after `revision`, or None when the history no longer reaches back
        that far (410)."""
        if revision < self.kept_from():
            return None
        found = []
        for event in self.history:
            if event.revision <= revision or not watched.covers(event.key):
                continue
            now = event.kind != "DELETED" and watched.matches(event.document)
            was = event.before is not None and watched.matches(event.before)
            if now or was:
                kind = event.kind if now == was else "ADDED" if now else "DELETED"
                found.append({"type": kind, "object": event.document})
        return found

    def set_log(self, namespace: str, pod: str, lines: Sequence[str], **stream: Any) -> PodLog:
        log = PodLog("".join(line + "\n" for line in lines), **stream)
        self.logs[(namespace, pod)] = log
        return log

    def append_log(self, namespace: str, pod: str, line: str) -> None:
        """One more line in a pod's log (the kubelet writing what its container printed)."""
        with self.lock:
            log = self.logs.setdefault((namespace, pod), PodLog(""))
            log.text += line + "\n"

    def fail(self, verb: str, resource: str, status: int, message: str, namespace: str | None = None) -> None:
        """Answer `verb resource` (in `namespace`, or anywhere when None) with an error Status."""
        self.failures[(verb, resource, namespace)] = (status, message)

    def reset(self) -> None:
        """An empty cluster again (a test's next case)."""
        with self.lock:
            for store in (self.objects, self.logs, self.failures, self.linger, self.terminating, self.requests,
                          self.history):
                store.clear()
            self.proxy_answer = self.users = None

    @property
    def calls(self) -> list[Call]:
        return [request.call for request in self.requests]

    def wait_for(self, call: Call, count: int = 1, timeout: float = 60) -> None:
        """Blocks until `call` was asked `count` times (a client in another process reached that point)."""
        with self.answered_one:
            reached = self.answered_one.wait_for(lambda: self.calls.count(call) >= count, timeout)
        assert reached, f"{call} was asked {self.calls.count(call)} time(s) in {timeout} s, not {count}"

    def answered(self, call: Call) -> list[int]:
        """The HTTP status of each request that asked `call`, in order."""
        return [request.status for request in self.requests if request.call == call]

    def writes(self) -> list[tuple[str, str, Any]]:
        """Every request that changed (or tried to change) something: (method, path, body)."""
        with self.lock:
            return [(r.method, r.path, r.body) for r in self.requests if r.writes]

    def kubeconfig(self, namespace: str | None = None) -> Path:
        """A kubeconfig whose current context reaches this server, in `namespace` (None: none set, so default)."""
        context = {"cluster": "fake", "user": "someone", **({"namespace": namespace} if namespace else {})}
        document = {
            "apiVersion": "v1", "kind": "Config", "current-context": "team",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "someone", "user": {"token": "t0ken"}}],
            "contexts": [{"name": "team", "context": context}],
        }  # fmt: skip
        path = self.folder / f"kubeconfig-{namespace or 'none'}"
        path.write_text(json.dumps(document))
        return path

    def api(self) -> KubeApi:
        """tfchart's KubeApi of this server, through a kubeconfig as `tfchart --kubeconfig` builds it."""
        return KubeApi.from_config(self.kubeconfig())

    # -- the API server's side -----------------------------------------------------------------------

    def authenticate(self, users: Mapping[str, str]) -> None:
        """Bearer tokens on from now (tests/kubeapi_rbac.py): `users` maps a token to its user; the kubeconfig's own
        token is the admin's, any other token is answered 401."""
        self.users = {"t0ken": ADMIN, **users}

    def answer(
        self, method: str, target: str, body: Any, content_type: str, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        """Records the request and returns its status and answer: a JSON document, a LogStream, a WatchStream,
        a Raw answer, or a proxy's (status, content type, body). `body`: the raw bytes or the decoded JSON."""
        parts = urlsplit(target)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        headers = {name.lower(): value for name, value in (headers or {}).items()}
        if isinstance(body, bytes):
            body = decoded(body)
        with self.lock:
            if self.proxy_answer:
                call, status, answer = Call(method.lower(), parts.path), self.proxy_answer[0], self.proxy_answer
            else:
                call, status, answer = self.dispatch(method, parts.path, query, body, content_type, headers)
            self.requests.append(Request(method, parts.path, parts.query, body, call, status, headers))
            self.answered_one.notify_all()
            return status, answer

    def user_of(self, headers: Mapping[str, str]) -> str | None:
        """The user a request acts as (None: its token is not known, 401)."""
        if self.users is None:
            return ADMIN
        scheme, _, token = headers.get("authorization", "").partition(" ")
        return self.users.get(token.strip()) if scheme.lower() == "bearer" else None

    def dispatch(
        self, method: str, path: str, query: dict[str, str], body: Any, content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[Call, int, Any]:
        headers = headers or {}
        user = self.user_of(headers)
        if user is None:
            return Call(method.lower(), path), 401, UNAUTHORIZED
        if not acceptable(headers.get("accept")):
            return Call(method.lower(), path), 406, Raw("application/json", not_acceptable_body())
        if path in ("/version", "/api", "/apis"):
            return Call("discover", path[1:]), 200, DISCOVERY[path]
        match = PATH.fullmatch(path)
        if match is None:
            return Call(method.lower(), path), 404, failure(404, NO_RESOURCE, details={})
        group_version = f"{match['group']}/{match['version']}" if match["group"] else "v1"
        group = match["group"] or ""
        namespace, resource, name, sub = match["namespace"], match["resource"], match["name"], match["sub"]
        if namespace and resource is None:  # GET /api/v1/namespaces/NAME
            namespace, resource, name = None, "namespaces", namespace
        if resource is None:
            call = Call("discover", group_version)
            return call, *(self.injected(call) or self.discovery(group_version))
        labels, fields = query.pop("labelSelector", None), query.pop("fieldSelector", None)
        watching = not name and query.get("watch") in ("1", "true")
        verb = {"GET": "log" if sub == "log" else "get" if name else "watch" if watching else "list"}.get(
            method, method.lower())
        shown = resource if sub in (None, "log") else f"{resource}/{sub}"
        call = Call(verb, shown, namespace, name, labels, fields, tuple(sorted(query.items())))
        refused = authorize(self.objects, user, method, group, resource, sub, namespace, name, watching, fields)
        if refused:
            return call, 403, refused
        injected = self.injected(call)
        if injected:
            return call, *injected
        if not self.serves(group_version, resource):
            return call, 404, failure(404, NO_RESOURCE, details={})
        if method in ("GET", "DELETE") and not name:
            bad = self.bad_selector(resource, fields or "")
            if bad:
                return call, 400, failure(400, bad)
        if verb == "watch":
            return call, 200, self.watch_of(group_version, resource, namespace, labels or "", fields or "", query)
        if verb == "list":
            return call, *self.listing(group_version, resource, namespace, labels or "", fields or "", query)
        if not isinstance(body, (dict, list, type(None))):
            what = "patch" if method == "PATCH" else "body"
            return call, 400, failure(400, f"error decoding {what}: {body.error}")
        dry = query.get("dryRun") == "All"
        if method == "POST" and not name:
            return call, *self.created(group, resource, namespace, body, dry)
        key = (resource, namespace, str(name))
        if method == "GET":
            self.count_down(key)
        document = self.objects.get(key)
        if document is None:
            return call, 404, not_found(resource, group, str(name))
        if method == "DELETE":
            options = body if isinstance(body, dict) else {}
            policy = query.get("propagationPolicy") or options.get("propagationPolicy") or ""
            return call, *self.deletion(key, document, policy, group, dry)
        if method in ("PATCH", "PUT"):
            patch_type = content_type if method == "PATCH" else ""
            return call, *self.updated(key, group, sub, body, patch_type, dry, group_version in BUILT_IN)
        if method != "GET":
            return call, 405, failure(405, f"{method} is not supported here")
        if sub == "log":
            return call, *self.log_of(document, query)
        return call, 200, scale_of(document) if sub == "scale" else document

    def injected(self, call: Call) -> tuple[int, dict[str, Any]] | None:
        found = self.failures.get((call.verb, call.resource, call.namespace))
        found = found or self.failures.get((call.verb, call.resource, None))
        return (found[0], failure(*found)) if found else None

    def crds(self, group: str, version: str) -> list[dict[str, Any]]:
        """The CustomResourceDefinitions that serve group/version."""
        return [
            crd for (resource, _, _), crd in sorted(self.objects.items(), key=lambda item: str(item[0]))
            if resource == "customresourcedefinitions" and crd["spec"]["group"] == group
            and any(v["name"] == version and v.get("served") for v in crd["spec"]["versions"])
        ]  # fmt: skip

    def serves(self, group_version: str, resource: str) -> bool:
        if group_version in BUILT_IN:
            return resource in BUILT_IN[group_version]
        group, _, version = group_version.partition("/")
        return any(crd["spec"]["names"]["plural"] == resource for crd in self.crds(group, version))

    def discovery(self, group_version: str) -> tuple[int, dict[str, Any]]:
        """The APIResourceList of group/version: built in, or of the CRDs serving it (every user may read it)."""
        if group_version in BUILT_IN:
            resources = [
                {"name": resource, "singularName": kind.lower(), "namespaced": resource not in CLUSTER_SCOPED,
                 "kind": kind, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                for resource, kind in BUILT_IN[group_version].items()
            ]  # fmt: skip
        else:
            group, _, version = group_version.partition("/")
            resources = [entry for crd in self.crds(group, version) for entry in api_resources(crd, version)]
        if not resources:
            return 404, failure(404, NO_RESOURCE, details={})
        return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                     "resources": resources}  # fmt: skip

    @staticmethod
    def bad_selector(resource: str, fields: str) -> str | None:
        """Why the API server refuses a field selector (a field it does not index, a value with an unescaped
        `=`), or None."""
        supported = {"metadata.name", "metadata.namespace", *FIELDS.get(resource, ())}
        for term in split_terms(fields):
            key = field_key(term)
            value = re.split(r"!=|==?", term, maxsplit=1)[1] if re.search(r"!=|=", term) else ""
            if "=" in value:
                return "invalid field selector: unescaped character in value: 61"
            if key not in supported:
                return f"field label not supported: {key}"
        return None

    def listing(
        self, group_version: str, resource: str, namespace: str | None, labels: str, fields: str,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """The matching objects (each without kind and apiVersion, as in a real list); with a limit, one page and a
        continue token while more remain, as the API server pages a list: every page at the first one's
        resourceVersion. A list at an exact resourceVersion older than the history is 410 Gone."""
        query = query or {}
        revision, start = self.revision, ""
        if query.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"] + "=" * (-len(query["continue"]) % 4)))
                revision, start = int(token["rv"]), str(token["start"])
            except (ValueError, KeyError, TypeError) as error:
                return 400, failure(400, f"invalid continue token: continue key is not valid: {error}")
        elif query.get("resourceVersionMatch") == "Exact" and int(query.get("resourceVersion") or 0) < self.kept_from():
            return 410, failure(410, "The resourceVersion for the provided list is too old.")
        def at(where: str | None, name: str) -> str:  # its key under the list's in etcd
            return f"/{where}/{name}" if namespace is None and where else f"/{name}"

        kept = sorted((at(item_namespace, name), document)
                      for (stored, item_namespace, name), document in self.objects.items()
                      if stored == resource and namespace in (None, item_namespace))  # fmt: skip
        items = [document for key, document in kept
                 if key >= start and labels_match(document["metadata"].get("labels") or {}, labels)
                 and fields_match(document, fields)]  # fmt: skip
        metadata: dict[str, Any] = {"resourceVersion": str(revision)}
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"v": "meta.k8s.io/v1", "rv": revision, "start": at(last.get("namespace"), last["name"]) + "\0"}
            encoded_token = base64.urlsafe_b64encode(json.dumps(token, separators=(",", ":")).encode())
            metadata |= {"continue": encoded_token.decode().rstrip("="),
                         "remainingItemCount": len(items) - limit}  # fmt: skip
            items = items[:limit]
        listed = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
        return 200, {"kind": f"{KIND_OF.get(resource, '')}List", "apiVersion": group_version, "metadata": metadata,
                     "items": listed}  # fmt: skip

    def kept_from(self) -> int:
        """The oldest resourceVersion a watch or an exact list may still start from."""
        return max(self.history[0].revision - 1 if self.history else self.revision, self.compacted)

    def watch_of(self, group_version: str, resource: str, namespace: str | None, labels: str, fields: str,
                 query: dict[str, str]) -> WatchStream:
        """A watch from `resourceVersion` (none or "0": the objects there are now, as ADDED, first)."""
        watched = Watched(resource, namespace, labels, fields)
        since = query.get("resourceVersion") or "0"
        first = None
        if since == "0":
            first = []
            for (stored, where, _), document in sorted(self.objects.items(), key=lambda item: str(item[0])):
                if watched.covers((stored, where, "")) and watched.matches(document):
                    first.append({"type": "ADDED", "object": document})
            since = str(self.revision)
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        return WatchStream(self, watched, int(since), first, timeout, query.get("allowWatchBookmarks") == "true",
                           self.cuts, group_version)

    def count_down(self, key: tuple[str, str | None, str]) -> None:
        """A GET of a terminating object: it goes once its `linger` reads are used up."""
        if key in self.terminating:
            remaining = self.terminating[key]
            if remaining is not None and remaining <= 0:
                self.remove(key)
            elif remaining is not None:
                self.terminating[key] = remaining - 1

    def created(self, group: str, resource: str, namespace: str | None, body: Any, dry: bool) -> tuple[int, Any]:
        """POST of a new object: 201 with it as stored, 409 AlreadyExists when the name is taken."""
        if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
            return 400, failure(400, "the body of a create must be an object with metadata.name")
        name = body["metadata"]["name"]
        key = (resource, namespace, name)
        if key in self.objects:
            return 409, already_exists(resource, group, name)
        document = served({**body, "metadata": {**body["metadata"], **({"namespace": namespace} if namespace else {})}})
        document["metadata"]["creationTimestamp"] = now_text()
        return 201, document if dry else self.store(key, document)

    def deletion(
        self, key: tuple[str, str | None, str], document: dict[str, Any], propagation: str, group: str = "",
        dry: bool = False,
    ) -> tuple[int, Any]:
        """DELETE: Background (or no policy and no finalizer) removes it at once and answers a Status; Foreground
        and Orphan, and a batch/v1 Job without a policy (orphan, with the API server's warning), keep it with a
        deletionTimestamp and the finalizer until the garbage collector is done (`linger`)."""
        resource, _, name = key
        metadata = document["metadata"]
        orphaned = not propagation and resource == "jobs" and group == "batch"
        policy = {"Orphan": ["orphan"], "Foreground": ["foregroundDeletion"]}.get(propagation, [])
        finalizers = sorted({*metadata.get("finalizers", []), *policy, *(["orphan"] if orphaned else [])})
        if not finalizers:
            if not dry:
                self.remove(key)
            return 200, deleted(resource, group, name, metadata["uid"])
        marks = {"deletionTimestamp": metadata.get("deletionTimestamp") or timestamp(NOW),
                 "deletionGracePeriodSeconds": metadata.get("deletionGracePeriodSeconds", 0), "finalizers": finalizers}
        answer = {**document, "metadata": {**metadata, **marks}}
        if not dry:
            answer = self.store(key, answer)
            self.terminating.setdefault(key, self.linger.get(key, 0))
        return 200, Raw("application/json", encoded(answer), (("Warning", JOB_ORPHANS),)) if orphaned else answer

    def updated(
        self, key: tuple[str, str | None, str], group: str, sub: str | None, body: Any, content_type: str, dry: bool,
        built_in: bool = True,
    ) -> tuple[int, dict[str, Any]]:
        """PATCH (merge, JSON or strategic merge: content_type) or PUT (content_type ""): the object after it,
        checked by the update rules (tests/kubeapi_rules.py, 422); a PUT of a stale resourceVersion is 409."""
        resource, _, name = key
        before = self.objects[key]
        if sub == "scale":
            patch = patched_document(scale_of(before), body, content_type or MERGE_PATCH, built_in)
            if isinstance(patch, tuple):
                return patch
            replicas = (patch.get("spec") or {}).get("replicas", 0)
            after = merge_patch(before, {"spec": {"replicas": replicas}})
            return 200, scale_of(after if dry else self.store(key, after))
        if content_type:
            result = patched_document(before, body, content_type, built_in)
            if isinstance(result, tuple):
                return result
            after = canonical_quantities(result)  # as `add` and a PUT store them
        else:
            stale = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if stale and stale != before["metadata"]["resourceVersion"]:
                return 409, conflict(resource, group, name)
            kept = {k: v for k, v in before["metadata"].items() if k in ("uid", "creationTimestamp", "generation")}
            after = served({**body, "metadata": {**(body.get("metadata") or {}), **kept}}) if isinstance(
                body, dict) else before
        causes = update_causes(resource, before, after)
        if causes:
            return 422, invalid(before["kind"], group, name, causes)
        if denied := admission_refusal(resource, before, after, self.objects):
            return 403, failure(403, denied)
        return 200, after if dry else self.store(key, after)

    def log_of(self, pod: dict[str, Any], query: dict[str, str]) -> tuple[int, Any]:
        """A container's log as the API server proxies it from the kubelet: 400 for a container the pod lacks,
        204 (no body) for a pod bound to no node, the kubelet's 400 for a container that never started."""
        name = pod["metadata"]["name"]
        containers = [c["name"] for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]]
        container = query.get("container") or pod["spec"]["containers"][0]["name"]
        if container not in containers:
            return 400, failure(400, f"container {container} is not valid for pod {name}")
        if not pod["spec"].get("nodeName"):
            return 204, Raw(None, b"")
        waiting = never_started_reason(pod)
        if waiting:
            return 400, failure(400, f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        log = self.logs.get((pod["metadata"]["namespace"], name), PodLog(""))
        previous = query.get("previous") == "true"
        if previous:
            restarted = [s for s in pod["status"].get("containerStatuses") or []
                         if s["name"] == container and (s.get("lastState") or {}).get("terminated")]  # fmt: skip
            if not restarted:
                return 400, failure(400, f'previous terminated container "{container}" in pod "{name}" not found')
        since = int(query["sinceSeconds"]) if "sinceSeconds" in query else None
        lines = log.lines(previous, since, query.get("timestamps") == "true")
        tail = int(query.get("tailLines", len(lines)))
        return 200, LogStream(log, lines[-tail:] if tail else [], query.get("follow") == "true")




@contextlib.contextmanager
def kube_server(read_only: bool = False) -> Iterator[KubeServer]:
    """A running KubeServer, closed at the end; `read_only`: asserts then that nothing tried to write."""
    server = KubeServer()
    try:
        yield server
    finally:
        server.close()
    if read_only:
        assert server.writes() == [], "a read command must only GET"


def tfchart_in_process(server: KubeServer, capsys: Any, namespace: str, *args: str) -> tuple[int, str, str]:
    """tfchart's CLI in this process (no interpreter to start) against `server`, with a kubeconfig whose
    context's namespace is `namespace`: exit code, stdout, stderr (`capsys`: pytest's fixture)."""
    from tfchart.cli.app import main

    try:
        main([*args, "--kubeconfig", str(server.kubeconfig(namespace))])
        code = 0
    except SystemExit as exit_info:
        code = int(exit_info.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- answers --------------------------------------------------------------------------------------------


def scale_of(document: dict[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale of a StatefulSet or Deployment: spec.replicas omitted when 0 (Go's omitempty), the
    status as the controller last reported it, the selector as a string."""
    meta, spec = document["metadata"], document["spec"]
    replicas = spec.get("replicas", 1)
    labels = sorted(((spec.get("selector") or {}).get("matchLabels") or {}).items())
    kept = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {k: meta[k] for k in kept if k in meta},
            "spec": {"replicas": replicas} if replicas else {},
            "status": {"replicas": (document.get("status") or {}).get("replicas", 0),
                       "selector": ",".join(f"{key}={value}" for key, value in labels)}}  # fmt: skip


def group_entry(group_version: str) -> dict[str, Any]:
    group, version = group_version.split("/")
    entry = {"groupVersion": group_version, "version": version}
    return {"name": group, "versions": [entry], "preferredVersion": entry}


DISCOVERY: dict[str, dict[str, Any]] = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.2", "platform": "linux/amd64"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_entry(gv) for gv in BUILT_IN if gv != "v1"]},
}


# -- selectors, read like the API server --------------------------------------------------------------


@functools.cache
def split_terms(selector: str) -> tuple[str, ...]:
    """Comma-separated terms, keeping `key in (a,b)` together (parsed once per selector: a list of 15,000 pods
    matches each against the same one)."""
    return tuple(term.strip() for term in re.findall(r"(?:[^,(]|\([^)]*\))+", selector) if term.strip())


def labels_match(labels: dict[str, str], selector: str) -> bool:
    for term in split_terms(selector):
        in_set = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term)
        if in_set:
            key, operator, values = in_set.groups()
            if (labels.get(key) in {value.strip() for value in values.split(",")}) != (operator == "in"):
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key) != value:
                return False
        elif (term[1:] in labels) if term.startswith("!") else (term not in labels):
            return False
    return True


def field_key(term: str) -> str:
    return re.split(r"!=|==?", term, maxsplit=1)[0]


@functools.cache
def field_term(term: str) -> tuple[tuple[str, ...], str, bool]:
    key, value = re.split(r"!=|==?", term, maxsplit=1)
    return tuple(key.split(".")), value, "!=" in term


def fields_match(document: dict[str, Any], selector: str) -> bool:
    for term in split_terms(selector):
        path, value, negated = field_term(term)
        found: Any = document
        for part in path:
            found = found.get(part) if isinstance(found, dict) else None
        if (("" if found is None else str(found)) == value) == negated:
            return False
    return True


# -- objects as the API server serves them ------------------------------------------------------------


def served(document: dict[str, Any]) -> dict[str, Any]:
    """Server-side shape: uid, timestamps, resourceVersion, canonical string quantities."""
    document = canonical_quantities(copy.deepcopy(document))
    metadata = document.setdefault("metadata", {})
    metadata.setdefault("uid", uid_of(document))
    metadata.setdefault("resourceVersion", "1")
    metadata.setdefault("creationTimestamp", ago(hours=1))
    if document["kind"] == "PersistentVolumeClaim":  # the StorageObjectInUseProtection admission plugin's
        metadata.setdefault("finalizers", ["kubernetes.io/pvc-protection"])
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


def uid_of(document: dict[str, Any]) -> str:
    return f"uid-{document['kind'].lower()}-{document['metadata']['name']}"


def never_started_reason(pod: dict[str, Any]) -> str | None:
    status = pod.get("status") or {}
    if not status.get("containerStatuses"):
        return "ContainerCreating" if status.get("phase", "Pending") == "Pending" else None
    for container in status["containerStatuses"]:
        state = container.get("state", {})
        if "waiting" in state and not container.get("restartCount") and not container.get("lastState", {}).get(
            "terminated"
        ):
            return str(state["waiting"].get("reason", "ContainerCreating"))
    return None


# -- the chart's objects, with the status their controllers write ----------------------------------------


def rendered(
    values: Sequence[str] = (), sets: Sequence[str] = (), release: str = "mnist", namespace: str = "ml-training"
) -> list[dict[str, Any]]:
    """The chart's manifests (helm 4 template; tests/chartlib.py renders each argument set once), a fresh copy."""
    return render("4", [Path(v) for v in values], list(sets), release, namespace)


def manifest(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component:
            return doc
    raise AssertionError(f"no {kind} for component {component}")


def stateful_set(doc: dict[str, Any], ready: int | None = None, replicas: int | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(doc)
    if replicas is not None:
        obj["spec"]["replicas"] = replicas
    desired = obj["spec"]["replicas"]
    ready_count = desired if ready is None else ready
    revision = f"{obj['metadata']['name']}-6d4b7c9f8"
    obj["metadata"]["generation"] = 1
    obj["status"] = {
        "observedGeneration": 1, "replicas": desired, "currentReplicas": desired, "updatedReplicas": desired,
        "availableReplicas": ready_count, **({"readyReplicas": ready_count} if ready_count else {}),
        "currentRevision": revision, "updateRevision": revision, "collisionCount": 0,
    }  # fmt: skip
    return obj


def job(
    doc: dict[str, Any], state: str = "running", reason: str = "", message: str = "", failed: int = 0
) -> dict[str, Any]:
    """A Job with the status the Job controller writes: running, pending, complete or failed."""
    obj = copy.deepcopy(doc)
    obj["metadata"]["generation"] = 1
    obj["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid_of(obj)}}
    status: dict[str, Any] = {"startTime": ago(hours=1), **({"failed": failed} if failed else {})}
    if state in ("running", "pending"):
        status.update(active=1, ready=int(state == "running"), terminating=0, uncountedTerminatedPods={})
    elif state == "complete":
        status.update(succeeded=1, completionTime=ago(minutes=5), ready=0, terminating=0)
        done = ("CompletionsReached", "Reached expected number of succeeded pods")
        status["conditions"] = [condition("SuccessCriteriaMet", *done), condition("Complete", *done)]
    elif state == "failed":
        status.update(ready=0, terminating=0)
        why = (reason or "BackoffLimitExceeded", message or "Job has reached the specified backoff limit")
        status["conditions"] = [condition("FailureTarget", *why), condition("Failed", *why)]
    else:
        raise ValueError(state)
    obj["status"] = status
    return obj


def condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": ago(minutes=5), "lastTransitionTime": ago(minutes=5)}  # fmt: skip


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
    if owner["kind"] == "StatefulSet":
        assert index is not None
        name = f"{owner_name}-{index}"
        labels |= {"apps.kubernetes.io/pod-index": str(index), "statefulset.kubernetes.io/pod-name": name,
                   "controller-revision-hash": f"{owner_name}-6d4b7c9f8"}  # fmt: skip
        owner_kind, owner_api = "StatefulSet", "apps/v1"
    elif owner["kind"] == "Job":
        name = name or f"{owner_name}-x7k2p"
        labels |= {"batch.kubernetes.io/controller-uid": uid_of(owner), "batch.kubernetes.io/job-name": owner_name,
                   "controller-uid": uid_of(owner), "job-name": owner_name}  # fmt: skip
        owner_kind, owner_api = "Job", "batch/v1"
    else:
        name = name or f"{owner_name}-5f7d8c6b9-abcde"
        labels["pod-template-hash"] = "5f7d8c6b9"
        owner_kind, owner_api, owner_name = "ReplicaSet", "apps/v1", f"{owner_name}-5f7d8c6b9"
    spec = template["spec"]
    for container in spec.get("initContainers", []) + spec["containers"]:
        resources = container.setdefault("resources", {})  # the API server requests a limit left without request
        resources["requests"] = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    if phase != "Pending" or not unschedulable:
        spec["nodeName"] = node
    created = created or ago(minutes=30)
    reference = {"apiVersion": owner_api, "kind": owner_kind, "name": owner_name, "uid": f"uid-{owner_name}",
                 "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": owner["metadata"]["namespace"], "labels": labels,
                     "annotations": template["metadata"].get("annotations", {}), "creationTimestamp": created,
                     "ownerReferences": [reference]},
        "spec": spec,
        "status": pod_status(spec, phase, ready, restarts, waiting, terminated, last_terminated, unschedulable,
                             created),
    }  # fmt: skip


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
        scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable,
                     "lastProbeTime": None, "lastTransitionTime": created}  # fmt: skip
        return {"phase": "Pending", "qosClass": "Burstable", "conditions": [scheduled]}
    statuses = []
    for container in spec["containers"]:
        state: dict[str, Any]
        if waiting:
            state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        elif terminated:
            state = {"terminated": {"reason": terminated[0], "exitCode": terminated[1], "startedAt": created,
                                    "finishedAt": ago(minutes=5), "containerID": "containerd://abc"}}  # fmt: skip
        else:
            state = {"running": {"startedAt": created}}
        status: dict[str, Any] = {
            "name": container["name"], "image": container["image"],
            "imageID": f"{container['image']}@sha256:{'0' * 64}", "ready": ready, "started": "running" in state,
            "restartCount": restarts, "state": state, "lastState": {},
        }  # fmt: skip
        if "waiting" not in state:
            status["containerID"] = "containerd://abc"
        if last_terminated:
            status["lastState"] = {"terminated": {"reason": last_terminated[0], "exitCode": last_terminated[1],
                                                  "startedAt": created, "finishedAt": ago(minutes=1)}}  # fmt: skip
        statuses.append(status)
    readiness = "True" if ready else "False"
    conditions = [
        {"type": kind, "status": value, "lastTransitionTime": created}
        for kind, value in (("PodReadyToStartContainers", "True"), ("Initialized", "True"), ("Ready", readiness),
                            ("ContainersReady", readiness), ("PodScheduled", "True"))
    ]  # fmt: skip
    return {"phase": phase, "conditions": conditions, "hostIP": "10.0.0.11", "podIP": "10.244.1.23",
            "startTime": created, "qosClass": "Burstable", "containerStatuses": statuses}  # fmt: skip


def deployment(doc: dict[str, Any], ready: int | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(doc)
    replicas = obj["spec"].get("replicas", 1)
    count = replicas if ready is None else ready
    obj["status"] = {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                     **({"readyReplicas": count, "availableReplicas": count} if count else {})}  # fmt: skip
    return obj


def service(doc: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(doc)
    if obj["spec"].get("clusterIP") != "None":
        obj["spec"] |= {"clusterIP": "10.96.12.34", "clusterIPs": ["10.96.12.34"]}
    obj["status"] = {"loadBalancer": {}}
    return obj


# -- cluster-level objects --------------------------------------------------------------------------------


def node(
    name: str,
    cpu: str = "16",
    memory: str = "64Gi",
    gpus: dict[str, int] | None = None,
    *,
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi",
                 **{resource: str(count) for resource, count in (gpus or {}).items()}}  # fmt: skip
    spec: dict[str, Any] = {"podCIDR": "10.244.1.0/24", **({"unschedulable": True} if unschedulable else {})}
    ready_condition = {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady",
                       "lastHeartbeatTime": ago(seconds=10), "lastTransitionTime": ago(days=3)}  # fmt: skip
    info = {"kubeletVersion": "v1.33.2", "osImage": "Ubuntu 24.04", "architecture": "amd64",
            "containerRuntimeVersion": "containerd://2.0.5", "kernelVersion": "6.8.0", "kubeProxyVersion": "",
            "machineID": "m", "systemUUID": "s", "bootID": "b", "operatingSystem": "linux"}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
        "spec": spec,
        "status": {"capacity": resources, "allocatable": resources, "conditions": [ready_condition], "nodeInfo": info},
    }


def running_pod(
    name: str, namespace: str, node_name: str, requests: dict[str, str], phase: str = "Running"
) -> dict[str, Any]:
    """Someone else's pod, holding resources on a node."""
    container = {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}
    metadata = {"name": name, "namespace": namespace, "labels": {"app": name}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": node_name, "containers": [container]}, "status": {"phase": phase}}  # fmt: skip


def storage_class(
    name: str, provisioner: str, default: bool = False, allow_volume_expansion: bool | None = None
) -> dict[str, Any]:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations}, "provisioner": provisioner,
        "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
        **({"allowVolumeExpansion": allow_volume_expansion} if allow_volume_expansion is not None else {}),
    }  # fmt: skip


def claim(name: str, namespace: str, phase: str = "Bound", access_modes: Sequence[str] = ("ReadWriteMany",),
          ) -> dict[str, Any]:  # fmt: skip
    bound = {"accessModes": list(access_modes), "capacity": {"storage": "20Gi"}} if phase == "Bound" else {}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": list(access_modes), "resources": {"requests": {"storage": "20Gi"}},
                 "storageClassName": "nfs", "volumeMode": "Filesystem"},
        "status": {"phase": phase, **bound},
    }  # fmt: skip


def resource_quota(name: str, namespace: str, hard: dict[str, str], used: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard}, "status": {"hard": hard, "used": used}}  # fmt: skip


def daemon_set(name: str, namespace: str = "kube-system") -> dict[str, Any]:
    labels = {"k8s-app": name}
    template = {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": f"registry.k8s.io/{name}:v1"}]}}  # fmt: skip
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": template},
        "status": {"currentNumberScheduled": 3, "desiredNumberScheduled": 3, "numberMisscheduled": 0, "numberReady": 3},
    }  # fmt: skip


# -- custom resources: CRDs, their discovery, Volcano and Kueue objects ----------------------------------------

KUEUE = "kueue.x-k8s.io"
NO_WORKLOADS = {"pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0}
# A vendored CRD (tests/crds, upstream's file), or `group Kind plural Scope version...` for one tests/crds lacks.
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


def api_resources(crd: dict[str, Any], version: str) -> list[dict[str, Any]]:
    """The APIResource entries a CRD adds to the discovery of one version (with its status subresource)."""
    names, namespaced = crd["spec"]["names"], crd["spec"]["scope"] == "Namespaced"
    entry = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    resource = {
        "name": names["plural"], "singularName": names.get("singular", names["kind"].lower()), "namespaced": namespaced,
        "kind": names["kind"],
        "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
        **({"shortNames": names["shortNames"]} if names.get("shortNames") else {}), "storageVersionHash": "fakehash",
    }  # fmt: skip
    status = {"name": f"{names['plural']}/status", "singularName": "", "namespaced": namespaced,
              "kind": names["kind"], "verbs": ["get", "patch", "update"]}  # fmt: skip
    return [resource, status] if "status" in entry.get("subresources", {}) else [resource]


def crds(*specs: str, served: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Installed CRDs from VOLCANO_CRDS-style specs; `served` keeps only those versions (an older release)."""
    documents = []
    for spec in specs:
        if spec.endswith(".yaml"):
            crd: dict[str, Any] = yaml.safe_load((crdlib.CRD_DIR / spec).read_text(encoding="utf-8"))
            if served is not None:
                crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] in served]
                crd["spec"]["versions"][-1]["storage"] = True
        else:
            group, kind, plural, scope, *versions = spec.split()
            kept = [v for v in versions if served is None or v in served]
            schema = {crdlib.SCHEMA_FIELD: {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
            crd = {
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {"group": group, "scope": scope,
                         "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                         "versions": [{"name": v, "served": True, "storage": i == len(kept) - 1, "schema": schema}
                                      for i, v in enumerate(kept)]},
            }  # fmt: skip
        documents.append(established(crd))
    return documents


def established(crd: dict[str, Any]) -> dict[str, Any]:
    """A CRD as the API server holds it once installed: names accepted, Established."""
    accepted = [("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted")]  # fmt: skip
    crd["status"] = {
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        "conditions": [{"type": kind, "status": "True", "reason": reason, "message": message,
                        "lastTransitionTime": ago(days=30)} for kind, reason, message in accepted],
    }  # fmt: skip
    return crd


def assert_served_valid(document: dict[str, Any]) -> dict[str, Any]:
    """The object validates against its vendored CRD (tests/crds); its status is checked too, since the server
    serves it as the controller wrote it."""
    subresource = ".status: set in a manifest, but the API server ignores it (status subresource)"
    errors = [error for error in crdlib.validate(document) if error != subresource]
    assert not errors, errors
    return document


def active_condition(reason: str = "Ready", message: str = "Can admit new workloads") -> dict[str, Any]:
    status = "True" if reason == "Ready" else "False"
    return {"type": "Active", "status": status, "reason": reason, "message": message, "lastTransitionTime": ago(days=1)}


def local_queue(
    name: str, namespace: str, cluster_queue: str, stop_policy: str | None = None, version: str = "v1beta2"
) -> dict[str, Any]:
    """A Kueue LocalQueue with the status Kueue's controller writes."""
    stopped = active_condition("Stopped", "LocalQueue is stopped")
    ready = active_condition("Ready", "Can submit new workloads to localQueue")
    return assert_served_valid({
        "apiVersion": f"{KUEUE}/{version}", "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"clusterQueue": cluster_queue, **({"stopPolicy": stop_policy} if stop_policy else {})},
        "status": {"conditions": [stopped if stop_policy else ready], **NO_WORKLOADS},
    })  # fmt: skip


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
        limit = {"borrowingLimit": borrowing_limit} if borrowing_limit is not None else {}
        flavors = [{"name": flavor, "resources": [{"name": resource, "nominalQuota": quota} | limit
                                                  for resource, quota in quotas.items()]}
                   for flavor, quotas in group.items()]  # fmt: skip
        resource_groups.append({"coveredResources": covered, "flavors": flavors})
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": resource_groups}
    if cohort:
        spec["cohortName" if version == "v1beta2" else "cohort"] = cohort
    state = active_condition(*inactive) if inactive else active_condition()
    return assert_served_valid({
        "apiVersion": f"{KUEUE}/{version}", "kind": "ClusterQueue", "metadata": {"name": name, "generation": 1},
        "spec": spec, "status": {"conditions": [state], **NO_WORKLOADS},
    })  # fmt: skip


def workload_priority_class(name: str, value: int, version: str = "v1beta2") -> dict[str, Any]:
    return {"apiVersion": f"{KUEUE}/{version}", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value}  # fmt: skip


def volcano_queue(name: str, state: str | None = "Open") -> dict[str, Any]:
    """A Volcano Queue (cluster-scoped); `state` None: not yet reconciled by Volcano's queue controller."""
    status: dict[str, Any] = {"running": 0, "pending": 0, "inqueue": 0, "reservation": {}, "allocated": {},
                              **({"state": state} if state else {})}  # fmt: skip
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1, "reclaimable": True}, "status": status}  # fmt: skip


# -- Kubernetes' Job controller, for one chief Job whose pod runs as a local process -------------------------


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
    `spec.suspend: true` ends the pod as a deletion does (SIGTERM, not counted as a failure) and
    sets the Suspended condition; unsuspended, a new pod starts and the deadline counts anew.

    Each pod it starts is a Pod object `<job>-<attempt>` in the server (the template's labels and
    annotations, and the controller's `batch.kubernetes.io/job-name` label), Running until its process
    ends (then Succeeded or Failed; a suspension deletes it, with a deletionTimestamp first), whose log
    is what the process printed: hand `log_line` to the LocalCluster's line callback.
    """

    def __init__(self, server: KubeServer, job: dict[str, Any], pod: LocalPod, cluster: LocalCluster,
                 backoff_seconds: float = 0.0) -> None:  # fmt: skip
        self.server, self.pod, self.cluster = server, pod, cluster
        self.namespace, self.name = job["metadata"]["namespace"], job["metadata"]["name"]
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        self.failed = 0
        self.pods_started = 0
        self.exit_codes: list[int] = []  # of each pod that ended on its own, in order
        self.backoff_seconds = backoff_seconds
        self.job = job
        self.suspensions = 0  # pods ended by a suspension
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"job-{self.name}")

    @property
    def pod_name(self) -> str:
        """The Pod object of the current (or last) attempt."""
        return f"{self.name}-{self.pods_started:05d}"

    def log_line(self, pod: LocalPod, line: str) -> None:
        """A line the Job's pod printed: into its Pod object's log."""
        if pod.name == self.pod.name and self.pods_started:
            self.server.append_log(self.namespace, self.pod_name, line)

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
        }})  # fmt: skip

    def _pod_object(self, phase: str | None, code: int = 0) -> None:
        """The current pod's object: created (Running), marked for deletion (Terminating), ended (Succeeded or
        Failed, with its container's exit code), or gone (None)."""
        if phase == "Running":
            self.server.set_log(self.namespace, self.pod_name, [])
            document = pod(self.job, self.pod_name, phase="Running", created=now_text())
            document["metadata"]["labels"]["batch.kubernetes.io/job-name"] = self.name
            self.server.add(document)
        elif phase == "Terminating":
            self.server.update("Pod", self.namespace, self.pod_name, {"metadata": {"deletionTimestamp": now_text()}})
        elif phase is None:
            self.server.delete("Pod", self.namespace, self.pod_name)
        else:
            container = self.job["spec"]["template"]["spec"]["containers"][0]["name"]
            ended = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "finishedAt": now_text()}}  # fmt: skip
            self.server.update("Pod", self.namespace, self.pod_name, {"status": {
                "phase": phase, "containerStatuses": [{"name": container, "state": ended, "restartCount": 0,
                                                       "ready": False}]}})  # fmt: skip

    def _suspended(self) -> bool:
        """Waits while the Job is suspended (its Suspended condition set); False when it was deleted meanwhile."""
        suspended = {"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended",
                     "lastProbeTime": now_text(), "lastTransitionTime": now_text()}  # fmt: skip
        self.server.update("Job", self.namespace, self.name, {"status": {"active": None, "startTime": None, "ready": 0,
                                                                         "conditions": [suspended]}})  # fmt: skip
        while (job := self.server.get("Job", self.namespace, self.name)) is not None and job["spec"].get("suspend"):
            time.sleep(0.1)
        if job is None:
            return False
        resumed = {**suspended, "status": "False", "reason": "JobResumed", "message": "Job resumed"}
        self.server.update("Job", self.namespace, self.name, {"status": {"startTime": now_text(),
                                                                         "conditions": [resumed]}})  # fmt: skip
        return True

    def _run(self) -> None:
        started = time.monotonic()
        while True:
            job = self.server.get("Job", self.namespace, self.name)
            if job is None:
                return
            if job["spec"].get("suspend"):
                if not self._suspended():
                    return
                started = time.monotonic()
                continue
            self.pods_started += 1
            self._pod_object("Running")
            self.cluster.start([self.pod])  # a new process under the pod's name (LocalCluster.restart is gone)
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
                if job["spec"].get("suspend"):  # the controller deletes the pod; not a failure
                    self._pod_object("Terminating")
                    self.cluster.kill(self.pod.name, signal.SIGTERM)
                    self._pod_object(None)
                    self.suspensions += 1
                    break
                deadline = job["spec"].get("activeDeadlineSeconds")
                if deadline is not None and time.monotonic() - started >= deadline:
                    self.cluster.kill(self.pod.name, signal.SIGTERM)
                    self.failed += 1
                    self._finish("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
                    return
                time.sleep(0.1)
            if code is None:  # suspended
                continue
            self.cluster.processes[self.pod.name].reader.join(timeout=5)
            self._pod_object("Succeeded" if code == 0 else "Failed", code)
            self.exit_codes.append(code)
            if code == 0:
                self._finish("Complete", "", "")
                return
            self.failed += 1
            rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
            action = next((r["action"] for r in rules if exit_code_rule_matches(r, code)), "Count")
            if action == "FailJob":
                container = job["spec"]["template"]["spec"]["containers"][0]["name"]
                self._finish("Failed", "PodFailurePolicy", f"Container {container} for pod {self.namespace}/"
                             f"{self.pod.name} failed with exit code {code} matching FailJob rule")  # fmt: skip
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


# -- topology-aware placement: Kueue's Topology and ResourceFlavor, Volcano's HyperNode (tfchart preflight) ----------

KUEUE_TAS_CRDS = ("kueue/v0.19.2/kueue.x-k8s.io_resourceflavors.yaml", "kueue/v0.19.2/kueue.x-k8s.io_topologies.yaml")
HYPERNODE_CRDS = ("volcano/v1.15.1/topology.volcano.sh_hypernodes.yaml",)


def resource_flavor(name: str, topology: str | None = None, node_labels: dict[str, str] | None = None,
                    version: str = "v1beta2") -> dict[str, Any]:  # fmt: skip
    """A Kueue ResourceFlavor; with `topology`, a topology-aware one (spec.topologyName)."""
    spec = {**({"nodeLabels": node_labels} if node_labels else {}), **({"topologyName": topology} if topology else {})}
    return assert_served_valid({"apiVersion": f"{KUEUE}/{version}", "kind": "ResourceFlavor",
                                "metadata": {"name": name, "generation": 1}, "spec": spec})  # fmt: skip


def topology(name: str, *levels: str, version: str = "v1beta2") -> dict[str, Any]:
    """A Kueue Topology with its levels (node labels), highest first."""
    return assert_served_valid({"apiVersion": f"{KUEUE}/{version}", "kind": "Topology",
                                "metadata": {"name": name, "generation": 1},
                                "spec": {"levels": [{"nodeLabel": level} for level in levels]}})  # fmt: skip


def hypernode(name: str, tier: int, *members: str, tier_name: str = "") -> dict[str, Any]:
    """A Volcano HyperNode of `tier` whose members are nodes (tier 1) or HyperNodes, by exact name."""
    kind = "Node" if tier == 1 else "HyperNode"
    spec: dict[str, Any] = {"tier": tier, **({"tierName": tier_name} if tier_name else {}),
                            "members": [{"type": kind, "selector": {"exactMatch": {"name": m}}} for m in members]}
    return assert_served_valid({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                                "metadata": {"name": name}, "spec": spec,
                                "status": {"nodeCount": len(members)}})  # fmt: skip


def labelled_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A schedulable node that also carries `labels` (its topology, its flavor's node labels)."""
    document = node(name)
    document["metadata"]["labels"].update(labels)
    return document


class StatefulSetController:
    """Kubernetes' StatefulSet controller (podManagementPolicy Parallel) for one rendered StatefulSet whose pods
    run as local processes: the ordinals below `spec.replicas` (re-read every tick, so a /scale PATCH takes effect)
    run, each started again when it exits (restartPolicy Always); one at or above it is ended as a deleted pod is
    (SIGTERM, its object marked, then gone). Each running pod is an object in the API, Ready once its TensorFlow
    port answers (the rendered readiness probe: a TCP check of that port, here at the pod's local address), and
    `status` counts them (replicas, readyReplicas, observedGeneration) as the controller reports them."""

    def __init__(self, server: KubeServer, stateful_set: dict[str, Any], pods: Sequence[LocalPod],
                 cluster: LocalCluster) -> None:  # fmt: skip
        self.server, self.doc, self.cluster = server, stateful_set, cluster
        self.namespace, self.name = stateful_set["metadata"]["namespace"], stateful_set["metadata"]["name"]
        self.pods = sorted(pods, key=lambda each: each.index)  # the rendered ordinals
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"sts-{self.name}")

    def start(self) -> StatefulSetController:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)

    def running(self) -> list[str]:
        """The names of this StatefulSet's pods whose process runs."""
        processes = self.cluster.processes
        return [each.name for each in self.pods if each.name in processes and processes[each.name].running]

    def _address(self, each: LocalPod) -> tuple[str, int]:
        host, port = json.loads(each.env["TFD_CLUSTER"])[each.role][each.index].rsplit(":", 1)
        return host, int(port)

    def _ready(self, each: LocalPod) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(self._address(each), timeout=0.5):
            return True
        return False

    def _run(self) -> None:
        reported: dict[str, Any] = {}
        ready: set[str] = set()
        while not self.stopping.is_set():
            found = self.server.get("StatefulSet", self.namespace, self.name)
            if found is None:
                return
            wanted = int(found["spec"].get("replicas", 1))
            for each in self.pods:
                alive = each.name in self.running()
                if each.index < wanted and not alive:
                    self.cluster.start([each])
                    ready.discard(each.name)
                    self.server.add(pod(self.doc, index=each.index, ready=False, created=now_text()))
                elif each.index < wanted and each.name not in ready and self._ready(each):
                    ready.add(each.name)
                    self.server.update("Pod", self.namespace, each.name, {"status": {"conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": now_text()}]}})  # fmt: skip
                elif each.index >= wanted and self.server.get("Pod", self.namespace, each.name) is not None:
                    marked = {"metadata": {"deletionTimestamp": now_text()}}
                    self.server.update("Pod", self.namespace, each.name, marked)
                    if alive:
                        self.cluster.kill(each.name, signal.SIGTERM)
                    self.server.delete("Pod", self.namespace, each.name)
                    ready.discard(each.name)
            status = {"replicas": len(self.running()), "readyReplicas": len(ready), "availableReplicas": len(ready),
                      "observedGeneration": found["metadata"].get("generation", 1)}  # fmt: skip
            if status != reported:
                self.server.update("StatefulSet", self.namespace, self.name, {"status": status})
                reported = status
            time.sleep(0.1)


# -- workload.kind=jobset: JobSet's CRD, its child Jobs and pods, and a tiny JobSet controller ---------------------

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_CRDS = ("jobset/v0.12.0/jobset.x-k8s.io_jobsets.yaml",)
WORKLOAD_CRDS = ("kueue.x-k8s.io Workload workloads Namespaced v1beta2",)
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"


def jobset(doc: dict[str, Any], state: str = "running", restarts: int = 0) -> dict[str, Any]:
    """The rendered JobSet as JobSet's controller leaves it: running, suspended, completed or failed."""
    obj = copy.deepcopy(doc)
    obj["metadata"]["generation"] = 1
    status: dict[str, Any] = {"restarts": restarts, "replicatedJobsStatus": []}
    reasons = {"completed": ("Completed", "AllJobsCompleted", "jobset completed successfully"),
               "failed": ("Failed", "FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action "
                          f"(first failed job: {obj['metadata']['name']}-chief-0)"),
               "suspended": ("Suspended", "SuspendedJobs", "jobset is suspended")}  # fmt: skip
    if state in reasons:
        kind, reason, message = reasons[state]
        status["conditions"] = [condition(kind, reason, message)]
        if state != "suspended":
            status["terminalState"] = kind
        else:
            obj["spec"]["suspend"] = True
    obj["status"] = status
    return obj


def jobset_jobs(jobset_doc: dict[str, Any], *roles: str) -> list[dict[str, Any]]:
    """The child Jobs JobSet creates (of `roles`, else every replicatedJob): `<jobset>-<rjob>-0`, each with the
    replicatedJob's Job template and JobSet's labels on it and on its pod template."""
    name = jobset_doc["metadata"]["name"]
    found = []
    for rjob in jobset_doc["spec"]["replicatedJobs"]:
        if roles and rjob["name"] not in roles:
            continue
        marks = {JOBSET_NAME: name, RJOB_NAME: rjob["name"], "jobset.sigs.k8s.io/job-index": "0"}
        spec = copy.deepcopy(rjob["template"]["spec"])
        spec["template"]["metadata"]["labels"] = {**spec["template"]["metadata"].get("labels", {}), **marks}
        owner = {"apiVersion": f"{JOBSET_GROUP}/v1alpha2", "kind": "JobSet", "name": name, "uid": uid_of(jobset_doc),
                 "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        metadata = {"name": f"{name}-{rjob['name']}-0", "namespace": jobset_doc["metadata"]["namespace"],
                    "labels": {**rjob["template"]["metadata"].get("labels", {}), **marks},
                    "ownerReferences": [owner]}  # fmt: skip
        found.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec})
    return found


def jobset_pods(child: dict[str, Any], **state: Any) -> list[dict[str, Any]]:
    """The pods of an Indexed child Job: `<job>-<index>-<suffix>`, with the completion index annotation."""
    found = []
    for index in range(int(child["spec"].get("parallelism", 1))):
        each = pod(child, f"{child['metadata']['name']}-{index}-q8z4w", **state)
        each["metadata"]["annotations"] = {**each["metadata"]["annotations"],
                                           "batch.kubernetes.io/job-completion-index": str(index)}  # fmt: skip
        found.append(each)
    return found


def jobset_webhook(namespace: str = "jobset-system", ready: int = 1) -> list[dict[str, Any]]:
    """What JobSet v0.12.0's manifests install for its controller, as preflight reads it: the validating webhook
    configuration of jobsets and the EndpointSlice of its Service (`ready` Ready endpoints)."""
    service = {"namespace": namespace, "name": "jobset-webhook-service",
               "path": "/validate-jobset-x-k8s-io-v1alpha2-jobset"}
    rule = {"apiGroups": [JOBSET_GROUP], "apiVersions": ["v1alpha2"], "operations": ["CREATE", "UPDATE"],
            "resources": ["jobsets"]}  # fmt: skip
    hook = {"name": "vjobset.kb.io", "admissionReviewVersions": ["v1"], "clientConfig": {"service": service},
            "failurePolicy": "Fail", "sideEffects": "None", "rules": [rule]}  # fmt: skip
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
              "metadata": {"name": "jobset-validating-webhook-configuration"}, "webhooks": [hook]}  # fmt: skip
    points = [{"addresses": [f"10.244.0.{i + 10}"], "conditions": {"ready": i < ready}} for i in range(max(ready, 1))]
    slices = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
              "metadata": {"name": "jobset-webhook-service-x1", "namespace": namespace,
                           "labels": {"kubernetes.io/service-name": "jobset-webhook-service"}},
              "endpoints": points, "ports": [{"port": 9443, "protocol": "TCP"}]}  # fmt: skip
    return [config, slices]


class JobSetController:
    """JobSet's controller, for one JobSet on the server whose child Jobs and pods are objects (no processes), as
    tfchart's commands see it: `spec.suspend` suspends every child Job and deletes its pods (Suspended condition),
    and unsuspended resumes them with new pods; a child Job whose activeDeadlineSeconds is set (`tfchart stop
    --end-run`) fails with DeadlineExceeded, which the DeadlineEndsTheRun rule turns into the JobSet's Failed
    condition, and JobSet deletes the other Jobs and their pods. With a Kueue Workload owned by the JobSet,
    Kueue's part too: `spec.active: false` suspends the JobSet, `true` lets it run."""

    def __init__(self, server: KubeServer, jobset_doc: dict[str, Any]) -> None:
        self.server, self.namespace, self.name = server, jobset_doc["metadata"]["namespace"], jobset_doc["metadata"][
            "name"]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"jobset-{self.name}")

    def __enter__(self) -> JobSetController:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)

    def children(self) -> list[dict[str, Any]]:
        with self.server.lock:
            return [copy.deepcopy(d) for (resource, ns, _), d in self.server.objects.items() if resource == "jobs"
                    and ns == self.namespace and d["metadata"].get("labels", {}).get(JOBSET_NAME) == self.name]

    def pods_of(self, job_name: str) -> list[str]:
        with self.server.lock:
            return [name for (resource, ns, name), d in self.server.objects.items() if resource == "pods"
                    and ns == self.namespace and d["metadata"].get("labels", {}).get("job-name") == job_name]

    def _kueue(self, found: dict[str, Any]) -> None:
        with self.server.lock:
            workloads = [d for (resource, ns, _), d in self.server.objects.items() if resource == "workloads"
                         and ns == self.namespace and any(o.get("uid") == found["metadata"]["uid"]
                                                          for o in d["metadata"].get("ownerReferences", []))]
        for workload in workloads:
            held = not workload.get("spec", {}).get("active", True)
            if held != bool(found["spec"].get("suspend")):
                self.server.update("JobSet", self.namespace, self.name, {"spec": {"suspend": held}})

    def _run(self) -> None:
        while not self.stopping.is_set():
            found = self.server.get("JobSet", self.namespace, self.name)
            if found is None:
                return
            conditions = {c["type"]: c for c in found.get("status", {}).get("conditions", []) if c["status"] == "True"}
            if "Completed" in conditions or "Failed" in conditions:
                time.sleep(0.05)
                continue
            self._kueue(found)
            suspend = bool(found["spec"].get("suspend"))
            for child in self.children():
                name = child["metadata"]["name"]
                if child["spec"].get("activeDeadlineSeconds") is not None:
                    self._fail(name)
                    break
                if bool(child["spec"].get("suspend")) != suspend:
                    self.server.update("Job", self.namespace, name, {"spec": {"suspend": suspend}})
                    if suspend:
                        for each in self.pods_of(name):
                            self.server.delete("Pod", self.namespace, each)
                    else:
                        self.server.add(*jobset_pods(child, created=now_text()))
            if suspend != ("Suspended" in conditions):
                kind = ("Suspended", "SuspendedJobs", "jobset is suspended") if suspend else None
                self.server.update("JobSet", self.namespace, self.name, {"status": {"conditions": [
                    condition(*kind) if kind else {**condition("Suspended", "ResumeJobs", "jobset is resumed"),
                                                   "status": "False"}]}})  # fmt: skip
            time.sleep(0.05)

    def _fail(self, failed: str) -> None:
        why = ("DeadlineExceeded", "Job was active longer than specified deadline")
        self.server.update("Job", self.namespace, failed, {"status": {"active": 0, "conditions": [
            condition("FailureTarget", *why), condition("Failed", *why)]}})  # fmt: skip
        for each in self.pods_of(failed):
            self.server.delete("Pod", self.namespace, each)
        for child in self.children():
            if child["metadata"]["name"] != failed:
                for each in self.pods_of(child["metadata"]["name"]):
                    self.server.delete("Pod", self.namespace, each)
                self.server.delete("Job", self.namespace, child["metadata"]["name"])
        message = f"applying FailJobSet failure policy action (first failed job: {failed})"
        self.server.update("JobSet", self.namespace, self.name, {"status": {
            "terminalState": "Failed", "conditions": [condition("Failed", "FailJobSetFailurePolicyAction", message)]}})


@contextlib.contextmanager
def discovered(*group_versions: str) -> Iterator[None]:
    """The groups of custom resources in /apis while inside (helm's lookup maps a kind through it); their resources
    are still served only where a CRD on the server serves them."""
    added = [group_entry(group_version) for group_version in group_versions]
    DISCOVERY["/apis"]["groups"] += added
    try:
        yield
    finally:
        DISCOVERY["/apis"]["groups"] = [g for g in DISCOVERY["/apis"]["groups"] if g not in added]
