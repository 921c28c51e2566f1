"""Probes of the TensorFlow servers (ps and worker StatefulSet pods), per role: a startup probe on the
TensorFlow port holds the liveness probe back while a program prepares before it listens; each probe
can be tuned, turned off, or replaced by a probe of one's own (<role>.custom<Kind>Probe)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_validate.utils import latest_version

from tests.chartlib import named, openapi_problems, pod_spec, render, template

TCP = {"tcpSocket": {"port": "tf-grpc"}}
DEFAULTS = {
    "startupProbe": {**TCP, "initialDelaySeconds": 0, "periodSeconds": 10, "timeoutSeconds": 1,
                     "failureThreshold": 180, "successThreshold": 1},
    "readinessProbe": {**TCP, "initialDelaySeconds": 0, "periodSeconds": 10, "timeoutSeconds": 1,
                       "failureThreshold": 3, "successThreshold": 1},
    "livenessProbe": {**TCP, "initialDelaySeconds": 60, "periodSeconds": 20, "timeoutSeconds": 1,
                      "failureThreshold": 6, "successThreshold": 1},
}  # fmt: skip
KINDS = tuple(DEFAULTS)


def container(docs: list[dict[str, Any]], kind: str, role: str) -> dict[str, Any]:
    spec = pod_spec(named(docs, kind, f"mnist-tf-distributed-{role}"))
    (found,) = [c for c in spec["containers"] if c["name"] == role]
    return found


def probes(docs: list[dict[str, Any]], role: str, kind: str = "StatefulSet") -> dict[str, Any]:
    return {name: probe for name, probe in container(docs, kind, role).items() if name in KINDS}


def test_servers_start_with_thirty_minutes_to_listen_then_keep_todays_liveness(helm_major: str) -> None:
    docs = render(helm_major)
    for role in ("ps", "worker"):
        assert probes(docs, role) == DEFAULTS, role
    startup = DEFAULTS["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 30 * 60


def test_jobs_have_no_probes(helm_major: str) -> None:
    """The chief, the evaluator and the workers' Indexed Job (no chief) end on their own: nothing probes them."""
    docs = render(helm_major, sets=["evaluator.enabled=true"])
    assert probes(docs, "chief", "Job") == {} and probes(docs, "evaluator", "Job") == {}
    chiefless = render(helm_major, sets=["training.strategy=multi_worker_mirrored", "chief.replicas=0"])
    assert probes(chiefless, "worker", "Job") == {}


def test_each_role_tunes_its_own_probes(helm_major: str) -> None:
    docs = render(helm_major, sets=["worker.startupProbe.failureThreshold=360", "worker.livenessProbe.periodSeconds=30",
                                    "ps.readinessProbe.timeoutSeconds=5"])  # fmt: skip
    worker, ps = probes(docs, "worker"), probes(docs, "ps")
    assert worker["startupProbe"] == {**DEFAULTS["startupProbe"], "failureThreshold": 360}
    assert worker["livenessProbe"] == {**DEFAULTS["livenessProbe"], "periodSeconds": 30}
    assert worker["readinessProbe"] == DEFAULTS["readinessProbe"]
    assert ps == {**DEFAULTS, "readinessProbe": {**DEFAULTS["readinessProbe"], "timeoutSeconds": 5}}


def test_a_probe_turned_off_is_not_rendered(helm_major: str) -> None:
    docs = render(helm_major, sets=["worker.startupProbe.enabled=false", "ps.livenessProbe.enabled=false",
                                    "ps.readinessProbe.enabled=false"])  # fmt: skip
    assert probes(docs, "worker") == {kind: DEFAULTS[kind] for kind in ("readinessProbe", "livenessProbe")}
    assert probes(docs, "ps") == {"startupProbe": DEFAULTS["startupProbe"]}


def test_a_probe_of_ones_own_replaces_the_charts(helm_major: str) -> None:
    ready = {"exec": {"command": ["cat", "/tmp/prepared"]}, "periodSeconds": 15, "failureThreshold": 240}
    alive = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 30}
    docs = render(helm_major, extra=["--set-json", f"worker.customStartupProbe={json.dumps(ready)}",
                                     "--set-json", f"worker.customLivenessProbe={json.dumps(alive)}",
                                     "--set", "worker.livenessProbe.enabled=false"])  # fmt: skip
    worker = probes(docs, "worker")
    assert worker == {"startupProbe": ready, "livenessProbe": alive, "readinessProbe": DEFAULTS["readinessProbe"]}
    assert probes(docs, "ps") == DEFAULTS
    assert openapi_problems([doc for doc in docs if doc["kind"] == "StatefulSet"], [latest_version()]) == []


def test_probe_values_kubernetes_refuses_are_refused_first(helm_major: str) -> None:
    for sets, where in (
        (["worker.livenessProbe.successThreshold=2"], "livenessProbe"),
        (["ps.startupProbe.periodSeconds=0"], "periodSeconds"),
        (["worker.customStartupProbe.tcpsocket.port=2222"], "tcpsocket"),
    ):
        refused = template(helm_major, sets=sets)
        assert refused.returncode != 0 and where in refused.stderr, (sets, refused.stderr)
