"""Where tfchart's way to a cluster comes from: the kubeconfig (an explicit one, else $KUBECONFIG, a path list, else
~/.kube/config) or the in-cluster service account, loaded by the kubernetes client's own loader; every failure is one
ClusterUnavailable (exit 69) whose hint says what to do. tfchart.cluster.kube builds its ApiClient from here."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

from tfchart.errors import ClusterUnavailable

IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = Path("~/.kube/config")
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def describe_source(kubeconfig: Path | None, context: str | None) -> str:
    files, listed = kubeconfig_files(kubeconfig), not kubeconfig and os.environ.get("KUBECONFIG")
    where = (f"KUBECONFIG={files}" if files and files == listed else files) or (
        "in-cluster service account" if os.environ.get(IN_CLUSTER_HOST_ENV) else "no configuration")
    return f"{where}, context {context}" if context else where


def kubeconfig_files(kubeconfig: Path | None) -> str | None:
    """The kubeconfig path (list) to load: --kubeconfig, else $KUBECONFIG, else ~/.kube/config where it exists; None
    when only the in-cluster configuration can apply."""
    listed = str(kubeconfig.expanduser()) if kubeconfig else os.environ.get("KUBECONFIG", "")
    default = DEFAULT_KUBECONFIG.expanduser()
    return listed if listed.strip(os.pathsep) else str(default) if default.exists() else None


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

    require_configuration(kubeconfig)
    files, configuration, root, errors = kubeconfig_files(kubeconfig), client.Configuration(), logging.getLogger(), []

    def said(record: logging.LogRecord) -> bool:  # the loader reports a failed exec plugin only by logging it and goes
        if record.levelno >= logging.ERROR:  # on without credentials: what it logs as an error ends tfchart instead
            errors.append(record.getMessage())
        return record.levelno < logging.ERROR

    try:
        if files is None:
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
        with suppress(OSError):
            return IN_CLUSTER_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "default"
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
