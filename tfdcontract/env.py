"""Every `TFD_*` environment variable of the project, named once: what the chart renders into a container's
environment and what the trainer, its supervisor, its helm test probe and `tfchart local` read there.

The chart cannot import Python, so its templates spell these names; tests/test_contract_names.py holds the
names the templates render equal to RENDERED below, and fails when a `TFD_` name is spelled in a string of
tfchart/, trainer/, scripts/ or bench/ instead of coming from here. Each name the chart does not render is in
NOT_RENDERED with who sets it. Standard library only, like the rest of tfdcontract.
"""

from __future__ import annotations

from collections.abc import Mapping

# -- every TensorFlow task (the prelude builds TF_CONFIG from these; `tfchart local` rewrites TFD_CLUSTER) ----

#: The cluster map, JSON `{"chief": [...], "ps": [...], "worker": [...]}` (tf-distributed.clusterSpec).
CLUSTER_ENV = "TFD_CLUSTER"
#: The TensorFlow task type (chief, ps, worker, evaluator).
TASK_TYPE_ENV = "TFD_TASK_TYPE"
#: The task index: the pod-index label (downward API), else the hostname's ordinal; 0 for the chief.
TASK_INDEX_ENV = "TFD_TASK_INDEX"

# -- the storage contract (tf-distributed.storageEnv; the layout is tfdcontract.storage_env's) ----------------

STORAGE_ROOT_ENV = "TFD_STORAGE_ROOT"
CHECKPOINT_DIR_ENV = "TFD_CHECKPOINT_DIR"
LOG_DIR_ENV = "TFD_LOG_DIR"
EXPORT_DIR_ENV = "TFD_EXPORT_DIR"
MODEL_NAME_ENV = "TFD_MODEL_NAME"

# -- metrics (metrics.enabled) --------------------------------------------------------------------------------

#: The port the trainer serves /metrics on (unset or 0: no metrics server). `tfchart local` rewrites
#: it per pod, as it does TFD_CLUSTER, since every local pod shares 127.0.0.1.
METRICS_PORT_ENV = "TFD_METRICS_PORT"
#: How long a finished chief keeps serving its final metrics, so a scrape records the last step.
METRICS_LINGER_ENV = "TFD_METRICS_LINGER_SECONDS"
#: The address the metrics server binds (default: every interface, as a pod's must); `tfchart local` sets 127.0.0.1.
METRICS_ADDRESS_ENV = "TFD_METRICS_ADDRESS"

# -- the run supervisor (tf-distributed.supervisorEnv; trainer/supervisor_settings.py reads them) -------------

#: The run's object: its kind (Job, or JobSet under workload.kind=jobset) and name.
RUN_KIND_ENV = "TFD_RUN_KIND"
RUN_NAME_ENV = "TFD_RUN_NAME"
#: The Job whose deadline ends the run (native: the run's Job; JobSet: <fullname>-chief-0).
CHIEF_JOB_ENV = "TFD_CHIEF_JOB"
EVALUATOR_JOB_ENV = "TFD_EVALUATOR_JOB"
#: The ps/worker StatefulSets an ending scales to 0, comma-separated.
STATEFULSETS_ENV = "TFD_STATEFULSETS"
#: The supervisor's own Deployment, scaled to 0 once the run ended.
SUPERVISOR_DEPLOYMENT_ENV = "TFD_SUPERVISOR_DEPLOYMENT"
#: training.cleanup.onSuccess / onFailure: scaleDown or keep.
ON_SUCCESS_ENV = "TFD_ON_SUCCESS"
ON_FAILURE_ENV = "TFD_ON_FAILURE"
START_TIMEOUT_ENV = "TFD_START_TIMEOUT_SECONDS"
STALL_TIMEOUT_ENV = "TFD_STALL_TIMEOUT_SECONDS"
#: The TensorFlow pods (a label selector) and how many of them a started run has.
POD_SELECTOR_ENV = "TFD_POD_SELECTOR"
EXPECTED_PODS_ENV = "TFD_EXPECTED_PODS"
POLL_SECONDS_ENV = "TFD_POLL_SECONDS"
CHIEF_MISSING_ENV = "TFD_CHIEF_MISSING_SECONDS"
#: true: read the chief's log and write its progress record on its Job.
PROGRESS_ENV = "TFD_PROGRESS"
PROGRESS_JOB_ENV = "TFD_PROGRESS_JOB"
PROGRESS_CONTAINER_ENV = "TFD_PROGRESS_CONTAINER"
#: The port of the supervisor's health endpoint (its probes).
HEALTH_PORT_ENV = "TFD_HEALTH_PORT"

# -- the helm test's endpoint probe (templates/tests/test-endpoints.yaml; trainer/endpoint_probe.py) ----------

#: `{"tensorboard": URL, "serving": URL}`, each only when the component is on.
TEST_URLS_ENV = "TFD_TEST_URLS"
#: Seconds every check may keep failing, from the start of the probe.
TEST_TIMEOUT_ENV = "TFD_TEST_TIMEOUT"

# -- read by the trainer, never rendered by the chart ---------------------------------------------------------

#: The StatefulSets the chief itself scales to 0 after success (`--cleanup scale-down`) when run without the
#: chart's supervisor, which the chart gives this job instead.
CLEANUP_STATEFULSETS_ENV = "TFD_CLEANUP_STATEFULSETS"
#: The Kubernetes API's base URL instead of the in-cluster one, and the service-account directory instead of
#: /var/run/secrets/kubernetes.io/serviceaccount (the tests point both at their loopback API server).
KUBE_API_ENV = "TFD_KUBE_API"
SERVICEACCOUNT_DIR_ENV = "TFD_SERVICEACCOUNT_DIR"
#: Any value: an internal error prints its traceback.
DEBUG_ENV = "TFD_DEBUG"

#: Every name above the chart renders (tests/test_contract_names.py holds the templates to this set).
RENDERED = frozenset({
    CLUSTER_ENV, TASK_TYPE_ENV, TASK_INDEX_ENV,
    STORAGE_ROOT_ENV, CHECKPOINT_DIR_ENV, LOG_DIR_ENV, EXPORT_DIR_ENV, MODEL_NAME_ENV,
    METRICS_PORT_ENV, METRICS_LINGER_ENV,
    RUN_KIND_ENV, RUN_NAME_ENV, CHIEF_JOB_ENV, EVALUATOR_JOB_ENV, STATEFULSETS_ENV, SUPERVISOR_DEPLOYMENT_ENV,
    ON_SUCCESS_ENV, ON_FAILURE_ENV, START_TIMEOUT_ENV, STALL_TIMEOUT_ENV, POD_SELECTOR_ENV, EXPECTED_PODS_ENV,
    POLL_SECONDS_ENV, CHIEF_MISSING_ENV, PROGRESS_ENV, PROGRESS_JOB_ENV, PROGRESS_CONTAINER_ENV, HEALTH_PORT_ENV,
    TEST_URLS_ENV, TEST_TIMEOUT_ENV,
})  # fmt: skip
#: The names the chart does not render, and who sets them.
NOT_RENDERED: Mapping[str, str] = {
    METRICS_ADDRESS_ENV: "tfchart local (127.0.0.1: its pods share one machine)",
    CLEANUP_STATEFULSETS_ENV: "whoever runs the trainer without the chart's supervisor",
    KUBE_API_ENV: "the tests (their loopback API server)",
    SERVICEACCOUNT_DIR_ENV: "the tests (their service-account directory)",
    DEBUG_ENV: "a user who wants an internal error's traceback",
}
