"""The one door to the Kubernetes API: every call tfchart makes to a cluster goes through KubeApi, on the kubernetes
client. The tests reach a fake API server on the loopback (tests/kubeapi.py) through a kubeconfig, so the whole client
stack runs (docs/architecture.md §8). The configuration is loaded (tfchart.cluster.kubeconfig) on the first call. Every
failure becomes a KubernetesError whose hint says what to do: a ClusterUnavailable (exit 69) where the cluster could not
be asked (no configuration, unreachable or failing server, 401/403, an answer not from an API server: a proxy's login
page, checked before the client deserialises it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

from tfchart.cluster.kubeconfig import describe_source, load_api_client
from tfchart.errors import ClusterUnavailable, KubernetesError

T = TypeVar("T")

REQUEST_TIMEOUT = (10, 60)  # seconds: (connect, read), for every call but a followed log and a DELETE
MERGE_PATCH = "application/merge-patch+json"

# What a DELETE did: gone (a Status), "terminating" (the object: finalizers pending) or "absent" (404: nothing there)
Deletion = Literal["deleted", "terminating", "absent"]

# The kinds tfchart names, as resources in full (plural.version.group, as `kubectl get` takes them): what the client
# cannot tell from a kind. Every call is made on the resource's path through the client's ApiClient (its
# configuration, credentials and HTTP layer) and read raw as JSON: no typed API or model stands between.
KINDS = {
    "Pod": "pods.v1", "Service": "services.v1", "ConfigMap": "configmaps.v1", "ResourceQuota": "resourcequotas.v1",
    "PersistentVolumeClaim": "persistentvolumeclaims.v1", "PersistentVolume": "persistentvolumes.v1",
    "Node": "nodes.v1", "StatefulSet": "statefulsets.v1.apps", "Deployment": "deployments.v1.apps",
    "DaemonSet": "daemonsets.v1.apps", "Job": "jobs.v1.batch", "StorageClass": "storageclasses.v1.storage.k8s.io",
    "EndpointSlice": "endpointslices.v1.discovery.k8s.io", "JobSet": "jobsets.v1alpha2.jobset.x-k8s.io",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations.v1.admissionregistration.k8s.io",
}  # fmt: skip


class Custom(NamedTuple):
    """A resource as its group, version and plural (the core group is "")."""

    group: str
    version: str
    plural: str


def split_resource(kind: str) -> Custom:  # a KINDS kind, or a resource spelled plural.version.group
    plural, version, *group = KINDS.get(kind, kind).split(".", 2)
    return Custom(group[0] if group else "", version, plural)


def resource_name(kind: str) -> str:  # as messages and RBAC hints name it: pods, statefulsets.apps
    group, _, plural = split_resource(kind)
    return f"{plural}.{group}".rstrip(".")


def resource_path(kind: str, namespace: str | None, *name: str) -> str:
    """The API path of a kind's objects (namespace None: cluster-scoped, or all namespaces), then of an object and its
    subresource: /api/v1/namespaces/ml/pods/NAME/log, /apis/jobset.x-k8s.io/v1alpha2/jobsets."""
    group, version, plural = split_resource(kind)
    where = ("namespaces", namespace) if namespace else ()
    return "/".join((f"/apis/{group}" if group else "/api", version, *where, plural, *name))


class AccessDenied(ClusterUnavailable):
    """The API server answered 403: RBAC does not allow the call (callers may degrade gracefully)."""


class KubeApi:
    """The few list/read/log/patch/delete calls tfchart needs. `client_factory` builds the ApiClient on first use
    (from_config: from the kubeconfig); `source` says where the configuration came from, for error hints."""

    def __init__(self, client_factory: Callable[[], Any], source: str = "") -> None:
        self._client_factory = client_factory
        self._client: Any = None
        self.source = source

    @classmethod
    def from_config(cls, kubeconfig: Path | None = None, context: str | None = None) -> KubeApi:
        """A KubeApi for the kubeconfig (or in-cluster) configuration; nothing is read until the first call."""
        return cls(lambda: load_api_client(kubeconfig, context), describe_source(kubeconfig, context))

    def _raw(self, method: str, path: str, body: Any = None, timeout: Any = REQUEST_TIMEOUT, **query: Any) -> Any:
        """The answer to one request, unread (checked_request has checked it), with the query's values that are not
        None; one not 2xx raises the client's ApiException, as its own calls do."""
        from kubernetes.client.exceptions import ApiException

        if self._client is None:
            api_client = self._client_factory()
            api_client.rest_client.request = checked_request(api_client.rest_client.request, self.source)
            self._client = api_client
        headers = {"Accept": "application/json", **({"Content-Type": MERGE_PATCH} if body is not None else {})}
        request = self._client.param_serialize(method, path, query_params=[(k, v) for k, v in query.items() if v is not
                                               None], header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self._client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def _call(self, call: Callable[[], T], verb: str, resource: str, namespace: str | None = None,
              name: str | None = None) -> T:
        """call's answer; its errors as a KubernetesError saying what tfchart was doing (`list pods in namespace x`)."""
        try:
            return call()
        except Exception as error:  # translated below; anything unknown (a KubernetesError already) is re-raised as is
            host = str(getattr(getattr(self._client, "configuration", None), "host", "") or "")
            raise translate(error, host, self.source, verb, resource, namespace, name) from None

    # -- reads ----------------------------------------------------------------------------------
    def pages(self, kind: str, namespace: str | None = None, label_selector: str = "", field_selector: str = "",
              page_size: int | None = 500) -> Iterator[list[dict[str, Any]]]:  # fmt: skip
        """A kind's (or a plural.version.group's) objects as JSON, `page_size` at a time (limit and continue; None: in
        one answer), none where the resource is not served (404): a caller keeps one page, however large the cluster,
        and builds no models (15,000 pods: 500 MB, 8-17 s)."""
        path, token = resource_path(kind, namespace), None
        while (listed := self._call(lambda: _json_or_none(  # the query in the client's order
                self._raw, "GET", path, **{"continue": token}, fieldSelector=field_selector or None,
                labelSelector=label_selector or None, limit=page_size),
                "list", resource_name(kind), namespace)) is not None:  # fmt: skip
            yield list(listed.get("items") or [])
            if not (token := (listed.get("metadata") or {}).get("continue")):
                return

    def items(self, kind: str, namespace: str | None = None, label_selector: str = "",
              page_size: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
        """pages' objects all together (none where the resource is not served: a custom resource not installed)."""
        return [item for page in self.pages(kind, namespace, label_selector, page_size=page_size) for item in page]

    def read_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """An object (cluster-scoped: namespace None) as the server sent it (JSON, no model that may drop what it does
        not know: deletionTimestamp, finalizers), or None (404)."""
        return self._call(lambda: _json_or_none(self._raw, "GET", resource_path(kind, namespace, name)), "get",
                          resource_name(kind), namespace, name)

    def stream_pod_log(
        self, namespace: str, name: str, container: str | None, tail_lines: int | None, follow: bool = False, *,
        previous: bool = False, since_seconds: int | None = None, timestamps: bool = False,
    ) -> Generator[str, None, None]:  # fmt: skip
        """The log line by line (without newlines, read raw: the client would json-decode a log of one JSON object), as
        kubectl logs' flags say; with follow, until the container ends or the caller stops. The HTTP response is
        released when the generator is closed (also on Ctrl-C)."""
        operation = ("get", "pods/log", namespace, name)  # following: no timeout (a quiet log is no end)
        response = self._call(lambda: self._raw(
            "GET", resource_path("Pod", namespace, name, "log"), timeout=None if follow else REQUEST_TIMEOUT,
            container=container or None, follow=follow or None, previous=previous or None, sinceSeconds=since_seconds,
            tailLines=tail_lines, timestamps=timestamps or None), *operation)  # fmt: skip
        lines = _response_lines(response)
        try:
            while (line := self._call(lambda: next(lines, None), *operation)) is not None:
                yield line
        finally:
            for method in ("close", "release_conn"):
                with suppress(Exception):
                    getattr(response, method, lambda: None)()

    def served_resources(self, group: str, version: str) -> list[str] | None:
        """The resources the server serves in group/version (None: not that version), by API discovery, which every
        authenticated user may read (reading CRDs needs a ClusterRole)."""
        path = f"/apis/{group}/{version}"
        document = self._call(lambda: _json_or_none(self._raw, "GET", path), "get", path)
        return None if document is None else [str(resource.get("name")) for resource in document.get("resources") or []]

    # -- writes (tfchart stop, upgrade --recreate, uninstall --delete-data) -----------------------
    def patch(self, kind: str, name: str, namespace: str, body: dict[str, Any], subresource: str = "", *,
              dry_run: bool = False) -> dict[str, Any] | None:  # fmt: skip
        """A JSON merge patch (RFC 7386): exactly the fields in body, of the object or of its `subresource` (scale:
        a StatefulSet's or Deployment's replicas). With `dry_run`, a server-side dry run (dryRun=All): None where the
        API server accepts it (or the object is gone), else its refusal as it sent it (a metav1.Status: 422 Invalid
        with details.causes, or 403 from admission or RBAC)."""
        from kubernetes.client.exceptions import ApiException

        resource = f"{split_resource(kind).plural}/{subresource}" if subresource else resource_name(kind)
        path = resource_path(kind, namespace, name, *filter(None, [subresource]))

        def patch() -> dict[str, Any] | None:
            try:
                self._raw("PATCH", path, body, dryRun="All" if dry_run else None)
            except ApiException as error:
                if not dry_run or error.status not in (403, 404, 422):
                    raise
                return None if error.status == 404 else dict(json.loads(error.body or "{}"), code=error.status)
            return None

        return self._call(patch, "patch", resource, namespace, name)

    def delete(self, kind: str, name: str, namespace: str, propagation: str | None = None) -> Deletion:
        """Deletes an object, its dependents as `propagation` says (Orphan, Foreground; None: the kind's default); read
        raw: a Status when it is gone, else the object itself (finalizers pending), which V1Status cannot hold."""
        document = self._call(lambda: _json_or_none(self._raw, "DELETE", resource_path(kind, namespace, name),
                                                    timeout=None, propagationPolicy=propagation),
                              "delete", resource_name(kind), namespace, name)  # fmt: skip
        return "absent" if document is None else "deleted" if document.get("kind") == "Status" else "terminating"


def _json_or_none(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """The JSON object of a raw call's answer (checked_request made sure it is Kubernetes JSON), or None (404)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return dict(json.loads(call(*args, **kwargs).data))
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def checked_request(request: Callable[..., Any], source: str) -> Callable[..., Any]:
    """Wraps the client's HTTP layer: an API server answers JSON with `kind` and `apiVersion` (a metav1.Status for
    errors), a pod log text/plain; anything else (a proxy's HTML login page, an empty body, other JSON) becomes a
    ClusterUnavailable before it reaches the client's deserialiser."""

    def checked(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = request(method, url, *args, **kwargs)
        content_type, status, body = str(response.headers.get("content-type") or ""), int(response.status or 0), b""
        if "/log" in url.split("?", 1)[0] and 200 <= status <= 299:  # a pod's log: text/plain
            if not content_type or content_type.startswith("text/plain"):
                return response
        else:
            document = None
            with suppress(ValueError):
                document = json.loads(body := response.read())
            if isinstance(document, dict) and document.get("kind") and document.get("apiVersion"):
                return response
        text = " ".join(body.decode("utf-8", errors="replace").split())
        shown = repr(text if len(text) <= 80 else text[:77] + "...") if text else "an empty body"
        answer = f"HTTP {status}, {content_type.split(';')[0].strip() or 'no content type'}, {shown}"
        raise ClusterUnavailable(f"{url.split('?', 1)[0]} did not answer like a Kubernetes API server: {answer}",
                            f"is this the API server? check the server URL of the kubeconfig ({source or 'default'}) "
                            "and any proxy in between (HTTPS_PROXY/NO_PROXY); `kubectl cluster-info` should reach it")

    return checked


def _response_lines(response: Any) -> Iterator[str]:
    """Lines of a raw urllib3 response as they arrive (read1: one HTTP chunk of a followed log, where stream() would
    wait for a whole non-chunked body); a last line without a newline is kept."""
    buffer = b""
    while chunk := response.read1(64 * 1024):
        *complete, buffer = (buffer + chunk).split(b"\n")
        yield from (line.decode("utf-8", errors="replace") for line in complete)
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


# -- errors ---------------------------------------------------------------------------------------
def translate(error: Exception, host: str, source: str, verb: str, resource: str, namespace: str | None,
              name: str | None) -> Exception:  # fmt: skip
    """A KubernetesError with a hint for API and connection errors (with the API server's own message, a metav1.Status
    body, else the HTTP reason), saying what tfchart was doing; other exceptions unchanged."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    scope, where = (f" -n {namespace}", f" in namespace {namespace}") if namespace else ("", "")
    what = f"{verb} {f'{resource}/{name}' if name else resource}{where or ' (cluster-wide)'}"
    server, config = host or "the API server", f"the kubeconfig ({source or 'default'})"
    if isinstance(error, HTTPError):
        return ClusterUnavailable(f"cannot reach the Kubernetes API server at {server} ({what}): "
                                  f"{getattr(error, 'reason', None) or error}",
                                  f"is the cluster running and does {config} point at it? try `kubectl cluster-info`")
    if isinstance(error, (ValueError, TypeError)):  # pydantic's ValidationError is a ValueError
        first = (str(error).strip() or type(error).__name__).splitlines()[0]
        return ClusterUnavailable(f"{server} answered {what} with an object the Kubernetes client cannot read: {first}",
                                  f"is this the API server? check the server URL of {config} and any proxy in between;"
                                  " a server much newer or older than the client can also answer so")
    if not isinstance(error, ApiException):
        return error
    document = json.loads(error.body or "null")  # a metav1.Status: checked_request lets no other answer through
    detail = str(document.get("message") if isinstance(document, dict) and document.get("message") else error.reason
                 or "")  # fmt: skip
    status = int(error.status or 0)
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
        target = f"{resource} {name}" if name else resource
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
