"""The chart a command works on, given as helm takes it: a directory, a packaged .tgz, or a remote
reference (oci://..., repo/name, https://...) that helm pulls once per command (--version picks it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tfchart.errors import HelmError, UsageError
from tfchart.helm.runner import Runner

# The chart tfchart ships: in a checkout tfchart/chart links to charts/tf-distributed; the wheel carries a copy.
BUNDLED_CHART = (Path(__file__).resolve().parents[1] / "chart").resolve()
PULL_HINT = (
    "--chart takes a chart directory, a .tgz made by `helm package`, oci://REGISTRY/REPO/CHART (--plain-http for a "
    "registry without TLS; `helm registry login` for credentials) or REPO/CHART of a repository `helm repo add` knows"
)
REMOTE = re.compile(r"^([a-z][a-z0-9+.-]*://|[^/.][^/]*/[^/]+$)")  # oci://, https://, or repo/name


@dataclass(frozen=True)
class Chart:
    """A local chart: `path` is what helm is given (a directory or a .tgz); `shown` is the user's reference."""

    path: Path
    shown: str

    def file(self, name: str) -> bytes | None:
        """A file at the chart's top level (values.yaml, values.schema.json), from the directory or the package."""
        if self.path.is_dir():
            target = self.path / name
            return target.read_bytes() if target.is_file() else None
        import tarfile

        with tarfile.open(self.path) as package:
            member = next((m for m in package.getmembers() if m.isfile() and m.name.count("/") == 1
                           and m.name.split("/")[1] == name), None)  # fmt: skip
            stream = package.extractfile(member) if member else None
            return stream.read() if stream else None


def resolve(reference: str | None, version: str | None, helm: Runner, plain_http: bool = False) -> Chart:
    """The chart for `reference` (default: the chart tfchart ships); remote ones are pulled now."""
    if reference is None:
        return local(BUNDLED_CHART, str(BUNDLED_CHART))
    path = Path(reference).expanduser()
    if path.exists():
        if version:
            raise UsageError("--version picks a version of a remote chart", f"drop --version for {reference}")
        return local(path, reference)
    if not REMOTE.match(reference):
        raise UsageError(f"no chart at {reference}", "pass --chart a chart directory, a .tgz, or oci://REGISTRY/CHART")
    where = private_folder("tfchart-chart-")
    args = ["pull", reference, "--untar", "--untardir", str(where)]
    try:
        helm([*args, *(["--version", version] if version else []), *(["--plain-http"] if plain_http else [])])
    except HelmError as error:
        raise HelmError(f"cannot pull chart {reference}: {error.message}", PULL_HINT) from None
    pulled = [child for child in where.iterdir() if (child / "Chart.yaml").is_file()]
    if len(pulled) != 1:
        raise UsageError(f"helm pull {reference} gave no chart", "check the reference and --version")
    return Chart(pulled[0], reference + (f" (version {version})" if version else ""))


def local(path: Path, shown: str) -> Chart:
    if path.is_dir() and not (path / "Chart.yaml").is_file():
        raise UsageError(f"no chart at {shown}: {path}/Chart.yaml is missing", "pass --chart a chart directory")
    if path.is_file():
        import tarfile  # lazily: a chart directory, the common case, never needs it

        if not tarfile.is_tarfile(path):
            raise UsageError(f"{shown} is not a packaged chart", "pass a .tgz made by `helm package`, or a directory")
    return Chart(path, shown)


def private_folder(prefix: str) -> Path:
    """A new 0700 folder that is removed when tfchart exits."""
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, True)
    return folder
