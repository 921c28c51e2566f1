"""The one door to the Kubernetes API: every call tfchart makes to a cluster goes through KubeApi.

No Kubernetes API server runs on the development and CI machines (docs/architecture.md §8), so:

- the commands built on this class (`tfchart status`, `logs`, `stop`, `preflight`, the upgrade
  guard and `upgrade --recreate`, `uninstall --delete-data`) are tested against a fake API server
  on the loopback (tests/kubeapi.py), reached through a kubeconfig like a real cluster: it keeps
  objects as the API server serves them, applies merge patches and deletes, and records every
  request; the real client code (kubeconfig loading, URL building, query parameters, HTTP,
  deserialisation into kubernetes.client models, HTTP errors) runs in those tests;
- tests marked `cluster` run the same functions against a live cluster when KUBECONFIG points at
  one, for example:

      kind create cluster
      KUBECONFIG=~/.kube/config make test
      # or only those: KUBECONFIG=~/.kube/config .venv/bin/python -m pytest -m cluster tests/tfchart

Configuration is loaded lazily (on the first API call): an explicit kubeconfig, else $KUBECONFIG
(a path list), else ~/.kube/config, else the in-cluster service account. Every failure (no
configuration, unreachable server, HTTP errors) becomes a tfchart.errors.KubernetesError whose
hint says what to do. So does an answer that is not from a Kubernetes API server (a proxy's HTML
login page, an empty body, JSON without `kind` and `apiVersion`): every response is checked here,
before the client deserialises it, and reported in one line naming the URL and what came back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from tfchart.errors import KubernetesError

T = TypeVar("T")

REQUEST_TIMEOUT = (10, 60)  # seconds: (connect, read) for list/read calls
LOG_READ_BYTES = 64 * 1024
IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = Path("~/.kube/config")
MERGE_PATCH = "application/merge-patch+json"
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

# What a DELETE did: the object is gone ("deleted": the server answered a Status), is still being
# deleted ("terminating": the server answered the object, finalizers pending: orphan or
# foregroundDeletion), or was not there ("absent": 404).
Deletion = Literal["deleted", "terminating", "absent"]
# kind -> (API group client, read method, resource for messages) of the objects `read_object` reads.
READABLE = {
    "StatefulSet": ("apps", "read_namespaced_stateful_set", "statefulsets.apps"),
    "Deployment": ("apps", "read_namespaced_deployment", "deployments.apps"),
    "Job": ("batch", "read_namespaced_job", "jobs.batch"),
    "PersistentVolumeClaim": ("core", "read_namespaced_persistent_volume_claim", "persistentvolumeclaims"),
}


class AccessDenied(KubernetesError):
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

    def can_i(self) -> str:
        scope = f" -n {self.namespace}" if self.namespace else ""
        return f"kubectl auth can-i {self.verb} {self.resource}{scope}"


class KubeApi:
    """The few list/read/log calls tfchart needs, returning kubernetes.client models.

    `client_factory` builds the kubernetes ApiClient on first use (from_config: from the kubeconfig);
    `source` says where the configuration came from, for error hints.
    """

    def __init__(
        self,
        client_factory: Callable[[], Any],
        source: str = "",
        namespace_resolver: Callable[[], str] | None = None,
    ) -> None:
        self._client_factory = client_factory
        self._client: Any = None
        self._namespace_resolver = namespace_resolver or (lambda: "default")
        self.source = source

    @classmethod
    def from_config(cls, kubeconfig: Path | None = None, context: str | None = None) -> KubeApi:
        """A KubeApi for the kubeconfig (or in-cluster) configuration; nothing is read until the first call."""
        return cls(
            lambda: load_api_client(kubeconfig, context),
            describe_source(kubeconfig, context),
            lambda: configured_namespace(kubeconfig, context),
        )

    def default_namespace(self) -> str:
        """The namespace kubectl would use: the context's namespace, the pod's own in a cluster, else default."""
        return self._namespace_resolver()

    # -- clients --------------------------------------------------------------------------------

    def _api_client(self) -> Any:
        if self._client is None:
            client = self._client_factory()
            client.rest_client.request = checked_request(client.rest_client.request, self.source)
            self._client = client
        return self._client

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._api_client())

    def _apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self._api_client())

    def _batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self._api_client())

    def _storage(self) -> Any:
        from kubernetes import client

        return client.StorageV1Api(self._api_client())

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._api_client())

    def _call(self, operation: Operation, call: Callable[[], T]) -> T:
        try:
            return call()
        except KubernetesError:
            raise
        except Exception as error:  # translated below; anything unknown is re-raised as is
            raise translate(error, operation, self.host(), self.source) from None

    def host(self) -> str:
        client = self._client
        return str(getattr(getattr(client, "configuration", None), "host", "") or "")

    # -- reads ----------------------------------------------------------------------------------

    def list_pods(self, namespace: str, label_selector: str, field_selector: str | None = None) -> list[Any]:
        """V1Pod objects of a namespace matching the selectors."""
        operation = Operation("list", "pods", namespace)
        kwargs = _selectors(label_selector, field_selector)
        return self._call(operation, lambda: self._core().list_namespaced_pod(namespace, **kwargs).items)

    def list_pods_all_namespaces(self, field_selector: str) -> list[Any]:
        """V1Pod objects of every namespace matching the field selector (e.g. pods on nodes, not finished)."""
        operation = Operation("list", "pods")
        return self._call(
            operation,
            lambda: (
                self._core()
                .list_pod_for_all_namespaces(field_selector=field_selector, _request_timeout=REQUEST_TIMEOUT)
                .items
            ),
        )

    def list_stateful_sets(self, namespace: str, label_selector: str) -> list[Any]:
        operation = Operation("list", "statefulsets.apps", namespace)
        kwargs = _selectors(label_selector)
        return self._call(operation, lambda: self._apps().list_namespaced_stateful_set(namespace, **kwargs).items)

    def list_deployments(self, namespace: str, label_selector: str) -> list[Any]:
        operation = Operation("list", "deployments.apps", namespace)
        kwargs = _selectors(label_selector)
        return self._call(operation, lambda: self._apps().list_namespaced_deployment(namespace, **kwargs).items)

    def list_daemon_sets(self, namespace: str) -> list[Any]:
        operation = Operation("list", "daemonsets.apps", namespace)
        return self._call(
            operation,
            lambda: self._apps().list_namespaced_daemon_set(namespace, _request_timeout=REQUEST_TIMEOUT).items,
        )

    def list_jobs(self, namespace: str, label_selector: str) -> list[Any]:
        operation = Operation("list", "jobs.batch", namespace)
        kwargs = _selectors(label_selector)
        return self._call(operation, lambda: self._batch().list_namespaced_job(namespace, **kwargs).items)

    def list_services(self, namespace: str, label_selector: str) -> list[Any]:
        operation = Operation("list", "services", namespace)
        kwargs = _selectors(label_selector)
        return self._call(operation, lambda: self._core().list_namespaced_service(namespace, **kwargs).items)

    def list_config_maps(self, namespace: str, label_selector: str) -> list[Any]:
        operation = Operation("list", "configmaps", namespace)
        kwargs = _selectors(label_selector)
        return self._call(operation, lambda: self._core().list_namespaced_config_map(namespace, **kwargs).items)

    def list_resource_quotas(self, namespace: str) -> list[Any]:
        operation = Operation("list", "resourcequotas", namespace)
        return self._call(
            operation,
            lambda: self._core().list_namespaced_resource_quota(namespace, _request_timeout=REQUEST_TIMEOUT).items,
        )

    def list_nodes(self) -> list[Any]:
        operation = Operation("list", "nodes")
        return self._call(operation, lambda: self._core().list_node(_request_timeout=REQUEST_TIMEOUT).items)

    def list_storage_classes(self) -> list[Any]:
        operation = Operation("list", "storageclasses.storage.k8s.io")
        return self._call(operation, lambda: self._storage().list_storage_class(_request_timeout=REQUEST_TIMEOUT).items)

    def read_persistent_volume_claim(self, namespace: str, name: str) -> Any | None:
        """The claim, or None when it does not exist."""
        operation = Operation("get", "persistentvolumeclaims", namespace, name)

        def read() -> Any:
            from kubernetes.client.exceptions import ApiException

            try:
                return self._core().read_namespaced_persistent_volume_claim(
                    name, namespace, _request_timeout=REQUEST_TIMEOUT
                )
            except ApiException as error:
                if error.status == 404:
                    return None
                raise

        return self._call(operation, read)

    def read_pod_log(self, namespace: str, name: str, container: str | None, tail_lines: int | None) -> str:
        """The (current container's) log as text.

        Read raw (_preload_content=False): the client would otherwise json-decode a log that happens
        to be one JSON document and hand back a Python repr.
        """
        return "".join(line + "\n" for line in self.stream_pod_log(namespace, name, container, tail_lines, False))

    def stream_pod_log(
        self, namespace: str, name: str, container: str | None, tail_lines: int | None, follow: bool
    ) -> Generator[str, None, None]:
        """The log line by line (without newlines); with follow, until the container ends or the caller stops.

        The HTTP response is released when the generator is closed (also on Ctrl-C in the caller).
        """
        operation = Operation("get", "pods/log", namespace, name)
        kwargs: dict[str, Any] = {"_preload_content": False}
        if follow:
            kwargs["follow"] = True  # no timeout: a quiet training log must not end the stream
        else:
            kwargs["_request_timeout"] = REQUEST_TIMEOUT
        if container:
            kwargs["container"] = container
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        response = self._call(operation, lambda: self._core().read_namespaced_pod_log(name, namespace, **kwargs))
        lines = _response_lines(response)
        try:
            while True:
                line = self._call(operation, lambda: next(lines, None))
                if line is None:
                    return
                yield line
        finally:
            _release(response)

    def read_object(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """A StatefulSet, Deployment, Job or PersistentVolumeClaim as the API server sent it (JSON), or None (404).

        Read raw: the upgrade guard compares the server's own fields (deletionTimestamp, finalizers,
        status.phase), not a client model that may drop what it does not know.
        """
        group, method, resource = READABLE[kind]
        operation = Operation("get", resource, namespace, name)
        clients = {"apps": self._apps, "batch": self._batch, "core": self._core}

        def read() -> dict[str, Any] | None:
            from kubernetes.client.exceptions import ApiException

            try:
                response = getattr(clients[group](), method)(
                    name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
            return _json_object(response)

        return self._call(operation, read)

    def read_storage_class(self, name: str) -> dict[str, Any] | None:
        """The StorageClass as JSON (allowVolumeExpansion...), or None when it does not exist."""
        operation = Operation("get", "storageclasses.storage.k8s.io", None, name)

        def read() -> dict[str, Any] | None:
            from kubernetes.client.exceptions import ApiException

            try:
                response = self._storage().read_storage_class(
                    name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
            return _json_object(response)

        return self._call(operation, read)

    # -- writes (tfchart stop) --------------------------------------------------------------------

    def patch(self, kind: str, name: str, namespace: str, body: dict[str, Any]) -> None:
        """A JSON merge patch (RFC 7386) of a StatefulSet, Deployment or Job: exactly the fields in body."""
        group, resource = {"StatefulSet": ("apps", "statefulsets.apps"), "Deployment": ("apps", "deployments.apps"),
                           "Job": ("batch", "jobs.batch")}[kind]
        method = {"StatefulSet": "patch_namespaced_stateful_set", "Deployment": "patch_namespaced_deployment",
                  "Job": "patch_namespaced_job"}[kind]
        api = self._apps() if group == "apps" else self._batch()
        operation = Operation("patch", resource, namespace, name)
        self._call(operation, lambda: getattr(api, method)(
            name, namespace, body, _content_type=MERGE_PATCH, _preload_content=False, _request_timeout=REQUEST_TIMEOUT))

    def scale(self, kind: str, name: str, namespace: str, replicas: int) -> None:
        """Sets a StatefulSet's or Deployment's replicas through its /scale subresource."""
        resource = {"StatefulSet": "statefulsets.apps", "Deployment": "deployments.apps"}[kind]
        method = {"StatefulSet": "patch_namespaced_stateful_set_scale",
                  "Deployment": "patch_namespaced_deployment_scale"}[kind]
        operation = Operation("patch", f"{resource.split('.')[0]}/scale", namespace, name)
        body = {"spec": {"replicas": replicas}}
        self._call(operation, lambda: getattr(self._apps(), method)(
            name, namespace, body, _content_type=MERGE_PATCH, _preload_content=False, _request_timeout=REQUEST_TIMEOUT))

    def served_resources(self, group: str, version: str) -> list[str] | None:
        """The resources (plural names) the API server serves in group/version, or None when it serves not
        that version: API discovery, which every authenticated user may read (reading CRDs needs a ClusterRole)."""
        operation = Operation("get", f"/apis/{group}/{version}")

        def read() -> list[str] | None:
            document = _json_or_none(
                lambda: self._custom().get_api_resources(
                    group, version, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
            if document is None:
                return None
            return [str(resource.get("name")) for resource in document.get("resources") or []]

        return self._call(operation, read)

    def read_custom_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """A custom object (namespaced when `namespace` is given, else cluster-scoped) as JSON, or None (404)."""
        operation = Operation("get", f"{plural}.{group}", namespace, name)

        def get() -> Any:
            custom = self._custom()
            if namespace is None:
                return custom.get_cluster_custom_object(
                    group, version, plural, name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            return custom.get_namespaced_custom_object(
                group, version, namespace, plural, name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )

        return self._call(operation, lambda: _json_or_none(get))

    # -- deletes (tfchart upgrade --recreate, tfchart uninstall --delete-data) -------------------

    def delete_statefulset_orphan(self, name: str, namespace: str) -> Deletion:
        """Deletes a StatefulSet but not its pods: the recreated StatefulSet adopts them."""
        operation = Operation("delete", "statefulsets", namespace, name)
        return self._delete(
            operation,
            lambda: self._apps().delete_namespaced_stateful_set(
                name, namespace, propagation_policy="Orphan", _preload_content=False
            ),
        )

    def delete_statefulset(self, name: str, namespace: str) -> Deletion:
        """Deletes a StatefulSet in the foreground, its pods first (when a new selector could not adopt them)."""
        operation = Operation("delete", "statefulsets", namespace, name)
        return self._delete(
            operation,
            lambda: self._apps().delete_namespaced_stateful_set(
                name, namespace, propagation_policy="Foreground", _preload_content=False
            ),
        )

    def delete_job(self, name: str, namespace: str) -> Deletion:
        """Deletes a Job in the foreground: it stays (terminating) until its pod is gone.

        So waiting for the Job to be gone also waits for the old chief pod: the recreated chief never
        writes the same checkpoint directory next to it.
        """
        operation = Operation("delete", "jobs", namespace, name)
        return self._delete(
            operation,
            lambda: self._batch().delete_namespaced_job(
                name, namespace, propagation_policy="Foreground", _preload_content=False
            ),
        )

    def delete_deployment(self, name: str, namespace: str) -> Deletion:
        """Deletes a Deployment in the foreground (its ReplicaSets and pods first)."""
        operation = Operation("delete", "deployments", namespace, name)
        return self._delete(
            operation,
            lambda: self._apps().delete_namespaced_deployment(
                name, namespace, propagation_policy="Foreground", _preload_content=False
            ),
        )

    def _delete(self, operation: Operation, call: Callable[[], Any]) -> Deletion:
        """Runs a DELETE read raw: the server answers a Status when the object is gone, else the object itself
        (which the client's V1Status model cannot hold); a 404 means there was nothing to delete."""

        def delete() -> Deletion:
            from kubernetes.client.exceptions import ApiException

            try:
                document = _json_object(call())
            except ApiException as error:
                if error.status == 404:
                    return "absent"
                raise
            return "deleted" if document.get("kind") == "Status" else "terminating"

        return self._call(operation, delete)

    def delete_pvc(self, name: str, namespace: str) -> None:
        """Deletes a claim (`uninstall --delete-data`). Read raw like every DELETE: a claim without the
        kubernetes.io/pvc-protection finalizer goes at once and the server answers a Status, which the client's
        V1PersistentVolumeClaim model refuses; a claim already gone is nothing left to do."""
        operation = Operation("delete", "persistentvolumeclaims", namespace, name)
        self._delete(
            operation,
            lambda: self._core().delete_namespaced_persistent_volume_claim(name, namespace, _preload_content=False),
        )


def _json_object(response: Any) -> dict[str, Any]:
    """The JSON object of a raw (unpreloaded) response; checked_request made sure it is Kubernetes JSON."""
    data = response.data
    document = json.loads(data) if data else {}
    if not isinstance(document, dict):
        raise ValueError(f"expected a JSON object, got {type(document).__name__}")
    return document


def _json_or_none(call: Callable[[], Any]) -> dict[str, Any] | None:
    """The JSON object of a raw GET, or None when the server answered 404."""
    from kubernetes.client.exceptions import ApiException

    try:
        response = call()
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return _json_object(response)


class NotKubernetes(KubernetesError):
    """The URL answered, but not like a Kubernetes API server."""


ANSWER_PREVIEW = 80


def checked_request(request: Callable[..., Any], source: str) -> Callable[..., Any]:
    """Wraps the client's HTTP layer: answers that are not Kubernetes JSON become NotKubernetes.

    A Kubernetes API server answers every request with JSON carrying `kind` and `apiVersion` (a
    metav1.Status for errors), except a pod log, which is text/plain. Anything else (an HTML login
    page of a proxy, an empty body, other JSON) would otherwise reach the client's deserialiser.
    """

    def checked(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = request(method, url, *args, **kwargs)
        content_type = str(response.headers.get("content-type") or response.headers.get("Content-Type") or "")
        status = int(response.status or 0)
        is_log = "/log" in url.split("?", 1)[0] and 200 <= status <= 299
        if is_log:
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
    if not text:
        shown = "an empty body"
    else:
        shown = repr(text if len(text) <= ANSWER_PREVIEW else text[: ANSWER_PREVIEW - 3] + "...")
    kind = content_type.split(";")[0].strip() or "no content type"
    return NotKubernetes(
        f"{url.split('?', 1)[0]} did not answer like a Kubernetes API server: HTTP {status}, {kind}, {shown}",
        f"is this the API server? check the server URL of the kubeconfig ({source or 'default'}) "
        "and any proxy in between (HTTPS_PROXY/NO_PROXY); `kubectl cluster-info` should reach it",
    )


def _selectors(label_selector: str, field_selector: str | None = None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"label_selector": label_selector, "_request_timeout": REQUEST_TIMEOUT}
    if field_selector:
        kwargs["field_selector"] = field_selector
    return kwargs


def _response_lines(response: Any) -> Iterator[str]:
    """Lines of a raw urllib3 response as they arrive; a last line without a newline is kept.

    read1 returns whatever has arrived (one HTTP chunk of a followed log), where stream(amt=None)
    would wait for the whole body of a non-chunked response.
    """
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


def _release(response: Any) -> None:
    for method in ("close", "release_conn"):
        function = getattr(response, method, None)
        if callable(function):
            try:
                function()
            except Exception:
                continue


# -- configuration --------------------------------------------------------------------------------


def describe_source(kubeconfig: Path | None, context: str | None) -> str:
    if kubeconfig:
        where = str(kubeconfig)
    elif os.environ.get("KUBECONFIG"):
        where = f"KUBECONFIG={os.environ['KUBECONFIG']}"
    elif DEFAULT_KUBECONFIG.expanduser().exists():
        where = str(DEFAULT_KUBECONFIG)
    elif os.environ.get(IN_CLUSTER_HOST_ENV):
        where = "in-cluster service account"
    else:
        where = "no configuration"
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


def load_api_client(kubeconfig: Path | None, context: str | None) -> Any:
    """A kubernetes ApiClient for the kubeconfig, or the in-cluster service account when there is none."""
    from kubernetes import client, config

    files = kubeconfig_files(kubeconfig)
    configuration = client.Configuration()
    try:
        if files is None:
            if not os.environ.get(IN_CLUSTER_HOST_ENV):
                raise KubernetesError(
                    "no Kubernetes configuration: KUBECONFIG is not set, ~/.kube/config does not exist "
                    "and tfchart is not running in a pod",
                    "point KUBECONFIG at your cluster's kubeconfig (export KUBECONFIG=/path/to/kubeconfig) or pass "
                    "--kubeconfig PATH; `kind create cluster` or your provider's get-credentials command writes one",
                )
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=files, context=context, client_configuration=configuration, persist_config=False
            )
    except KubernetesError:
        raise
    except Exception as error:  # ConfigException, and TypeError/ValueError/OSError on malformed files
        raise config_error(error, files, context) from None
    return client.ApiClient(configuration)


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


def config_error(error: Exception, files: str | None, context: str | None) -> KubernetesError:
    detail = str(error).strip() or type(error).__name__
    if files is None:
        return KubernetesError(
            f"cannot use the in-cluster service account: {detail}",
            "run tfchart in a pod with a mounted service-account token, or set KUBECONFIG to a kubeconfig file",
        )
    if context and "context" in detail.lower():
        return KubernetesError(
            f"kubeconfig context {context!r} not found in {files}: {detail}",
            "list the contexts with `kubectl config get-contexts` and pass one of them with --kube-context",
        )
    return KubernetesError(
        f"cannot load the kubeconfig {files}: {detail}",
        "check the file (`kubectl config view` reads the same one) "
        "or point KUBECONFIG/--kubeconfig at a valid kubeconfig",
    )


# -- errors ---------------------------------------------------------------------------------------


def translate(error: Exception, operation: Operation, host: str, source: str) -> Exception:
    """A KubernetesError with a hint for API and connection errors; other exceptions unchanged."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(error, ApiException):
        return http_error(error, operation, host, source)
    if isinstance(error, HTTPError):
        server = host or "the API server"
        reason = getattr(error, "reason", None) or error
        return KubernetesError(
            f"cannot reach the Kubernetes API server at {server} ({operation.describe()}): {reason}",
            f"is the cluster running and does the kubeconfig ({source or 'default'}) point at it? "
            "try `kubectl cluster-info`",
        )
    if isinstance(error, (ValueError, TypeError)):  # pydantic's ValidationError is a ValueError
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return KubernetesError(
            f"{host or 'the API server'} answered {operation.describe()} with an object the Kubernetes client "
            f"cannot read: {first}",
            f"is this the API server? check the server URL of the kubeconfig ({source or 'default'}) and any proxy "
            "in between; a server much newer or older than the client can also answer so",
        )
    return error


def status_message(error: Any) -> str:
    """The API server's own message (a metav1.Status body), else the HTTP reason."""
    body = getattr(error, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str) and body:
        try:
            document = json.loads(body)
        except ValueError:
            return body.strip()[:300]
        if isinstance(document, dict) and document.get("message"):
            return str(document["message"])
    return str(getattr(error, "reason", "") or "")


def http_error(error: Any, operation: Operation, host: str, source: str) -> KubernetesError:
    status = int(error.status or 0)
    detail = status_message(error)
    what = operation.describe()
    if status == 401:
        return KubernetesError(
            f"the API server rejected the credentials (401 Unauthorized) to {what}",
            f"refresh your login (e.g. `gcloud container clusters get-credentials`, `aws eks update-kubeconfig`, "
            f"`kubectl oidc-login`) or fix the user in the kubeconfig ({source or 'default'})",
        )
    if status == 403:
        scope = f"a Role in namespace {operation.namespace}" if operation.namespace else "a ClusterRole"
        return AccessDenied(
            f"forbidden: you may not {what}: {detail}",
            f"RBAC verb `{operation.verb}` on resource `{operation.resource}` is missing: ask a cluster admin for "
            f"{scope} granting it (check with `{operation.can_i()}`)",
        )
    if status == 404:
        target = f"{operation.resource} {operation.name}" if operation.name else operation.resource
        where = f" in namespace {operation.namespace}" if operation.namespace else ""
        listing = f"kubectl get {operation.resource.split('/')[0]}" + (
            f" -n {operation.namespace}" if operation.namespace else ""
        )
        return KubernetesError(
            f"{target} not found{where}: {detail}",
            f"check the name and --namespace (`{listing}`); the object may have been deleted meanwhile",
        )
    if status == 0:
        return KubernetesError(
            f"TLS or client error talking to {host or 'the API server'} ({what}): {error.reason}",
            "check the cluster CA and server address in the kubeconfig (`kubectl cluster-info`)",
        )
    if status == 429 or status >= 500:
        return KubernetesError(
            f"the API server failed to {what} (HTTP {status}): {detail}",
            "the control plane is overloaded or unhealthy: retry in a moment; "
            "`kubectl get --raw '/readyz?verbose'` shows its health",
        )
    return KubernetesError(
        f"the API server refused to {what} (HTTP {status}): {detail}",
        "run with --debug for details; `kubectl` with -v=6 shows the same request",
    )
