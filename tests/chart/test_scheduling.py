"""Gang admission and queues (docs/scheduling.md), and the ps/worker PDBs.

Rendered with real helm; every PodGroup is checked against the vendored CRD schemas
(tests/crds). The topology matrix renders once per (strategy, ps, workers, provider) and every
assertion reads that one render.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import pytest
from kubernetes_validate.utils import latest_version

from tests.chartlib import by_kind, component, openapi_problems, pod_spec, pod_template, render, workloads
from tests.crds import crdlib

TF_ROLES = ("ps", "worker", "chief", "evaluator")
GROUP = "mnist-tf-distributed-training"
KUEUE_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/priority-class")
KUEUE_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
PROVIDERS = {
    "volcano": ["scheduling.gang.provider=volcano", "scheduling.gang.volcanoQueue=research"],
    "coscheduling": ["scheduling.gang.provider=coscheduling", "scheduling.gang.scheduleTimeoutSeconds=300"],
    "kueue": ["scheduling.kueue.queueName=team-a", "scheduling.kueue.priorityClass=high"],
}
# Roles each strategy renders (values.yaml training.strategy); ps/worker counts that a strategy
# ignores collapse to one render.
STRATEGY_ROLES = {
    "parameter_server": ("ps", "worker", "chief"),
    "multi_worker_mirrored": ("worker", "chief"),
    "mirrored": ("chief",),
    # multi_worker_mirrored with chief.replicas=0: worker 0 is the chief, the workers an Indexed Job
    "workers_only": ("worker",),
}


def topologies() -> list[tuple[str, int, int]]:
    found: set[tuple[str, int, int]] = set()
    for strategy, ps, workers in itertools.product(STRATEGY_ROLES, (1, 2, 5), (1, 3, 16)):
        roles = STRATEGY_ROLES[strategy]
        found.add((strategy, ps if "ps" in roles else 0, workers if "worker" in roles else 0))
    return sorted(found)


TOPOLOGIES = topologies()
CASES = [(*topology, provider) for topology in TOPOLOGIES for provider in PROVIDERS]


def topology_sets(strategy: str, ps: int, workers: int) -> list[str]:
    sets = [f"training.strategy={strategy}", f"ps.replicas={max(ps, 1)}", f"worker.replicas={max(workers, 1)}"]
    if strategy == "multi_worker_mirrored":
        sets.append(f"training.batchSize={10 * (1 + workers)}")
    if strategy == "workers_only":
        sets = ["training.strategy=multi_worker_mirrored", "chief.replicas=0", f"worker.replicas={workers}",
                f"training.batchSize={10 * workers}"]
    # the evaluator joins the gang too: on in every other topology
    if (ps + workers) % 2 == 0:
        sets.append("evaluator.enabled=true")
    return sets


@cache
def renders() -> dict[tuple[str, int, int, str], list[dict[str, Any]]]:
    def one(case: tuple[str, int, int, str]) -> list[dict[str, Any]]:
        strategy, ps, workers, provider = case
        return render(sets=[*topology_sets(strategy, ps, workers), *PROVIDERS[provider]])

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(CASES, pool.map(one, CASES), strict=True))


def tf_workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in workloads(docs) if component(doc) in TF_ROLES]


def other_workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in workloads(docs) if component(doc) not in TF_ROLES]


def pods_of(doc: dict[str, Any]) -> int:
    spec = doc["spec"]
    return int(spec["replicas"] if doc["kind"] == "StatefulSet" else spec.get("parallelism", 1))


def expected_pods(strategy: str, ps: int, workers: int) -> int:
    evaluator = 1 if (ps + workers) % 2 == 0 else 0
    return ps + workers + (0 if strategy == "workers_only" else 1) + evaluator


def labels_of(doc: dict[str, Any]) -> dict[str, str]:
    return dict(doc["metadata"].get("labels") or {})


def annotations_of(doc: dict[str, Any]) -> dict[str, str]:
    return dict(doc["metadata"].get("annotations") or {})


def test_the_matrix_covers_every_strategy_and_size() -> None:
    assert {t[0] for t in TOPOLOGIES} == set(STRATEGY_ROLES)
    assert {(t[1], t[2]) for t in TOPOLOGIES if t[0] == "parameter_server"} == set(
        itertools.product((1, 2, 5), (1, 3, 16))
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_gang_is_every_tensorflow_pod_and_nothing_else(case: tuple[str, int, int, str]) -> None:
    strategy, ps, workers, provider = case
    docs = renders()[case]
    tf = tf_workloads(docs)
    roles = {component(doc) for doc in tf}
    evaluator = {"evaluator"} if (ps + workers) % 2 == 0 else set()
    assert roles == set(STRATEGY_ROLES[strategy]) | evaluator
    count = sum(pods_of(doc) for doc in tf)
    assert count == expected_pods(strategy, ps, workers)

    groups = by_kind(docs, "PodGroup")
    if provider == "kueue":
        assert groups == []
    else:
        assert len(groups) == 1
        group = groups[0]
        assert crdlib.validate(group) == []
        assert group["metadata"]["name"] == GROUP
        assert group["spec"]["minMember"] == count
        if provider == "volcano":
            assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
            assert group["spec"]["queue"] == "research"
        else:
            assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
            assert group["spec"]["scheduleTimeoutSeconds"] == 300

    scheduler = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler", "kueue": None}[provider]
    for doc in tf:
        template, spec = pod_template(doc), pod_spec(doc)
        labels, annotations = labels_of(template), annotations_of(template)
        assert spec.get("schedulerName") == scheduler, doc["metadata"]["name"]
        if provider == "volcano":
            assert annotations[VOLCANO_ANNOTATION] == GROUP
        elif provider == "coscheduling":
            assert labels[COSCHEDULING_LABEL] == GROUP
        else:
            assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
            assert labels["kueue.x-k8s.io/pod-group-name"] == GROUP
            assert labels["kueue.x-k8s.io/priority-class"] == "high"
            assert annotations[KUEUE_ANNOTATION] == str(count)

    # TensorBoard, Serving and the helm test pod: never in the gang or the queue.
    for doc in other_workloads(docs):
        template = pod_template(doc)
        assert "schedulerName" not in pod_spec(doc), doc["metadata"]["name"]
        marks = set(labels_of(template)) | set(annotations_of(template))
        assert not marks & {*KUEUE_LABELS, KUEUE_ANNOTATION, VOLCANO_ANNOTATION, COSCHEDULING_LABEL}, doc["kind"]

    # Queue labels sit on pods only: an owner (StatefulSet, Job) with one would be admitted by
    # Kueue's statefulset / batch/job integration on its own instead of with the group; the claim,
    # Services and the rest never carry them either.
    for doc in docs:
        marks = set(labels_of(doc)) | set(annotations_of(doc))
        assert not marks & {*KUEUE_LABELS, KUEUE_ANNOTATION, VOLCANO_ANNOTATION, COSCHEDULING_LABEL}, (
            doc["kind"],
            doc["metadata"]["name"],
        )


def test_no_gang_and_no_queue_by_default() -> None:
    docs = render()
    assert by_kind(docs, "PodGroup") == []
    assert by_kind(docs, "PodDisruptionBudget") == []
    for doc in workloads(docs):
        template = pod_template(doc)
        assert "schedulerName" not in pod_spec(doc)
        assert not any(key.startswith(("kueue.x-k8s.io/", "scheduling.")) for key in labels_of(template))
        assert not any(key.startswith(("kueue.x-k8s.io/", "scheduling.")) for key in annotations_of(template))


def test_scheduler_name_overrides_the_gang_schedulers_and_applies_to_tensorflow_pods_only() -> None:
    docs = render(sets=["scheduling.gang.provider=coscheduling", "schedulerName=my-coscheduler"])
    assert {pod_spec(doc).get("schedulerName") for doc in tf_workloads(docs)} == {"my-coscheduler"}
    assert all("schedulerName" not in pod_spec(doc) for doc in other_workloads(docs))
    plain = render(sets=["schedulerName=volcano"])
    assert {pod_spec(doc).get("schedulerName") for doc in tf_workloads(plain)} == {"volcano"}
    assert by_kind(plain, "PodGroup") == []


def test_the_kueue_group_name_is_the_workload_name_and_a_valid_label() -> None:
    docs = render(sets=["scheduling.kueue.queueName=team-a", "fullnameOverride=" + "a" * 45])
    names = {labels_of(pod_template(doc))["kueue.x-k8s.io/pod-group-name"] for doc in tf_workloads(docs)}
    (name,) = names
    assert len(name) <= 63 and name == "a" * 45 + "-training"
    # the LocalQueue the label names is a valid Kueue object name (vendored CRD)
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "team-a", "namespace": "ml-training"},
        "spec": {"clusterQueue": "cluster"},
    }
    assert crdlib.validate(queue) == []


def test_the_kueue_group_can_be_without_a_priority_class() -> None:
    docs = render(sets=["scheduling.kueue.queueName=team-a"])
    for doc in tf_workloads(docs):
        assert "kueue.x-k8s.io/priority-class" not in labels_of(pod_template(doc))


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}
    return all(labels.get(key) == value for key, value in selector["matchLabels"].items())


@pytest.mark.parametrize("strategy", ["parameter_server", "multi_worker_mirrored", "mirrored"])
def test_pod_disruption_budgets_select_exactly_their_role(strategy: str) -> None:
    docs = render(
        sets=[
            f"training.strategy={strategy}",
            "ps.podDisruptionBudget.enabled=true",
            "worker.podDisruptionBudget.enabled=true",
            "evaluator.enabled=true",
            "training.batchSize=120",
        ]
    )
    budgets = {component(doc): doc for doc in by_kind(docs, "PodDisruptionBudget")}
    assert set(budgets) == set(STRATEGY_ROLES[strategy]) - {"chief"}
    for role, budget in budgets.items():
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"]["maxUnavailable"] == 0
        assert budget["metadata"]["name"] == f"mnist-tf-distributed-{role}"
        selected = [doc for doc in workloads(docs) if selects(budget["spec"]["selector"], labels_of(pod_template(doc)))]
        assert [(doc["kind"], component(doc)) for doc in selected] == [("StatefulSet", role)]


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_rendered_kubernetes_objects_stay_valid_on_the_oldest_and_newest_kubernetes(provider: str) -> None:
    """The labelled pod templates and the PDBs (unhealthyPodEvictionPolicy included) pass strict
    OpenAPI validation on Kubernetes 1.29 (the chart's kubeVersion floor) and the newest schema."""
    docs = render(
        sets=[
            *PROVIDERS[provider],
            "ps.podDisruptionBudget.enabled=true",
            "worker.podDisruptionBudget.enabled=true",
            "evaluator.enabled=true",
        ]
    )
    assert openapi_problems([doc for doc in docs if doc["kind"] != "PodGroup"], ("1.29.0", latest_version())) == []


def test_pod_disruption_budgets_are_per_role() -> None:
    docs = render(sets=["worker.podDisruptionBudget.enabled=true"])
    assert [component(doc) for doc in by_kind(docs, "PodDisruptionBudget")] == ["worker"]
