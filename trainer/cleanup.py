"""Scale the ps/worker StatefulSets to zero after success (the chief's ``--cleanup=scale-down``).

The chief calls :func:`scale_down` once training Succeeded. It PATCHes the ``/scale`` of every StatefulSet in
``TFD_CLEANUP_STATEFULSETS`` with ``{"spec":{"replicas":0}}`` (``application/merge-patch+json``) through the
kubernetes client (trainer/kube.py: the pod's service-account token, the in-cluster CA; ``TFD_KUBE_API`` and
``TFD_SERVICEACCOUNT_DIR`` point the tests at tests/kubeapi.py). A failure is a warning, never a training failure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from tfdcontract.env import CLEANUP_STATEFULSETS_ENV
from trainer.kube import NO_ANSWER, SA_DIR, ApiException, Kube, kube_target, scale_path, target_from_env

__all__ = ["kube_target", "scale_down", "statefulset_names"]

log = logging.getLogger(__name__)


def statefulset_names(env: Mapping[str, str]) -> list[str]:
    """Names from TFD_CLEANUP_STATEFULSETS (comma-separated)."""
    return [n.strip() for n in env.get(CLEANUP_STATEFULSETS_ENV, "").split(",") if n.strip()]


def scale_down(env: Mapping[str, str], sa_dir: Path = SA_DIR, timeout: float = 10.0) -> list[str]:
    """Scale every StatefulSet in TFD_CLEANUP_STATEFULSETS to 0 replicas.

    Returns the names scaled down. Never raises: problems are warnings.
    """
    names = statefulset_names(env)
    if not names:
        log.info("cleanup: %s is empty, nothing to scale down", CLEANUP_STATEFULSETS_ENV)
        return []
    target = target_from_env(env, sa_dir)
    if target is None:
        log.info("cleanup: not running in Kubernetes (no API server or token), skipping")
        return []
    if not target.namespace:
        log.warning("cleanup: POD_NAMESPACE is not set, cannot scale down %s", ", ".join(names))
        return []
    kube = Kube(target)
    done: list[str] = []
    for name in names:
        try:
            kube.request("PATCH", scale_path(target.namespace, "statefulsets", name), body={"spec": {"replicas": 0}},
                         timeout=timeout)
        except ApiException as error:
            if error.status:
                log.warning("cleanup: scaling statefulset %s to 0 failed: HTTP %s %s "
                            "(may the chief's service account patch statefulsets/scale?)",
                            name, error.status, error.reason)
            else:
                log.warning("cleanup: scaling statefulset %s to 0 failed: %s", name, error.reason)
            continue
        except NO_ANSWER as error:
            log.warning("cleanup: scaling statefulset %s to 0 failed: %s", name, error)
            continue
        log.info("cleanup: scaled statefulset %s/%s to 0 replicas", target.namespace, name)
        done.append(name)
    return done
