"""The PrometheusRule (metrics.prometheusRule, docs/install.md "Alerts"): rendered by helm 3 and 4 in a
namespace that is not default, checked against the vendored prometheus-operator v0.93.0 CRD and by
`promtool check rules`, and each alert run by `promtool test rules` on series shaped as the chart's
ServiceMonitor (the trainer's tfd_ metrics) and kube-state-metrics give them: firing, and not firing
for a run that progresses, a run that ended (and freed its GPUs), a run too young to judge, and
another release's or another namespace's series. promtool is Debian's (package `prometheus`,
scripts/install_prometheus.sh): missing, these tests fail, they never skip."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.test_metrics import problem_lines, tfchart_lines
from tests.chartlib import HELM_MAJORS, by_kind, render, template
from tests.crds import crdlib
from tfdcontract import INTERRUPTED, RUNNING, STATES, SUCCEEDED

PROMTOOL = Path("/usr/bin/promtool")
RELEASE, NAMESPACE = "mnist", "ml-training"
FULL = f"{RELEASE}-tf-distributed"
ON = ("metrics.enabled=true", "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
      "evaluator.enabled=true", "worker.gpu.count=1", "evaluator.gpu.count=1")  # fmt: skip
CUSTOM = (
    *ON, "metrics.prometheusRule.namespace=monitoring", "metrics.prometheusRule.labels.release=kube-prometheus-stack",
    "metrics.prometheusRule.annotations.owner=team-a", "metrics.prometheusRule.interval=30s",
    "metrics.prometheusRule.alertLabels.team=ml-platform", "metrics.prometheusRule.runStalled.labels.severity=critical",
    "metrics.prometheusRule.runStalled.windowSeconds=600", "metrics.prometheusRule.runStalled.for=1m",
    "metrics.prometheusRule.checkpointsStopped.maxAgeSeconds=5400", "metrics.prometheusRule.gpusHeldAfterRunEnded.for=",
    "metrics.prometheusRule.additionalRules[0].alert=TrainingSlow",
    "metrics.prometheusRule.additionalRules[0].expr=tfd_examples_per_second < 10",
    "training.cleanup.onSuccess=keep", "worker.gpu.resourceName=amd.com/gpu", "evaluator.gpu.resourceName=amd.com/gpu",
)  # fmt: skip
ALERTS = ("TFDistributedRunStalled", "TFDistributedGPUsHeldAfterRunEnded", "TFDistributedCheckpointsStopped")


@cache
def rendered(sets: tuple[str, ...], major: str = "4") -> dict[str, Any]:
    [rule] = by_kind(render(major, sets=list(sets), release=RELEASE, namespace=NAMESPACE), "PrometheusRule")
    return rule


def rules_of(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [group] = rule["spec"]["groups"]
    return {r.get("alert") or r["record"]: r for r in group["rules"]}


@pytest.fixture(scope="module")
def promtool() -> Path:
    if not PROMTOOL.is_file():
        pytest.fail(f"{PROMTOOL} is missing: the alert tests must run; install it with "
                    f"scripts/install_prometheus.sh (part of `make setup`; Debian's package prometheus)")  # fmt: skip
    return PROMTOOL


def write_rules(rule: dict[str, Any], directory: Path) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def run(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


# -- the object ------------------------------------------------------------------------------------


def test_off_by_default_and_nothing_else_changes() -> None:
    off = render(sets=[s for s in ON if not s.startswith("metrics.prometheusRule.")])
    assert not by_kind(off, "PrometheusRule")
    assert [d for d in render(sets=list(ON)) if d["kind"] != "PrometheusRule"] == off


@pytest.mark.parametrize("sets", [ON, CUSTOM], ids=["defaults", "custom"])
def test_the_rule_validates_and_promtool_checks_it(sets: tuple[str, ...], promtool: Path, tmp_path: Path) -> None:
    rule = rendered(sets)
    assert crdlib.validate(rule) == []
    result = run(promtool, "check", "rules", str(write_rules(rule, tmp_path)), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_defaults_metadata_and_labels() -> None:
    rule = rendered(ON)
    assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == (FULL, NAMESPACE)
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    [group] = rule["spec"]["groups"]
    assert group["name"] == f"tf-distributed.{NAMESPACE}.{RELEASE}" and "interval" not in group
    rules = rules_of(rule)
    assert tuple(rules) == ALERTS
    for name, alert in rules.items():
        assert alert["labels"] == {"app_kubernetes_io_instance": RELEASE, "severity": "warning"}, name
        assert f"tfchart status {RELEASE} -n {NAMESPACE}" in alert["annotations"]["description"], name
        assert set(alert["annotations"]) == {"summary", "description"}, name
    assert [rules[a]["for"] for a in ALERTS] == ["5m", "15m", "5m"]
    assert "[30m]" in rules["TFDistributedRunStalled"]["expr"] and "> 7200" in rules[ALERTS[2]]["expr"]


def test_custom_values_reach_the_rule() -> None:
    rule = rendered(CUSTOM)
    # in a shared namespace the release namespace keeps two releases of one name apart
    assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == (f"{NAMESPACE}-{FULL}", "monitoring")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["annotations"] == {"owner": "team-a"}
    assert rule["spec"]["groups"][0]["interval"] == "30s"
    rules = rules_of(rule)
    assert rules["TrainingSlow"] == {"alert": "TrainingSlow", "expr": "tfd_examples_per_second < 10"}
    stalled, gpus, checkpoints = (rules[a] for a in ALERTS)
    assert stalled["labels"] == {"app_kubernetes_io_instance": RELEASE, "severity": "critical", "team": "ml-platform"}
    assert stalled["for"] == "1m" and "[10m]" in stalled["expr"] and "offset 10m" in stalled["expr"]
    assert "> 5400" in checkpoints["expr"] and "1h30m" in checkpoints["annotations"]["description"]
    # onSuccess=keep: a success frees only the evaluator; a failure the StatefulSets too
    complete, failed = gpus["expr"].split("\nor\n")
    assert f'owner_name=~"{FULL}-evaluator"' in complete and "kube_job_complete" in complete
    assert f'owner_name=~"{FULL}-ps|{FULL}-worker|{FULL}-evaluator"' in failed and "kube_job_failed" in failed
    assert 'resource=~"nvidia_com_gpu|amd_com_gpu"' in complete and "for" not in gpus


def test_without_chief_the_run_is_the_workers_job_and_without_anything_to_free_no_gpu_alert() -> None:
    workers = ("training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=3",
               "training.batchSize=99")  # fmt: skip
    gpus = rules_of(rendered((*ON, *workers)))["TFDistributedGPUsHeldAfterRunEnded"]["expr"]
    assert f'job_name="{FULL}-worker"' in gpus and f'owner_name=~"{FULL}-evaluator"' in gpus  # the workers end with it
    alone = rules_of(rendered((*ON, *workers, "evaluator.enabled=false")))
    assert tuple(alone) == (ALERTS[0], ALERTS[2])


def test_under_a_jobset_the_other_roles_jobs_are_watched() -> None:
    """workload.kind=jobset: the other roles run in the Jobs <fullname>-<role>-0, which JobSet ends with the run
    (no cleanup policy can keep them); the run Job's name is runJobName's."""
    docs = render(sets=[*ON, "workload.kind=jobset"])
    gpus = rules_of(by_kind(docs, "PrometheusRule")[0])["TFDistributedGPUsHeldAfterRunEnded"]["expr"]
    complete, failed = gpus.split("\nor\n")
    owners = f'owner_name=~"{FULL}-ps-0|{FULL}-worker-0|{FULL}-evaluator-0"'
    assert owners in complete and owners in failed and f"{FULL}-chief-0|" not in gpus


def needs_monitor(alert: str, enabled: bool = False, service: bool = False) -> str:
    return (f"metrics.prometheusRule.{alert}.enabled: the alert reads the trainer's tfd_ metrics as the chart's "
            f"ServiceMonitor or PodMonitor scrapes them (labelled with the release), but metrics.enabled="
            f"{str(enabled).lower()}, metrics.serviceMonitor.enabled={str(service).lower()}, "
            f"metrics.podMonitor.enabled=false. Fix: --set metrics.enabled=true "
            f"--set metrics.serviceMonitor.enabled=true (or --set metrics.prometheusRule.{alert}.enabled=false)"
            )  # fmt: skip


RULE_ON = "metrics.prometheusRule.enabled=true"
ALL_OFF = tuple(f"metrics.prometheusRule.{a}.enabled=false" for a in ("runStalled", "gpusHeldAfterRunEnded",
                                                                      "checkpointsStopped"))  # fmt: skip
EMPTY = ("metrics.prometheusRule.enabled: every alert is off and metrics.prometheusRule.additionalRules is empty, so "
         "the PrometheusRule would hold no rule. Fix: --set metrics.prometheusRule.gpusHeldAfterRunEnded.enabled=true "
         "(or --set metrics.prometheusRule.enabled=false)")  # fmt: skip


@pytest.mark.parametrize(("sets", "expected"), [
    ((RULE_ON,), [needs_monitor("runStalled"), needs_monitor("checkpointsStopped")]),
    ((RULE_ON, "metrics.enabled=true"), [needs_monitor("runStalled", True), needs_monitor("checkpointsStopped", True)]),
    ((RULE_ON, *ALL_OFF), [EMPTY]),
    ((RULE_ON, *ALL_OFF[::2]), []),  # the GPU alert alone reads kube-state-metrics only
    ((RULE_ON, *ALL_OFF, "metrics.prometheusRule.additionalRules[0].record=x",
      "metrics.prometheusRule.additionalRules[0].expr=1"), []),
])  # fmt: skip
def test_alerts_that_could_never_fire_are_refused(sets: tuple[str, ...], expected: list[str]) -> None:
    """helm (3 and 4) and tfchart validate refuse them with the same lines."""
    assert tfchart_lines(sets) == expected
    for major in HELM_MAJORS:
        result = template(major, sets=list(sets))
        assert problem_lines(result.stderr) == expected and (result.returncode == 0) == (not expected), result.stderr


# -- the alerts, run by promtool -------------------------------------------------------------------


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    return {"series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def chief(name: str, values: str, release: str = RELEASE, namespace: str = NAMESPACE, pod: str = "",
          **extra: str) -> dict[str, str]:  # fmt: skip
    """A tfd_ series of a chief as the chart's ServiceMonitor scrapes it (target labels + the trainer's)."""
    full = f"{release}-tf-distributed"
    return series(name, values, namespace=namespace, app_kubernetes_io_instance=release,
                  app_kubernetes_io_component="chief", pod=pod or f"{full}-chief-x7k2p", job=f"{full}-chief",
                  service=f"{full}-chief", endpoint="metrics", container="tensorflow", instance="10.1.2.3:9464",
                  role="chief", index="0", **extra)  # fmt: skip


def state(values_by_state: dict[str, str], **kw: str) -> list[dict[str, str]]:
    """tfd_training_state: one series per state (the chief sets each to 0 or 1)."""
    return [chief("tfd_training_state", values_by_state.get(s, "0x200"), state=s, **kw) for s in STATES]


def running(minutes: int, **kw: str) -> list[dict[str, str]]:
    return state({RUNNING: f"1x{minutes}"}, **kw)


def expected(rule: dict[str, Any], value: str, **labels: str) -> dict[str, Any]:
    """The alert promtool must see: the rule's labels with namespace, its annotations as Prometheus expands them."""
    annotations = {key: text.replace("{{ $value | humanizeDuration }}", value).replace("{{ $value }}", value)
                   for key, text in rule["annotations"].items()}  # fmt: skip
    return {"exp_labels": {**rule["labels"], "namespace": NAMESPACE, **labels}, "exp_annotations": annotations}


def promtool_test(promtool: Path, tmp_path: Path, rule: dict[str, Any], series_list: list[dict[str, str]],
                  checks: list[tuple[str, str, list[dict[str, Any]]]]) -> None:  # fmt: skip
    """One promtool unit test: input series every minute; checks = (eval time, alert, expected firing alerts)."""
    rules = write_rules(rule, tmp_path)
    test = {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series_list,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": alerts}
                            for at, alert, alerts in checks],
    }]}  # fmt: skip
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = run(promtool, "test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


STALLED = "TFDistributedRunStalled"


def test_a_stalled_run_fires_and_only_for_this_release(promtool: Path, tmp_path: Path) -> None:
    rule = rules_of(rendered(ON))
    stuck = "0+10x20 200x60"  # rises for 20 min, then stays at 200: changes()[30m] is 0 from minute 50
    series_list = [
        chief("tfd_training_step", stuck), *running(80),
        # the same stall in another release of the namespace, and in the same release name elsewhere
        chief("tfd_training_step", stuck, release="other"), *running(80, release="other"),
        chief("tfd_training_step", stuck, namespace="ml-other"), *running(80, namespace="ml-other"),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), series_list, [
        ("49m", STALLED, []),  # minute 19's step (190) is still in the window
        ("53m", STALLED, []),  # pending: for 5m
        ("60m", STALLED, [expected(rule[STALLED], "200", app_kubernetes_io_instance=RELEASE)]),
    ])  # fmt: skip


def test_runs_that_progress_ended_or_are_young_do_not_fire(promtool: Path, tmp_path: Path) -> None:
    series_list = [
        # progresses for 80 min
        chief("tfd_training_step", "0+10x80", pod=f"{FULL}-chief-aaaaa"), *running(80, pod=f"{FULL}-chief-aaaaa"),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), series_list, [("60m", STALLED, []), ("80m", STALLED, [])])
    ended = [  # stays at 200 after it Succeeded at minute 20 (the chief lingers, serving its final step)
        chief("tfd_training_step", "0+10x20 200x60"),
        *state({RUNNING: "1x20 0x60", SUCCEEDED: "0x20 1x60"}),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), ended, [("60m", STALLED, []), ("80m", STALLED, [])])
    young = [chief("tfd_training_step", "_x50 200x30"), *state({RUNNING: "_x50 1x30"})]  # started at minute 50
    promtool_test(promtool, tmp_path, rendered(ON), young, [("78m", STALLED, [])])
    restarted = [  # the chief died at minute 40 at step 400; the new pod resumed at 300 and rises again
        chief("tfd_training_step", "0+10x40"), *state({RUNNING: "1x40"}),
        chief("tfd_training_step", "_x42 300+5x40", pod=f"{FULL}-chief-b2b2b"),
        *state({RUNNING: "_x42 1x40"}, pod=f"{FULL}-chief-b2b2b"),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), restarted, [("80m", STALLED, [])])


GPUS = "TFDistributedGPUsHeldAfterRunEnded"


def pod(name: str, gpus: int, owner: str, owner_kind: str, phase: str = "Running", namespace: str = NAMESPACE,
        minutes: int = 60, resource: str = "nvidia_com_gpu") -> list[dict[str, str]]:  # fmt: skip
    """kube-state-metrics' series of one pod: its GPU request, phase and owner."""
    live = f"1x{minutes}"
    return [
        series("kube_pod_container_resource_requests", f"{gpus}x{minutes}", namespace=namespace, pod=name,
               uid=f"uid-{name}", container="tensorflow", node="gpu-node-1", resource=resource, unit="integer"),
        *[series("kube_pod_status_phase", live if p == phase else f"0x{minutes}", namespace=namespace, pod=name,
                 uid=f"uid-{name}", phase=p) for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown")],
        series("kube_pod_owner", live, namespace=namespace, pod=name, uid=f"uid-{name}", owner_kind=owner_kind,
               owner_name=owner, owner_is_controller="true"),
    ]  # fmt: skip


def job(name: str, condition: str, ended_at: int | None = 10, namespace: str = NAMESPACE) -> list[dict[str, str]]:
    """kube_job_complete / kube_job_failed of a Job (condition "true" 1 from minute ended_at; None: never)."""
    if ended_at is None:
        return []  # kube-state-metrics exports the family only for a Job with that condition
    return [series(condition, f"0x{ended_at} 1x60", namespace=namespace, job_name=name, condition="true"),
            series(condition, f"1x{ended_at} 0x60", namespace=namespace, job_name=name, condition="false")]  # fmt: skip


def release_pods(release: str = RELEASE, namespace: str = NAMESPACE) -> list[dict[str, str]]:
    full = f"{release}-tf-distributed"
    return [
        *pod(f"{full}-ps-0", 0, f"{full}-ps", "StatefulSet", namespace=namespace),  # a CPU ps requests no GPU
        *pod(f"{full}-worker-0", 1, f"{full}-worker", "StatefulSet", namespace=namespace),
        *pod(f"{full}-worker-1", 1, f"{full}-worker", "StatefulSet", namespace=namespace),
        *pod(f"{full}-evaluator-q8w4z", 1, f"{full}-evaluator", "Job", namespace=namespace),
    ]


def test_gpus_held_after_the_run_ended_fire_and_only_for_this_release(promtool: Path, tmp_path: Path) -> None:
    rule = rules_of(rendered(ON))
    series_list = [
        *job(f"{FULL}-chief", "kube_job_complete"), *release_pods(),
        # the chief pod itself completed: Succeeded holds nothing
        *pod(f"{FULL}-chief-x7k2p", 1, f"{FULL}-chief", "Job", phase="Succeeded"),
        # another release whose run ended too, in this namespace and in another; a release still running here
        *job("other-tf-distributed-chief", "kube_job_complete"), *release_pods("other"),
        *job(f"{FULL}-chief", "kube_job_complete", namespace="ml-other"),
        *release_pods(namespace="ml-other"), *release_pods("busy"),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), series_list, [
        ("20m", GPUS, []),  # pending: for 15m from minute 10
        ("30m", GPUS, [expected(rule[GPUS], "3", app_kubernetes_io_instance=RELEASE)]),
    ])  # fmt: skip
    failed = [*job(f"{FULL}-chief", "kube_job_failed"), *release_pods()]
    promtool_test(promtool, tmp_path, rendered(ON), failed, [("30m", GPUS, [expected(rule[GPUS], "3")])])


def test_a_running_run_and_one_that_freed_its_gpus_do_not_fire(promtool: Path, tmp_path: Path) -> None:
    training = [*job(f"{FULL}-chief", "kube_job_complete", None), *release_pods()]
    promtool_test(promtool, tmp_path, rendered(ON), training, [("40m", GPUS, [])])
    full = FULL
    freed = [  # the supervisor scaled ps/workers to 0 and suspended the evaluator at minute 11: the pods are gone
        *job(f"{full}-chief", "kube_job_complete"),
        *pod(f"{full}-worker-0", 1, f"{full}-worker", "StatefulSet", minutes=11),
        *pod(f"{full}-evaluator-q8w4z", 1, f"{full}-evaluator", "Job", minutes=11),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), freed, [("40m", GPUS, [])])


def test_keep_on_success_alerts_only_the_evaluator(promtool: Path, tmp_path: Path) -> None:
    keep = (*ON, "training.cleanup.onSuccess=keep")
    series_list = [*job(f"{FULL}-chief", "kube_job_complete"), *release_pods()]
    promtool_test(promtool, tmp_path, rendered(keep), series_list, [
        ("30m", GPUS, [expected(rules_of(rendered(keep))[GPUS], "1")]),  # the workers were kept on purpose
    ])  # fmt: skip


CHECKPOINTS = "TFDistributedCheckpointsStopped"


def test_checkpoints_that_stopped_fire_and_only_for_this_release(promtool: Path, tmp_path: Path) -> None:
    rule = rules_of(rendered(ON))
    ageing = "0+60x150"  # seconds since the last checkpoint, one scrape a minute: 7200 at minute 120
    series_list = [
        chief("tfd_seconds_since_checkpoint", ageing), *running(150),
        chief("tfd_seconds_since_checkpoint", ageing, release="other"), *running(150, release="other"),
        chief("tfd_seconds_since_checkpoint", ageing, namespace="ml-other"), *running(150, namespace="ml-other"),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), series_list, [
        ("120m", CHECKPOINTS, []),
        ("124m", CHECKPOINTS, []),  # pending: for 5m
        ("130m", CHECKPOINTS, [expected(rule[CHECKPOINTS], "2h 10m 0s", app_kubernetes_io_instance=RELEASE)]),
    ])  # fmt: skip


def test_regular_checkpoints_or_a_run_that_stopped_running_do_not_fire(promtool: Path, tmp_path: Path) -> None:
    sawtooth = " ".join(["0+60x59"] * 3)  # a checkpoint every hour
    regular = [chief("tfd_seconds_since_checkpoint", sawtooth), *running(180)]
    promtool_test(promtool, tmp_path, rendered(ON), regular, [("130m", CHECKPOINTS, []), ("175m", CHECKPOINTS, [])])
    interrupted = [  # SIGTERM at minute 100: Interrupted, no longer training
        chief("tfd_seconds_since_checkpoint", "0+60x150"), *state({RUNNING: "1x100 0x50", INTERRUPTED: "0x100 1x50"}),
    ]
    promtool_test(promtool, tmp_path, rendered(ON), interrupted, [("130m", CHECKPOINTS, [])])
