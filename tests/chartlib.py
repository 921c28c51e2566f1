"""Shared helpers for the chart tests: real helm binaries, rendering, manifest walking."""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "tf-distributed"
VALUES_DIR = REPO / "values"
CI_DIR = CHART / "ci"
TOOLS = Path(os.environ.get("TFD_TOOLS_DIR", REPO / ".tools"))
HELM_MAJORS = ("3", "4")

POD_KINDS = {"StatefulSet", "Deployment", "Job", "DaemonSet", "ReplicaSet", "Pod"}


class MissingTool(RuntimeError):
    """A tool the tests need is not installed: the tests fail, they never skip."""


def helm_path(major: str) -> Path:
    """The helm <major>.x binary installed by scripts/install_helm.sh (or $TFD_HELM<major>)."""
    override = os.environ.get(f"TFD_HELM{major}")
    path = Path(override) if override else TOOLS / f"helm{major}" / "helm"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise MissingTool(f"helm {major}.x not found at {path}: run `bash scripts/setup.sh`")
    return path


def copy_tracked(destination: Path) -> Path:
    """The working tree's tracked files (symlinks kept), as a clean clone has them plus uncommitted edits."""
    destination.mkdir(parents=True, exist_ok=True)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    packed = subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], cwd=REPO, input=tracked, check=True,
                            capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-xf", "-", "-C", str(destination)], input=packed, check=True)
    return destination


# A process's own peak memory. wait4's ru_maxrss also counts the process that spawned it: at exec the kernel
# records the old address space's high-water mark, and a (v)forked child's is its parent's. A child of a
# pytest process that has grown to 200 MB would report 200 MB, whatever it used itself. So the command is
# spawned by this small launcher, which reports only its child's peak (and the launcher's ~10 MB at most).
_PEAK_LAUNCHER = """
import os, signal, subprocess, sys
child = subprocess.Popen(sys.argv[2:], close_fds=False)
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def with_peak_memory(argv: Sequence[str], report: Path) -> list[str]:
    """argv under the launcher: its own peak RSS (and its children's) lands in `report`, in KiB."""
    return [sys.executable, "-c", _PEAK_LAUNCHER, str(report), *argv]


def peak_memory_mb(report: Path) -> float:
    return int(report.read_text() or 0) / 1024


def tool(name: str, *candidates: Path) -> Path:
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise MissingTool(
        f"{name} not found (looked in {', '.join(map(str, candidates))} and PATH): run `bash scripts/setup.sh`"
    )


def values_files() -> list[Path]:
    """Every ready values file and every CI scenario file."""
    return sorted(VALUES_DIR.glob("*.yaml")) + sorted(CI_DIR.glob("*.yaml"))


def file_id(path: Path) -> str:
    return str(path.relative_to(REPO))


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


# `helm template` of the repository's chart is a function of its arguments and of the files they name (no
# cluster is asked, and the chart does not change during a session): tests that render the same values with
# the same helm share one run.
_TEMPLATES: dict[tuple[str, ...], Result] = {}


def _template_key(major: str, args: Sequence[str]) -> tuple[str, ...] | None:
    asks_a_cluster = any(a.startswith(("--dry-run", "--validate", "--kube")) for a in args)
    if not args or args[0] != "template" or str(CHART) not in args or asks_a_cluster:
        return None
    named = [hashlib.sha256(Path(a).read_bytes()).hexdigest() for a in args if os.path.isfile(a)]
    return (str(helm_path(major)), *args, *named)


def helm(major: str, *args: str, timeout: int = 120, fresh: bool = False) -> Result:
    """helm's answer; a `template` of the repository's chart is run once per session unless `fresh`."""
    key = None if fresh else _template_key(major, args)
    if key is not None and key in _TEMPLATES:
        return _TEMPLATES[key]
    result = _helm(major, *args, timeout=timeout)
    if key is not None:
        _TEMPLATES[key] = result
    return result


def _helm(major: str, *args: str, timeout: int = 120) -> Result:
    proc = subprocess.run(
        [str(helm_path(major)), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            **os.environ,
            "HELM_CACHE_HOME": str(TOOLS / "helm-cache"),
            "HELM_CONFIG_HOME": str(TOOLS / "helm-config"),
        },
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def template(
    major: str = "4",
    values: Sequence[Path | str] = (),
    sets: Sequence[str] = (),
    release: str = "mnist",
    namespace: str = "ml-training",
    extra: Sequence[str] = (),
    fresh: bool = False,
) -> Result:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for file in values:
        args += ["-f", str(file)]
    for item in sets:
        args += ["--set", item]
    return helm(major, *args, *extra, fresh=fresh)


def render(
    major: str = "4",
    values: Sequence[Path | str] = (),
    sets: Sequence[str] = (),
    release: str = "mnist",
    namespace: str = "ml-training",
    extra: Sequence[str] = (),
) -> list[dict[str, Any]]:
    result = template(major, values, sets, release, namespace, extra)
    if result.returncode != 0:
        raise AssertionError(f"helm {major} template failed:\n{result.stderr}")
    return pickle.loads(_parsed(result.stdout))  # a copy of its own: tests may change what they get


_PARSED: dict[str, bytes] = {}


def _parsed(text: str) -> bytes:
    """The documents of a render, parsed once (by libyaml) per distinct output and kept pickled."""
    if text not in _PARSED:
        _PARSED[text] = pickle.dumps(parse_all(text))
    return _PARSED[text]


def parse_all(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of `text` (libyaml's safe loader: the same objects, 8 times faster)."""
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} named {name} in {[(d['kind'], d['metadata']['name']) for d in docs]}")


def pod_template(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Pod":
        return doc
    return dict(doc["spec"]["template"])


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(pod_template(doc)["spec"])


def component(doc: dict[str, Any]) -> str:
    """The object's app.kubernetes.io/component label ("" without one)."""
    return str((doc["metadata"].get("labels") or {}).get("app.kubernetes.io/component", ""))


def workloads(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (doc for doc in docs if doc["kind"] in POD_KINDS)


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions: In, NotIn, Exists, DoesNotExist) matches labels."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        held = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[operator]  # fmt: skip
        if not held:
            return False
    return True


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


# kubernetes-validate reads and parses its schema files (the definitions: 1.4 MB of JSON) on every call: once per
# session is enough, they do not change (8 times faster; the validation itself is the library's, unchanged)
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)


def openapi_problems(docs: Sequence[dict[str, Any]], versions: Sequence[str]) -> list[str]:
    """Strict OpenAPI validation (kubernetes-validate) of each object on each Kubernetes version: the problems, as
    `<version> <Kind>/<name>: <message> at <path>` (none: valid everywhere)."""
    problems = []
    for version in versions:
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                problems.append(f"{version} {doc['kind']}/{doc['metadata']['name']}: {error.message} at "
                                f"{list(error.path)}")
    return problems
