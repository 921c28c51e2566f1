"""Topology-aware placement (docs/scheduling.md "Topology-aware placement"): scheduling.topology rendered as
Kueue's TAS pod-template annotations or as the Volcano PodGroup's network topology.

Every render is made once (namespace ml-training, not default) and read by every assertion about it. The
Kueue annotations are checked with the rules Kueue v0.19.2's webhooks apply to them
(pkg/controller/jobframework/tas_validation.go), and the PodGroups against the vendored Volcano CRD.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import pytest

from tests.chartlib import by_kind, component, pod_template, render, workloads
from tests.crds import crdlib

NS = "ml-training"
RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
REQUIRED, PREFERRED = "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"
GROUP, ROLE_HASH = "kueue.x-k8s.io/podset-group-name", "kueue.x-k8s.io/role-hash"
PLACED = ("ps", "worker", "chief")  # the evaluator is never placed
KUEUE = ["scheduling.kueue.queueName=team-a"]
VOLCANO = ["scheduling.gang.provider=volcano"]
PS = ["ps.replicas=2", "worker.replicas=3", "evaluator.enabled=true"]
MWM = ["training.strategy=multi_worker_mirrored", "worker.replicas=3", "training.batchSize=40"]

RENDERS: dict[str, list[str]] = {
    "kueue-required": [*PS, *KUEUE, "scheduling.topology.mode=required", f"scheduling.topology.level={RACK}"],
    "kueue-together": [*PS, "ps.replicas=1", *KUEUE, "scheduling.topology.mode=preferred",
                       f"scheduling.topology.level={BLOCK}", "scheduling.topology.together=true"],
    "kueue-per-role": [*PS, *KUEUE, "scheduling.topology.worker.mode=required", f"scheduling.topology.level={RACK}",
                       "scheduling.topology.chief.mode=preferred", f"scheduling.topology.chief.level={BLOCK}"],
    "kueue-mwm-together": [*MWM, *KUEUE, "scheduling.topology.mode=required", f"scheduling.topology.level={RACK}",
                           "scheduling.topology.together=true"],
    "kueue-no-topology": [*PS, *KUEUE],
    "volcano-required": [*PS, *VOLCANO, "scheduling.topology.mode=required", "scheduling.topology.tier=2"],
    "volcano-together": [*PS, *VOLCANO, "scheduling.topology.mode=required", "scheduling.topology.tier=1",
                         "scheduling.topology.together=true", "scheduling.topology.chief.mode=preferred"],
    "volcano-mwm-together": [*MWM, *VOLCANO, "scheduling.topology.mode=preferred", "scheduling.topology.together=true"],
}  # fmt: skip


@cache
def renders() -> dict[str, list[dict[str, Any]]]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = pool.map(lambda sets: render(sets=[*sets, "tests.enabled=true"], namespace=NS), RENDERS.values())
        return dict(zip(RENDERS, done, strict=True))


def annotations(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Every pod template's annotations by component (the helm test pod's as `test`)."""
    return {component(doc): dict(pod_template(doc)["metadata"].get("annotations") or {}) for doc in workloads(docs)}


def kueue_keys(found: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in found.items() if key.startswith("kueue.x-k8s.io/podset") or key == ROLE_HASH}


def pod_sets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kueue's PodSets of the plain-pod group, as its pod integration builds them: one per role hash, its count
    the pods of that hash, its topology request from the pod's annotations (constructGroupPodSets); without the
    chart's role hash, Kueue's own hash of the pod's shape, taken here as one per role."""
    found: dict[str, dict[str, Any]] = {}
    for doc in workloads(docs):
        meta = pod_template(doc)["metadata"]
        if "kueue.x-k8s.io/queue-name" not in (meta.get("labels") or {}):
            continue
        notes = meta.get("annotations") or {}
        count = int(doc["spec"].get("replicas", doc["spec"].get("parallelism", 1)))
        entry = found.setdefault(notes.get(ROLE_HASH) or component(doc), {"count": 0, "annotations": notes})
        assert entry["annotations"] == notes, "one PodSet, two topology requests"
        entry["count"] += count
    return [{"name": name, **entry} for name, entry in sorted(found.items())]


def kueue_refusals(podsets: list[dict[str, Any]]) -> list[str]:
    """What Kueue v0.19.2 refuses in these PodSets' TAS annotations (ValidateTASPodSetRequest and
    ValidatePodSetGroupingTopology, tas_validation.go)."""
    label = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]"
                       r"([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # fmt: skip
    refusals, groups = [], {}
    for podset in podsets:
        notes = podset["annotations"]
        asks = [notes[key] for key in (REQUIRED, PREFERRED) if key in notes]
        if len(asks) > 1:
            refusals.append(f"{podset['name']}: more than one topology annotation")
        refusals += [f"{podset['name']}: {ask} is not a label name" for ask in asks if not label.match(ask)]
        if GROUP in notes:
            if notes[GROUP].isdigit() or not asks:
                refusals.append(f"{podset['name']}: bad group name or group without a topology")
            groups.setdefault(notes[GROUP], []).append(podset)
    for name, members in groups.items():
        if len(members) != 2 or 1 not in {m["count"] for m in members}:
            refusals.append(f"group {name}: not exactly 2 pod sets with one of 1 replica")
        elif len({(m["annotations"].get(REQUIRED), m["annotations"].get(PREFERRED)) for m in members}) != 1:
            refusals.append(f"group {name}: different topology requests")
    return refusals


@pytest.mark.parametrize("case", [case for case in RENDERS if case.startswith("kueue")])
def test_kueue_annotations_are_on_exactly_the_tensorflow_pod_templates(case: str) -> None:
    found = annotations(renders()[case])
    assert {"worker", "chief", "tensorboard", "serving", "supervisor", "test"} <= set(found)
    for role, notes in found.items():
        keys = kueue_keys(notes)
        if role not in (*PLACED, "evaluator") or case == "kueue-no-topology":
            assert keys == {}, (role, keys)  # TensorBoard, Serving, the supervisor, the helm test pod: never
        else:
            assert keys[ROLE_HASH] == role  # one PodSet per role in the plain-pod group
    assert kueue_refusals(pod_sets(renders()[case])) == []
    assert by_kind(renders()[case], "PodGroup") == []


def placement(case: str) -> dict[str, dict[str, str]]:
    return {role: {k: v for k, v in kueue_keys(notes).items() if k != ROLE_HASH}
            for role, notes in annotations(renders()[case]).items() if role in (*PLACED, "evaluator")}  # fmt: skip


def test_kueue_required_places_each_role_in_a_rack_and_never_the_evaluator() -> None:
    assert placement("kueue-required") == {"ps": {REQUIRED: RACK}, "worker": {REQUIRED: RACK},
                                           "chief": {REQUIRED: RACK}, "evaluator": {}}  # fmt: skip
    assert [(p["name"], p["count"]) for p in pod_sets(renders()["kueue-required"])] == [
        ("chief", 1), ("evaluator", 1), ("ps", 2), ("worker", 3)]


def test_kueue_together_is_one_podset_group_of_the_ps_and_the_workers() -> None:
    together = {PREFERRED: BLOCK, GROUP: "tensorflow"}
    assert placement("kueue-together") == {"ps": together, "worker": together, "chief": {PREFERRED: BLOCK},
                                           "evaluator": {}}  # fmt: skip
    mwm = placement("kueue-mwm-together")
    assert mwm == {"worker": {REQUIRED: RACK, GROUP: "tensorflow"}, "chief": {REQUIRED: RACK, GROUP: "tensorflow"}}


def test_kueue_roles_have_their_own_modes_and_levels() -> None:
    assert placement("kueue-per-role") == {"ps": {}, "worker": {REQUIRED: RACK}, "chief": {PREFERRED: BLOCK},
                                           "evaluator": {}}  # fmt: skip


def test_the_kueue_checker_refuses_what_kueue_refuses() -> None:
    """The checker above is not vacuous: Kueue's refusals of a group of two multi-pod PodSets and of two requests."""
    both = {"annotations": {REQUIRED: RACK, PREFERRED: RACK}, "count": 1, "name": "ps"}
    wide = [{"annotations": {REQUIRED: RACK, GROUP: "g"}, "count": 2, "name": n} for n in ("ps", "worker")]
    assert kueue_refusals([both]) == ["ps: more than one topology annotation"]
    assert kueue_refusals(wide) == ["group g: not exactly 2 pod sets with one of 1 replica"]


def podgroup(case: str) -> dict[str, Any]:
    [group] = by_kind(renders()[case], "PodGroup")
    assert crdlib.validate(group) == []
    assert group["metadata"]["namespace"] == NS
    return group


def subgroup(roles: list[str], size: int, topology: dict[str, Any]) -> dict[str, Any]:
    return {"name": "-".join(roles), "subGroupSize": size, "networkTopology": topology,
            "labelSelector": {"matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                                    "values": roles}]},
            "matchLabelKeys": ["app.kubernetes.io/instance"]}  # fmt: skip


def test_volcano_places_each_role_in_a_hypernode_of_at_most_the_tier() -> None:
    spec = podgroup("volcano-required")["spec"]
    hard = {"mode": "hard", "highestTierAllowed": 2}
    assert "networkTopology" not in spec  # the evaluator is in the gang but not placed
    assert spec["subGroupPolicy"] == [subgroup(["ps"], 2, hard), subgroup(["worker"], 3, hard),
                                      subgroup(["chief"], 1, hard)]  # fmt: skip


def test_volcano_together_is_one_subgroup_or_the_whole_podgroup() -> None:
    spec = podgroup("volcano-together")["spec"]
    assert spec["subGroupPolicy"] == [subgroup(["ps", "worker"], 5, {"mode": "hard", "highestTierAllowed": 1}),
                                      subgroup(["chief"], 1, {"mode": "soft"})]  # fmt: skip
    # chief and workers together are every pod of the gang: the PodGroup's own network topology
    spec = podgroup("volcano-mwm-together")["spec"]
    assert spec["networkTopology"] == {"mode": "soft"} and "subGroupPolicy" not in spec
    assert spec["minMember"] == 4


@pytest.mark.parametrize("case", [case for case in RENDERS if case.startswith("volcano")])
def test_volcano_renders_no_kueue_annotation(case: str) -> None:
    assert {role: kueue_keys(notes) for role, notes in annotations(renders()[case]).items() if kueue_keys(notes)} == {}


@cache
def jobset_renders() -> dict[str, dict[str, Any]]:
    """The JobSet of a Kueue TAS render (workload.kind=jobset): one per case, its replicatedJobs by name."""
    cases = {"required": RENDERS["kueue-required"], "together": RENDERS["kueue-together"]}
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = pool.map(lambda sets: render(sets=[*sets, "workload.kind=jobset"], namespace=NS), cases.values())
        return {case: next(iter(by_kind(docs, "JobSet"))) for case, docs in zip(cases, done, strict=True)}


def test_under_a_jobset_the_topology_is_on_the_tensorflow_pod_templates_of_its_replicated_jobs() -> None:
    """Kueue makes one PodSet per replicatedJob of a JobSet and reads each PodSet's topology request from its pod
    template: the same annotations as the native workloads, on ps, worker and chief, never on the evaluator, and
    no role hash (that names PodSets of a plain-pod group only)."""
    for case, jobset in jobset_renders().items():
        found = {rjob["name"]: kueue_keys(rjob["template"]["spec"]["template"]["metadata"].get("annotations") or {})
                 for rjob in jobset["spec"]["replicatedJobs"]}  # fmt: skip
        assert found["evaluator"] == {}, case
        if case == "required":
            assert {role: found[role] for role in PLACED} == {role: {REQUIRED: RACK} for role in PLACED}
        else:
            assert found["ps"] == found["worker"] == {PREFERRED: BLOCK, GROUP: "tensorflow"}
            assert found["chief"] == {PREFERRED: BLOCK}
        assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
