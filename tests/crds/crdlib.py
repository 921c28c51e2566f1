"""Validate rendered custom resources against upstream CRDs (JobSet, Kueue, Volcano, scheduler-plugins,
prometheus-operator), which this repository does not carry.

Where the CRDs come from (``crd_dir()``; ``CRD_DIR`` is the same folder, resolved when first read):

* ``TFD_TEST_CRDS``: a folder laid out ``<project>/<tag>/<file>`` holding every file of ``MANIFEST``
  (``.ci/run`` sets it where CI provides one); each file must have the manifest's sha256;
* else each file is downloaded from its upstream repository by release tag
  (``https://raw.githubusercontent.com/<repo>/<tag>/<path>``; ``TFD_TEST_CRDS_BASE_URL`` replaces the
  ``https://raw.githubusercontent.com`` part, for a mirror), checked against its sha256 and kept in
  ``${XDG_CACHE_HOME:-~/.cache}/tf-distributed/crds``, outside the checkout;
* where neither works, every test that needs a CRD fails (never skips) with one line that names
  ``TFD_TEST_CRDS`` and the file or download that failed. The failure is remembered: the download is
  tried once per test process.

``validate(obj)`` finds the ``CustomResourceDefinition`` for the object's
``apiVersion`` + ``kind``, takes the OpenAPI v3 schema of that (served) version and
checks the object with ``jsonschema`` (Draft 7, which is what OpenAPI v3.0 schemas are
closest to), after translating the Kubernetes structural-schema extensions:

* ``x-kubernetes-int-or-string: true``: an integer or a string (a ``pattern`` then only
  applies to the string form, as in the API server);
* ``nullable: true``: ``null`` is accepted; without it a ``null`` is an error, since the
  API server drops such a null silently;
* ``x-kubernetes-preserve-unknown-fields: true``: unknown fields are accepted there;
* everywhere else **unknown fields are errors**: the API server prunes fields a
  structural schema does not declare (an object with ``properties`` and no
  ``additionalProperties``, or an object with neither), and a field that silently
  disappears is a bug in the chart that rendered it;
* ``x-kubernetes-embedded-resource: true``: ``apiVersion``, ``kind`` and ``metadata``
  are implicitly declared;
* ``x-kubernetes-list-type: set`` / ``map`` (with ``x-kubernetes-list-map-keys``):
  duplicate items / duplicate keys are errors, as in the API server;
* ``format: int32`` / ``int64``: the integer must fit;
* ``status`` in a manifest of a kind with the status subresource is an error: the API
  server ignores it.

The root ``metadata`` is checked against a small ``ObjectMeta`` schema (string labels and
annotations, known field names, ``name`` or ``generateName`` present).

Not done: CEL rules (``x-kubernetes-validations``), defaulting, string formats such as
``date-time``, and anything an admission webhook of the project would check.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

import pytest
import yaml
from jsonschema import Draft7Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from kubernetes.client import V1CustomResourceValidation

#: The schema's field in a CRD version's `schema`, by its wire name in the kubernetes client's model.
SCHEMA_FIELD = V1CustomResourceValidation.attribute_map["open_apiv3_schema"]

# CRD_DIR (module __getattr__ below) is public too, read as crdlib.CRD_DIR.
__all__ = ["MANIFEST", "CrdNotFound", "CrdsUnavailable", "crd_dir", "crd_for", "resolve", "schema_for", "validate"]

ENV = "TFD_TEST_CRDS"
BASE_URL_ENV = "TFD_TEST_CRDS_BASE_URL"
BASE_URL = "https://raw.githubusercontent.com"
DOWNLOAD_TIMEOUT_S = 30


@dataclass(frozen=True)
class Upstream:
    """One CRD file: where it lies under a CRD folder and where it comes from upstream."""

    rel: str  # <project>/<tag>/<file>
    repo: str  # GitHub owner/name
    path: str  # the file in the repository at the tag
    sha256: str

    @property
    def tag(self) -> str:
        return self.rel.split("/")[1]

    def url(self, base: str) -> str:
        return f"{base.rstrip('/')}/{self.repo}/{self.tag}/{self.path}"


_KUEUE = "config/components/crd/bases/kueue.x-k8s.io_"
_PROM = "example/prometheus-operator-crd/monitoring.coreos.com_"
_VOLCANO = "config/crd/volcano/bases/"
# Why each one is needed and why this tag: README.md beside this file. scheduler-plugins'
# manifests/crds/scheduling.x-k8s.io_podgroups.yaml is a symlink to manifests/coscheduling/crd.yaml,
# which the raw download must name (it would serve the link's text).
MANIFEST: tuple[Upstream, ...] = (
    Upstream("jobset/v0.12.0/jobset.x-k8s.io_jobsets.yaml", "kubernetes-sigs/jobset",
             "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
             "d022b87624512cf0b6741b31b24a2bea9945b5a838b50713af29332c878bb6fe"),
    Upstream("kueue/v0.19.2/kueue.x-k8s.io_clusterqueues.yaml", "kubernetes-sigs/kueue", f"{_KUEUE}clusterqueues.yaml",
             "e0a5fc9b370c70f3d993d4f599865817338ecf94187b30b15b12ff33c579bd55"),
    Upstream("kueue/v0.19.2/kueue.x-k8s.io_localqueues.yaml", "kubernetes-sigs/kueue", f"{_KUEUE}localqueues.yaml",
             "dd10ef8d3578e7212fa52763549e7b6be0949793a5b924495fcd293330109fed"),
    Upstream("kueue/v0.19.2/kueue.x-k8s.io_resourceflavors.yaml", "kubernetes-sigs/kueue",
             f"{_KUEUE}resourceflavors.yaml", "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173"),
    Upstream("kueue/v0.19.2/kueue.x-k8s.io_topologies.yaml", "kubernetes-sigs/kueue", f"{_KUEUE}topologies.yaml",
             "f703575d3bb64d26f6e839f831e01646367ed41a89b3abf163f8e842ca1c4d2b"),
    Upstream("prometheus-operator/v0.93.0/monitoring.coreos.com_podmonitors.yaml",
             "prometheus-operator/prometheus-operator", f"{_PROM}podmonitors.yaml",
             "45a93443daa687d3654f7e9631909ff7edcdf3ec09c5e60251b74aa2722aee5d"),
    Upstream("prometheus-operator/v0.93.0/monitoring.coreos.com_prometheusrules.yaml",
             "prometheus-operator/prometheus-operator", f"{_PROM}prometheusrules.yaml",
             "78be98554b9c8506ab2b4f4feb91c5f3a56e536a0a510f3a8e876a459970d56d"),
    Upstream("prometheus-operator/v0.93.0/monitoring.coreos.com_servicemonitors.yaml",
             "prometheus-operator/prometheus-operator", f"{_PROM}servicemonitors.yaml",
             "a99047972c9dd7679ce2050b9968e8a08773492e671b3e17abd476d42aa78a32"),
    Upstream("scheduler-plugins/v0.34.7/scheduling.x-k8s.io_podgroups.yaml", "kubernetes-sigs/scheduler-plugins",
             "manifests/coscheduling/crd.yaml", "acf75c3eef75e1273f0d1ed53a4b230b558d8066a92acdddc10c9bc8c91ab42c"),
    Upstream("volcano/v1.15.1/scheduling.volcano.sh_podgroups.yaml", "volcano-sh/volcano",
             f"{_VOLCANO}scheduling.volcano.sh_podgroups.yaml",
             "c297c0fdcf00cea6a35daa2b6153a8590b56df0e22a96dbfa44f773814685017"),
    Upstream("volcano/v1.15.1/topology.volcano.sh_hypernodes.yaml", "volcano-sh/volcano",
             f"{_VOLCANO}topology.volcano.sh_hypernodes.yaml",
             "77ae7304543e37f218b428fc972dbd71bd6a88cc3004c4222172a63e2bd78fa4"),
)  # fmt: skip


class CrdsUnavailable(RuntimeError):
    """The CRD files could be had neither from TFD_TEST_CRDS nor by download (a one-line message)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_dir(environ: Mapping[str, str]) -> Path:
    """Where downloaded CRDs are kept: outside any checkout, shared by every clone on the machine."""
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "tf-distributed" / "crds"


def _download(entry: Upstream, url: str, target: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            data = response.read()
    except (OSError, ValueError) as exc:
        reason = exc if isinstance(exc, HTTPError) else getattr(exc, "reason", exc)
        raise CrdsUnavailable(
            f"{ENV} is not set (a folder of the CRDs laid out <project>/<tag>/<file>) and downloading {url} failed: "
            f"{' '.join(str(reason).split())}"
        ) from None
    if _sha256(data) != entry.sha256:
        raise CrdsUnavailable(
            f"{ENV} is not set and {url} has sha256 {_sha256(data)}, not the expected {entry.sha256}: refused "
            f"(set {ENV} to a folder of the CRDs)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    partial.write_bytes(data)
    partial.replace(target)


def resolve(environ: Mapping[str, str]) -> Path:
    """The folder holding every MANIFEST file (checked against its sha256), or CrdsUnavailable in one line."""
    given = environ.get(ENV)
    if given:
        folder = Path(given).resolve()
        for entry in MANIFEST:
            path = folder / entry.rel
            if not path.is_file():
                raise CrdsUnavailable(f"{ENV}={given}: {entry.rel} is missing (laid out <project>/<tag>/<file>)")
            if _sha256(path.read_bytes()) != entry.sha256:
                raise CrdsUnavailable(f"{ENV}={given}: {entry.rel} does not have the sha256 {entry.sha256}")
        return folder
    folder = cache_dir(environ)
    base = environ.get(BASE_URL_ENV) or BASE_URL
    for entry in MANIFEST:
        path = folder / entry.rel
        if not (path.is_file() and _sha256(path.read_bytes()) == entry.sha256):
            _download(entry, entry.url(base), path)
    return folder


_resolved: list[Path | str] = []  # the folder, or the failure's message: resolved once per process


def crd_dir() -> Path:
    """The CRD folder; a test that needs it fails with one line (no traceback) when there is none."""
    if not _resolved:
        try:
            _resolved.append(resolve(os.environ))
        except CrdsUnavailable as exc:
            _resolved.append(f"the tests' CRDs: {exc}")
    found = _resolved[0]
    if isinstance(found, str):
        pytest.fail(found, pytrace=False)
    return found


def __getattr__(name: str) -> Any:
    if name == "CRD_DIR":  # resolved on first use, so that importing crdlib needs neither the folder nor a network
        return crd_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}

# The ObjectMeta fields a client may send (k8s.io/apimachinery/pkg/apis/meta/v1 ObjectMeta).
_OBJECT_META: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer"},
        "creationTimestamp": {"type": ["string", "null"]},
        "deletionTimestamp": {"type": ["string", "null"]},
        "deletionGracePeriodSeconds": {"type": "integer"},
        "managedFields": {"type": "array", "items": {"type": "object"}},
        "selfLink": {"type": "string"},
    },
    "additionalProperties": False,
    "anyOf": [{"required": ["name"]}, {"required": ["generateName"]}],
}


# libyaml's safe loader where PyYAML has it (the same documents, ten times faster: JobSet's CRD is 824 KB).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CrdNotFound(LookupError):
    """No known CRD serves the object's apiVersion and kind."""


# --------------------------------------------------------------------------- loading


@functools.cache
def _crds() -> dict[tuple[str, str], tuple[Path, dict[str, Any]]]:
    """(group, kind) -> (file, CRD) for every CRD of the MANIFEST."""
    found: dict[tuple[str, str], tuple[Path, dict[str, Any]]] = {}
    folder = crd_dir()
    for path in sorted(folder / entry.rel for entry in MANIFEST):
        with path.open(encoding="utf-8") as fh:
            for doc in yaml.load_all(fh, Loader=_LOADER):
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                if doc.get("apiVersion") != "apiextensions.k8s.io/v1":
                    raise ValueError(f"{path}: only apiextensions.k8s.io/v1 CRDs are supported")
                key = (str(doc["spec"]["group"]), str(doc["spec"]["names"]["kind"]))
                if key in found:
                    raise ValueError(f"{path}: {key[1]}.{key[0]} is also defined in {found[key][0]}")
                found[key] = (path, doc)
    return found


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, sep, version = api_version.rpartition("/")
    if not sep:  # core group ("v1"): never a CRD
        return "", api_version
    return group, version


def crd_for(api_version: str, kind: str) -> tuple[Path, dict[str, Any]]:
    """The CRD file and document for ``apiVersion`` + ``kind``.

    Raises ``CrdNotFound`` when no known CRD has the group and kind, or when it does not
    serve that version.
    """
    group, version = _split_api_version(api_version)
    try:
        path, crd = _crds()[(group, kind)]
    except KeyError:
        raise CrdNotFound(f"no known CRD for kind {kind!r} in group {group!r}") from None
    served = [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
    if version not in served:
        raise CrdNotFound(f"{path.relative_to(crd_dir())}: {kind} is not served as {version!r} (served: {served})")
    return path, crd


def _version_entry(api_version: str, kind: str) -> dict[str, Any]:
    """The entry of ``spec.versions`` for the object's version."""
    _, version = _split_api_version(api_version)
    _, crd = crd_for(api_version, kind)
    entries: list[dict[str, Any]] = crd["spec"]["versions"]
    return next(v for v in entries if v["name"] == version)


# ------------------------------------------------------------- structural translation


def _structural(node: Mapping[str, Any]) -> dict[str, Any]:
    """Translate one structural-schema node (and its properties/items) to strict Draft 7.

    Logical junctors (allOf/anyOf/oneOf/not) are left as they are: in a structural schema
    they may only carry value validations, so making them strict would be wrong.
    """
    out = dict(node)
    for word in ("description", "default", "example", "externalDocs"):
        out.pop(word, None)

    if out.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
        if out.get("anyOf") == [{"type": "integer"}, {"type": "string"}]:
            del out["anyOf"]  # said by "type" now; keeping it would report every error twice

    if out.get("x-kubernetes-embedded-resource"):
        props = dict(out.get("properties", {}))
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
        out["properties"] = props

    if "properties" in out:
        out["properties"] = {k: _structural(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), Mapping):
        out["items"] = _structural(out["items"])
    if isinstance(out.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _structural(out["additionalProperties"])

    is_object = out.get("type") == "object" or "properties" in out
    if is_object and not out.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in out:
        out["additionalProperties"] = False

    if out.get("nullable"):
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list):
            out["type"] = [*kind, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if kind is None:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


@functools.cache
def _strict_schema(api_version: str, kind: str) -> dict[str, Any]:
    schema = _structural(copy.deepcopy(_version_entry(api_version, kind)["schema"][SCHEMA_FIELD]))
    props = dict(schema.get("properties", {}))
    props["apiVersion"] = {"const": api_version}
    props["kind"] = {"const": kind}
    props["metadata"] = _OBJECT_META
    schema["properties"] = props
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return schema


def schema_for(api_version: str, kind: str) -> dict[str, Any]:
    """The strict Draft 7 schema ``validate`` uses for ``apiVersion`` + ``kind`` (a copy)."""
    return copy.deepcopy(_strict_schema(api_version, kind))


# ------------------------------------------------------------------- the validator


def _list_type(validator: Any, list_type: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not isinstance(instance, list):
        return
    if list_type == "set":
        seen: list[Any] = []
        for index, item in enumerate(instance):
            if item in seen:
                yield ValidationError(f"duplicate entry {item!r} in a list of type set", path=[index])
            seen.append(item)
    elif list_type == "map":
        keys = list(schema.get("x-kubernetes-list-map-keys", []))
        seen_keys: list[tuple[Any, ...]] = []
        for index, item in enumerate(instance):
            if not isinstance(item, dict):
                continue
            key = tuple(item.get(k) for k in keys)
            if key in seen_keys:
                shown = ", ".join(f"{k}={v!r}" for k, v in zip(keys, key, strict=True))
                yield ValidationError(f"duplicate entry with {shown} in a list of type map", path=[index])
            seen_keys.append(key)


_format_checker = FormatChecker(formats=())


def _int_format(name: str) -> None:
    low, high = _INT_RANGES[name]

    @_format_checker.checks(name)
    def _check(instance: object) -> bool:
        if isinstance(instance, bool) or not isinstance(instance, int):
            return True
        return low <= instance <= high


for _name in _INT_RANGES:
    _int_format(_name)

# jsonschema's stubs leave validators.extend untyped.
_KubeValidator = validators.extend(Draft7Validator, {"x-kubernetes-list-type": _list_type})  # type: ignore[no-untyped-call]


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text or "."


def _messages(error: ValidationError) -> list[str]:
    where = list(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = set(error.schema.get("properties", {})) if isinstance(error.schema, Mapping) else set()
        extra = sorted(k for k in error.instance if k not in known) if isinstance(error.instance, dict) else []
        return [f"{_path([*where, k])}: unknown field (the API server would prune it silently)" for k in extra] or [
            f"{_path(where)}: {error.message}"
        ]
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(error.validator_value, list):
        missing = [k for k in error.validator_value if k not in error.instance]
        return [f"{_path([*where, k])}: required field missing" for k in missing]
    if error.validator == "anyOf" and where and where[-1] == "metadata" and len(where) == 1:
        return [".metadata.name: required field missing (or metadata.generateName)"]
    if error.validator == "const" and len(where) == 1 and where[0] in ("apiVersion", "kind"):
        return [f"{_path(where)}: {error.instance!r} does not match the CRD ({error.validator_value!r})"]
    return [f"{_path(where)}: {error.message}"]


def validate(obj: dict[str, Any]) -> list[str]:
    """Errors of ``obj`` against its CRD, as ``"<path>: <message>"``; empty when valid.

    An object whose apiVersion/kind no known CRD serves gives one error at ``.apiVersion``.
    """
    if not isinstance(obj, dict):
        return [f".: expected an object, got {type(obj).__name__}"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"{_path([k])}: required field missing" for k in ("apiVersion", "kind") if not obj.get(k)] or [
            ".: apiVersion and kind must be strings"
        ]
    try:
        schema = _strict_schema(api_version, kind)
    except CrdNotFound as exc:
        return [f".apiVersion: {exc}"]
    checker = _KubeValidator(schema, format_checker=_format_checker)
    errors: list[str] = []
    if "status" in obj and "status" in _version_entry(api_version, kind).get("subresources", {}):
        errors.append(".status: set in a manifest, but the API server ignores it (status subresource)")
    for error in sorted(checker.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
        errors.extend(_messages(error))
    return errors
