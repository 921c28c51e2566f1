"""The trainer's one way to the Kubernetes API: the pinned ``kubernetes`` client, as tfchart uses it.

Its REST client (urllib3: chunked answers, keep-alive, TLS with the service account's CA), its in-cluster
configuration (``InClusterConfigLoader``: KUBERNETES_SERVICE_HOST/PORT, the token, re-read as the kubelet rotates
it, and ca.crt) and its watch (:mod:`trainer.supervisor_watch`). Objects stay the API server's JSON (dicts): every
answer is read raw (``_preload_content=False``) and parsed once, never turned into the client's models.

``TFD_SERVICEACCOUNT_DIR`` overrides the service-account directory (token, namespace, ca.crt); ``TFD_KUBE_API``
overrides the API's base URL (e.g. ``http://127.0.0.1:PORT``): no API server runs on the development machine, so the
tests point it at tests/kubeapi.py, which answers as the API server does (chunked bodies, Status errors).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

from tfdcontract.env import KUBE_API_ENV, SERVICEACCOUNT_DIR_ENV

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"
REQUEST_SECONDS = 10.0
# No answer at all: the API away, a cut connection, TLS, an answer that is not JSON. (An ApiException with a status
# is an answer; one with status 0 is the client's own "no answer".)
NO_ANSWER = (urllib3.exceptions.HTTPError, OSError, ValueError)

__all__ = ["NO_ANSWER", "ApiException", "Kube", "KubeTarget", "answered", "kube_target", "scale_path",
           "target_from_env"]


@dataclass(frozen=True)
class KubeTarget:
    """Where and how to reach the Kubernetes API; `token_file`, when set, is read again before each request."""

    base_url: str
    namespace: str
    token: str | None
    ca_file: Path | None
    token_file: Path | None = None


def _namespace(env: Mapping[str, str], sa_dir: Path) -> str:
    namespace = env.get("POD_NAMESPACE", "").strip()
    if namespace:
        return namespace
    try:
        return (sa_dir / "namespace").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def kube_target(env: Mapping[str, str], sa_dir: Path = SA_DIR) -> KubeTarget | None:
    """The API endpoint, or None when not running in a cluster (no service host or no token)."""
    token_file = sa_dir / "token"
    override = env.get(KUBE_API_ENV, "").strip()
    if override:
        try:
            token: str | None = token_file.read_text(encoding="utf-8").strip()
        except OSError:
            token = None
        ca = sa_dir / "ca.crt"
        return KubeTarget(override.rstrip("/"), _namespace(env, sa_dir), token, ca if ca.is_file() else None,
                          token_file if token is not None else None)
    configuration = client.Configuration()
    loader = InClusterConfigLoader(token_filename=str(token_file), cert_filename=str(sa_dir / "ca.crt"),
                                   environ=env)  # type: ignore[no-untyped-call]
    try:
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except ConfigException:
        return None
    token = str(configuration.api_key.get("BearerToken", "")).removeprefix("bearer ").strip() or None
    return KubeTarget(str(configuration.host), _namespace(env, sa_dir), token, sa_dir / "ca.crt", token_file)


def target_from_env(env: Mapping[str, str], sa_dir: Path = SA_DIR) -> KubeTarget | None:
    """kube_target() with TFD_SERVICEACCOUNT_DIR honoured (the tests' service-account directory)."""
    override = env.get(SERVICEACCOUNT_DIR_ENV, "").strip()
    return kube_target(env, Path(override) if override else sa_dir)


def scale_path(namespace: str, resource: str, name: str) -> str:
    """The /scale subresource of an apps/v1 object (statefulsets, deployments)."""
    return f"/apis/apps/v1/namespaces/{namespace}/{resource}/{name}/scale"


def answered(error: Exception) -> bool:
    """Whether the API server answered (an HTTP status), rather than nothing at all."""
    return isinstance(error, ApiException) and bool(error.status)


def configuration(target: KubeTarget) -> client.Configuration:
    """The client's configuration for `target`: host, CA, and the bearer token (read again before each request
    from its file: the chart projects a short-lived token that the kubelet rotates in place)."""
    conf = client.Configuration()
    conf.host = target.base_url
    conf.ssl_ca_cert = str(target.ca_file) if target.ca_file else None
    if target.token:
        conf.api_key["BearerToken"] = f"Bearer {target.token}"
    token_file = target.token_file

    def fresh_token(conf: client.Configuration) -> None:
        try:
            token = token_file.read_text(encoding="utf-8").strip() if token_file else ""
        except OSError:
            return  # keep the last one: the request says whether it still works
        if token:
            conf.api_key["BearerToken"] = f"Bearer {token}"

    if token_file is not None:
        conf.refresh_api_key_hook = fresh_token  # type: ignore[assignment]
    return conf


class Kube:
    """The API of one namespace through the kubernetes client: JSON in, JSON out."""

    def __init__(self, target: KubeTarget) -> None:
        self.target = target
        self.namespace = target.namespace
        self.client = client.ApiClient(configuration(target))

    def request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (),
                body: Mapping[str, object] | None = None, timeout: float = REQUEST_SECONDS,
                content_type: str = MERGE_PATCH) -> dict[str, Any]:
        """One request (a GET, or a PATCH of `content_type`); the answer's JSON object. Raises ApiException for an
        HTTP error (its status and the Status' message) and NO_ANSWER's errors when there is none."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, data, _ = self.client.param_serialize(
            method, path, query_params=list(query) or None, header_params=headers,
            body=dict(body) if body is not None else None, auth_settings=["BearerToken"])
        response = self.client.call_api(method, url, header_params=headers, body=data, _request_timeout=timeout)
        raw: bytes = response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        document = json.loads(raw) if raw.strip() else {}
        return document if isinstance(document, dict) else {}

    def pod_log(self, pod: str, container: str, tail_lines: int, limit: int = 1 << 20) -> str:
        """The tail of a container's log (at most `limit` bytes), asked as the client asks it (Accept:
        application/json, which the API server takes for pods/log; text/plain it refuses with 406)."""
        response: Any = client.CoreV1Api(self.client).read_namespaced_pod_log(
            pod, self.namespace, container=container, tail_lines=tail_lines,
            _preload_content=False, _request_timeout=REQUEST_SECONDS)
        try:
            return bytes(response.read(limit)).decode(errors="replace")
        finally:
            response.release_conn()

    def lister(self, kind: str, selector: Mapping[str, str]) -> Any:
        """The client's list function of `kind` (jobs, pods, statefulsets, or a JobSet group/version/plural) in this
        namespace, its selectors bound (field_selector / label_selector): what the watch calls with watch=True."""
        if kind == "jobs":
            function: Any = client.BatchV1Api(self.client).list_namespaced_job
            args: tuple[str, ...] = (self.namespace,)
        elif kind == "pods":
            function, args = client.CoreV1Api(self.client).list_namespaced_pod, (self.namespace,)
        elif kind == "statefulsets":
            function, args = client.AppsV1Api(self.client).list_namespaced_stateful_set, (self.namespace,)
        else:
            group, version, plural = kind.split("/")
            function = client.CustomObjectsApi(self.client).list_namespaced_custom_object
            args = (group, version, self.namespace, plural)

        def listed(**kwargs: Any) -> Any:
            return function(*args, **selector, **kwargs)

        return listed

    def list(self, lister: Any) -> dict[str, Any]:
        """A list through `lister` (see :meth:`lister`), read raw."""
        response = lister(_preload_content=False, _request_timeout=REQUEST_SECONDS)
        try:
            document = json.loads(response.data)
        finally:
            response.release_conn()
        return document if isinstance(document, dict) else {}
