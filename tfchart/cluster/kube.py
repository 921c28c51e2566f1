"""The one door to the Kubernetes API: every call tfchart makes to a cluster goes through KubeApi.

No API server runs on the development and CI machines (docs/architecture.md §8): the tests reach a fake
one on the loopback (tests/kubeapi.py) through a kubeconfig, so the whole client stack runs; tests
marked `cluster` run against a live cluster when KUBECONFIG points at one (e.g. `kind create cluster`).

Configuration is loaded lazily (on the first API call): an explicit kubeconfig, else $KUBECONFIG (a path list), else
~/.kube/config, else the in-cluster service account. Every failure becomes a KubernetesError whose hint says what to do:
a ClusterUnavailable (exit 69) where the cluster could not be asked (no configuration, unreachable or failing server,
401/403, an answer not from an API server: a proxy's login page, checked before the client deserialises it).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Generator, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

from tfchart.errors import ClusterUnavailable, KubernetesError

T = TypeVar("T")

REQUEST_TIMEOUT = (10, 60)  # seconds: (connect, read), for every call but a followed log and a DELETE
LOG_READ_BYTES = 64 * 1024
IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = Path("~/.kube/config")
MERGE_PATCH = "application/merge-patch+json"
RAW = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}  # the answer as sent, checked_request checks it
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

# What a DELETE did: "deleted" (the server answered a Status: gone), "terminating" (it answered the object:
# finalizers pending, orphan or foregroundDeletion) or "absent" (404: there was nothing to delete).
Deletion = Literal["deleted", "terminating", "absent"]

# The kinds tfchart names, each as its resource in full (plural.version.group, as `kubectl get` accepts it): the one
# thing the client cannot tell from a kind. The client's typed API and method follow from it by the client's own
# naming (kubernetes.utils.create_from_yaml: <Group><Version>Api, the kind in snake_case, namespaced when the API
# has list_namespaced_<kind>); a group the client has no API for (JobSet, any resource named plural.version.group
# by the *_custom calls) goes through its CustomObjectsApi.
KINDS = {
    "Pod": "pods.v1", "Service": "services.v1", "ConfigMap": "configmaps.v1", "ResourceQuota": "resourcequotas.v1",
    "PersistentVolumeClaim": "persistentvolumeclaims.v1", "PersistentVolume": "persistentvolumes.v1",
    "Node": "nodes.v1", "StatefulSet": "statefulsets.v1.apps", "Deployment": "deployments.v1.apps",
    "DaemonSet": "daemonsets.v1.apps", "Job": "jobs.v1.batch", "StorageClass": "storageclasses.v1.storage.k8s.io",
    "EndpointSlice": "endpointslices.v1.discovery.k8s.io", "JobSet": "jobsets.v1alpha2.jobset.x-k8s.io",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations.v1.admissionregistration.k8s.io",
}  # fmt: skip


class Custom(NamedTuple):
    """A custom resource tfchart reads and writes as JSON (no client model): workload.kind=jobset's JobSet."""

    group: str
    version: str
    plural: str

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


def split_resource(kind: str) -> Custom:
    """(group, version, plural) of a KINDS kind, or of a resource spelled plural.version.group."""
    plural, version, *group = KINDS.get(kind, kind).split(".", 2)
    return Custom(group[0] if group else "", version, plural)


def resource_name(kind: str) -> str:
    """The resource as messages and RBAC hints name it: pods, statefulsets.apps, jobsets.jobset.x-k8s.io."""
    resource = split_resource(kind)
    return resource.name if resource.group else resource.plural


CUSTOM = {"JobSet": split_resource("JobSet")}


class AccessDenied(ClusterUnavailable):
    """The API server answered 403: RBAC does not allow the call (callers may degrade gracefully)."""


@dataclass(frozen=True)
class Operation:
    """What tfchart was doing, for error messages: `list pods in namespace ml-training`."""

    verb: str
    resource: str
    namespace: str | None = None
    name: str | None = None

    def describe(self) -> str:
        target = f"{self.resource}/{self.name}" if self.name else self.resource
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)"
        return f"{self.verb} {target}{where}"


def _selectors(label_selector: str, field_selector: str) -> dict[str, str]:
    return {key: value for key, value in (("label_selector", label_selector), ("field_selector", field_selector))
            if value}  # fmt: skip


class KubeApi:
    """The few list/read/log/patch/delete calls tfchart needs. `client_factory` builds the kubernetes
    ApiClient on first use (from_config: from the kubeconfig); `source` says where the configuration came
    from, for error hints."""

    def __init__(
        self, client_factory: Callable[[], Any], source: str = "", namespace_resolver: Callable[[], str] | None = None
    ) -> None:
        self._client_factory = client_factory
        self._client: Any = None
        self._namespace_resolver = namespace_resolver or (lambda: "default")
        self.source = source

    @classmethod
    def from_config(cls, kubeconfig: Path | None = None, context: str | None = None) -> KubeApi:
        """A KubeApi for the kubeconfig (or in-cluster) configuration; nothing is read until the first call."""
        return cls(lambda: load_api_client(kubeconfig, context), describe_source(kubeconfig, context),
                   lambda: configured_namespace(kubeconfig, context))

    def default_namespace(self) -> str:
        """The namespace kubectl would use: the context's namespace, the pod's own in a cluster, else default."""
        return self._namespace_resolver()

    def _api(self, name: str) -> Any:
        """The client's API `name` (CoreV1Api...) on the one checked ApiClient, or None: the client has none."""
        from kubernetes import client

        if self._client is None:
            api_client = self._client_factory()
            api_client.rest_client.request = checked_request(api_client.rest_client.request, self.source)
            self._client = api_client
        api = getattr(client, name, None)
        return api and api(self._client)

    def _call(self, operation: Operation, call: Callable[[], T]) -> T:
        try:
            return call()
        except KubernetesError:
            raise
        except Exception as error:  # translated below; anything unknown is re-raised as is
            host = str(getattr(getattr(self._client, "configuration", None), "host", "") or "")
            raise translate(error, operation, host, self.source) from None

    def _bound(self, kind: str, verb: str, namespace: str | None, *name: str, sub: str = "") -> Callable[..., Any]:
        """The client's `verb` call (list, read, patch, delete) of a kind or resource, its path arguments bound."""
        group, version, plural = split_resource(kind)
        api_group = "".join(word.capitalize() for word in ("".join(group.rsplit(".k8s.io", 1)) or "core").split("."))
        typed = self._api(f"{api_group}{version.capitalize()}Api") if kind in KINDS else None
        if typed is None:
            verb, scope = ("get" if verb == "read" else verb), ("namespaced" if namespace else "cluster")
            where = (namespace,) if namespace else ()
            method = getattr(self._api("CustomObjectsApi"), f"{verb}_{scope}_custom_object")
            return functools.partial(method, group, version, *where, plural, *name)
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()
        if namespace:
            return functools.partial(getattr(typed, f"{verb}_namespaced_{snake}{sub}"), *name, namespace)
        all_namespaces = verb == "list" and hasattr(typed, f"list_namespaced_{snake}")
        return functools.partial(getattr(typed, f"list_{snake}_for_all_namespaces" if all_namespaces
                                         else f"{verb}_{snake}"), *name)  # fmt: skip

    # -- reads ----------------------------------------------------------------------------------
    def list_objects(
        self, kind: str, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> list[Any]:
        """kubernetes.client models of the objects of a kind matching the selectors: in a namespace, or
        in all of them (a namespaced kind) or cluster-wide (Node, StorageClass) when namespace is None."""
        selectors = _selectors(label_selector, field_selector) | {"_request_timeout": REQUEST_TIMEOUT}
        return self._call(Operation("list", resource_name(kind), namespace),
                          lambda: self._bound(kind, "list", namespace)(**selectors).items)

    def pages(self, kind: str, namespace: str | None = None, label_selector: str = "", field_selector: str = "",
              page_size: int = 500) -> Iterator[list[dict[str, Any]]]:  # fmt: skip
        """The objects of list_objects (or of a resource plural.version.group) as the API server sends them (JSON),
        `page_size` at a time (limit and continue): a caller that keeps only what it counts holds one page, however
        large the cluster, and no client models are built (15,000 pods as models: 500 MB and 8-17 s); none when the
        server does not serve the resource (404)."""
        operation = Operation("list", resource_name(kind), namespace)
        more: dict[str, Any] = {"limit": page_size, **_selectors(label_selector, field_selector)}
        while True:
            listed = self._call(operation, lambda: _json_or_none(self._bound(kind, "list", namespace), **more, **RAW))
            yield list((listed or {}).get("items") or [])
            if not (token := ((listed or {}).get("metadata") or {}).get("continue")):
                return
            more["_continue"] = token

    def read_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """An object of a kind (or resource plural.version.group; cluster-scoped: namespace None) as the API server
        sent it (JSON), or None (404). Read raw: the upgrade guard compares the server's own fields
        (deletionTimestamp, finalizers, status.phase), not a client model that may drop what it does not know."""
        operation = Operation("get", resource_name(kind), namespace, name)
        return self._call(operation, lambda: _json_or_none(self._bound(kind, "read", namespace, name), **RAW))

    def read_pod_log(self, namespace: str, name: str, container: str | None, tail_lines: int | None) -> str:
        """The (current container's) log as text, read raw: the client would json-decode a log that is one JSON
        document and hand back a Python repr."""
        return "".join(line + "\n" for line in self.stream_pod_log(namespace, name, container, tail_lines, False))

    def stream_pod_log(
        self, namespace: str, name: str, container: str | None, tail_lines: int | None, follow: bool, *,
        previous: bool = False, since_seconds: int | None = None, timestamps: bool = False,
    ) -> Generator[str, None, None]:  # fmt: skip
        """The log line by line (without newlines), as kubectl logs' flags say; with follow, until the container ends
        or the caller stops. The HTTP response is released when the generator is closed (also on Ctrl-C)."""
        operation = Operation("get", "pods/log", namespace, name)
        # No timeout when following: a quiet training log must not end the stream. (None: not sent.)
        kwargs: dict[str, Any] = {"follow": True} if follow else {"_request_timeout": REQUEST_TIMEOUT}
        kwargs |= {"_preload_content": False, "container": container or None, "tail_lines": tail_lines,
                   "since_seconds": since_seconds, "previous": previous or None, "timestamps": timestamps or None}
        response = self._call(operation,
                              lambda: self._api("CoreV1Api").read_namespaced_pod_log(name, namespace, **kwargs))
        lines = _response_lines(response)
        try:
            while (line := self._call(operation, lambda: next(lines, None))) is not None:
                yield line
        finally:
            for method in ("close", "release_conn"):
                with suppress(Exception):
                    getattr(response, method, lambda: None)()

    def served_resources(self, group: str, version: str) -> list[str] | None:
        """The resources (plural names) the API server serves in group/version, or None when it serves not
        that version: API discovery, which every authenticated user may read (reading CRDs needs a ClusterRole)."""
        document = self._call(Operation("get", f"/apis/{group}/{version}"), lambda: _json_or_none(
            self._api("CustomObjectsApi").get_api_resources, group, version, **RAW))
        return None if document is None else [str(resource.get("name")) for resource in document.get("resources") or []]

    def read_custom_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """A custom object (namespaced when `namespace` is given, else cluster-scoped) as JSON, or None (404)."""
        return self.read_object(f"{plural}.{version}.{group}", name, namespace)

    def list_custom_objects(self, group: str, version: str, plural: str, page_size: int = 500) -> list[dict[str, Any]]:
        """Every object of a cluster-scoped custom resource (Volcano's HyperNodes) as JSON, read `page_size` at a
        time; empty when the server does not serve it (404)."""
        return [item for page in self.pages(f"{plural}.{version}.{group}", page_size=page_size) for item in page]

    def list_namespaced_custom(self, group: str, version: str, plural: str, namespace: str | None,
                               label_selector: str = "") -> list[dict[str, Any]] | None:  # fmt: skip
        """The custom objects of a namespaced resource (a JobSet, a Kueue Workload) in `namespace` (None: every
        namespace) as JSON, or None when the server does not serve the resource (404: its CRD is not installed)."""
        resource, selector = f"{plural}.{version}.{group}", _selectors(label_selector, "")
        listed = self._call(Operation("list", f"{plural}.{group}", namespace),
                            lambda: _json_or_none(self._bound(resource, "list", namespace), **selector, **RAW))
        return None if listed is None else list(listed.get("items") or [])

    # -- writes (tfchart stop, upgrade --recreate, uninstall --delete-data) -----------------------
    def patch_custom(self, group: str, version: str, plural: str, name: str, namespace: str,
                     body: dict[str, Any]) -> None:  # fmt: skip
        """A JSON merge patch of a namespaced custom object (a JobSet, a Kueue Workload)."""
        self.patch(f"{plural}.{version}.{group}", name, namespace, body)

    def patch(self, kind: str, name: str, namespace: str, body: dict[str, Any]) -> None:
        """A JSON merge patch (RFC 7386) of a StatefulSet, Deployment, Job or JobSet: exactly the fields in body."""
        self._call(Operation("patch", resource_name(kind), namespace, name), lambda: self._bound(
            kind, "patch", namespace, name)(body, _content_type=MERGE_PATCH, **RAW))

    def dry_run_patch(self, kind: str, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """A server-side dry run (dryRun=All) of a JSON merge patch: None where the API server accepts it, else its
        refusal as it sent it (a metav1.Status: 422 Invalid with details.causes, or 403 from admission or RBAC)."""
        from kubernetes.client.exceptions import ApiException

        def dry_run() -> dict[str, Any] | None:
            try:
                _json_or_none(self._bound(kind, "patch", namespace, name), body, dry_run="All",
                              _content_type=MERGE_PATCH, **RAW)  # fmt: skip
            except ApiException as error:
                if error.status not in (403, 422):
                    raise
                return dict(json.loads(error.body or "{}"), code=error.status)
            return None

        return self._call(Operation("patch", resource_name(kind), namespace, name), dry_run)

    def scale(self, kind: str, name: str, namespace: str, replicas: int) -> None:
        """Sets a StatefulSet's or Deployment's replicas through its /scale subresource."""
        operation = Operation("patch", f"{split_resource(kind).plural}/scale", namespace, name)
        self._call(operation, lambda: self._bound(kind, "patch", namespace, name, sub="_scale")(
            {"spec": {"replicas": replicas}}, _content_type=MERGE_PATCH, **RAW))

    def delete(self, kind: str, name: str, namespace: str, propagation: str | None = None) -> Deletion:
        """Deletes an object, its dependents as `propagation` says (Orphan, Foreground; None: the kind's
        default). Read raw: the server answers a Status when the object is gone, else the object itself
        (finalizers pending), which the client's V1Status model cannot hold; 404: nothing to delete."""
        resource = split_resource(kind)
        operation = Operation("delete", resource.name if kind in CUSTOM else resource.plural, namespace, name)

        def delete() -> Deletion:
            document = _json_or_none(self._bound(kind, "delete", namespace, name), propagation_policy=propagation,
                                     _preload_content=False)  # fmt: skip
            return "absent" if document is None else "deleted" if document.get("kind") == "Status" else "terminating"

        return self._call(operation, delete)

    def delete_pvc(self, name: str, namespace: str) -> None:
        """Deletes a claim (`uninstall --delete-data`); one already gone is nothing left to do."""
        self.delete("PersistentVolumeClaim", name, namespace)


def _json_or_none(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """The JSON object of a raw call's answer (checked_request made sure it is Kubernetes JSON), or None (404)."""
    from kubernetes.client.exceptions import ApiException

    try:
        data = call(*args, **kwargs).data
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    document = json.loads(data) if data else {}
    if not isinstance(document, dict):
        raise ValueError(f"expected a JSON object, got {type(document).__name__}")
    return document


class NotKubernetes(ClusterUnavailable):
    """The URL answered, but not like a Kubernetes API server."""


ANSWER_PREVIEW = 80


def checked_request(request: Callable[..., Any], source: str) -> Callable[..., Any]:
    """Wraps the client's HTTP layer: answers that are not Kubernetes JSON become NotKubernetes. A Kubernetes
    API server answers every request with JSON carrying `kind` and `apiVersion` (a metav1.Status for errors),
    except a pod log, which is text/plain. Anything else (an HTML login page of a proxy, an empty body,
    other JSON) would otherwise reach the client's deserialiser."""

    def checked(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = request(method, url, *args, **kwargs)
        content_type = str(response.headers.get("content-type") or response.headers.get("Content-Type") or "")
        status = int(response.status or 0)
        if "/log" in url.split("?", 1)[0] and 200 <= status <= 299:  # a pod's log: text/plain
            if content_type and not content_type.startswith("text/plain"):
                raise not_kubernetes(url, status, content_type, b"", source)
            return response
        body = response.read()
        try:
            document = json.loads(body) if body else None
        except ValueError:
            document = None
        if not (isinstance(document, dict) and document.get("kind") and document.get("apiVersion")):
            raise not_kubernetes(url, status, content_type, body, source)
        return response

    return checked


def not_kubernetes(url: str, status: int, content_type: str, body: bytes, source: str) -> NotKubernetes:
    text = " ".join(body.decode("utf-8", errors="replace").split())
    preview = text if len(text) <= ANSWER_PREVIEW else text[: ANSWER_PREVIEW - 3] + "..."
    shown = repr(preview) if text else "an empty body"
    kind = content_type.split(";")[0].strip() or "no content type"
    answer = f"HTTP {status}, {kind}, {shown}"
    return NotKubernetes(f"{url.split('?', 1)[0]} did not answer like a Kubernetes API server: {answer}",
                         f"is this the API server? check the server URL of the kubeconfig ({source or 'default'}) and "
                         "any proxy in between (HTTPS_PROXY/NO_PROXY); `kubectl cluster-info` should reach it")


def _response_lines(response: Any) -> Iterator[str]:
    """Lines of a raw urllib3 response as they arrive; a last line without a newline is kept. read1
    returns whatever has arrived (one HTTP chunk of a followed log), where stream(amt=None) would wait
    for the whole body of a non-chunked response."""
    buffer = b""
    while True:
        chunk = response.read1(LOG_READ_BYTES)
        if not chunk:
            break
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", errors="replace")
    if buffer:
        yield buffer.decode("utf-8", errors="replace")



# -- configuration --------------------------------------------------------------------------------
def describe_source(kubeconfig: Path | None, context: str | None) -> str:
    listed = os.environ.get("KUBECONFIG")
    where = (str(kubeconfig) if kubeconfig else f"KUBECONFIG={listed}" if listed else str(DEFAULT_KUBECONFIG)
             if DEFAULT_KUBECONFIG.expanduser().exists() else "in-cluster service account"
             if os.environ.get(IN_CLUSTER_HOST_ENV) else "no configuration")  # fmt: skip
    return f"{where}, context {context}" if context else where


def kubeconfig_files(kubeconfig: Path | None) -> str | None:
    """The kubeconfig path (list) to load, or None when only the in-cluster configuration can apply."""
    if kubeconfig:
        return str(kubeconfig.expanduser())
    listed = os.environ.get("KUBECONFIG", "")
    if listed.strip(os.pathsep):
        return listed
    default = DEFAULT_KUBECONFIG.expanduser()
    return str(default) if default.exists() else None


def require_configuration(kubeconfig: Path | None) -> None:
    """Refuses when there is no kubeconfig and tfchart is not in a pod, before helm would try localhost:8080."""
    if kubeconfig_files(kubeconfig) is None and not os.environ.get(IN_CLUSTER_HOST_ENV):
        raise ClusterUnavailable("no Kubernetes configuration: KUBECONFIG is not set, ~/.kube/config does not "
                              "exist and tfchart is not running in a pod",
                              "point KUBECONFIG at your cluster's kubeconfig (export KUBECONFIG=/path/to/kubeconfig) "
                              "or pass --kubeconfig PATH; `kind create cluster` or your provider's get-credentials "
                              "command writes one")


def load_api_client(kubeconfig: Path | None, context: str | None) -> Any:
    """A kubernetes ApiClient for the kubeconfig, or the in-cluster service account when there is none."""
    from kubernetes import client, config
    from kubernetes.config.kube_config import KubeConfigMerger

    files = kubeconfig_files(kubeconfig)
    configuration = client.Configuration()
    root, errors = logging.getLogger(), list[str]()

    def said(record: logging.LogRecord) -> bool:  # the loader reports a failed exec plugin only by logging it and goes
        if record.levelno >= logging.ERROR:  # on without credentials: what it logs as an error ends tfchart instead
            errors.append(record.getMessage())
        return record.levelno < logging.ERROR

    try:
        if files is None:
            require_configuration(kubeconfig)
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            merged = KubeConfigMerger(files).config  # type: ignore[no-untyped-call]  # as load_kube_config merges
            if merged is None:
                raise ValueError("Invalid kube-config file. No configuration found.")
            root.addFilter(said)
            root.addHandler(quiet := logging.NullHandler())  # no logging.basicConfig behind tfchart's back
            try:
                config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                    bounded_plugins(merged), context=context, client_configuration=configuration, persist_config=False)
            finally:
                root.removeFilter(said)
                root.removeHandler(quiet)
    except KubernetesError:
        raise
    except Exception as error:  # ConfigException, and TypeError/ValueError/OSError on malformed files
        raise config_error(error, files, context) from None
    if errors:
        raise ClusterUnavailable(f"the kubeconfig's credential plugin failed: {errors[0]}",
                                 "run it by hand to see why (often a login that expired: log in again); "
                                 f"{EXEC_TIMEOUT_ENV} sets how long it may take")
    return client.ApiClient(configuration)


EXEC_TIMEOUT_ENV = "TFCHART_EXEC_PLUGIN_TIMEOUT"
# The client's ExecProvider waits for a plugin without a limit (a login prompt nobody answers hangs tfchart), and
# takes no option to bound it: each plugin runs under this wrapper instead, which kills it after the limit. It is
# the kubeconfig's exec.command and args in memory only (persist_config=False), so it also bounds the runs of a
# token refresh; the client reads what it prints and exits with as the plugin's own.
BOUNDED_PLUGIN = """import subprocess, sys
limit, argv = float(sys.argv[1]), sys.argv[2:]
try: sys.exit(subprocess.run(argv, timeout=limit).returncode)
except subprocess.TimeoutExpired: sys.exit(f"{argv!r} did not answer within {limit:.0f} s")
except OSError as error: sys.exit(str(error))"""


def bounded_plugins(merged: Any) -> Any:
    """The merged kubeconfig with each user's exec plugin run under BOUNDED_PLUGIN (EXEC_TIMEOUT_ENV seconds, 60)."""
    limit = float(os.environ.get(EXEC_TIMEOUT_ENV) or 60)
    for node in merged.value.get("users") or []:
        plugin = (getattr(node, "value", node).get("user") or {}).get("exec")
        if isinstance(plugin, dict) and plugin.get("command"):
            plugin["args"] = ["-c", BOUNDED_PLUGIN, str(limit), plugin["command"], *(plugin.get("args") or [])]
            plugin["command"] = sys.executable
    return merged


def configured_namespace(kubeconfig: Path | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (current or named), or of the in-cluster service account."""
    from kubernetes import config

    files = kubeconfig_files(kubeconfig)
    if files is None:
        try:
            return IN_CLUSTER_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "default"
        except OSError:
            return "default"
    try:
        contexts, active = config.list_kube_config_contexts(config_file=files)  # type: ignore[no-untyped-call]
    except Exception as error:  # same failures as loading the configuration
        raise config_error(error, files, context) from None
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    if context and chosen is None:
        raise config_error(ValueError(f"context {context!r} not found"), files, context)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


def config_error(error: Exception, files: str | None, context: str | None) -> ClusterUnavailable:
    detail = str(error).strip() or type(error).__name__
    if files is None:
        return ClusterUnavailable(f"cannot use the in-cluster service account: {detail}", "run tfchart in a pod with a "
                                  "mounted service-account token, or set KUBECONFIG to a kubeconfig file")
    if context and "context" in detail.lower():
        return ClusterUnavailable(f"kubeconfig context {context!r} not found in {files}: {detail}", "list the contexts "
                                  "with `kubectl config get-contexts` and pass one of them with --kube-context")
    return ClusterUnavailable(f"cannot load the kubeconfig {files}: {detail}", "check the file (`kubectl config view` "
                              "reads the same one) or point KUBECONFIG/--kubeconfig at a valid kubeconfig")


# -- errors ---------------------------------------------------------------------------------------
def translate(error: Exception, operation: Operation, host: str, source: str) -> Exception:
    """A KubernetesError with a hint for API and connection errors; other exceptions unchanged."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    server, what, config = host or "the API server", operation.describe(), f"the kubeconfig ({source or 'default'})"
    if isinstance(error, ApiException):
        return http_error(error, operation, server, config)
    if isinstance(error, HTTPError):
        return ClusterUnavailable(f"cannot reach the Kubernetes API server at {server} ({what}): "
                                  f"{getattr(error, 'reason', None) or error}",
                                  f"is the cluster running and does {config} point at it? try `kubectl cluster-info`")
    if isinstance(error, (ValueError, TypeError)):  # pydantic's ValidationError is a ValueError
        first = (str(error).strip() or type(error).__name__).splitlines()[0]
        return ClusterUnavailable(f"{server} answered {what} with an object the Kubernetes client cannot read: {first}",
                                  f"is this the API server? check the server URL of {config} and any proxy in between;"
                                  " a server much newer or older than the client can also answer so")
    return error


def status_message(error: Any) -> str:
    """The API server's own message (a metav1.Status body), else the HTTP reason."""
    body = error.body.decode("utf-8", errors="replace") if isinstance(error.body, bytes) else error.body
    try:
        document = json.loads(body or "null")
    except ValueError:
        return str(body).strip()[:300]
    return str(document["message"] if isinstance(document, dict) and document.get("message") else error.reason or "")


def http_error(error: Any, operation: Operation, server: str, config: str) -> KubernetesError:
    status, detail, what = int(error.status or 0), status_message(error), operation.describe()
    verb, resource, namespace = operation.verb, operation.resource, operation.namespace
    scope, where = (f" -n {namespace}", f" in namespace {namespace}") if namespace else ("", "")
    if status == 401:
        return ClusterUnavailable(f"the API server rejected the credentials (401 Unauthorized) to {what}",
                                  "refresh your login (e.g. `gcloud container clusters get-credentials`, `aws eks "
                                  f"update-kubeconfig`, `kubectl oidc-login`) or fix the user in {config}")
    if status == 403:
        role = f"a Role in namespace {namespace}" if namespace else "a ClusterRole"
        return AccessDenied(f"forbidden: you may not {what}: {detail}",
                            f"RBAC verb `{verb}` on resource `{resource}` is missing: ask a cluster admin for {role} "
                            f"granting it (check with `kubectl auth can-i {verb} {resource}{scope}`)")
    if status == 404:
        target = f"{resource} {operation.name}" if operation.name else resource
        return KubernetesError(f"{target} not found{where}: {detail}", "check the name and --namespace (`kubectl get "
                               f"{resource.split('/')[0]}{scope}`); the object may have been deleted meanwhile")
    if status == 0:
        return ClusterUnavailable(f"TLS or client error talking to {server} ({what}): {error.reason}",
                                  "check the cluster CA and server address in the kubeconfig (`kubectl cluster-info`)")
    if status == 429 or status >= 500:
        return ClusterUnavailable(f"the API server failed to {what} (HTTP {status}): {detail}",
                                  "the control plane is overloaded or unhealthy: retry in a moment; "
                                  "`kubectl get --raw '/readyz?verbose'` shows its health")
    return KubernetesError(f"the API server refused to {what} (HTTP {status}): {detail}",
                           "run with --debug for details; `kubectl` with -v=6 shows the same request")


def as_model(kind: str, document: dict[str, Any]) -> Any:
    """The kubernetes.client model (V1Pod...) of an object read raw (KubeApi.pages), for the readers of
    tfchart.cluster.objects: built only for the few objects a caller keeps."""
    from kubernetes import client

    return client.ApiClient().deserialize(json.dumps(document), f"V1{kind}", "application/json")
