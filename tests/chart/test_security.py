"""Security: checkov (helm and rendered manifests), Pod Security "restricted", NetworkPolicy, exposure."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import (
    CHART,
    REPO,
    TOOLS,
    all_containers,
    by_kind,
    file_id,
    helm_path,
    pod_spec,
    pod_template,
    render,
    tool,
    values_files,
    workloads,
)

CHECKOV_CONFIG = REPO / ".checkov.yaml"
TEAM_NAMESPACE = REPO / "tests" / "fixtures" / "team-namespace.yaml"
FILES = values_files()


def checkov() -> Path:
    return tool("checkov", TOOLS / "checkov" / "bin" / "checkov")


def run_checkov(*args: str) -> list[dict[str, Any]]:
    helm_dir = str(helm_path("4").parent)
    proc = subprocess.run(
        [str(checkov()), "--config-file", str(CHECKOV_CONFIG), "--output", "json", "--quiet", "--compact", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": f"{helm_dir}:/usr/bin:/bin", "HOME": str(TOOLS), "LOG_LEVEL": "WARNING"},
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert "disabled" not in proc.stderr.lower(), f"checkov disabled a framework (is helm on PATH?):\n{proc.stderr}"
    parsed = json.loads(proc.stdout)
    reports: list[dict[str, Any]] = parsed if isinstance(parsed, list) else [parsed]
    return reports


def failed_checks(reports: list[dict[str, Any]]) -> list[str]:
    return [
        f"{check['check_id']} {check['resource']} ({check['check_name']})"
        for report in reports
        for check in report.get("results", {}).get("failed_checks", [])
    ]


def test_checkov_config_skips_at_most_two_checks_each_with_a_reason() -> None:
    lines = CHECKOV_CONFIG.read_text().splitlines()
    skips = [i for i, line in enumerate(lines) if re.match(r"\s*- CKV", line)]
    assert 1 <= len(skips) <= 2
    for index in skips:
        assert lines[index - 1].strip().startswith("#") and len(lines[index - 1]) > 30, lines[index]


@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_checkov_helm_framework_passes(values_file: Path) -> None:
    reports = run_checkov(
        "--framework", "helm", "-d", str(CHART), "--var-file", str(values_file), "--var-file", str(TEAM_NAMESPACE)
    )
    helm_reports = [r for r in reports if r.get("check_type") == "helm"]
    assert helm_reports, f"checkov produced no helm report (framework disabled?): {reports}"
    assert helm_reports[0]["summary"]["passed"] > 50
    assert failed_checks(reports) == []


@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_checkov_on_rendered_manifests_passes(values_file: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(helm_path("4")), "template", "mnist", str(CHART), "-n", "ml-training", "-f", str(values_file)],
        capture_output=True,
        text=True,
        check=True,
    )
    (tmp_path / "manifests.yaml").write_text(result.stdout)
    reports = run_checkov("--framework", "kubernetes", "-d", str(tmp_path))
    assert reports[0]["check_type"] == "kubernetes"
    assert reports[0]["summary"]["passed"] > 50
    assert failed_checks(reports) == []


RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(doc: dict[str, Any]) -> list[str]:
    """Pod Security Standards, profile "restricted" (plus our runAsUser >= 10000 rule)."""
    spec = pod_spec(doc)
    name = f"{doc['kind']}/{doc['metadata']['name']}"
    problems = []
    pod_sc = spec.get("securityContext", {})
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            problems.append(f"{name}: {key}")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"{name}: volume {volume['name']} uses {kinds}")
    for container in all_containers(spec):
        where = f"{name}/{container['name']}"
        sc = container.get("securityContext", {})

        def effective(key: str, sc: dict[str, Any] = sc) -> Any:
            return sc.get(key, pod_sc.get(key))

        if effective("runAsNonRoot") is not True:
            problems.append(f"{where}: runAsNonRoot")
        if not isinstance(effective("runAsUser"), int) or effective("runAsUser") < 10000:
            problems.append(f"{where}: runAsUser >= 10000")
        if sc.get("privileged"):
            problems.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation")
        capabilities = sc.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{where}: capabilities.drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}: capabilities.add")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: readOnlyRootFilesystem")
        if any("hostPort" in port for port in container.get("ports", [])):
            problems.append(f"{where}: hostPort")
    return problems


@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_every_container_meets_pod_security_restricted(values_file: Path) -> None:
    docs = render(values=[values_file], sets=["evaluator.enabled=true"])
    problems = [problem for doc in workloads(docs) for problem in restricted_violations(doc)]
    assert problems == []
    assert all(pod_spec(doc)["automountServiceAccountToken"] is False for doc in workloads(docs))


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        value = labels.get(expression["key"])
        if expression["operator"] == "In" and value not in expression["values"]:
            return False
        if expression["operator"] == "NotIn" and value in expression["values"]:
            return False
        if expression["operator"] == "Exists" and value is None:
            return False
        if expression["operator"] == "DoesNotExist" and value is not None:
            return False
    return True


@pytest.mark.parametrize("values_file", [f for f in FILES if "single-device" not in f.name], ids=file_id)
def test_tensorflow_ports_admit_only_pods_of_the_same_release(values_file: Path) -> None:
    docs = render(values=[values_file], sets=["evaluator.enabled=true"])
    policies = by_kind(docs, "NetworkPolicy")
    other_release = {
        "app.kubernetes.io/name": "tf-distributed",
        "app.kubernetes.io/instance": "other",
        "app.kubernetes.io/component": "worker",
    }
    for doc in workloads(docs):
        labels = pod_template(doc)["metadata"]["labels"]
        if labels["app.kubernetes.io/component"] not in ("ps", "worker", "chief"):
            continue
        covering = [p for p in policies if selects(p["spec"]["podSelector"], labels)]
        assert covering, f"{doc['metadata']['name']} is not covered by a NetworkPolicy"
        for policy in covering:
            assert policy["spec"]["policyTypes"] == ["Ingress"]
            for rule in policy["spec"]["ingress"]:
                for peer in rule["from"]:
                    assert set(peer) == {"podSelector"}, "no namespace or IP peers may reach TF ports"
                    assert not selects(peer["podSelector"], other_release)
                    assert selects(peer["podSelector"], labels)


def test_default_values_expose_nothing_outside_the_cluster() -> None:
    docs = render()
    assert not by_kind(docs, "Ingress")
    for service in by_kind(docs, "Service"):
        assert service["spec"]["type"] == "ClusterIP", service["metadata"]["name"]
        assert "externalIPs" not in service["spec"]
    for doc in workloads(docs):
        for container in all_containers(pod_spec(doc)):
            assert all("hostPort" not in port for port in container.get("ports", []))
    assert by_kind(docs, "NetworkPolicy"), "NetworkPolicies are on by default"
