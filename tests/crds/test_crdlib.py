"""tests/crds/crdlib.py against the upstream CRDs (from TFD_TEST_CRDS or downloaded): valid objects pass, each
kind of mistake is named by path; where the CRDs come from, and the one line when they cannot be had."""

from __future__ import annotations

import copy
import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
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
    _assert_error(validate(_with("servicemonitor", "kind", "ServiceMonitors")), ".apiVersion", "no known CRD")
    _assert_error(
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}), ".apiVersion", "no known CRD"
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


# ------------------------------------------------------------------ where the CRDs come from

REPO = Path(__file__).resolve().parents[2]
SERVICEMONITOR = "tests/crds/test_crdlib.py::test_minimal_valid_object_passes[servicemonitor]"


def test_the_repository_carries_no_crd_file() -> None:
    """Upstream files are not committed here: the CRDs come from TFD_TEST_CRDS or a download."""
    assert sorted(p.name for p in Path(crdlib.__file__).parent.rglob("*.y*ml")) == []
    outside = {".git", ".venv", ".tools", "node_modules", "build", "dist", "runs"}
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in outside]
        for name in files:
            path = Path(folder, name)
            if path.suffix in (".yaml", ".yml", ".json") and crdlib.SCHEMA_FIELD.encode() in path.read_bytes():
                found.append(str(path.relative_to(REPO)))
    assert found == []


def test_the_crd_folder_holds_every_manifest_file_unchanged() -> None:
    for entry in crdlib.MANIFEST:
        assert hashlib.sha256((crdlib.CRD_DIR / entry.rel).read_bytes()).hexdigest() == entry.sha256, entry.rel
    assert crdlib.crd_dir() == crdlib.CRD_DIR


@pytest.fixture
def mirror() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A local HTTP server laid out as raw.githubusercontent.com (<repo>/<tag>/<path>), serving the CRD files."""
    files = {f"/{entry.repo}/{entry.tag}/{entry.path}": (crdlib.CRD_DIR / entry.rel).read_bytes()
             for entry in crdlib.MANIFEST}  # fmt: skip

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def _refused_base() -> str:
    """An http:// base on a local port nothing listens on: a refused connection, as with no network."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_without_the_variable_each_file_is_downloaded_by_tag_checked_and_cached(
    mirror: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    base, _ = mirror
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), crdlib.BASE_URL_ENV: base}
    folder = crdlib.resolve(env)
    assert folder == tmp_path / "cache" / "tf-distributed" / "crds"
    for entry in crdlib.MANIFEST:
        assert (folder / entry.rel).read_bytes() == (crdlib.CRD_DIR / entry.rel).read_bytes()
    # The cache serves the next run: no download (the base refuses every connection now).
    assert crdlib.resolve({**env, crdlib.BASE_URL_ENV: _refused_base()}) == folder


def test_a_download_with_another_sha256_is_refused_in_one_line(
    mirror: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    base, files = mirror
    jobset = crdlib.MANIFEST[0]
    url_path = f"/{jobset.repo}/{jobset.tag}/{jobset.path}"
    files[url_path] = files[url_path].replace(b"JobSet", b"JobSat", 1)
    with pytest.raises(crdlib.CrdsUnavailable) as caught:
        crdlib.resolve({"XDG_CACHE_HOME": str(tmp_path), crdlib.BASE_URL_ENV: base})
    message = str(caught.value)
    assert "\n" not in message
    assert f"{base}{url_path} has sha256 " in message and f"not the expected {jobset.sha256}: refused" in message
    assert crdlib.ENV in message
    assert not (tmp_path / "tf-distributed" / "crds" / jobset.rel).exists()


def test_a_failed_download_names_the_variable_and_the_url(
    mirror: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    base, files = mirror
    del files[next(iter(files))]
    with pytest.raises(crdlib.CrdsUnavailable, match=r"TFD_TEST_CRDS is not set .* downloading http://127\.0\.0\.1:\d+/"
                       r"kubernetes-sigs/jobset/v0\.12\.0/config/components/crd/bases/jobset\.x-k8s\.io_jobsets\.yaml "
                       r"failed: HTTP Error 404: Not Found$"):  # fmt: skip
        crdlib.resolve({"XDG_CACHE_HOME": str(tmp_path), crdlib.BASE_URL_ENV: base})


def test_a_folder_without_a_file_or_with_a_changed_one_is_named(tmp_path: Path) -> None:
    for entry in crdlib.MANIFEST:
        (tmp_path / entry.rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / entry.rel).write_bytes((crdlib.CRD_DIR / entry.rel).read_bytes())
    assert crdlib.resolve({crdlib.ENV: str(tmp_path)}) == tmp_path
    last = crdlib.MANIFEST[-1]
    (tmp_path / last.rel).write_bytes(b"kind: CustomResourceDefinition\n")
    with pytest.raises(crdlib.CrdsUnavailable, match=f"^TFD_TEST_CRDS={tmp_path}: {last.rel} does not have the sha256"):
        crdlib.resolve({crdlib.ENV: str(tmp_path)})
    (tmp_path / last.rel).unlink()
    with pytest.raises(crdlib.CrdsUnavailable, match=f"^TFD_TEST_CRDS={tmp_path}: {last.rel} is missing"):
        crdlib.resolve({crdlib.ENV: str(tmp_path), crdlib.BASE_URL_ENV: _refused_base()})


def test_with_neither_the_variable_nor_a_network_a_crd_test_fails_in_one_line(tmp_path: Path) -> None:
    """A real pytest run of a test that needs a CRD: failed (not skipped, not errored), one line, no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != crdlib.ENV}
    base = _refused_base()
    env.update({"XDG_CACHE_HOME": str(tmp_path), crdlib.BASE_URL_ENV: base})
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SERVICEMONITOR],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert run.stdout.strip().splitlines()[-1].startswith("1 failed in "), out  # not skipped, not an error
    jobset = crdlib.MANIFEST[0]
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and "[servicemonitor] _" in line)
    body = lines[start + 1 : next(i for i in range(start + 1, len(lines)) if lines[i].startswith("==="))]
    assert len(body) == 1, out  # the failure's whole report: one line, no traceback
    assert body[0].startswith("the tests' CRDs: TFD_TEST_CRDS is not set"), out
    assert body[0].endswith(f"downloading {base}/{jobset.repo}/{jobset.tag}/{jobset.path} failed: "
                            "[Errno 111] Connection refused"), out  # fmt: skip
