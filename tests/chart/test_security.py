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
    named,
    pod_spec,
    pod_template,
    render,
    selects,
    tool,
    values_files,
    workloads,
)

PREFIX = "mnist-tf-distributed"
CHECKOV_CONFIG = REPO / ".checkov.yaml"
TEAM_NAMESPACE = REPO / "tests" / "fixtures" / "team-namespace.yaml"
FILES = values_files()


def checkov() -> Path:
    return tool("checkov", TOOLS / "checkov" / "bin" / "checkov")


def run_checkov(*args: str) -> list[dict[str, Any]]:
    helm_dir = str(helm_path("4").parent)
    proc = subprocess.run(
        [str(checkov()), "--config-file", str(CHECKOV_CONFIG), "--output", "json", "--quiet", "--compact",
         "--skip-download", *args],  # no guideline download: no network here, nor a timeout waiting for one
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


# checkov's helm framework renders the chart with helm and runs its Kubernetes checks on the manifests (the same
# checks as --framework kubernetes on `helm template`'s output, which is why that run is not made as well)
@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_checkov_helm_framework_passes(values_file: Path) -> None:
    reports = run_checkov(
        "--framework", "helm", "-d", str(CHART), "--var-file", str(values_file), "--var-file", str(TEAM_NAMESPACE)
    )
    helm_reports = [r for r in reports if r.get("check_type") == "helm"]
    assert helm_reports, f"checkov produced no helm report (framework disabled?): {reports}"
    assert helm_reports[0]["summary"]["passed"] > 50
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
    # only the run supervisor talks to the API server: its own ServiceAccount, a projected short-lived token
    projected = {doc["metadata"]["name"]: [v for v in pod_spec(doc).get("volumes", []) if "projected" in v]
                 for doc in workloads(docs)}
    [supervisor] = [name for name, volumes in projected.items() if volumes]
    assert supervisor.endswith("-supervisor")
    assert projected[supervisor][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 3607



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
        covering = [
            p for p in policies if "Ingress" in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], labels)
        ]
        assert covering, f"{doc['metadata']['name']} is not covered by a NetworkPolicy"
        for policy in covering:
            for rule in policy["spec"]["ingress"]:
                if rule.get("ports") == [{"port": "metrics", "protocol": "TCP"}]:
                    continue  # metrics.enabled: the scraper reaches the metrics port only (test_metrics.py)
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


# -- egress: TensorFlow pods run any graph they receive, so they reach only what they need -----------


def egress_rules(docs: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]] | None:
    """The union of the egress rules of every policy that restricts the egress of a pod (None: unrestricted)."""
    policies = [
        p
        for p in by_kind(docs, "NetworkPolicy")
        if "Egress" in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], labels)
    ]
    if not policies:
        return None
    return [rule for policy in policies for rule in policy["spec"].get("egress", [])]


def tf_pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        pod_template(doc)["metadata"]["labels"]["app.kubernetes.io/component"]: pod_template(doc)["metadata"]["labels"]
        for doc in workloads(docs)
        if pod_template(doc)["metadata"]["labels"]["app.kubernetes.io/component"]
        in ("chief", "ps", "worker", "evaluator")
    }


DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
EVERYWHERE = [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]


@pytest.mark.parametrize("values_file", FILES, ids=file_id)
def test_tensorflow_pods_reach_only_dns_their_release_and_what_the_chief_needs(values_file: Path) -> None:
    docs = render(values=[values_file], sets=["evaluator.enabled=true"])
    other_release = {"app.kubernetes.io/name": "tf-distributed", "app.kubernetes.io/instance": "other"}
    pods = tf_pods(docs)
    chief = "chief" if "chief" in pods else "worker"  # worker 0 is the chief with chief.replicas=0
    assert chief in pods and "evaluator" in pods
    for component, labels in pods.items():
        rules = egress_rules(docs, labels)
        assert rules is not None, f"{component} egress is not restricted"
        for rule in rules:
            peers = rule.get("to")
            assert peers, f"{component}: an egress rule without `to` admits every destination"
            for peer in peers:
                if "podSelector" in peer and "namespaceSelector" not in peer:
                    # The release's own TensorFlow pods (all ports: NCCL), never another release's.
                    assert selects(peer["podSelector"], labels)
                    assert not selects(peer["podSelector"], {**labels, **other_release})
                elif peer == DNS_PEER:
                    assert rule["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
                else:
                    # Addresses outside the cluster's pods: the chief's API server and download, only.
                    assert component == chief, f"{component} reaches {peer}"
                    assert "ipBlock" in peer and {p["port"] for p in rule["ports"]} <= {443, 6443}
    for doc in workloads(docs):
        labels = pod_template(doc)["metadata"]["labels"]
        if labels["app.kubernetes.io/component"] in ("tensorboard", "serving", "test"):
            assert egress_rules(docs, labels) is None  # they do not run received graphs


def test_only_the_supervisor_reaches_the_api_server_and_only_the_chief_the_download() -> None:
    docs = render()
    # under a JobSet the same supervisor pod (but for what its environment names) under the same policy
    jobset = render(sets=["workload.kind=jobset"])
    for kind in ("NetworkPolicy", "ServiceAccount"):
        assert named(jobset, kind, f"{PREFIX}-supervisor") == named(docs, kind, f"{PREFIX}-supervisor")
    pods = [pod_spec(named(each, "Deployment", f"{PREFIX}-supervisor")) for each in (jobset, docs)]
    for pod in pods:
        pod["containers"][0].pop("env")
    assert pods[0] == pods[1]
    chief = tf_pods(docs)["chief"]
    addressed = [rule for rule in egress_rules(docs, chief) or [] if "ipBlock" in rule["to"][0]]
    assert addressed == [{"ports": [{"port": 443, "protocol": "TCP"}], "to": EVERYWHERE}]
    supervisor = named(docs, "NetworkPolicy", f"{PREFIX}-supervisor")["spec"]
    assert supervisor["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in supervisor
    assert supervisor["egress"][1] == {
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}], "to": EVERYWHERE
    }
    assert [p["port"] for p in supervisor["egress"][0]["ports"]] == [53, 53] and len(supervisor["egress"]) == 2
    docs = render(sets=["training.download=false"])
    assert all("ipBlock" not in rule["to"][0] for rule in egress_rules(docs, tf_pods(docs)["chief"]) or [])
    assert not [p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-chief-egress")]
    docs = render(
        sets=[
            "networkPolicy.egress.apiServer.cidrs={10.0.0.1/32}",
            "networkPolicy.egress.apiServer.ports={6443}",
            "networkPolicy.egress.download.cidrs={142.250.0.0/15}",
        ]
    )
    addressed = [rule for rule in egress_rules(docs, tf_pods(docs)["chief"]) or [] if "ipBlock" in rule["to"][0]]
    assert addressed == [{"ports": [{"port": 443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "142.250.0.0/15"}}]}]
    assert named(docs, "NetworkPolicy", f"{PREFIX}-supervisor")["spec"]["egress"][1] == {
        "ports": [{"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    }


def test_extra_egress_rules_open_more_and_egress_can_be_left_open() -> None:
    extra = [{"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 9000, "protocol": "TCP"}]}]
    docs = render(extra=["--set-json", f"networkPolicy.egress.extraRules={json.dumps(extra)}"])
    for component, labels in tf_pods(docs).items():
        assert extra[0] in (egress_rules(docs, labels) or []), component
    docs = render(sets=["networkPolicy.egress.enabled=false"])
    for labels in tf_pods(docs).values():
        assert egress_rules(docs, labels) is None
    assert {p["metadata"]["name"]: p["spec"]["policyTypes"] for p in by_kind(docs, "NetworkPolicy")} == {
        f"{PREFIX}-{part}": ["Ingress"] for part in ("tensorflow", "tensorboard", "serving", "supervisor")}


def admitted(
    docs: list[dict[str, Any]], target: str, peer_labels: dict[str, str], namespace: dict[str, str]
) -> set[Any]:
    """Ports of the `target` component the pod with `peer_labels` in a namespace with `namespace` labels may reach."""
    ports: set[Any] = set()
    for policy in by_kind(docs, "NetworkPolicy"):
        if policy["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component") != target:
            continue
        for rule in policy["spec"]["ingress"]:
            for peer in rule["from"]:
                in_namespace = (
                    selects(peer["namespaceSelector"], namespace)
                    if "namespaceSelector" in peer
                    else namespace.get("kubernetes.io/metadata.name") == "ml-training"
                )
                if in_namespace and selects(peer.get("podSelector", {}), peer_labels):
                    ports |= {port["port"] for port in rule["ports"]}
    return ports


RELEASE_NAMESPACE = {"kubernetes.io/metadata.name": "ml-training"}


def test_the_helm_test_pod_is_admitted_whatever_the_client_selectors_say() -> None:
    docs = render(sets=["networkPolicy.clientPodSelector.matchLabels.role=frontend"])
    [test_job] = [doc for doc in by_kind(docs, "Job") if doc["metadata"]["name"].endswith("-test")]
    test_labels = pod_template(test_job)["metadata"]["labels"]
    assert admitted(docs, "tensorboard", test_labels, RELEASE_NAMESPACE) == {"http"}
    assert admitted(docs, "serving", test_labels, RELEASE_NAMESPACE) == {"http", "grpc"}
    stranger = {"app": "curl"}
    assert admitted(docs, "tensorboard", stranger, RELEASE_NAMESPACE) == set()
    assert admitted(docs, "tensorboard", {"role": "frontend"}, RELEASE_NAMESPACE) == {"http"}
    # Another release's test pod is not this release's.
    other_test = {**test_labels, "app.kubernetes.io/instance": "other"}
    assert admitted(docs, "serving", other_test, RELEASE_NAMESPACE) == set()
    tensorflow = [p for p in by_kind(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-tensorflow")]
    assert selects(tensorflow[0]["spec"]["ingress"][0]["from"][0]["podSelector"], test_labels)


def test_the_ingress_controller_reaches_the_http_port_while_the_ingress_is_on() -> None:
    controller = {"app.kubernetes.io/name": "ingress-nginx"}
    controller_namespace = {"kubernetes.io/metadata.name": "ingress-nginx"}
    docs = render(sets=["networkPolicy.clientPodSelector.matchLabels.role=frontend"])
    assert admitted(docs, "tensorboard", controller, controller_namespace) == set()
    docs = render(
        sets=[
            "networkPolicy.clientPodSelector.matchLabels.role=frontend",
            "tensorboard.ingress.enabled=true",
            "serving.ingress.enabled=true",
        ]
    )
    assert admitted(docs, "tensorboard", controller, controller_namespace) == {"http"}
    assert admitted(docs, "serving", controller, controller_namespace) == {"http"}  # not gRPC: not routed
    assert admitted(docs, "serving", controller, {"kubernetes.io/metadata.name": "elsewhere"}) == set()
    docs = render(
        sets=["tensorboard.ingress.enabled=true", "networkPolicy.ingressControllerSelector=null"],
    )
    assert admitted(docs, "tensorboard", controller, controller_namespace) == set()
