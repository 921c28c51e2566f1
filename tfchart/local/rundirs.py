"""Where `tfchart local` keeps things between runs: the run directories under runs/ (`--clean` removes the
old ones) and one dataset cache per user, so MNIST is downloaded once, not into every run directory. A live
`tfchart local` holds its run directory (hold) for its whole life."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from pathlib import Path

RUNS = Path("runs")  # runs/NAME-<time>, relative to the working directory


def dataset_cache() -> Path:
    """The per-user dataset directory local runs share: $XDG_CACHE_HOME/tf-distributed/datasets (or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).resolve() / "tf-distributed" / "datasets"


def hold(run_dir: Path) -> int | None:
    """Locks run_dir (flock: Linux, macOS) while the descriptor returned is open; None while another process does."""
    handle = os.open(run_dir, os.O_RDONLY)
    with contextlib.suppress(BlockingIOError):
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return handle
    os.close(handle)
    return None


def held(run_dir: Path) -> bool:
    """Whether a live process holds run_dir (hold): a `tfchart local` runs in it."""
    if (handle := hold(run_dir)) is not None:
        os.close(handle)
    return handle is None


def made_runs(name: str) -> list[Path]:
    """NAME's run directories under runs/ that tfchart made (runs/NAME-YYYYmmdd-HHMMSS with pod-logs/), oldest
    first; anything else there (another name, a --workdir of one's own) is left."""
    pattern = re.compile(rf"{re.escape(name)}-\d{{8}}-\d{{6}}")
    made = [path for path in RUNS.glob(f"{name}-*") if pattern.fullmatch(path.name) and not path.is_symlink()]
    return sorted(path for path in made if (path / "pod-logs").is_dir())
