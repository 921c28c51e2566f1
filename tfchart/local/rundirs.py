"""Where `tfchart local` keeps things between runs: the run directories under runs/ (`--clean` removes the
old ones) and one dataset cache per user, so MNIST is downloaded once, not into every run directory."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from tfchart.errors import TfchartError

RUNS = Path("runs")  # runs/NAME-<time>, relative to the working directory


def dataset_cache() -> Path:
    """The per-user dataset directory local runs share: $XDG_CACHE_HOME/tf-distributed/datasets (default
    ~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).resolve() / "tf-distributed" / "datasets"


def run_directory(name: str, stamp: str) -> Path:
    return RUNS / f"{name}-{stamp}"


def old_runs(name: str, keep: int) -> list[Path]:
    """NAME's run directories under runs/ that tfchart made (runs/NAME-YYYYmmdd-HHMMSS with pod-logs/), all but
    the newest `keep`, oldest first; anything else there (another name, a --workdir of one's own) is left."""
    pattern = re.compile(rf"{re.escape(name)}-\d{{8}}-\d{{6}}")
    made = [path for path in RUNS.glob(f"{name}-*") if pattern.fullmatch(path.name) and not path.is_symlink()]
    runs = sorted(path for path in made if (path / "pod-logs").is_dir())
    return runs[: max(0, len(runs) - keep)]


def size(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())


def clean(name: str, keep: int) -> list[tuple[Path, int]]:
    """Removes NAME's old run directories (old_runs); each with the bytes it held."""
    removed = []
    for path in old_runs(name, keep):
        held = size(path)
        try:
            shutil.rmtree(path)
        except OSError as error:  # e.g. a file a container's user still owns
            raise TfchartError(f"cannot remove {path}: {error.strerror} ({error.filename})",
                               "remove it by hand (podman unshare rm -rf for a container's files)") from None
        removed.append((path, held))
    return removed
