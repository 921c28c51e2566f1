"""The cluster contract of tf-distributed, in one place: what the chart renders, the trainer reads and
writes, and tfchart reads back. Standard library only (no TensorFlow, no Kubernetes client), so both
the CLI (`tfchart`) and the program inside the image (`trainer`) import it, and neither imports the
other.

- Roles: the TensorFlow job names of the cluster map (chief, ps, worker, evaluator), the chart's
  other components, and which roles each strategy runs.
- Labels and annotations the chart puts on objects and that tfchart and the supervisor select by.
- The storage contract: the shared volume's layout and the variables that name it in every
  TensorFlow container (TFD_STORAGE_ROOT, TFD_CHECKPOINT_DIR, TFD_LOG_DIR, TFD_EXPORT_DIR, TFD_MODEL_NAME).
- The progress formats (tfdcontract.progress, re-exported here): the step line, the status document and the
  progress record the run supervisor writes on the chief's Job.
- A run's state (tfdcontract.runstate) and the planner of its lifecycle (tfdcontract.lifecycle).

docs/architecture.md, section 2, describes the contract in prose; tests/test_contract.py fails when
a role name or one of these formats is spelled anywhere else in tfchart/, trainer/, scripts/ or bench/.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

# every TFD_* name is defined in tfdcontract/env.py; these are re-exported for `from tfdcontract import ...`
from tfdcontract.env import CHECKPOINT_DIR_ENV as CHECKPOINT_DIR_ENV
from tfdcontract.env import EXPORT_DIR_ENV as EXPORT_DIR_ENV
from tfdcontract.env import LOG_DIR_ENV as LOG_DIR_ENV
from tfdcontract.env import METRICS_ADDRESS_ENV as METRICS_ADDRESS_ENV
from tfdcontract.env import METRICS_LINGER_ENV as METRICS_LINGER_ENV
from tfdcontract.env import METRICS_PORT_ENV as METRICS_PORT_ENV
from tfdcontract.env import MODEL_NAME_ENV as MODEL_NAME_ENV
from tfdcontract.env import STORAGE_ROOT_ENV as STORAGE_ROOT_ENV

# the progress formats are in tfdcontract/progress.py; re-exported for `from tfdcontract import ...`
from tfdcontract.progress import FAILED as FAILED
from tfdcontract.progress import INTERRUPTED as INTERRUPTED
from tfdcontract.progress import PREDICT_REQUEST_FILE as PREDICT_REQUEST_FILE
from tfdcontract.progress import RUNNING as RUNNING
from tfdcontract.progress import STATES as STATES
from tfdcontract.progress import STATUS_FILE as STATUS_FILE
from tfdcontract.progress import STATUS_LINE_PREFIX as STATUS_LINE_PREFIX
from tfdcontract.progress import SUCCEEDED as SUCCEEDED
from tfdcontract.progress import SUSPENDED as SUSPENDED
from tfdcontract.progress import JobProgress as JobProgress
from tfdcontract.progress import Status as Status
from tfdcontract.progress import StepLine as StepLine
from tfdcontract.progress import format_job_progress as format_job_progress
from tfdcontract.progress import format_status_line as format_status_line
from tfdcontract.progress import format_step_line as format_step_line
from tfdcontract.progress import parse_job_progress as parse_job_progress
from tfdcontract.progress import parse_status_line as parse_status_line
from tfdcontract.progress import parse_step_line as parse_step_line
from tfdcontract.progress import read_status_file as read_status_file
from tfdcontract.progress import status_from_document as status_from_document

# -- roles ------------------------------------------------------------------------------------------

CHIEF = "chief"
PS = "ps"
WORKER = "worker"
EVALUATOR = "evaluator"
TENSORBOARD = "tensorboard"
SERVING = "serving"
SUPERVISOR = "supervisor"
HELM_TEST = "test"

#: Job names TensorFlow accepts in TF_CONFIG's cluster map (never `master`).
CLUSTER_JOBS = (CHIEF, WORKER, PS)
#: Every TensorFlow task type, the evaluator included (it reads checkpoints, outside the map).
TASK_TYPES = (CHIEF, WORKER, PS, EVALUATOR)
#: The TensorFlow roles in the chart's order: StatefulSets first, then the Jobs.
TF_ROLES = (PS, WORKER, CHIEF, EVALUATOR)
#: The StatefulSet roles (a pod per ordinal), the Job roles and the Deployment roles.
STATEFUL_ROLES = (PS, WORKER)
JOB_ROLES = (CHIEF, EVALUATOR)
CLIENT_ROLES = (TENSORBOARD, SERVING)
#: Value blocks of components that run pods of their own (ps, worker, chief, evaluator, clients).
COMPONENTS = (*TF_ROLES, *CLIENT_ROLES)
#: Every component, in the order tfchart lists them.
DISPLAY_ORDER = (CHIEF, PS, WORKER, EVALUATOR, TENSORBOARD, SERVING, SUPERVISOR, HELM_TEST)
#: Roles that serve only a run, so should end with it (the supervisor frees them).
HOLDING_ROLES = (PS, WORKER, EVALUATOR)

# -- strategies -------------------------------------------------------------------------------------

PARAMETER_SERVER = "parameter_server"
MULTI_WORKER_MIRRORED = "multi_worker_mirrored"
MIRRORED = "mirrored"
SINGLE_DEVICE = "single_device"
STRATEGIES = (PARAMETER_SERVER, MULTI_WORKER_MIRRORED, MIRRORED, SINGLE_DEVICE)
#: The TensorFlow roles each strategy renders (the evaluator is optional in all of them). Under
#: multi_worker_mirrored, chief.replicas=0 leaves the chief out: worker 0 is the chief.
STRATEGY_ROLES: Mapping[str, tuple[str, ...]] = {
    PARAMETER_SERVER: (PS, WORKER, CHIEF),
    MULTI_WORKER_MIRRORED: (WORKER, CHIEF),
    MIRRORED: (CHIEF,),
    SINGLE_DEVICE: (CHIEF,),
}

# -- labels and annotations -------------------------------------------------------------------------

CHART_NAME = "tf-distributed"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
PART_OF_LABEL = "app.kubernetes.io/part-of"
#: Who manages each object (Helm) and the chart's appVersion (tf-distributed.labels); nothing selects by them.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
VERSION_LABEL = "app.kubernetes.io/version"
#: A StatefulSet pod's ordinal (Kubernetes >= 1.28), and an Indexed Job pod's index.
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ANNOTATION_PREFIX = "tf-distributed.io/"
RUN_SPEC_ANNOTATION = ANNOTATION_PREFIX + "run-spec"
#: An API version no cluster serves: rendered with it (helm's --api-versions), the chart's rules (_validate.tpl) do not
#: run, so `tfchart validate --policy` checks the policy on values the rules refuse.
NO_RULES_API_VERSION = ANNOTATION_PREFIX + "no-rules"
#: The run record, on the run's Job (the chief Job, or the workers' Job without a chief): a run is
#: one Job object, so a re-created Job is a new run and carries no record of the old one.
ENDING_ANNOTATION = ANNOTATION_PREFIX + "ending"
END_REASON_ANNOTATION = ANNOTATION_PREFIX + "end-reason"
ENDED_AT_ANNOTATION = ANNOTATION_PREFIX + "ended-at"
#: When the supervisor first saw every TensorFlow pod of the run up: the start timeout is over.
STARTED_AT_ANNOTATION = ANNOTATION_PREFIX + "started-at"
#: On a Job or JobSet that `tfchart upgrade --recreate` is deleting to create it again: the supervisor waits for the
#: new one (supervisor.chiefMissingSeconds), where a run's object deleted without it ends the run at once.
RECREATING_ANNOTATION = ANNOTATION_PREFIX + "recreating"
#: The chief's progress on the chief's own Job (JobProgress, written by the run supervisor).
PROGRESS_ANNOTATION = ANNOTATION_PREFIX + "progress"
#: On Serving's ConfigMap: serving.modelVersionPolicy and training.modelName as the release's values gave them (JSON)
MODEL_VERSION_POLICY_ANNOTATION = ANNOTATION_PREFIX + "model-version-policy"
#: The label Kubernetes' Job controller puts on each pod of a Job: the Job's name.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: The ending of a run whose step stopped rising for training.stallTimeoutSeconds (reason STALLED_REASON...).
STALLED = "stalled"
STALLED_REASON_PREFIX = "Stalled: "


def run_ended(job_annotations: Mapping[str, str]) -> bool:
    """The run's Job carries an ending (written by the supervisor or `tfchart stop`): it stands."""
    return bool(job_annotations.get(ENDING_ANNOTATION))


def ending_annotations(ending: str, reason: str, ended_at: str) -> dict[str, str]:
    """The record of a run's ending, written on its Job once the run's pods are freed; the chart's
    lookup reads it back so that an upgrade of the same run keeps them at 0."""
    return {ENDING_ANNOTATION: ending, END_REASON_ANNOTATION: reason, ENDED_AT_ANNOTATION: ended_at}


#: A suspended run (`tfchart suspend`), on its run object: when, and what `tfchart resume` brings back.
SUSPENDED_ANNOTATION = ANNOTATION_PREFIX + "suspended"


@dataclass(frozen=True)
class Suspension:
    """The record of a suspension: written with `spec.suspend: true` in one PATCH, dropped by the resume."""

    since: str  # RFC 3339, UTC
    replicas: Mapping[str, int]  # role (ps, worker) -> the StatefulSet's replicas to scale back to
    evaluator: bool = False  # the evaluator Job was running: resume lets it run again


def suspension_annotations(suspension: Suspension) -> dict[str, str]:
    record = {"since": suspension.since, "replicas": dict(sorted(suspension.replicas.items())),
              "evaluator": suspension.evaluator}  # fmt: skip
    return {SUSPENDED_ANNOTATION: json.dumps(record, separators=(",", ":"))}


def parse_suspension(annotations: Mapping[str, str] | None) -> Suspension | None:
    """The suspension recorded in these annotations, else None (none, or not one: a hand-written value)."""
    try:
        record = json.loads((annotations or {}).get(SUSPENDED_ANNOTATION) or "null")
        replicas = {str(role): int(count) for role, count in (record.get("replicas") or {}).items()}
        if not isinstance(record.get("since"), str) or any(count < 0 for count in replicas.values()):
            return None
        return Suspension(record["since"], replicas, bool(record.get("evaluator")))
    except (ValueError, TypeError, AttributeError):
        return None


def release_selector(release: str, component: str | None = None) -> str:
    """The label selector of a release's objects (of one component): its instance and the chart's part-of
    label, which no nameOverride or fullnameOverride changes (app.kubernetes.io/name follows nameOverride)."""
    selector = f"{INSTANCE_LABEL}={release},{PART_OF_LABEL}={CHART_NAME}"
    return f"{selector},{COMPONENT_LABEL}={component}" if component else selector


# -- the storage contract ---------------------------------------------------------------------------

#: The shared volume's layout under storage.mountPath (docs/trainer.md, "Storage layout"). The chart
#: hands every TensorFlow container these paths in the variables below (tf-distributed.storageEnv),
#: from the same helpers that give TensorBoard its logdir and TF Serving its base path;
#: tests/chart/test_byo_contract.py holds the chart to this table.
#:
#: ====================  ========================================  ===================================
#: variable              value                                     who reads it there
#: ====================  ========================================  ===================================
#: TFD_STORAGE_ROOT      <mountPath>                               status.json, datasets/ (yours)
#: TFD_CHECKPOINT_DIR    <mountPath>/checkpoints                   the chief writes, a restart resumes
#: TFD_LOG_DIR           <mountPath>/logs                          TensorBoard's --logdir
#: TFD_EXPORT_DIR        <mountPath>/export/<training.modelName>   TF Serving: versions in <N>/
#: TFD_MODEL_NAME        <training.modelName>                      TF Serving's model name
#: ====================  ========================================  ===================================
#: The variables' names are in tfdcontract/env.py, with every other TFD_* name (re-exported here).
CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"
EXPORT_DIR = "export"


def storage_env(root: str, model_name: str) -> dict[str, str]:
    """The storage variables of a TensorFlow container whose claim is mounted at `root`."""
    root = root.rstrip("/") or "/"
    return {
        STORAGE_ROOT_ENV: root,
        CHECKPOINT_DIR_ENV: str(PurePosixPath(root, CHECKPOINTS_DIR)),
        LOG_DIR_ENV: str(PurePosixPath(root, LOGS_DIR)),
        EXPORT_DIR_ENV: str(PurePosixPath(root, EXPORT_DIR, model_name)),
        MODEL_NAME_ENV: model_name,
    }


# -- metrics ---------------------------------------------------------------------------------------

#: The container port name every TensorFlow pod serves Prometheus metrics on (metrics.enabled), and
#: the Service/PodMonitor endpoints scrape by that name.
METRICS_PORT_NAME = "metrics"
#: Every metric the project exports starts with this.
METRICS_PREFIX = "tfd_"
