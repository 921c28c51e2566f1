"""status.json: the training run's state on the shared volume.

Written by the chief only, atomically (temporary file in the same directory, fsync,
``os.replace``), so a reader (``tfchart status``, the evaluator, a restarting ps/worker)
never sees a half-written file. Fields are documented in docs/trainer.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
#: Stopped by SIGTERM/SIGINT (e.g. preempted); ``step`` is the checkpoint a restart resumes from.
INTERRUPTED = "Interrupted"
STATES = (RUNNING, SUCCEEDED, FAILED, INTERRUPTED)


def utc_now() -> str:
    """Current time, ISO 8601 UTC with a Z suffix and second precision."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Status:
    """The content of status.json."""

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

    def with_updates(self, **changes: Any) -> Status:
        """A copy with the given fields changed and ``updated_at`` refreshed."""
        return replace(self, updated_at=utc_now(), **changes)


def write_status(path: Path, status: Status) -> None:
    """Write status.json atomically (tmp file + fsync + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".status-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(status), f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    publish(status)


STATUS_LINE_PREFIX = "tfd-status: "


def publish(status: Status) -> None:
    """The same status as one log line, so `tfchart status` can read it from the chief's log
    (a completed Job's pod can no longer be exec'd into, but its log stays readable)."""
    sys.stdout.write(STATUS_LINE_PREFIX + json.dumps(asdict(status), sort_keys=True, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def read_status(path: Path) -> Status | None:
    """The current status, or None when the file is absent or unreadable."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("state") not in STATES:
        return None
    known = set(Status.__dataclass_fields__)
    try:
        return Status(**{k: v for k, v in doc.items() if k in known})
    except TypeError:
        return None


def is_completed(path: Path, run_id: str) -> bool:
    """True when status.json says this run (same run_id) Succeeded."""
    st = read_status(path)
    return st is not None and st.state == SUCCEEDED and st.run_id == run_id
