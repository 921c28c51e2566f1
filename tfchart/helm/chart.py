"""The chart and the user's inputs as helm takes them, what helm renders from them, and install / upgrade /
uninstall of them in helm 3's and helm 4's spellings of the same flags (uninstall keeps the shared claim).

The chart: a directory, a packaged .tgz (unpacked), or a remote reference (oci://..., repo/name, https://...) that
helm pulls once per command (--version picks it). The inputs: -f files and the --set family in command-line order;
helm reads every input itself, only what can be read once (standard input `-`, a pipe such as bash's process
substitution) is read here first and handed to helm as a private copy, so that every helm call of a command
(render, values, origins) and the file:line lookups see the same bytes. The merged values come from a
values-dump chart built next to the user's chart: its values.yaml is the chart's own (or empty), its only
template is `{{ toJson .Values }}`; helm merges, types and coalesces, and this module only reads the JSON back.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tfchart.errors import HelmError, TfchartError, UsageError
from tfchart.helm.runner import Helm, Options, Runner, failure, finish, go_duration, major_version

# The chart tfchart ships: in a checkout tfchart/chart links to charts/tf-distributed; the wheel carries a copy.
BUNDLED_CHART = (Path(__file__).resolve().parents[1] / "chart").resolve()
PULL_HINT = (
    "--chart takes a chart directory, a .tgz made by `helm package`, oci://REGISTRY/REPO/CHART (--plain-http for a "
    "registry without TLS; `helm registry login` for credentials) or REPO/CHART of a repository `helm repo add` knows"
)
REMOTE = re.compile(r"^([a-z][a-z0-9+.-]*://|[^/.][^/]*/[^/]+$)")  # oci://, https://, or repo/name


@dataclass(frozen=True)
class Chart:
    """A chart directory, what helm is given (a packaged or remote chart unpacked); `shown` is the user's reference."""

    path: Path
    shown: str

    def file(self, name: str) -> bytes | None:
        """A file at the chart's top level (values.yaml, values.schema.json)."""
        return (self.path / name).read_bytes() if (self.path / name).is_file() else None


def resolve(reference: str | None, version: str | None, helm: Runner, plain_http: bool = False) -> Chart:
    """The chart for `reference` (default: the chart tfchart ships); a packaged one is unpacked, a remote one pulled,
    once per command."""
    path = Path(reference).expanduser() if reference else BUNDLED_CHART
    shown = reference or str(BUNDLED_CHART)
    if version and path.exists() and reference:
        raise UsageError("--version picks a version of a remote chart", f"drop --version for {shown}")
    if path.is_dir():
        if not (path / "Chart.yaml").is_file():
            raise UsageError(f"no chart at {shown}: {path}/Chart.yaml is missing", "pass --chart a chart directory")
        return Chart(path, shown)
    where = private_folder("tfchart-chart-")
    if path.exists():  # a packaged chart, unpacked as `helm pull --untar` does
        import tarfile  # lazily: a chart directory, the common case, never needs it

        try:
            with tarfile.open(path) as package:
                package.extractall(where, filter="data")
        except (tarfile.TarError, OSError):
            raise UsageError(f"{shown} is not a packaged chart",
                             "pass a .tgz made by `helm package`, or a directory") from None
        except TypeError:  # extractall's filter came in Python 3.10.12 and 3.11.4
            raise UsageError(f"this Python ({sys.version.split()[0]}) cannot unpack {shown} safely",
                             "use Python 3.10.12, 3.11.4 or newer, or pass the chart's directory") from None
    elif REMOTE.match(shown):
        args = ["pull", shown, "--untar", "--untardir", str(where)]
        try:
            helm([*args, *(["--version", version] if version else []), *(["--plain-http"] if plain_http else [])])
        except TfchartError as error:  # in helm's words, also where the registry cannot be reached
            raise HelmError(f"cannot pull chart {shown}: {error.message}", PULL_HINT) from None
    else:
        raise UsageError(f"no chart at {shown}", "pass --chart a chart directory, a .tgz, or oci://REGISTRY/CHART")
    pulled = [child for child in where.iterdir() if (child / "Chart.yaml").is_file()]
    if len(pulled) != 1:
        raise UsageError(f"{shown} holds no chart", "check the reference and --version")
    return Chart(pulled[0], shown + (f" (version {version})" if version else ""))


def private_folder(prefix: str) -> Path:
    """A new 0700 folder that is removed when tfchart exits."""
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, True)
    return folder


MAX_INPUT_BYTES = 64 * 1024 * 1024  # a pipe that never ends (/dev/zero) is refused past this
SET_FLAGS = ("--set-json", "--set", "--set-string", "--set-file")  # the order helm applies them in


@dataclass(frozen=True)
class ValuesFile:
    """One -f argument: `name` as given, `path` what helm reads (the file itself, or the private copy)."""

    name: str
    path: str


@dataclass
class Inputs:
    """-f files and --set-family arguments as helm gets them, once-only inputs copied."""

    files: list[ValuesFile] = field(default_factory=list)
    sets: list[tuple[str, str]] = field(default_factory=list)  # (flag, argument) in command-line order

    def args(self) -> list[str]:
        """helm's arguments for these inputs; helm applies the files, then each --set flag in SET_FLAGS order."""
        return [*(arg for file in self.files for arg in ("--values", file.path)),
                *(arg for flag, argument in self.sets for arg in (flag, argument))]  # fmt: skip

    def applied(self) -> list[tuple[str, str]]:
        """The --set family in the order helm applies it (later ones win)."""
        return sorted(self.sets, key=lambda item: SET_FLAGS.index(item[0]))  # stable: command-line order per flag


def read(files: list[str], sets: list[tuple[str, str]], chart_dir: Path | None = None) -> Inputs:
    """The inputs, with standard input and pipes read now (once, in command-line order). A relative -f path that
    names nothing here but a file of the chart (`values/gpu.yaml`, the ready files it ships) reads the chart's."""
    folder: Path | None = None
    stdin_read = False

    def copied(name: str) -> str:  # what helm reads for `name`: a private copy of what can be read only once
        nonlocal folder, stdin_read
        # standard input, or a pipe; a missing file: helm says so in its words
        if name.strip() != "-" and not (os.path.exists(name) and not os.path.isfile(name) and not os.path.isdir(name)):
            return name
        if name.strip() == "-":
            data = b"" if stdin_read else _read_capped(sys.stdin.buffer, "standard input")
            stdin_read = True  # helm reads `-` with io.ReadAll: a second `-` reads nothing
        else:
            try:
                with open(name, "rb") as stream:
                    data = _read_capped(stream, name)
            except OSError as error:
                raise UsageError(f"cannot read {name}: {error.strerror}", "check the path of -f/--set-file") from None
        folder = folder or private_folder("tfchart-values-")  # 0700: no one else reads the copies
        (copy := folder / f"{len(list(folder.iterdir())) + 1}.yaml").write_bytes(data)
        return str(copy)

    def shipped(name: str) -> str:  # `name`, or the chart's file of that name where nothing here has it
        if chart_dir is None or name.strip() == "-" or os.path.isabs(name) or os.path.lexists(name):
            return name
        return str(chart_dir / name) if (chart_dir / name).is_file() else name

    inputs = Inputs([ValuesFile(name, copied(shipped(name))) for name in files])
    for flag, argument in sets:
        key, _, path = argument.partition("=")
        inputs.sets.append((flag, f"{key}={copied(path)}" if flag == "--set-file" and path else argument))
    return inputs


def _read_capped(stream: BinaryIO, name: str) -> bytes:
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{name} is larger than {MAX_INPUT_BYTES >> 20} MiB: not a values file", "pass a values file")
    return data


DUMP_TEMPLATE = "{{ toJson .Values }}\n"


class RenderFailed(HelmError):
    """`helm template` refused: `stderr` says why (schema errors, the chart's own rules, an unreadable input)."""

    def __init__(self, stderr: str) -> None:
        error = failure(stderr)
        super().__init__(error.message, error.hint)
        self.stderr = stderr


def template(helm: Helm, chart: Chart, release: str, inputs: Inputs, namespace: str | None = None,
             more: Sequence[str] = ()) -> str:  # fmt: skip
    """`helm template` exactly as the user would run it; RenderFailed when helm refuses."""
    return result(start(helm, chart, release, inputs, namespace, more))


def start(helm: Helm, chart: Chart, release: str, inputs: Inputs, namespace: str | None = None,
          more: Sequence[str] = ()) -> subprocess.Popen[bytes]:  # fmt: skip
    """`template`, started: the caller can load what reads its output meanwhile (`result` waits for it)."""
    namespaced = ["--namespace", namespace] if namespace else []
    return helm.start(["template", release, str(chart.path), *namespaced, *inputs.args(), *more])


def result(rendering: subprocess.Popen[bytes]) -> str:
    return finish(rendering, failed=RenderFailed).decode()


def manifests(text: str) -> list[dict[str, Any]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if isinstance(doc, dict)]


def merged_values(helm: Helm, chart: Chart | None, inputs: Inputs) -> Any:
    """The values helm renders `chart` with for `inputs` (chart None: the inputs alone, no defaults)."""
    defaults = (chart.file("values.yaml") or b"") if chart else b""
    text = result(helm.start(["template", "values", str(_dump_chart(defaults)), *inputs.args()]))
    body = text.split("# Source: values/templates/values.json\n", 1)[-1]
    try:
        return json.loads(body)
    except RecursionError:
        raise UsageError("the values are nested too deeply to read back", "flatten the values") from None


@functools.cache
def _dump_chart(defaults: bytes) -> Path:
    """A chart whose values.yaml is `defaults` and whose only template prints .Values as JSON (one per process)."""
    chart = private_folder("tfchart-dump-") / "values"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: values\nversion: 0.0.0\n")
    (chart / "values.yaml").write_bytes(defaults)
    (chart / "templates" / "values.json").write_text(DUMP_TEMPLATE)
    return chart


def release_args(verb: str, major: int, release: str, chart: Chart, inputs: Inputs, options: Options) -> list[str]:
    """`helm install|upgrade RELEASE CHART` with the options and the user's values, in order."""
    args = [verb, release, str(chart.path)]
    args += ["--namespace", options.namespace] if options.namespace else []
    args += ["--create-namespace"] if options.create_namespace else []
    args += ["--wait=watcher" if major >= 4 else "--wait"] if options.wait else []
    args += ["--timeout", go_duration(options.timeout)] if options.timeout is not None else []
    args += ["--rollback-on-failure" if major >= 4 else "--atomic"] if options.atomic else []
    args += [f"--dry-run={options.dry_run}"] if options.dry_run else []
    args += ["--install"] if options.install else []
    args += [f"--{options.reuse_values}-values"] if options.reuse_values else []
    return [*args, *inputs.args()]


def install(runner: Runner, release: str, chart: Chart, inputs: Inputs, options: Options, verb: str = "install") -> str:
    """`helm install`, or `helm upgrade --install` of a release helm does not hold yet (verb "upgrade")."""
    return runner(release_args(verb, major_version(runner), release, chart, inputs, options)).decode()


def uninstall(runner: Runner, release: str, namespace: str, wait: bool = False, timeout: float | None = None,
              keep_history: bool = False) -> list[str]:  # fmt: skip
    """Uninstalls the release from `namespace`; returns its claims, which helm keeps (helm.sh/resource-policy)."""
    shown = manifests(runner(["get", "manifest", release, "--namespace", namespace]).decode())
    claims = [doc["metadata"]["name"] for doc in shown if doc.get("kind") == "PersistentVolumeClaim"]
    runner(["uninstall", release, "--namespace", namespace, *(["--wait"] if wait else []),
            *(["--timeout", go_duration(timeout)] if timeout is not None else []),
            *(["--keep-history"] if keep_history else [])])  # fmt: skip
    return claims
