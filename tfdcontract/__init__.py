"""The cluster contract of tf-distributed, in one place: what the chart renders, the trainer reads and
writes, and tfchart reads back. Standard library only (no TensorFlow, no Kubernetes client), so both
the CLI (`tfchart`) and the program inside the image (`trainer`) import it, and neither imports the
other.

- Roles: the TensorFlow job names of the cluster map (chief, ps, worker, evaluator), the chart's
  other components, and which roles each strategy runs.
- Labels and annotations the chart puts on objects and that tfchart and the supervisor select by.
- The storage contract: the shared volume's layout and the variables that name it in every
  TensorFlow container (TFD_STORAGE_ROOT, TFD_CHECKPOINT_DIR, TFD_LOG_DIR, TFD_EXPORT_DIR, TFD_MODEL_NAME).
- The progress line the chief prints (`step N, loss = L (X examples/sec; Y sec/batch)`) and the
  status document (`<storage>/status.json`, also printed as a `tfd-status: {json}` log line): one
  writer and one parser each.
- The progress record the run supervisor writes on the chief's Job (`tf-distributed.io/progress`,
  compact JSON read from those lines, with the stall clock): one writer and one parser.

docs/architecture.md, section 2, describes the contract in prose; tests/test_contract.py fails when
a role name or one of these formats is spelled anywhere else in tfchart/, trainer/, scripts/ or bench/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

# every TFD_* name is defined in tfdcontract/env.py; these are re-exported for `from tfdcontract import ...`
from tfdcontract.env import CHECKPOINT_DIR_ENV as CHECKPOINT_DIR_ENV
from tfdcontract.env import EXPORT_DIR_ENV as EXPORT_DIR_ENV
from tfdcontract.env import LOG_DIR_ENV as LOG_DIR_ENV
from tfdcontract.env import METRICS_ADDRESS_ENV as METRICS_ADDRESS_ENV
from tfdcontract.env import METRICS_LINGER_ENV as METRICS_LINGER_ENV
from tfdcontract.env import METRICS_PORT_ENV as METRICS_PORT_ENV
from tfdcontract.env import MODEL_NAME_ENV as MODEL_NAME_ENV
from tfdcontract.env import STORAGE_ROOT_ENV as STORAGE_ROOT_ENV

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


# -- the progress line ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepLine:
    """One progress line of the chief: `step N, loss = L (X examples/sec; Y sec/batch)`."""

    step: int
    loss: float
    examples_per_sec: float
    sec_per_batch: float

    @property
    def loss_text(self) -> str:
        """4 decimals, but e notation for a loss that would read 0.0000 and is not 0."""
        return f"{self.loss:.4f}" if not 0 < abs(self.loss) < 5e-5 else f"{self.loss:.3e}"

    def __str__(self) -> str:
        return (f"step {self.step}, loss = {self.loss_text} ({self.examples_per_sec:.1f} examples/sec; "
                f"{self.sec_per_batch:.3f} sec/batch)")


_NUMBER = r"[-+0-9.eE]+|nan|inf"
_STEP_LINE = re.compile(
    rf"step (?P<step>\d+), loss = (?P<loss>{_NUMBER}) "
    rf"\((?P<eps>{_NUMBER}) examples/sec; (?P<spb>{_NUMBER}) sec/batch\)"
)


def format_step_line(step: int, loss: float, examples_per_sec: float, sec_per_batch: float) -> str:
    return str(StepLine(step, loss, examples_per_sec, sec_per_batch))


def parse_step_line(line: str) -> StepLine | None:
    """The step line anywhere in `line` (a log prefix may precede it), else None."""
    match = _STEP_LINE.search(line)
    if not match:
        return None
    try:
        return StepLine(int(match["step"]), float(match["loss"]), float(match["eps"]), float(match["spb"]))
    except ValueError:
        return None


# -- the status document ----------------------------------------------------------------------------

RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
#: Stopped by SIGTERM/SIGINT (e.g. preempted); `step` is the checkpoint a restart resumes from.
INTERRUPTED = "Interrupted"
STATES = (RUNNING, SUCCEEDED, FAILED, INTERRUPTED)
STATUS_FILE = "status.json"
STATUS_LINE_PREFIX = "tfd-status: "
#: Beside status.json: a TensorFlow Serving REST predict request (`{"instances": [{"images": ...}]}`) of one
#: held-out example, written by the chief with the export, so `curl -d @predict-request.json` works as printed.
PREDICT_REQUEST_FILE = "predict-request.json"


@dataclass(frozen=True)
class Status:
    """The content of status.json (fields documented in docs/trainer.md)."""

    state: str
    strategy: str
    step: int
    train_steps: int
    loss: float | None
    accuracy: float | None
    examples_per_sec: float | None
    export_path: str | None
    started_at: str
    updated_at: str
    message: str
    run_id: str = ""
    model_name: str = ""
    dataset: str = ""
    #: The integer SavedModel versions under the model's export directory (ascending), every run's;
    #: None when the writer did not say (a document without the field), not "none exported".
    exported_versions: list[int] | None = None
    #: Examples per second over the whole training so far (examples since training (re)started / its time);
    #: ``examples_per_sec`` is the last log interval's. None from a writer that did not say.
    average_examples_per_sec: float | None = None
    #: The step of the latest checkpoint saved (the one a restart resumes from); None before the first one,
    #: and from a writer that did not say.
    checkpoint_step: int | None = None

    def as_json(self, indent: int | None = None) -> str:
        separators = None if indent else (",", ":")
        return json.dumps(asdict(self), indent=indent, sort_keys=True, separators=separators)


def format_status_line(status: Status) -> str:
    """The status as one log line, so `tfchart status` reads it from the chief's log (a completed
    Job's pod can no longer be exec'd into, but its log stays readable)."""
    return STATUS_LINE_PREFIX + status.as_json()


def status_from_document(document: object) -> Status | None:
    """A Status from a decoded document; None when it is not one (unknown state, wrong types)."""
    if not isinstance(document, dict) or document.get("state") not in STATES:
        return None
    known = {f.name for f in fields(Status)}
    try:
        status = Status(**{k: v for k, v in document.items() if k in known})
    except TypeError:
        return None
    numbers = (status.loss, status.accuracy, status.examples_per_sec, status.average_examples_per_sec)
    if not isinstance(status.step, int) or any(n is not None and not _is_number(n) for n in numbers):
        return None
    if status.checkpoint_step is not None and not _is_int(status.checkpoint_step):
        return None
    versions = status.exported_versions
    if versions is not None and (
        not isinstance(versions, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in versions)
    ):
        return None
    return status


def parse_status_line(line: str) -> Status | None:
    """The status of a `tfd-status: {json}` line (a log prefix may precede it), else None."""
    position = line.find(STATUS_LINE_PREFIX)
    if position < 0:
        return None
    try:
        document = json.loads(line[position + len(STATUS_LINE_PREFIX) :])
    except ValueError:
        return None
    return status_from_document(document)


def read_status_file(path: Path) -> Status | None:
    """status.json at `path` (or `path`/status.json for a storage root), else None."""
    target = path / STATUS_FILE if path.is_dir() else path
    try:
        return status_from_document(json.loads(target.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


# -- the progress record on the chief's Job ---------------------------------------------------------

#: The progress state while the chief's Job is suspended (besides the trainer's STATES).
SUSPENDED = "Suspended"


@dataclass(frozen=True)
class JobProgress:
    """`tf-distributed.io/progress` on the chief's Job: what the chief last reported (its `tfd-status:` line,
    else its step line), as the run supervisor read it from the chief's log, and the stall clock.

    Times are ISO 8601 UTC (`Z`). ``step_changed_at`` is when the supervisor saw ``step`` change (or the
    run resume): the stall clock runs from it, so a restarted supervisor continues the same clock."""

    state: str  # one of STATES, or SUSPENDED
    step: int | None = None
    target: int | None = None  # train steps, when the chief said
    eta: str | None = None  # when the target is expected to be reached, at the latest rate
    loss: float | None = None
    accuracy: float | None = None  # held-out, of the latest checkpoint
    checkpoint_step: int | None = None  # the latest checkpoint's step
    updated_at: str = ""  # when this record was written
    step_changed_at: str = ""


#: JobProgress field -> its JSON key (kubectl users read these).
_PROGRESS_KEYS = {"state": "state", "step": "step", "target": "target", "eta": "eta", "loss": "loss",
                  "accuracy": "accuracy", "checkpoint_step": "checkpointStep", "updated_at": "updatedAt",
                  "step_changed_at": "stepChangedAt"}


def format_job_progress(progress: JobProgress) -> str:
    """The annotation's value: compact JSON, unknown fields left out."""
    document = {key: getattr(progress, name) for name, key in _PROGRESS_KEYS.items()}
    return json.dumps({k: v for k, v in document.items() if v is not None and v != ""}, separators=(",", ":"))


def parse_job_progress(text: object) -> JobProgress | None:
    """The record in an annotation's value; None when absent or not one (keys it does not know are ignored)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("state"), str) or not document["state"]:
        return None
    values: dict[str, Any] = {name: document.get(key) for name, key in _PROGRESS_KEYS.items()}
    kinds = {"step": _is_int, "target": _is_int, "checkpoint_step": _is_int, "loss": _is_number,
             "accuracy": _is_number, "eta": _is_text, "updated_at": _is_text, "step_changed_at": _is_text}
    if any(values[name] is not None and not valid(values[name]) for name, valid in kinds.items()):
        return None
    values["updated_at"] = values["updated_at"] or ""
    values["step_changed_at"] = values["step_changed_at"] or ""
    return JobProgress(**values)
