"""status.json: the training run's state on the shared volume.

Written by the chief only, atomically (temporary file in the same directory, fsync,
``os.replace``), so a reader (``tfchart status``, the evaluator, a restarting ps/worker)
never sees a half-written file. Fields are documented in docs/trainer.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tfdcontract import (
    FAILED,
    INTERRUPTED,
    RUNNING,
    STATES,
    SUCCEEDED,
    Status,
    format_status_line,
    read_status_file,
)

__all__ = ["FAILED", "INTERRUPTED", "RUNNING", "STATES", "SUCCEEDED", "Status", "is_completed", "publish",
           "read_status", "utc_now", "with_updates", "write_status"]

def utc_now() -> str:
    """Current time, ISO 8601 UTC with a Z suffix and second precision."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def with_updates(status: Status, **changes: Any) -> Status:
    """A copy with the given fields changed and ``updated_at`` refreshed."""
    return replace(status, updated_at=utc_now(), **changes)


def write_status(path: Path, status: Status) -> None:
    """Write status.json atomically (tmp file + fsync + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".status-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(status.as_json(indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    publish(status)


def publish(status: Status) -> None:
    """The same status as one log line (tfdcontract.format_status_line)."""
    sys.stdout.write(format_status_line(status) + "\n")
    sys.stdout.flush()


def read_status(path: Path) -> Status | None:
    """The current status, or None when the file is absent or unreadable."""
    return read_status_file(path)


def is_completed(path: Path, run_id: str) -> bool:
    """True when status.json says this run (same run_id) Succeeded."""
    st = read_status(path)
    return st is not None and st.state == SUCCEEDED and st.run_id == run_id
