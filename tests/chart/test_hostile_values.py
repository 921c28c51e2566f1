"""Hostile values: injection payloads in every string of the schema, through helm 3.17, helm 4.1 and tfchart.

A values file that validates must never make the chart emit objects the user did not ask for: every
user string reaches YAML quoted or through toYaml, and every pattern that must be single-line says
so (in RE2, which helm uses, and in Python, where tfchart reads `$` the same way). The slots are
generated from values.schema.json: every string value, every item of a string list, every key of a
map, found by walking the schema next to BASE, values that make the chart render all of them. Each
slot gets three payloads: a YAML document separator opening a ClusterRoleBinding, a quote that
closes the scalar and adds a key (with a template action in it), and a single trailing newline
(where Python's `$` and RE2's `$` differ).

Every case is either
- rejected by the real `tfchart validate` CLI (the slot named) and by helm 3 and helm 4 (the slot
  named), all of them asked of batches of cases; or
- accepted by all three, and then helm 3 and helm 4 render byte-identical manifests whose objects are
  among BASE's, with no `injected` key anywhere and the payload as one string value; each payload's
  accepted cases together also go through the real `tfchart template` CLI, byte-identical to helm's.
Every tfchart CLI run stays within 2 s of CPU and 500 MB of peak RSS (both from wait4).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.badvalues import merged
from tests.chartlib import (
    CHART,
    HELM_MAJORS,
    REPO,
    TOOLS,
    Result,
    helm_path,
    template,
)
from tests.tfchart.hostile import measured

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
WORK = REPO / ".pytest_cache" / "hostile-values"
TIME_LIMIT_S = 2.0
MEMORY_LIMIT_MB = 500
BATCH = 40
COMPONENTS = ("ps", "worker", "chief", "evaluator", "tensorboard", "serving")
SELECTOR = {
    "matchLabels": {"role": "client"},
    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}],
}


def component_base(role: str) -> dict[str, Any]:
    return {
        "image": {"registry": "registry.example.com", "repository": f"team/{role}", "tag": "1.0", "digest": ""},
        "command": ["python"],
        "args": ["--x"],
        "extraEnv": [{"name": "EXTRA", "value": "v"}],
        "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}},
        "gpu": {"count": 1},
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": SELECTOR,
                "matchLabelKeys": ["pod-template-hash"],
                "nodeAffinityPolicy": "Honor",
                "nodeTaintsPolicy": "Honor",
            }
        ],
        "priorityClassName": "batch",
        "podLabels": {"team": "a"},
        "podAnnotations": {"note": "a"},
        "extraVolumes": [
            {"name": "scratch", "emptyDir": {}},
            {"name": "conf", "configMap": {"name": "c", "items": [{"key": "k", "path": "p"}]}},
            {"name": "keys", "secret": {"secretName": "s", "items": [{"key": "k", "path": "p"}]}},
            {"name": "info", "downwardAPI": {"items": [{"path": "p", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"name": "all", "projected": {"sources": [
                {"configMap": {"name": "c", "items": [{"key": "k", "path": "p"}]}},
                {"secret": {"name": "s", "items": [{"key": "k", "path": "p"}]}},
                {"downwardAPI": {"items": [{"path": "p", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            ]}},
        ],
        "extraVolumeMounts": [
            {
                "name": "scratch",
                "mountPath": "/scratch",
                "subPath": "s",
                "subPathExpr": "$(POD_NAME)",
                "recursiveReadOnly": "Disabled",
                "mountPropagation": "None",
            }
        ],
        "podSecurityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/p.json"}},
        "containerSecurityContext": {
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/p.json"},
        },
    }


def monitor_base() -> dict[str, Any]:
    relabel = {"sourceLabels": ["__name__"], "separator": ";", "targetLabel": "series", "regex": "tfd_(.*)",
               "replacement": "$1", "action": "replace"}
    return {
        "enabled": True,
        "namespace": "monitoring",
        "labels": {"release": "kps"},
        "annotations": {"note": "a"},
        "interval": "30s",
        "scrapeTimeout": "10s",
        "namespaceSelector": {"matchNames": ["ml-training"]},
        "relabelings": [relabel],
        "metricRelabelings": [relabel],
    }


# Values that make the chart render every string key (ingresses, evaluator, GPUs, every list non-empty).
BASE: dict[str, Any] = {
    "global": {"imageRegistry": "mirror.example.com", "imagePullSecrets": ["regcred"], "parentKey": "x"},
    "nameOverride": "tfd",
    "namespaceOverride": "ml-training",
    "clusterDomain": "cluster.local",
    "commonLabels": {"team": "a"},
    "commonAnnotations": {"owner": "a"},
    "schedulerName": "volcano",
    "training": {"dataDir": "/data/datasets", "learningRate": "0.01", "exportMinAccuracy": "0.5",
                 "extraArgs": ["--eval-split=0.2"]},
    "storage": {"storageClassName": "standard", "subPath": "runs", "annotations": {"backup": "yes"}},
    **{role: component_base(role) for role in COMPONENTS},
    "evaluator": {**component_base("evaluator"), "enabled": True},
    "tensorboard": {
        **component_base("tensorboard"),
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "host": "tb.example.com",
            "path": "/tb",
            "tlsSecretName": "tb-tls",
            "annotations": {"a": "b"},
        },
    },
    "serving": {
        **component_base("serving"),
        "image": {"registry": "docker.io", "repository": "tensorflow/serving", "tag": "2.21.0"},
        "metrics": {"enabled": True, "path": "/metrics/tf"},
        # custom args must name the monitoring config while serving.metrics is on
        "args": ["--x", "--monitoring_config_file=/etc/tf-serving/monitoring.config"],
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "host": "serving.example.com",
            "path": "/",
            "tlsSecretName": "serving-tls",
            "annotations": {"a": "b"},
        },
    },
    "supervisor": {
        "image": {"registry": "registry.example.com", "repository": "team/supervisor", "tag": "1.0", "digest": ""},
        "resources": {"requests": {"cpu": "10m"}, "limits": {"cpu": "100m"}},
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        "priorityClassName": "system",
    },
    "serviceAccount": {"name": "trainer", "annotations": {"iam": "role"}},
    "metrics": {
        "enabled": True,
        "scraper": {"namespaceSelector": SELECTOR, "podSelector": SELECTOR},
        "serviceMonitor": monitor_base(),
        # both monitors at once are refused (every target scraped twice): the PodMonitor's slots get
        # their turn through masks()
        "podMonitor": {**monitor_base(), "enabled": False},
        "prometheusRule": {
            "enabled": True, "namespace": "monitoring", "labels": {"release": "kps"}, "annotations": {"note": "r"},
            "interval": "1m", "alertLabels": {"team": "ml-team"},
            **{alert: {"for": "7m", "labels": {"severity": "page"}}
               for alert in ("runStalled", "gpusHeldAfterRunEnded", "checkpointsStopped")},
            "additionalRules": [
                {"alert": "Slow", "expr": "tfd_examples_per_second < 1", "for": "9m", "keep_firing_for": "2m",
                 "labels": {"route": "ml"}, "annotations": {"summary": "slow"}},
                {"record": "tfd:step:max", "expr": "max(tfd_training_step)"},
            ],
        },
    },
    "networkPolicy": {
        "clientPodSelector": SELECTOR,
        "clientNamespaceSelector": SELECTOR,
        "ingressControllerSelector": {"namespaceSelector": SELECTOR, "podSelector": SELECTOR},
        "egress": {
            "dns": {"namespaceSelector": SELECTOR, "podSelector": SELECTOR},
            "extraRules": [
                {
                    "to": [
                        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                        {"namespaceSelector": SELECTOR, "podSelector": SELECTOR},
                    ],
                    "ports": [{"port": "metrics", "protocol": "TCP"}],
                }
            ],
        },
    },
}

# The three payloads, each after a valid value so that the payload is the only defect.
DOCUMENT = (
    "\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: injected\n"
    "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n"
    "subjects:\n  - kind: Group\n    name: system:authenticated\n"
)
QUOTE = '{{ .Release.Name }}"\n  injected: x'
NEWLINE = "\n"
PAYLOADS = {"document": DOCUMENT, "quote": QUOTE, "newline": NEWLINE}


FULL: dict[str, Any] = merged(BASE)  # BASE holds no null to remove a default

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Slot:
    """Where a payload goes: the value at `path`, or (key=True) the name of the first key of the map at `path`."""

    path: Path_
    key: bool
    example: str  # the valid value (or key) the payload is appended to

    @property
    def dotted(self) -> str:
        """The key path tfchart names ("(root)" never): list indices as numbers, a bad key appended."""
        return ".".join(str(part) for part in self.path)

    @property
    def id(self) -> str:
        return f"{self.dotted}{'{key}' if self.key else ''}"


def string_schema(schema: dict[str, Any]) -> bool:
    branches = schema.get("oneOf", [schema])
    return any("string" in str(branch.get("type")) for branch in branches)


def slots(schema: dict[str, Any], value: Any, path: Path_ = ()) -> Iterator[Slot]:
    """Every string the schema admits at or under `path`, located in `value` (BASE merged over the defaults)."""
    if string_schema(schema) and isinstance(value, str):
        yield Slot(path, False, value)
    properties = schema.get("properties")
    if isinstance(properties, dict) and isinstance(value, dict):
        for key, child in properties.items():
            if key in value:
                yield from slots(child, value[key], (*path, key))
    extra = schema.get("additionalProperties")
    if isinstance(value, dict) and (isinstance(extra, dict) or extra is True) and not properties:
        first = next(iter(value), None)
        if first is not None:
            yield Slot(path, True, first)
            if isinstance(extra, dict):
                yield from slots(extra, value[first], (*path, first))
            elif isinstance(value[first], str):
                yield Slot((*path, first), False, value[first])
    items = schema.get("items")
    if isinstance(items, dict) and isinstance(value, list):
        for index, item in enumerate(value):
            yield from slots(items, item, (*path, index))


def schema_string_locations(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every place the schema admits a string (map keys as <key>, list items as 0), from the schema alone."""
    if string_schema(schema):
        yield path
    for key, child in schema.get("properties", {}).items():
        yield from schema_string_locations(child, (*path, key))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and "properties" not in schema:
        yield (*path, "<key>")
        yield from schema_string_locations(extra, (*path, "<value>"))
    if isinstance(schema.get("items"), dict):
        yield from schema_string_locations(schema["items"], (*path, "0"))


SLOTS = list(slots(SCHEMA, FULL))


def generic(slot: Slot) -> tuple[str, ...]:
    """The slot as schema_string_locations spells it."""
    parts = [str(part) for part in slot.path]
    node: dict[str, Any] = SCHEMA
    out: list[str] = []
    for part in parts:
        if "properties" in node and part in node["properties"]:
            node = node["properties"][part]
            out.append(part)
        elif isinstance(node.get("items"), dict) and part.isdigit():
            node = node["items"]
            out.append("0")
        else:
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, dict) else {}
            out.append("<value>")
    return (*out, "<key>") if slot.key else tuple(out)


@dataclass(frozen=True)
class Case:
    slot: Slot
    payload: str

    @property
    def id(self) -> str:
        return f"{self.slot.id}:{self.payload}"

    def document(self) -> dict[str, Any]:
        return apply(unmasked(BASE, self.slot), self)


@dataclass(frozen=True)
class Switch:
    """A BASE value set to another one for a slot (a mask that sets rather than leaves out)."""

    path: tuple[str, ...]
    value: Any


Mask = tuple[str, ...] | Switch
#: The PodMonitor renders only with the ServiceMonitor off.
POD_MONITOR_TURN = (Switch(("metrics", "serviceMonitor", "enabled"), False),
                    Switch(("metrics", "podMonitor", "enabled"), True))


def masks(slot: Slot) -> tuple[Mask, ...]:
    """BASE values that keep the slot from being rendered (BASE sets everything at once), to leave out
    or switch."""
    dotted = slot.dotted
    if dotted.startswith("metrics.podMonitor."):
        return POD_MONITOR_TURN
    if dotted.endswith("image.registry"):
        return (("global", "imageRegistry"), ("chief", "image"))  # global.imageRegistry wins over every registry
    if dotted.startswith("image."):
        return (("chief", "image"),)  # the trainer image shows where a component sets none of its own
    if dotted.startswith("training."):
        return (("chief", "command"), ("chief", "args"))  # the trainer's arguments show without an override
    return ()


def without(base: dict[str, Any], paths: Iterable[Mask]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(json.dumps(base))  # unshared: BASE repeats SELECTOR, deepcopy would too
    for mask in paths:
        path = mask.path if isinstance(mask, Switch) else mask
        node = document
        for part in path[:-1]:
            node = node[part]
        if isinstance(mask, Switch):
            node[path[-1]] = mask.value
        else:
            node.pop(path[-1], None)
    return document


def unmasked(base: dict[str, Any], slot: Slot) -> dict[str, Any]:
    return without(base, masks(slot))


def apply(document: dict[str, Any], case: Case) -> dict[str, Any]:
    """Puts the case's payload into a BASE-shaped document (maps merge with the defaults, lists replace them)."""
    slot, text = case.slot, case.slot.example + PAYLOADS[case.payload]
    node: Any = document
    full: Any = FULL
    for depth, part in enumerate(slot.path):
        full = full[part]
        if depth == len(slot.path) - 1 and not slot.key:
            node[part] = text
            return document
        if isinstance(node, dict) and not isinstance(node.get(part), (dict, list)):
            node[part] = {} if isinstance(full, dict) else copy.deepcopy(full)
        node = node[part]
    node[text] = node.pop(slot.example, full[slot.example])
    return document


CASES = [Case(slot, payload) for slot in SLOTS for payload in PAYLOADS]


# -- the tfchart side: the real `tfchart validate`, asked of batches --------------------------------------


@dataclass(frozen=True)
class Verdict:
    valid: bool
    paths: tuple[str, ...]  # the key paths tfchart names
    schema_only: bool  # helm stopped at the schema, which judges every value on its own


def write(document: dict[str, Any], name: str) -> Path:
    """A values file (JSON, which is YAML: quick to write for a thousand cases)."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"{name}.yaml"
    path.write_text(json.dumps(document, indent=1))
    return path


def validated(cases: list[Case], name: str) -> dict[str, Any]:
    """`tfchart validate -o json` of the cases' payloads together."""
    run = tfchart("4", "validate", "-o", "json", "-f", str(write(batch_document(cases), name)))
    report: dict[str, Any] = json.loads(run.stdout)
    assert run.returncode == (0 if report["valid"] else 1), run.stderr
    return report


@cache
def verdicts() -> dict[str, Verdict]:
    """tfchart's verdict on every case, asked of batches of one payload and one kind of slot. helm's schema
    judges each value on its own: the cases of a refused batch that tfchart names are rejected whatever
    the others hold, and the others go on in a smaller batch. The chart's rules judge the values
    together: a batch that passes the schema and breaks a rule is halved until each case is judged alone."""
    groups: dict[tuple[str, bool], list[Case]] = {}
    for case in CASES:
        groups.setdefault((case.payload, case.slot.key), []).append(case)
    pending = [group[i : i + BATCH] for group in groups.values() for i in range(0, len(group), BATCH)]
    found: dict[str, Verdict] = {}
    round_number = 0
    while pending:
        names = [f"verdict-{round_number}-{number}" for number in range(len(pending))]
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
            reports = list(pool.map(validated, pending, names))
        next_round: list[list[Case]] = []
        for batch, report in zip(pending, reports, strict=True):
            schema_only = not report["rulesChecked"]  # the rules' problems then ran on refused values replaced
            paths = tuple(p["path"] for p in report["problems"] if not schema_only or p["kind"] != "rule")
            if report["valid"] or len(batch) == 1:
                found.update((case.id, Verdict(report["valid"], paths, schema_only)) for case in batch)
                continue
            named_cases = [case for case in batch if named(case, paths)]
            if schema_only and named_cases:
                for case in named_cases:
                    found[case.id] = Verdict(False, tuple(path for path in paths if named(case, (path,))), True)
                rest = [case for case in batch if case not in named_cases]
                next_round += [rest] if rest else []
            elif schema_only:  # refused, and none named: each alone says which
                next_round += [[case] for case in batch]
            else:
                next_round += [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
        pending, round_number = next_round, round_number + 1
    return found


def named(case: Case, paths: tuple[str, ...]) -> bool:
    return any(path == case.slot.dotted or path.startswith(f"{case.slot.dotted}.") for path in paths)


# -- running tfchart and helm --------------------------------------------------------------------------


@cache
def tfchart_env() -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(WORK / "cache")}


def tfchart(major: str, *args: str) -> Result:
    """The real CLI, measured (tests/tfchart/hostile.py's measure: wall and CPU time, peak RSS with helm's)."""
    run = measured([sys.executable, "-m", "tfchart", "--helm", str(helm_path(major)), *args], env=tfchart_env(),
                   kill_after=300)  # a hang, not the limit: that is the CPU time below
    # CPU time: the 2 cores these tests share may be busy with other work, which stretches wall time.
    timing = f"{run.cpu_seconds:.2f} s of CPU ({run.seconds:.2f} s wall)"
    assert run.cpu_seconds < TIME_LIMIT_S, f"tfchart {' '.join(args[:2])} took {timing}"
    assert run.max_rss_mb < MEMORY_LIMIT_MB, f"tfchart {' '.join(args[:2])} peaked at {run.max_rss_mb:.0f} MB"
    result = Result(run.returncode, run.stdout.decode(), run.stderr.decode())
    assert "Traceback" not in result.stderr, result.stderr
    return result


RELEASE, NAMESPACE = "mnist", "ml-training"


def helm_template(major: str, path: Path) -> Result:
    return template(major, values=[path], release=RELEASE, namespace=NAMESPACE)


def location(major: str, case: Case) -> str:
    """How each helm names the slot: helm 3 dotted, helm 4 as a JSON pointer (a bad key: the key itself)."""
    if major == "3":
        return case.slot.dotted
    if case.slot.key:  # helm 4 names a bad map key by itself, at ''
        return f"invalid propertyName '{case.slot.example}"
    pointer = "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in case.slot.path)
    return f"at '{pointer}'"


def objects(manifests: str) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10 times faster on 1,000 renders
    return [doc for doc in yaml.load_all(manifests, Loader=loader) if isinstance(doc, dict)]


def identity(doc: dict[str, Any]) -> tuple[str, str]:
    return (str(doc.get("kind")), str((doc.get("metadata") or {}).get("name")))


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for key, child in node.items():
            yield key
            yield from walk(child)
    elif isinstance(node, list):
        for child in node:
            yield from walk(child)


@cache
def base_objects() -> frozenset[tuple[str, str]]:
    """The objects of BASE and of its masked variants (the PodMonitor's turn renders a PodMonitor)."""
    found: set[tuple[str, str]] = set()
    for mask in {(), *(masks(slot) for slot in SLOTS)}:
        result = helm_template("4", write(without(BASE, mask), "base"))
        assert result.returncode == 0, result.stderr
        found |= {identity(doc) for doc in objects(result.stdout)}
    return frozenset(found)


# -- the tests -------------------------------------------------------------------------------------------


def test_slots_cover_every_string_of_the_schema() -> None:
    wanted = set(schema_string_locations(SCHEMA))
    covered = {generic(slot) for slot in SLOTS}
    assert wanted - covered == set()
    assert len(SLOTS) >= 300 and len(CASES) == 3 * len(SLOTS)


def test_base_renders_every_string_and_is_valid() -> None:
    """Each slot's example reaches the manifests of its case's document: injecting there tests the quoting."""
    valid = tfchart("4", "validate", "-f", str(write(BASE, "base")))
    assert valid.returncode == 0, valid.stderr
    rendered: dict[tuple[Mask, ...], set[str]] = {}
    for mask in {masks(slot) for slot in SLOTS}:
        result = helm_template("4", write(without(BASE, mask), "base-unmasked"))
        assert result.returncode == 0, result.stderr
        rendered[mask] = {value for value in walk(objects(result.stdout)) if isinstance(value, str)}
    # Not rendered as written: a parent chart's global, and choices the chart translates.
    silent = {"global.parentKey", "global{key}", *TRANSLATED}
    missing = [
        slot.id
        for slot in SLOTS
        if slot.id not in silent and not any(slot.example in value for value in rendered[masks(slot)])
    ]
    assert missing == []


@pytest.fixture(scope="module")
def split() -> tuple[list[Case], list[Case]]:
    """(accepted, rejected) by tfchart validate, each case checked: a rejection names the slot."""
    accepted, rejected, unnamed = [], [], []
    for case in CASES:
        verdict = verdicts()[case.id]
        if verdict.valid:
            accepted.append(case)
        else:
            rejected.append(case)
            if not named(case, verdict.paths):
                unnamed.append(f"{case.id}: tfchart named {verdict.paths}")
    assert unnamed == []
    return accepted, rejected


def batches(cases: list[Case]) -> list[list[Case]]:
    """Rejected cases put together where each is rejected by the schema alone: one payload, one kind of slot."""
    groups: dict[tuple[str, bool], list[Case]] = {}
    singles: list[list[Case]] = []
    for case in cases:
        if verdicts()[case.id].schema_only:
            groups.setdefault((case.payload, case.slot.key), []).append(case)
        else:
            singles.append([case])
    out = singles
    for group in groups.values():
        out += [group[i : i + BATCH] for i in range(0, len(group), BATCH)]
    return out


def batch_document(cases: list[Case]) -> dict[str, Any]:
    document = without(BASE, {mask for case in cases for mask in masks(case.slot)})
    for case in cases:
        document = apply(document, case)
    return document


def test_every_rejected_case_is_rejected_by_helm_3_and_4(split: tuple[list[Case], list[Case]]) -> None:
    """tfchart validate rejected them, naming the slot (split); helm names it too, in batches."""
    _, rejected = split
    assert len(rejected) > len(CASES) // 2
    groups = batches(rejected)
    paths = [write(batch_document(group), f"rejected-{number}") for number, group in enumerate(groups)]
    jobs = [(major, path) for path in paths for major in HELM_MAJORS]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        helm_results = dict(zip(jobs, pool.map(lambda job: helm_template(*job), jobs), strict=True))
    failures = []
    for group, path in zip(groups, paths, strict=True):
        for major in HELM_MAJORS:
            result = helm_results[(major, path)]
            assert "Traceback" not in result.stderr and "panic" not in result.stderr
            if result.returncode == 0:
                failures.append(f"helm {major} accepted {[case.id for case in group]}")
                continue
            failures += [
                f"helm {major} does not name {case.id}: {result.stderr[-3000:]}"
                for case in group
                if location(major, case) not in result.stderr
            ]
    assert failures == []


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_every_accepted_case_renders_identically_and_injects_nothing(
    payload: str, split: tuple[list[Case], list[Case]]
) -> None:
    """All the payload's accepted cases in one document: the real `tfchart template` CLI, helm 3 and helm 4
    render it alike and inject nothing, and each case's string reaches the manifests. A case whose string
    does not (another case's value hides it: a digest hides the tag, a command override the arguments) is
    rendered on its own with both helms and checked the same way."""
    accepted = [case for case in split[0] if case.payload == payload]
    assert accepted, "every slot rejects this payload: the test would check nothing"
    base_objects()
    path = write(batch_document(accepted), f"accepted-{payload}")
    cli = tfchart("4", "template", RELEASE, "-n", NAMESPACE, "-f", str(path))
    helm = {major: helm_template(major, path) for major in HELM_MAJORS}
    assert cli.returncode == helm["3"].returncode == helm["4"].returncode == 0, cli.stderr + helm["4"].stderr
    assert cli.stdout == helm["3"].stdout == helm["4"].stdout
    docs = objects(cli.stdout)
    failures = injected(f"all {payload} cases", docs)
    strings = [node for node in walk(docs) if isinstance(node, str)]
    hidden = [case for case in accepted if not reaches_as_written(case, strings)]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        failures += [failure for found in pool.map(check_accepted, hidden) for failure in found]
    assert failures == []


def injected(what: str, docs: list[dict[str, Any]]) -> list[str]:
    """What the manifests hold beyond BASE's objects: other objects, or an `injected` key or value."""
    failures = []
    extra = {identity(doc) for doc in docs} - base_objects()
    if extra:
        failures.append(f"{what}: renders objects the base values do not: {extra}")
    if "injected" in [node for node in walk(docs) if isinstance(node, str)]:
        failures.append(f"{what}: a key or value 'injected' reached the manifests")
    return failures


def check_accepted(case: Case) -> list[str]:
    path = write(case.document(), f"accepted-{case.id.replace('/', '_')}")
    results = {major: helm_template(major, path) for major in HELM_MAJORS}
    failures = [
        f"{case.id}: tfchart accepts, helm {major} rejects: {result.stderr[-800:]}"
        for major, result in results.items()
        if result.returncode != 0
    ]
    if failures:
        return failures
    if results["3"].stdout != results["4"].stdout:
        return [f"{case.id}: helm 3 and helm 4 render differently"]
    docs = objects(results["4"].stdout)
    failures = injected(case.id, docs)
    if not reaches_as_written(case, [node for node in walk(docs) if isinstance(node, str)]):
        failures.append(f"{case.id}: the payload does not reach the manifests as one string")
    return failures


def reaches_as_written(case: Case, strings: list[str]) -> bool:
    """The case's string is (part of) one string of the manifests, or the slot is not rendered as written
    (a parent chart's global, or a resource name only)."""
    if case.slot.dotted.startswith("global") or (case.slot.key and case.slot.path[-1] in ("requests", "limits")):
        return True
    text = case.slot.example + PAYLOADS[case.payload]
    return any(text in node for node in strings)


@pytest.mark.parametrize("payload", ["document", "quote"])
def test_without_the_schema_every_string_still_reaches_yaml_as_one_scalar(payload: str, tmp_path: Path) -> None:
    """Defence in depth: with values.schema.json deleted, payloads in every string at once add nothing
    (the quoting alone holds), and each payload is one string value of the manifests."""
    chart = tmp_path / "tf-distributed"
    shutil.copytree(CHART, chart)
    (chart / "values.schema.json").unlink()
    cases = [case for case in CASES if case.payload == payload and not excluded_without_schema(case)]
    # One map cannot have its first key renamed and its first value replaced at once, and
    # global.imageRegistry hides every other registry: three renders with everything in them.
    groups = [
        [case for case in cases if not case.slot.key and case.slot.dotted != "global.imageRegistry"],
        [case for case in cases if case.slot.key],
        [case for case in cases if case.slot.dotted == "global.imageRegistry"],
    ]
    assert sum(map(len, groups)) == len(cases) and all(groups)
    failures: list[str] = []
    unseen: list[Case] = []
    for number, group in enumerate(groups):
        found, missing = render_without_schema(chart, group, f"{payload}-{number}")
        failures += found
        unseen += missing
    # Some payloads hide others (a digest hides the tag, an unknown strategy the ps and worker pods, a
    # command override the trainer's arguments): those are rendered once more, each on its own.
    for case in unseen:
        found, missing = render_without_schema(chart, [case], f"{payload}-alone")
        failures += found + [f"{case.id}: not one string of the manifests" for case in missing]
    assert failures == []


def render_without_schema(chart: Path, cases: list[Case], name: str) -> tuple[list[str], list[Case]]:
    """(failures, cases whose payload is not a string of the manifests) of one helm 4 render."""
    path = write(batch_document(cases), f"no-schema-{name}")
    result = subprocess.run(
        [str(helm_path("4")), "template", RELEASE, str(chart), "-n", NAMESPACE, "-f", str(path)],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "HELM_CACHE_HOME": str(TOOLS / "helm-cache"),
            "HELM_CONFIG_HOME": str(TOOLS / "helm-config"),
        },
    )
    if result.returncode != 0:
        return [f"{[case.id for case in cases][:5]}...: {result.stderr[-2000:]}"], []
    docs = objects(result.stdout)
    failures = []
    # Object names follow fullnameOverride, which may carry a payload here: compare kinds and counts.
    kinds = Counter(str(doc.get("kind")) for doc in docs)
    if not kinds <= Counter(kind for kind, _ in base_objects()):
        failures.append(f"{name}: renders objects the base values do not: {kinds}")
    strings = [node for node in walk(docs) if isinstance(node, str)]
    if "injected" in strings:
        failures.append(f"{name}: a key or value 'injected' reached the manifests")
    return failures, [case for case in cases if not reaches(case, strings)]


def reaches(case: Case, strings: list[str]) -> bool:
    """Whether the case's string is (part of) one string value of the manifests, as written or inside JSON."""
    if case.slot.dotted.startswith("global.") or case.slot.dotted.endswith(".gpu.resourceName"):
        return True  # a parent chart's value; a resources key (rendered, sorted among the others)
    if case.slot.dotted in TRANSLATED:
        return True  # a choice the chart translates, never rendered as written
    text = case.slot.example + PAYLOADS[case.payload]
    if case.slot.dotted in ("nameOverride", "namespaceOverride"):
        text = text[:63]  # names are cut to 63 characters
    forms = (text, json.dumps(text)[1:-1])
    return any(form in node for node in strings for form in forms)


# Choices the chart translates rather than renders: a PodGroup kind and scheduler (or none), a model
# version policy block of TensorFlow Serving's config, a topology mode (an annotation's key, hard or soft),
# the workload's kind (StatefulSets and Jobs, or a JobSet).
TRANSLATED = ("scheduling.gang.provider", "serving.modelVersionPolicy.type", "scheduling.topology.mode",
              "workload.kind", *(f"scheduling.topology.{role}.mode" for role in ("ps", "worker", "chief")))


def excluded_without_schema(case: Case) -> bool:
    """Strings a rule reads rather than renders: a bad one fails the render before any YAML is made."""
    return (
        case.slot.dotted in {"training.learningRate", "training.exportMinAccuracy", "storage.accessModes.0"}
        or (case.payload == "document" and case.slot.dotted == "clusterDomain")  # longer than DNS allows
        or (case.slot.key and case.slot.path[-1] in ("requests", "limits"))  # a resource requested and limited
    )
