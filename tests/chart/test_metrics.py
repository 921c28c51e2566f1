"""Prometheus metrics (docs/install.md, "Metrics"): the env and port of every TensorFlow container,
the ServiceMonitor and PodMonitor (checked against the vendored prometheus-operator v0.93.0 CRDs,
tests/crds) and what their selectors and port names reach in the same render, the NetworkPolicy
rule of the scraper, and TensorFlow Serving's monitoring config (parsed as the model server parses
it). Every render is a real helm render."""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from tests.chartlib import (
    CHART,
    HELM_MAJORS,
    by_kind,
    component,
    env_of,
    helm,
    helm_path,
    named,
    pod_spec,
    pod_template,
    render,
    selects,
    template,
    workloads,
)
from tests.crds import crdlib
from tfchart.helm.chart import Chart, read
from tfchart.helm.runner import Helm
from tfchart.values.validate import check
from tfdcontract import METRICS_LINGER_ENV, METRICS_PORT_ENV, METRICS_PORT_NAME

PREFIX = "mnist-tf-distributed"
NAMESPACE = "ml-training"
COMPONENT = "app.kubernetes.io/component"
TF_ROLES = ("chief", "ps", "worker", "evaluator")
ON = ["metrics.enabled=true"]
#: One monitor at a time: both together scrape every target twice, which the chart refuses.
MONITORS = {"ServiceMonitor": "metrics.serviceMonitor.enabled=true", "PodMonitor": "metrics.podMonitor.enabled=true"}
SERVING = ["serving.metrics.enabled=true"]
TOPOLOGIES = {
    "parameter_server": ["evaluator.enabled=true"],
    "multi_worker_mirrored": ["training.strategy=multi_worker_mirrored", "training.batchSize=99", "worker.replicas=2"],
    "workers_only": ["training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=3",
                     "training.batchSize=99", "evaluator.enabled=true"],
    "mirrored": ["training.strategy=mirrored"],
}  # fmt: skip
TOPOLOGY_ROLES = {
    "parameter_server": {"ps", "worker", "chief", "evaluator"},
    "multi_worker_mirrored": {"worker", "chief"},
    "workers_only": {"worker", "evaluator"},
    "mirrored": {"chief"},
}


@cache
def rendered(sets: tuple[str, ...], major: str = "4") -> list[dict[str, Any]]:
    return render(major, sets=list(sets))


def tf_containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """role -> the TensorFlow container of its pods."""
    found = {}
    for doc in workloads(docs):
        role = pod_template(doc)["metadata"]["labels"][COMPONENT]
        if role in TF_ROLES:
            [container] = pod_spec(doc)["containers"]
            found[role] = container
    return found


def ports_of(container: dict[str, Any]) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", [])}


# -- the TensorFlow containers ---------------------------------------------------------------------


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_every_tensorflow_container_gets_the_metrics_port_and_env(topology: str) -> None:
    sets = (*TOPOLOGIES[topology], *ON, "metrics.port=9100", "metrics.lingerSeconds=45")
    docs = rendered(sets)
    containers = tf_containers(docs)
    assert set(containers) == TOPOLOGY_ROLES[topology]
    for role, container in containers.items():
        env = env_of(container)
        assert (env[METRICS_PORT_ENV], env[METRICS_LINGER_ENV]) == ("9100", "45"), role
        assert ports_of(container)[METRICS_PORT_NAME] == 9100, role
        assert [p["protocol"] for p in container["ports"] if p["name"] == METRICS_PORT_NAME] == ["TCP"]
    # only the TensorFlow containers: TensorBoard, Serving, the supervisor and the helm test pod serve none
    for doc in workloads(docs):
        if pod_template(doc)["metadata"]["labels"][COMPONENT] in TF_ROLES:
            continue
        for container in pod_spec(doc)["containers"]:
            assert METRICS_PORT_ENV not in env_of(container) and METRICS_PORT_NAME not in ports_of(container)


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_without_metrics_no_container_has_the_port_or_env(topology: str) -> None:
    docs = rendered(tuple(TOPOLOGIES[topology]))
    for doc in workloads(docs):
        for container in pod_spec(doc)["containers"]:
            assert not {METRICS_PORT_ENV, METRICS_LINGER_ENV} & set(env_of(container))
            assert METRICS_PORT_NAME not in ports_of(container)
    assert not [doc for doc in docs if doc["apiVersion"].startswith("monitoring.coreos.com/")]
    headless = [service for service in by_kind(docs, "Service") if "clusterIP" in service["spec"]]
    assert all(len(service["spec"]["ports"]) == 1 for service in headless)


def test_linger_zero_and_bring_your_own_commands_keep_the_env() -> None:
    docs = rendered((*ON, "metrics.lingerSeconds=0", "chief.command={python,/app/train.py}", "ps.args={--x}"))
    for role, container in tf_containers(docs).items():
        assert env_of(container)[METRICS_LINGER_ENV] == "0", role
        assert env_of(container)[METRICS_PORT_ENV] == "9464", role


def test_the_tensorflow_port_and_probes_are_unchanged() -> None:
    off = tf_containers(rendered(("evaluator.enabled=true",)))
    on = tf_containers(rendered(("evaluator.enabled=true", *ON)))
    for role in off:
        assert {k: v for k, v in ports_of(on[role]).items() if k != METRICS_PORT_NAME} == ports_of(off[role])
        assert on[role].get("readinessProbe") == off[role].get("readinessProbe")


# -- ServiceMonitor and PodMonitor -------------------------------------------------------------------

#: Each case is rendered once with either monitor (MONITORS); the settings of the other one are harmless.
MONITOR_CASES = {
    "defaults": (*ON,),
    "serving": (*ON, *SERVING),
    "serving-only": (*SERVING,),
    "custom": (
        *ON, *SERVING, "evaluator.enabled=true",
        "metrics.serviceMonitor.namespace=monitoring", "metrics.podMonitor.namespace=monitoring",
        "metrics.serviceMonitor.labels.release=kube-prometheus-stack", "metrics.podMonitor.labels.release=kps",
        "metrics.serviceMonitor.annotations.owner=team-a",
        "metrics.serviceMonitor.interval=15s", "metrics.serviceMonitor.scrapeTimeout=10s",
        "metrics.podMonitor.interval=1m30s", "metrics.serviceMonitor.honorLabels=true",
        "metrics.podMonitor.namespaceSelector.any=true",
        "metrics.serviceMonitor.namespaceSelector.matchNames={ml-training}",
        "metrics.serviceMonitor.relabelings[0].sourceLabels={__meta_kubernetes_pod_node_name}",
        "metrics.serviceMonitor.relabelings[0].targetLabel=node",
        "metrics.podMonitor.metricRelabelings[0].sourceLabels={__name__}",
        "metrics.podMonitor.metricRelabelings[0].regex=go_.*",
        "metrics.podMonitor.metricRelabelings[0].action=drop",
        "serving.metrics.path=/metrics/tf-serving",
    ),
    "workers-only": (*ON, *TOPOLOGIES["workers_only"]),
}  # fmt: skip


def monitor(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = by_kind(docs, kind)
    return found



def in_namespaces(namespace_selector: dict[str, Any], namespace: str) -> bool:
    return bool(namespace_selector.get("any")) or namespace in namespace_selector.get("matchNames", [])


def pods(docs: list[dict[str, Any]]) -> list[tuple[dict[str, str], list[dict[str, Any]], str]]:
    """(labels, containers, namespace) of every pod template."""
    return [
        (pod_template(doc)["metadata"]["labels"], pod_spec(doc)["containers"], doc["metadata"]["namespace"])
        for doc in workloads(docs)
    ]


def service_monitor_targets(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    """endpoint port -> components of the pods it reaches: Services the monitor selects that have a port of
    that name, whose selector picks pods with a container port of the Service port's targetPort."""
    sm = monitor(docs, "ServiceMonitor")["spec"]
    found: dict[str, set[str]] = {}
    for endpoint in sm["endpoints"]:
        reached = found.setdefault(endpoint["port"], set())
        for service in by_kind(docs, "Service"):
            if not (selects(sm["selector"], service["metadata"]["labels"])
                    and in_namespaces(sm["namespaceSelector"], service["metadata"]["namespace"])):
                continue
            for port in service["spec"]["ports"]:
                if port["name"] != endpoint["port"]:
                    continue
                for labels, containers, namespace in pods(docs):
                    if namespace == service["metadata"]["namespace"] and selects(
                        {"matchLabels": service["spec"]["selector"]}, labels
                    ) and any(port["targetPort"] in ports_of(container) for container in containers):
                        reached.add(labels[COMPONENT])
    return found


def pod_monitor_targets(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    pm = monitor(docs, "PodMonitor")["spec"]
    return {
        endpoint["port"]: {
            labels[COMPONENT]
            for labels, containers, namespace in pods(docs)
            if selects(pm["selector"], labels) and in_namespaces(pm["namespaceSelector"], namespace)
            and any(endpoint["port"] in ports_of(container) for container in containers)
        }
        for endpoint in pm["podMetricsEndpoints"]
    }  # fmt: skip


@cache
def monitor_renders() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(case, kind) -> the render of MONITOR_CASES[case] with that monitor alone."""
    keys = [(case, kind) for case in MONITOR_CASES for kind in MONITORS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        docs = pool.map(lambda key: rendered((*MONITOR_CASES[key[0]], MONITORS[key[1]])), keys)
        return dict(zip(keys, docs, strict=True))


@pytest.mark.parametrize("case", sorted(MONITOR_CASES))
def test_monitors_validate_against_the_prometheus_operator_crds(case: str) -> None:
    for kind in MONITORS:
        docs = monitor_renders()[case, kind]
        assert crdlib.validate(monitor(docs, kind)) == [], kind
        assert not by_kind(docs, ({*MONITORS} - {kind}).pop())


@pytest.mark.parametrize("case", sorted(MONITOR_CASES))
def test_each_endpoint_reaches_exactly_the_pods_that_serve_it(case: str) -> None:
    docs = monitor_renders()[case, "ServiceMonitor"]
    sets = MONITOR_CASES[case]
    tf = {component(doc) for doc in workloads(docs)} & set(TF_ROLES) if "metrics.enabled=true" in sets else set()
    expected = {}
    if tf:
        expected[METRICS_PORT_NAME] = tf
    if "serving.metrics.enabled=true" in sets:
        expected["http"] = {"serving"}  # never TensorBoard, whose port is "http" too
    assert service_monitor_targets(docs) == expected
    assert pod_monitor_targets(monitor_renders()[case, "PodMonitor"]) == expected
    path = "/metrics/tf-serving" if case == "custom" else "/monitoring/prometheus/metrics"
    wanted = {METRICS_PORT_NAME: "/metrics", "http": path}
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        spec = monitor(monitor_renders()[case, kind], kind)["spec"]
        paths = {endpoint["port"]: endpoint["path"] for endpoint in spec[key]}
        assert paths == {port: wanted[port] for port in expected}, kind


def test_the_monitors_find_the_release_namespace_from_elsewhere() -> None:
    sm = monitor(monitor_renders()["custom", "ServiceMonitor"], "ServiceMonitor")
    pm = monitor(monitor_renders()["custom", "PodMonitor"], "PodMonitor")
    assert (sm["metadata"]["namespace"], pm["metadata"]["namespace"]) == ("monitoring", "monitoring")
    # two releases of one name in two namespaces keep their monitors apart in a shared namespace
    assert sm["metadata"]["name"] == pm["metadata"]["name"] == f"{NAMESPACE}-{PREFIX}"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["metadata"]["labels"][COMPONENT] == "metrics"
    assert sm["metadata"]["annotations"] == {"owner": "team-a"}
    assert {(e["interval"], e["scrapeTimeout"], e["honorLabels"]) for e in sm["spec"]["endpoints"]} == {
        ("15s", "10s", True)}
    assert sm["spec"]["endpoints"][0]["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    assert {e["interval"] for e in pm["spec"]["podMetricsEndpoints"]} == {"1m30s"}
    assert pm["spec"]["podMetricsEndpoints"][0]["metricRelabelings"] == [
        {"action": "drop", "regex": "go_.*", "sourceLabels": ["__name__"]}]
    for kind in MONITORS:
        found = monitor(monitor_renders()["defaults", kind], kind)
        assert (found["metadata"]["name"], found["metadata"]["namespace"]) == (PREFIX, NAMESPACE)
        assert found["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        assert "interval" not in found["spec"][{"ServiceMonitor": "endpoints"}.get(kind, "podMetricsEndpoints")][0]


def test_the_headless_services_carry_the_metrics_port_only_for_the_service_monitor() -> None:
    pod_only = rendered(("evaluator.enabled=true", *ON, "metrics.podMonitor.enabled=true"))
    assert not [s for s in by_kind(pod_only, "Service") if s["metadata"]["name"].endswith("-evaluator")]
    assert all(METRICS_PORT_NAME not in {p["name"] for p in s["spec"]["ports"]} for s in by_kind(pod_only, "Service"))
    docs = rendered(("evaluator.enabled=true", *ON, "metrics.serviceMonitor.enabled=true", "metrics.port=9100"))
    for role in TF_ROLES:
        service = named(docs, "Service", f"{PREFIX}-{role}")
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        assert set(service["spec"]["selector"]) == {"app.kubernetes.io/name", "app.kubernetes.io/instance", COMPONENT}
        metrics = [p for p in service["spec"]["ports"] if p["name"] == METRICS_PORT_NAME]
        assert metrics == [{"name": "metrics", "port": 9100, "targetPort": "metrics", "protocol": "TCP"}], role
    # the evaluator needs no DNS name: its Service serves the scrape only
    assert [p["name"] for p in named(docs, "Service", f"{PREFIX}-evaluator")["spec"]["ports"]] == ["metrics"]


# -- NetworkPolicy -----------------------------------------------------------------------------------

SCRAPER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def policies(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc["spec"] for doc in by_kind(docs, "NetworkPolicy")}


@pytest.mark.parametrize(("serving", "kind"), [(False, "ServiceMonitor"), (True, "PodMonitor")])
def test_the_network_policy_diff_is_exactly_the_scraper_on_the_metrics_ports(serving: bool, kind: str) -> None:
    base = ("evaluator.enabled=true", "tensorboard.ingress.enabled=true")
    off = policies(rendered(base))
    on = policies(rendered((*base, *ON, MONITORS[kind], *(SERVING if serving else ()))))
    assert set(on) == set(off)
    added: dict[str, list[Any]] = {}
    for name, spec in on.items():
        before = off[name]
        assert {k: v for k, v in spec.items() if k != "ingress"} == {k: v for k, v in before.items() if k != "ingress"}
        rules = spec.get("ingress", [])
        assert [rule for rule in rules if rule in before.get("ingress", [])] == before.get("ingress", [])
        new = [rule for rule in rules if rule not in before.get("ingress", [])]
        if new:
            added[name] = new
    expected = {f"{PREFIX}-tensorflow": [{"from": [SCRAPER], "ports": [{"port": "metrics", "protocol": "TCP"}]}]}
    if serving:
        expected[f"{PREFIX}-serving"] = [{"from": [SCRAPER], "ports": [{"port": "http", "protocol": "TCP"}]}]
    assert added == expected


def test_the_scraper_is_configurable_and_null_keeps_it_in_the_release_namespace() -> None:
    docs = rendered((*ON, *SERVING, "metrics.scraper.namespaceSelector=null",
                     "metrics.scraper.podSelector.matchLabels.app=vmagent"))  # fmt: skip
    for name, port in ((f"{PREFIX}-tensorflow", "metrics"), (f"{PREFIX}-serving", "http")):
        [rule] = [r for r in policies(docs)[name]["ingress"] if r["from"][0].get("podSelector", {}).get("matchLabels")
                  == {"app": "vmagent", "app.kubernetes.io/name": "prometheus"}]
        assert rule == {"from": [{"podSelector": {"matchLabels": {"app": "vmagent", "app.kubernetes.io/name":
                        "prometheus"}}}], "ports": [{"port": port, "protocol": "TCP"}]}  # fmt: skip
    docs = rendered((*ON, "networkPolicy.enabled=false"))
    assert not by_kind(docs, "NetworkPolicy")


# -- TensorFlow Serving's monitoring config ------------------------------------------------------------


def monitoring_config_class() -> Any:
    """TensorFlow Serving's MonitoringConfig message. tensorflow-serving-api 2.21's wheel ships no
    monitoring_config_pb2, so it is built here from tensorflow_serving/config/monitoring_config.proto
    (tensorflow/serving): PrometheusConfig {bool enable = 1; string path = 2;} and MonitoringConfig
    {PrometheusConfig prometheus_config = 1;}, package tensorflow.serving, proto3."""
    try:
        from tensorflow_serving.config import monitoring_config_pb2

        return monitoring_config_pb2.MonitoringConfig
    except ImportError:
        pass
    proto = descriptor_pb2.FileDescriptorProto(
        name="tfd_test/monitoring_config.proto", package="tensorflow.serving", syntax="proto3"
    )
    prometheus = proto.message_type.add(name="PrometheusConfig")
    field = descriptor_pb2.FieldDescriptorProto
    prometheus.field.add(name="enable", number=1, type=field.TYPE_BOOL, label=field.LABEL_OPTIONAL)
    prometheus.field.add(name="path", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    monitoring = proto.message_type.add(name="MonitoringConfig")
    monitoring.field.add(name="prometheus_config", number=1, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                         type_name=".tensorflow.serving.PrometheusConfig")  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.MonitoringConfig"))


@pytest.mark.parametrize("path", ["/monitoring/prometheus/metrics", '/metrics/"quoted"\\and-escaped'])
def test_the_monitoring_config_parses_and_serving_reads_it(path: str) -> None:
    docs = render(sets=SERVING, extra=["--set-json", f"serving.metrics.path={json.dumps(path)}"])
    config_map = named(docs, "ConfigMap", f"{PREFIX}-serving")
    config = text_format.Parse(config_map["data"]["monitoring.config"], monitoring_config_class()())
    assert config.prometheus_config.enable is True and config.prometheus_config.path == path
    container = pod_spec(named(docs, "Deployment", f"{PREFIX}-serving"))["containers"][0]
    [flag] = [a for a in container["args"] if a.startswith("--monitoring_config_file=")]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "model-config")
    volume = next(v for v in pod_spec(named(docs, "Deployment", f"{PREFIX}-serving"))["volumes"]
                  if v["name"] == "model-config")  # fmt: skip
    assert flag == f"--monitoring_config_file={mount['mountPath']}/monitoring.config"
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    # the metrics are served on the REST port, the one the monitors and the NetworkPolicy name
    assert ports_of(container)["http"] == 8501 and f"--rest_api_port={8501}" in container["args"]


def test_without_serving_metrics_there_is_no_monitoring_config() -> None:
    docs = rendered(())
    assert "monitoring.config" not in named(docs, "ConfigMap", f"{PREFIX}-serving")["data"]
    container = pod_spec(named(docs, "Deployment", f"{PREFIX}-serving"))["containers"][0]
    assert not [a for a in container["args"] if a.startswith("--monitoring_config_file")]


# -- helm 3 and 4, the ci scenario, refusals -----------------------------------------------------------


@pytest.mark.parametrize(("sets", "message"), [
    (["metrics.serviceMonitor.enabled=true"], "metrics.serviceMonitor.enabled: the ServiceMonitor scrapes"),
    (["metrics.podMonitor.enabled=true"], "--set metrics.podMonitor.enabled=false"),
    (["serving.enabled=false", *SERVING], "serving.metrics.enabled: TensorFlow Serving's metrics need"),
    ([*ON, "metrics.port=2222"], "of ps, worker, chief; the metrics server and the TensorFlow server of one"),
    ([*ON, "metrics.port=2222", "training.strategy=mirrored"], "of chief;"),
])  # fmt: skip
def test_refusals_name_the_value_and_the_fix(sets: list[str], message: str) -> None:
    for major in HELM_MAJORS:
        result = template(major, sets=sets)
        assert result.returncode != 0 and message in result.stderr, result.stderr


def problem_lines(stderr: str) -> list[str]:
    """The `<path>: <message>. Fix: <fix>` lines of the chart's validateValues failure."""
    if "problem(s) in values:" not in stderr:
        return []
    block = stderr.split("problem(s) in values:\n", 1)[1].split("\n\n", 1)[0]
    return [line[4:] for line in block.splitlines() if line.startswith("  - ")]


def tfchart_lines(sets: Sequence[str] = (), values: Sequence[Path] = ()) -> list[str]:
    """tfchart validate's problems (helm 4's refusal, located), as the chart's lines."""
    inputs = read([str(path) for path in values], [("--set", item) for item in sets])
    report = check(Helm(str(helm_path("4"))), Chart(CHART, str(CHART)), inputs, "mnist", NAMESPACE)
    return [f"{p.path}: {p.message}. Fix: {p.fix}" for p in report.problems]


BOTH_MONITORS = (
    "metrics.podMonitor.enabled: metrics.serviceMonitor.enabled is on too, and both monitors scrape the same targets "
    "(the ServiceMonitor through the pods' Services, the PodMonitor the pods directly), so Prometheus would scrape "
    "every target twice: each series twice under two job labels, and sums doubled. "
    "Fix: --set metrics.podMonitor.enabled=false (or --set metrics.serviceMonitor.enabled=false)"
)
NO_MONITORING_FLAG = (
    "serving.args: serving.metrics.enabled=true, but the chart adds "
    "--monitoring_config_file=/etc/tf-serving/monitoring.config only to its own arguments, which serving.args "
    "replaces, and neither serving.args nor serving.command has it, so TensorFlow Serving would not serve "
    "serving.metrics.path and the monitors would scrape a 404. Fix: add "
    "--monitoring_config_file=/etc/tf-serving/monitoring.config to serving.args (--set cannot append to a list: "
    "give the whole list) (or --set serving.metrics.enabled=false)"
)
CUSTOM_ARGS = "serving.args={--port=8500,--rest_api_port=8501,--model_config_file=/etc/tf-serving/models.config}"


@pytest.mark.parametrize(("sets", "expected"), [
    ((*ON, *MONITORS.values()), [BOTH_MONITORS]),
    ((*SERVING, *MONITORS.values()), [BOTH_MONITORS]),
    ((*ON, *SERVING, *MONITORS.values(), CUSTOM_ARGS), [BOTH_MONITORS, NO_MONITORING_FLAG]),
    ((*SERVING, CUSTOM_ARGS), [NO_MONITORING_FLAG]),
    ((*SERVING, CUSTOM_ARGS, "serving.command={tensorflow_model_server}"), [NO_MONITORING_FLAG]),
])  # fmt: skip
def test_double_scrapes_and_a_lost_monitoring_flag_are_refused(sets: tuple[str, ...], expected: list[str]) -> None:
    """helm (3 and 4) and tfchart validate refuse them with the same lines."""
    assert tfchart_lines(sets) == expected
    for major in HELM_MAJORS:
        result = template(major, sets=list(sets))
        assert result.returncode != 0 and problem_lines(result.stderr) == expected, result.stderr


def test_with_nothing_to_scrape_two_monitors_are_told_only_that() -> None:
    """monitors_have_targets names both monitors; the double scrape would follow once one of them goes."""
    lines = tfchart_lines(tuple(MONITORS.values()))
    assert [line.split(":", 1)[0] for line in lines] == ["metrics.serviceMonitor.enabled", "metrics.podMonitor.enabled"]
    assert "scrape nothing" in lines[1] and BOTH_MONITORS not in lines


SHELL_LINE = "exec tensorflow_model_server --port=8500 --monitoring_config_file=/etc/tf-serving/monitoring.config"


@pytest.mark.parametrize("overrides", [
    {"args": ["--port=8500", "--rest_api_port=8501", "--monitoring_config_file=/etc/tf-serving/monitoring.config"]},
    {"command": ["/bin/sh", "-c"], "args": [SHELL_LINE]},  # the flag inside a shell line counts
    {"command": ["/bin/sh", "-c", SHELL_LINE], "args": ["sh"]},
    {"command": ["/usr/bin/tensorflow_model_server"]},  # serving.command alone keeps the chart's arguments
])  # fmt: skip
def test_custom_serving_arguments_with_the_monitoring_flag_pass(overrides: dict[str, Any], tmp_path: Path) -> None:
    values = tmp_path / "serving.yaml"
    values.write_text(json.dumps({"serving": {**overrides, "metrics": {"enabled": True}}}))
    assert tfchart_lines(values=[values]) == []
    docs = render(values=[values])
    [container] = pod_spec(named(docs, "Deployment", f"{PREFIX}-serving"))["containers"]
    assert any("--monitoring_config_file=/etc/tf-serving/monitoring.config" in arg
               for arg in [*container["command"], *container["args"]])  # fmt: skip


def test_custom_serving_arguments_without_metrics_pass() -> None:
    assert tfchart_lines((CUSTOM_ARGS,)) == []
    assert template(sets=[CUSTOM_ARGS]).returncode == 0


def test_the_metrics_port_clash_concerns_only_roles_that_run() -> None:
    render(sets=[*ON, "metrics.port=2222", "training.strategy=mirrored", "chief.service.port=2223"])


@pytest.mark.parametrize(("sets", "job"), [
    ([], "mnist-tf-distributed-chief"),
    (["training.strategy=multi_worker_mirrored", "chief.replicas=0"], "mnist-tf-distributed-worker"),
])  # fmt: skip
def test_the_notes_say_how_to_read_the_metrics(sets: list[str], job: str) -> None:
    args = ["install", "mnist", str(CHART), "--dry-run=client", "-n", "team-a", "--set", "metrics.enabled=true"]
    result = helm("4", *args, *[arg for s in sets for arg in ("--set", s)])
    assert result.returncode == 0, result.stderr
    assert f"kubectl -n team-a port-forward job/{job} 9464:9464\n" in result.stdout
    assert "curl -s http://127.0.0.1:9464/metrics | grep ^tfd_" in result.stdout
    quiet = helm("4", "install", "mnist", str(CHART), "--dry-run=client", "-n", "team-a")
    assert quiet.returncode == 0 and "/metrics" not in quiet.stdout.split("NOTES:")[1]
