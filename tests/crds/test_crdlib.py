"""tests/crds/crdlib.py against the vendored CRDs: valid objects pass, each kind of mistake is named by path."""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

import pytest

from tests.crds import crdlib
from tests.crds.crdlib import validate

META = {"name": "mnist", "namespace": "ml", "labels": {"app.kubernetes.io/name": "tf-distributed"}}


def _obj(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": copy.deepcopy(META), "spec": spec}


VALID: dict[str, dict[str, Any]] = {
    "volcano-podgroup": _obj(
        "scheduling.volcano.sh/v1beta1",
        "PodGroup",
        {
            "minMember": 4,
            "minTaskMember": {"ps": 1, "worker": 2, "chief": 1},
            "minResources": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2},
            "queue": "default",
            "priorityClassName": "training",
        },
    ),
    "coscheduling-podgroup": _obj(
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
        {"minMember": 4, "scheduleTimeoutSeconds": 60, "minResources": {"cpu": 4, "memory": "8Gi"}},
    ),
    "servicemonitor": _obj(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        {
            "selector": {"matchLabels": {"app.kubernetes.io/component": "serving"}},
            "namespaceSelector": {"matchNames": ["ml"]},
            "endpoints": [
                {"port": "http", "path": "/monitoring/prometheus/metrics", "interval": "30s", "scrapeTimeout": "10s"}
            ],
        },
    ),
    "podmonitor": _obj(
        "monitoring.coreos.com/v1",
        "PodMonitor",
        {
            "selector": {"matchLabels": {"app.kubernetes.io/component": "serving"}},
            "podMetricsEndpoints": [{"port": "http", "path": "/monitoring/prometheus/metrics", "interval": "30s"}],
        },
    ),
    "localqueue-v1beta1": _obj("kueue.x-k8s.io/v1beta1", "LocalQueue", {"clusterQueue": "cluster-queue"}),
    "localqueue-v1beta2": _obj("kueue.x-k8s.io/v1beta2", "LocalQueue", {"clusterQueue": "cluster-queue"}),
}
for _version in ("v1beta1", "v1beta2"):
    VALID[f"clusterqueue-{_version}"] = {
        "apiVersion": f"kueue.x-k8s.io/{_version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "cluster-queue"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 9},
                                {"name": "memory", "nominalQuota": "36Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    VALID[f"topology-{_version}"] = {
        "apiVersion": f"kueue.x-k8s.io/{_version}",
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {"levels": [{"nodeLabel": "cloud.provider.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]},
    }
    VALID[f"resourceflavor-{_version}"] = {
        "apiVersion": f"kueue.x-k8s.io/{_version}",
        "kind": "ResourceFlavor",
        "metadata": {"name": "tas-flavor"},
        "spec": {"nodeLabels": {"cloud.provider.com/node-group": "tas"}, "topologyName": "default"},
    }
VALID["hypernode"] = {
    "apiVersion": "topology.volcano.sh/v1alpha1",
    "kind": "HyperNode",
    "metadata": {"name": "s0"},
    "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "node-0"}}}]},
}
VALID["volcano-podgroup-topology"] = _obj(
    "scheduling.volcano.sh/v1beta1",
    "PodGroup",
    {
        "minMember": 4,
        "networkTopology": {"mode": "hard", "highestTierAllowed": 2},
        "subGroupPolicy": [
            {
                "name": "ps-worker",
                "labelSelector": {"matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                                         "values": ["ps", "worker"]}]},
                "matchLabelKeys": ["app.kubernetes.io/instance"],
                "subGroupSize": 3,
                "networkTopology": {"mode": "soft"},
            }
        ],
    },
)


def _with(name: str, path: str, value: Any) -> dict[str, Any]:
    """A deep copy of VALID[name] with the value at a dotted path set (``"<drop>"`` deletes it)."""
    obj = copy.deepcopy(VALID[name])
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = obj
    for part in parents:
        node = node[part]
    if value == "<drop>":
        del node[last]
    else:
        node[last] = value
    return obj


def _assert_error(errors: list[str], path: str, words: str) -> None:
    assert any(e.startswith(f"{path}: ") and words in e for e in errors), errors


# ----------------------------------------------------------------------------- valid


@pytest.mark.parametrize("name", sorted(VALID))
def test_minimal_valid_object_passes(name: str) -> None:
    assert validate(VALID[name]) == []


# ------------------------------------------------------------------------ wrong type


@pytest.mark.parametrize(
    ("name", "path", "value", "where", "words"),
    [
        ("volcano-podgroup", "spec.minMember", "4", ".spec.minMember", "is not of type 'integer'"),
        ("volcano-podgroup", "spec.minTaskMember.ps", "1", ".spec.minTaskMember.ps", "is not of type 'integer'"),
        ("coscheduling-podgroup", "spec.scheduleTimeoutSeconds", "60s", ".spec.scheduleTimeoutSeconds", "integer"),
        ("servicemonitor", "spec.endpoints.0.interval", 30, ".spec.endpoints[0].interval", "is not of type 'string'"),
        ("podmonitor", "spec.podMetricsEndpoints.0.port", 8501, ".spec.podMetricsEndpoints[0].port", "'string'"),
        ("localqueue-v1beta2", "spec.clusterQueue", 5, ".spec.clusterQueue", "is not of type 'string'"),
        (
            "clusterqueue-v1beta2",
            "spec.resourceGroups.0.flavors.0.resources.0.nominalQuota",
            True,
            ".spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "is not of type 'integer', 'string'",
        ),
    ],
)
def test_wrong_type_fails_with_path(name: str, path: str, value: Any, where: str, words: str) -> None:
    _assert_error(validate(_with(name, path, value)), where, words)


# ------------------------------------------------------------------ required missing


@pytest.mark.parametrize(
    ("name", "path", "where"),
    [
        ("servicemonitor", "spec.endpoints", ".spec.endpoints"),
        ("servicemonitor", "spec.selector", ".spec.selector"),
        ("podmonitor", "spec.selector", ".spec.selector"),
        ("podmonitor", "spec", ".spec"),
        ("clusterqueue-v1beta1", "spec.resourceGroups.0.flavors", ".spec.resourceGroups[0].flavors"),
        (
            "clusterqueue-v1beta2",
            "spec.resourceGroups.0.flavors.0.resources.1.nominalQuota",
            ".spec.resourceGroups[0].flavors[0].resources[1].nominalQuota",
        ),
        # The PodGroup and LocalQueue schemas mark nothing required; the API server still needs a name.
        ("volcano-podgroup", "metadata.name", ".metadata.name"),
        ("coscheduling-podgroup", "metadata.name", ".metadata.name"),
        ("localqueue-v1beta1", "metadata.name", ".metadata.name"),
    ],
)
def test_missing_required_field_fails_with_path(name: str, path: str, where: str) -> None:
    _assert_error(validate(_with(name, path, "<drop>")), where, "required field missing")


def test_missing_required_in_nested_list_item() -> None:
    obj = _with("volcano-podgroup", "spec.subGroupPolicy", [{"labelSelector": {"matchExpressions": [{"key": "k"}]}}])
    _assert_error(validate(obj), ".spec.subGroupPolicy[0].labelSelector.matchExpressions[0].operator", "required")


# ---------------------------------------------------------------------- unknown field


@pytest.mark.parametrize(
    ("name", "path", "where"),
    [
        ("volcano-podgroup", "spec.minMembers", ".spec.minMembers"),
        ("volcano-podgroup", "spec.schedulerName", ".spec.schedulerName"),
        ("coscheduling-podgroup", "spec.scheduleTimeout", ".spec.scheduleTimeout"),
        ("servicemonitor", "spec.endpoints.0.portName", ".spec.endpoints[0].portName"),
        ("podmonitor", "spec.endpoints", ".spec.endpoints"),
        ("localqueue-v1beta2", "spec.queue", ".spec.queue"),
        # v1beta2 renamed ClusterQueue.spec.cohort to cohortName: the old name is pruned there.
        ("clusterqueue-v1beta2", "spec.cohort", ".spec.cohort"),
        ("clusterqueue-v1beta1", "spec.resourceGroups.0.flavors.0.quota", ".spec.resourceGroups[0].flavors[0].quota"),
        ("volcano-podgroup", "specs", ".specs"),
        ("servicemonitor", "metadata.label", ".metadata.label"),
    ],
)
def test_unknown_field_fails_with_path(name: str, path: str, where: str) -> None:
    _assert_error(validate(_with(name, path, "x")), where, "unknown field")


def test_object_without_properties_prunes_everything() -> None:
    # ClusterQueue.spec.namespaceSelector has properties; LabelSelector.matchLabels is a string map: both fine.
    ok = _with("clusterqueue-v1beta2", "spec.namespaceSelector", {"matchLabels": {"team": "ml"}})
    assert validate(ok) == []
    bad = _with("clusterqueue-v1beta2", "spec.namespaceSelector", {"matchLabels": {"team": 1}})
    _assert_error(validate(bad), ".spec.namespaceSelector.matchLabels.team", "is not of type 'string'")


# ------------------------------------------------------------- Kubernetes extensions


def test_int_or_string_accepts_both_and_checks_the_quantity_pattern() -> None:
    assert validate(_with("coscheduling-podgroup", "spec.minResources.cpu", "500m")) == []
    assert validate(_with("coscheduling-podgroup", "spec.minResources.cpu", 2)) == []
    _assert_error(
        validate(_with("coscheduling-podgroup", "spec.minResources.cpu", "lots")), ".spec.minResources.cpu", "match"
    )


def test_value_constraints() -> None:
    _assert_error(validate(_with("coscheduling-podgroup", "spec.minMember", 0)), ".spec.minMember", "minimum")
    _assert_error(validate(_with("volcano-podgroup", "spec.queue", "Not_A_Name")), ".spec.queue", "match")
    interval = _with("servicemonitor", "spec.endpoints.0.interval", "30 s")
    _assert_error(validate(interval), ".spec.endpoints[0].interval", "does not match")
    _assert_error(validate(_with("localqueue-v1beta2", "spec.stopPolicy", "Pause")), ".spec.stopPolicy", "is not one")


def test_int32_overflow() -> None:
    _assert_error(validate(_with("volcano-podgroup", "spec.minMember", 2**31)), ".spec.minMember", "int32")


def test_null_is_an_error() -> None:
    _assert_error(validate(_with("volcano-podgroup", "spec.queue", None)), ".spec.queue", "None is not of type")


def test_list_type_map_rejects_duplicate_keys() -> None:
    obj = copy.deepcopy(VALID["clusterqueue-v1beta2"])
    flavor = obj["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["resources"].append({"name": "cpu", "nominalQuota": 1})
    _assert_error(validate(obj), ".spec.resourceGroups[0].flavors[0].resources[2]", "duplicate entry with name='cpu'")


def test_label_values_must_be_strings() -> None:
    obj = _with("podmonitor", "metadata.labels", {"release": "prometheus", "replicas": 2})
    _assert_error(validate(obj), ".metadata.labels.replicas", "is not of type 'string'")


def test_status_in_a_manifest_is_reported_where_the_status_subresource_drops_it() -> None:
    obj = copy.deepcopy(VALID["coscheduling-podgroup"])
    obj["status"] = {"phase": "Running"}
    _assert_error(validate(obj), ".status", "ignores it")
    # Volcano's PodGroup CRD has no status subresource (`subresources: {}`): status is stored as sent.
    volcano = copy.deepcopy(VALID["volcano-podgroup"])
    volcano["status"] = {"phase": "Pending"}
    assert validate(volcano) == []


# ------------------------------------------------------------------- lookup failures


def test_api_version_and_kind_must_match_a_served_crd() -> None:
    _assert_error(
        validate(_with("volcano-podgroup", "apiVersion", "scheduling.volcano.sh/v1alpha1")), ".apiVersion", ""
    )
    _assert_error(validate(_with("servicemonitor", "kind", "ServiceMonitors")), ".apiVersion", "no vendored CRD")
    _assert_error(
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}), ".apiVersion", "no vendored"
    )
    _assert_error(validate({"apiVersion": "monitoring.coreos.com/v1"}), ".kind", "required field missing")


def test_same_kind_in_two_groups_is_told_apart() -> None:
    volcano = crdlib.crd_for("scheduling.volcano.sh/v1beta1", "PodGroup")[0]
    cosched = crdlib.crd_for("scheduling.x-k8s.io/v1alpha1", "PodGroup")[0]
    assert volcano.parent.parent.name == "volcano"
    assert cosched.parent.parent.name == "scheduler-plugins"
    # A Volcano-only field is unknown to the coscheduling PodGroup.
    obj = _with("coscheduling-podgroup", "spec.queue", "default")
    _assert_error(validate(obj), ".spec.queue", "unknown field")


def test_schema_for_returns_a_copy() -> None:
    schema = crdlib.schema_for("kueue.x-k8s.io/v1beta2", "LocalQueue")
    schema["properties"].clear()
    assert validate(VALID["localqueue-v1beta2"]) == []


# ------------------------------------------------------------ vendored files intact


def test_vendored_files_match_the_readme_checksums() -> None:
    """Every vendored YAML is listed in README.md with its sha256, and is unchanged."""
    readme = (crdlib.CRD_DIR / "README.md").read_text(encoding="utf-8")
    listed = dict(re.findall(r"`([\w./-]+\.yaml)`[^\n]*?`([0-9a-f]{64})`", readme))
    on_disk = {str(p.relative_to(crdlib.CRD_DIR)): p for p in crdlib.CRD_DIR.rglob("*.yaml")}
    assert sorted(listed) == sorted(on_disk)
    for rel, path in on_disk.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == listed[rel], rel
