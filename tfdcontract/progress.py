"""The progress formats of the contract: the step line the chief prints (`step N, loss = L (X examples/sec; Y
sec/batch)`), the status document (`<storage>/status.json`, also printed as a `tfd-status: {json}` log line) and
the progress record the run supervisor writes on the chief's Job (`tf-distributed.io/progress`, compact JSON read
from those lines, with the stall clock): one writer and one parser each. Re-exported by tfdcontract.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

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
