"""Scale the ps/worker StatefulSets to zero after success (standard library only).

The chief calls :func:`scale_down` once training Succeeded and ``--cleanup=scale-down``.
It PATCHes ``/apis/apps/v1/namespaces/<ns>/statefulsets/<name>/scale`` with
``{"spec":{"replicas":0}}`` (``application/merge-patch+json``) for every name in
``TFD_CLEANUP_STATEFULSETS``, authenticated with the pod's service-account token and
verified with the in-cluster CA. A failure is logged as a warning, never a training
failure.

``TFD_SERVICEACCOUNT_DIR`` overrides the service-account directory (token, namespace,
ca.crt); ``TFD_KUBE_API`` overrides the API base URL (e.g. ``http://127.0.0.1:PORT``). A real
Kubernetes API server cannot run on the development machine, so the tests point this at
a loopback HTTP server and assert the exact requests; the in-cluster path (HTTPS to
``KUBERNETES_SERVICE_HOST``) is exercised only in a real cluster.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class KubeTarget:
    """Where and how to reach the Kubernetes API."""

    base_url: str
    namespace: str
    token: str | None
    ca_file: Path | None


def kube_target(env: Mapping[str, str], sa_dir: Path = SA_DIR) -> KubeTarget | None:
    """The API endpoint, or None when not running in a cluster (nothing to clean up)."""
    token_file = sa_dir / "token"
    try:
        token: str | None = token_file.read_text(encoding="utf-8").strip()
    except OSError:
        token = None
    namespace = env.get("POD_NAMESPACE", "").strip()
    if not namespace:
        try:
            namespace = (sa_dir / "namespace").read_text(encoding="utf-8").strip()
        except OSError:
            namespace = ""
    override = env.get("TFD_KUBE_API", "").strip()
    if override:
        ca = sa_dir / "ca.crt"
        return KubeTarget(override.rstrip("/"), namespace, token, ca if ca.is_file() else None)
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    if not host or token is None:
        return None
    port = env.get("KUBERNETES_SERVICE_PORT", "443").strip() or "443"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    return KubeTarget(f"https://{host}:{port}", namespace, token, sa_dir / "ca.crt")


def statefulset_names(env: Mapping[str, str]) -> list[str]:
    """Names from TFD_CLEANUP_STATEFULSETS (comma-separated)."""
    return [n.strip() for n in env.get("TFD_CLEANUP_STATEFULSETS", "").split(",") if n.strip()]


def target_from_env(env: Mapping[str, str], sa_dir: Path = SA_DIR) -> KubeTarget | None:
    """kube_target() with TFD_SERVICEACCOUNT_DIR honoured (the tests' service-account directory)."""
    override = env.get("TFD_SERVICEACCOUNT_DIR", "").strip()
    return kube_target(env, Path(override) if override else sa_dir)


def call(
    target: KubeTarget,
    method: str,
    path: str,
    body: Mapping[str, object] | None = None,
    timeout: float = 10.0,
    content_type: str = "application/merge-patch+json",
) -> tuple[int, dict[str, object]]:
    """One API request; returns (HTTP status, JSON body). Raises urllib.error.HTTPError (4xx/5xx,
    including 404) and URLError/OSError/SSLError (no answer)."""
    status, raw = request(target, method, path, body, timeout, content_type)
    document = json.loads(raw) if raw.strip() else {}
    return status, document if isinstance(document, dict) else {}


def read_text(target: KubeTarget, path: str, timeout: float = 10.0, limit: int = 1 << 20) -> str:
    """A GET answered with text (a pod's log), at most `limit` bytes of it; raises as :func:`call`."""
    return request(target, "GET", path, None, timeout, accept="text/plain", limit=limit)[1].decode(errors="replace")


def request(
    target: KubeTarget, method: str, path: str, body: Mapping[str, object] | None = None, timeout: float = 10.0,
    content_type: str = "application/merge-patch+json", accept: str = "application/json", limit: int = -1,
) -> tuple[int, bytes]:
    """One API request; returns (HTTP status, the answer's bytes, at most `limit` of them)."""
    with open_request(target, method, path, body, timeout, content_type, accept) as resp:
        return int(resp.status), resp.read(limit)


def open_request(
    target: KubeTarget, method: str, path: str, body: Mapping[str, object] | None = None, timeout: float = 10.0,
    content_type: str = "application/merge-patch+json", accept: str = "application/json",
) -> http.client.HTTPResponse:
    """One API request, its answer left open to be read as it comes (a watch's stream); raises as :func:`call`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{target.base_url}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    req.add_header("Accept", accept)
    if target.token:
        req.add_header("Authorization", f"Bearer {target.token}")
    context: ssl.SSLContext | None = None
    if target.base_url.startswith("https://"):
        context = ssl.create_default_context(
            cafile=str(target.ca_file) if target.ca_file else None
        )
    response: http.client.HTTPResponse = urllib.request.urlopen(req, timeout=timeout, context=context)
    return response


def scale_path(namespace: str, resource: str, name: str) -> str:
    """The /scale subresource of an apps/v1 object (statefulsets, deployments)."""
    return f"/apis/apps/v1/namespaces/{namespace}/{resource}/{name}/scale"


def _patch(target: KubeTarget, name: str, timeout: float) -> int:
    code, _ = call(target, "PATCH", scale_path(target.namespace, "statefulsets", name),
                   {"spec": {"replicas": 0}}, timeout)
    return code


def scale_down(env: Mapping[str, str], sa_dir: Path = SA_DIR, timeout: float = 10.0) -> list[str]:
    """Scale every StatefulSet in TFD_CLEANUP_STATEFULSETS to 0 replicas.

    Returns the names scaled down. Never raises: problems are warnings.
    """
    names = statefulset_names(env)
    if not names:
        log.info("cleanup: TFD_CLEANUP_STATEFULSETS is empty, nothing to scale down")
        return []
    target = target_from_env(env, sa_dir)
    if target is None:
        log.info("cleanup: not running in Kubernetes (no API server or token), skipping")
        return []
    if not target.namespace:
        log.warning("cleanup: POD_NAMESPACE is not set, cannot scale down %s", ", ".join(names))
        return []
    done: list[str] = []
    for name in names:
        try:
            code = _patch(target, name, timeout)
        except urllib.error.HTTPError as e:
            log.warning("cleanup: scaling statefulset %s to 0 failed: HTTP %s %s "
                        "(does the chief's service account may patch statefulsets/scale?)",
                        name, e.code, e.reason)
            continue
        except (urllib.error.URLError, OSError, ssl.SSLError) as e:
            log.warning("cleanup: scaling statefulset %s to 0 failed: %s", name, e)
            continue
        log.info("cleanup: scaled statefulset %s/%s to 0 replicas (HTTP %d)",
                 target.namespace, name, code)
        done.append(name)
    return done
