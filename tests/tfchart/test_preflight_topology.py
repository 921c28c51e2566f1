"""tfchart preflight's topology findings (tfchart/cluster/preflight/topology.py), which the kueue and gang-scheduling
checks make from the queue or PodGroup they read, against the loopback API server.

The release is the chart rendered with scheduling.topology (helm 4, namespace ml-training); the cluster holds
Kueue's LocalQueue -> ClusterQueue -> ResourceFlavors -> Topology, or Volcano's HyperNodes, built from the
vendored CRDs (tests/crds) and checked against them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import render
from tests.kubeapi import Call, KubeServer, kube_server
from tfchart.cli.app import main
from tfchart.cluster import preflight
from tfchart.cluster.preflight import FAIL, OK, WARN, Context, Finding
from tfchart.cluster.preflight.controllers import check_gang, check_kueue

NS = "ml-training"
RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"
HOSTNAME = "kubernetes.io/hostname"
KUEUE = ("scheduling.kueue.queueName=team-a", "ps.replicas=1")
VOLCANO = ("scheduling.gang.provider=volcano",)
CPU_ONLY = ("worker.gpu.count=0", "worker.replicas=2")


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    with kube_server(read_only=True) as server:
        yield server


@cache
def _rendered(sets: tuple[str, ...]) -> str:
    return json.dumps(render(sets=[*CPU_ONLY, *sets], namespace=NS))


def release(*sets: str) -> list[dict[str, Any]]:
    rendered: list[dict[str, Any]] = json.loads(_rendered(sets))
    return rendered


def kueue_release(*more: str) -> list[dict[str, Any]]:
    return release(*KUEUE, "scheduling.topology.mode=required", f"scheduling.topology.level={RACK}", *more)


def findings(cluster: KubeServer, docs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The topology findings of the checks that read the queue (kueue) or the PodGroup (gang-scheduling)."""
    read = Context(cluster.api(), docs, NS)
    return [(f.severity, f.message, f.hint) for f in check_kueue(read) + check_gang(read) if f.check == "topology"]


def tas_cluster(cluster: KubeServer, *objects: dict[str, Any], flavor_topology: str | None = "default",
                served: tuple[str, ...] | None = None) -> KubeServer:  # fmt: skip
    """Kueue with LocalQueue team-a -> ClusterQueue team, whose flavors are `default` (no topology) and `tas`
    (the Topology `flavor_topology`, nodes labelled pool=tas), and two racks of two nodes in one block."""
    version = (served or ("v1beta2",))[-1]
    quota = {"cpu": "64", "memory": "256Gi"}
    racks = [kf.labelled_node(f"node-{i}", {"pool": "tas", BLOCK: "b1", RACK: f"r{i // 2}"}) for i in range(4)]
    return cluster.add(
        *kf.crds(*kf.KUEUE_CRDS, *kf.KUEUE_TAS_CRDS, served=served), *racks, kf.node("other"),
        kf.local_queue("team-a", NS, "team", version=version),
        kf.cluster_queue("team", [{"default": quota, "tas": quota}], version=version),
        kf.resource_flavor("default", version=version),
        kf.resource_flavor("tas", flavor_topology, {"pool": "tas"}, version=version), *objects,
    )  # fmt: skip


def test_the_level_of_the_flavors_topology_passes_with_its_nodes_and_domains(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, RACK, HOSTNAME))
    assert findings(cluster, kueue_release()) == [
        (OK, f"the ps, worker and chief pods ask for level {RACK} of Topology default (ResourceFlavor tas) "
             "(required): 4 schedulable node(s) in 2 domain(s)", ""),
    ]  # fmt: skip
    assert [call for call in cluster.calls if call.resource not in ("nodes",)] == [
        Call("discover", "kueue.x-k8s.io/v1beta2"),
        Call("get", "localqueues", NS, "team-a"), Call("get", "clusterqueues", None, "team"),
        Call("get", "resourceflavors", None, "default"), Call("get", "resourceflavors", None, "tas"),
        Call("get", "topologies", None, "default"),
    ]  # fmt: skip


def test_a_missing_level_fails_with_the_levels_there_are_and_the_set_that_uses_one(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, HOSTNAME))
    [(severity, message, hint)] = findings(cluster, kueue_release())
    assert severity == FAIL
    assert message == (
        f"no Topology of ClusterQueue team has the level {RACK} that the ps, worker and chief pods ask for "
        "(required): Kueue would not admit them; the levels: "
        f"Topology default (ResourceFlavor tas): {BLOCK}, {HOSTNAME}"
    )
    assert hint == (f"--set scheduling.topology.level={BLOCK} (a level there), or ask the Kueue admin to add {RACK} to "
                    "a Topology of ClusterQueue team")  # fmt: skip


def test_a_roles_own_level_is_fixed_by_its_own_key(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, RACK, HOSTNAME))
    docs = kueue_release("scheduling.topology.worker.level=cloud.provider.com/topology-rak")
    (ok, _, _), (severity, message, hint) = findings(cluster, docs)
    assert (ok, severity) == (OK, FAIL)
    assert "level cloud.provider.com/topology-rak that the worker pods ask for" in message
    assert hint.startswith(f"--set scheduling.topology.worker.level={RACK} (a level there)")


def test_no_topology_aware_flavor_or_a_missing_topology_fails(cluster: KubeServer) -> None:
    tas_cluster(cluster, flavor_topology=None)
    [(severity, message, hint)] = findings(cluster, kueue_release())
    assert (severity, message) == (FAIL, "ClusterQueue team has no flavor with a Topology (no ResourceFlavor of it "
                                   "names one in spec.topologyName): Kueue admits no pod that asks for a topology "
                                   "there")  # fmt: skip
    assert hint.endswith("or --set scheduling.topology.mode=none")

    cluster.reset()  # a missing Topology: Kueue keeps the ClusterQueue inactive, which the kueue check reports
    tas_cluster(cluster, flavor_topology="racks")
    [level] = findings(cluster, kueue_release())
    assert level[:2] == (FAIL, f"no Topology of ClusterQueue team has the level {RACK} that the ps, worker and "
                         "chief pods ask for (required): Kueue would not admit them; the levels: none of its "
                         "Topologies exists")  # fmt: skip
    assert level[2] == f"ask the Kueue admin to add {RACK} to a Topology of ClusterQueue team"


def test_nodes_without_the_label_warn(cluster: KubeServer) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, RACK, "cloud.provider.com/topology-host"))
    docs = release(*KUEUE, "scheduling.topology.mode=preferred", "scheduling.topology.level=cloud.provider.com/"
                   "topology-host", "scheduling.topology.together=true")  # fmt: skip
    [(severity, message, hint)] = findings(cluster, docs)  # one level asked, by every placed role
    assert severity == WARN
    assert message.startswith("the ps, worker and chief pods ask for level cloud.provider.com/topology-host")
    assert "no schedulable node of that flavor carries the label" in message
    assert hint.startswith("`kubectl get nodes -L cloud.provider.com/topology-host` shows the label")


def test_kueue_before_v0_14_has_no_topology(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.KUEUE_CRDS, served=("v1beta1",)), kf.local_queue("team-a", NS, "team", version="v1beta1"),
                kf.cluster_queue("team", [{"default": {"cpu": "64"}}], version="v1beta1"))  # fmt: skip
    [(severity, message, hint)] = findings(cluster, kueue_release())
    assert severity == FAIL and message.startswith("Kueue serves no Topology in kueue.x-k8s.io/v1beta1")
    assert hint == "upgrade Kueue to v0.14 or later, or --set scheduling.topology.mode=none"


def test_a_missing_queue_is_left_to_the_kueue_check(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.KUEUE_CRDS, *kf.KUEUE_TAS_CRDS))
    assert findings(cluster, kueue_release()) == []
    assert findings(cluster, release(*KUEUE)) == []  # no topology asked: nothing read


# -- Volcano: HyperNodes --------------------------------------------------------------------------------------


def volcano_release(tier: int, *more: str) -> list[dict[str, Any]]:
    return release(*VOLCANO, "scheduling.topology.mode=required", f"scheduling.topology.tier={tier}", *more)


def hypernodes(cluster: KubeServer, *tiers: int) -> KubeServer:
    """Leaf switches s0, s1 (tier 1) of two nodes each, and a spine (tier 2) over them when `tiers` has 2."""
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS, *kf.HYPERNODE_CRDS))
    if 1 in tiers:
        cluster.add(kf.hypernode("s0", 1, "node-0", "node-1"), kf.hypernode("s1", 1, "node-2", "node-3"))
    if 2 in tiers:
        cluster.add(kf.hypernode("spine", 2, "s0", "s1", tier_name="spine"))
    return cluster


def test_hypernodes_of_the_tier_pass_per_placed_role(cluster: KubeServer) -> None:
    hypernodes(cluster, 1, 2)
    assert findings(cluster, volcano_release(2)) == [
        (OK, f"the {role} pods stay within one HyperNode of tier 2 at most (2 of tier 1, 1 of tier 2)", "")
        for role in ("ps", "worker", "chief")
    ]
    assert Call("list", "hypernodes", params=(("limit", "500"),)) in cluster.calls


def test_a_tier_below_every_hypernode_fails_and_one_above_them_all_warns(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS, *kf.HYPERNODE_CRDS), kf.hypernode("spine", 2, "s0", "s1"))
    docs = volcano_release(1, "scheduling.topology.together=true", "scheduling.topology.chief.mode=none")
    [(severity, message, hint)] = findings(cluster, docs)
    assert (severity, message) == (FAIL, "no HyperNode of tier 1 or lower (1 of tier 2): Volcano would hold the ps "
                                   "and worker pods forever")  # fmt: skip
    assert hint == ("--set scheduling.topology.ps.tier=2 --set scheduling.topology.worker.tier=2, or build "
                    "HyperNodes of tier 1 (`kubectl get hypernodes`)")  # fmt: skip

    [(severity, message, _)] = findings(cluster, volcano_release(3, "training.strategy=mirrored"))
    assert (severity, message) == (WARN, "the chief pods may spread across a HyperNode of tier 3, but the highest "
                                   "tier there is is 2 (1 of tier 2): tier 3 is the whole cluster, the pods are not "
                                   "kept together")  # fmt: skip


def test_without_hypernodes_required_fails_and_preferred_warns(cluster: KubeServer) -> None:
    cluster.add(*kf.crds(*kf.VOLCANO_CRDS))
    [(severity, message, hint)] = findings(cluster, volcano_release(1))
    assert severity == FAIL and message.startswith("Volcano serves no HyperNodes (topology.volcano.sh/v1alpha1)")
    assert hint.endswith("or --set scheduling.topology.mode=none")
    hypernodes(cluster)
    soft = release(*VOLCANO, "scheduling.topology.mode=preferred")
    assert findings(cluster, soft) == [
        (WARN, "no HyperNode exists: Volcano places the ps, worker and chief pods without a network topology",
         "build the HyperNodes (by hand or by Volcano's HyperNode auto-discovery; `kubectl get hypernodes`)")]


def test_preflight_json_reports_the_topology_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cluster: KubeServer
) -> None:
    tas_cluster(cluster, kf.topology("default", BLOCK, HOSTNAME))
    monkeypatch.setenv("COLUMNS", "400")
    argv = ["preflight", "mnist", "-n", NS, "-o", "json", "--skip-image-check", "--kubeconfig",
            str(cluster.kubeconfig()), *[f"--set={item}" for item in (*CPU_ONLY, *KUEUE)],
            "--set=scheduling.topology.mode=required", f"--set=scheduling.topology.level={RACK}"]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    report = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == 1 and report["passed"] is False
    [topology] = [finding for finding in report["findings"] if finding["check"] == "topology"]
    assert topology["severity"] == FAIL and topology["message"].startswith(f"no Topology of ClusterQueue team has "
                                                                           f"the level {RACK}")  # fmt: skip
    assert topology["hint"].startswith(f"--set scheduling.topology.level={BLOCK}")
    checks = [finding["check"] for finding in report["findings"]]
    assert checks.index("kueue") < checks.index("topology") == len(checks) - 1
    assert Finding("topology", FAIL, topology["message"], topology["hint"]) in preflight.run(
        cluster.api(), release(*KUEUE, "scheduling.topology.mode=required", f"scheduling.topology.level={RACK}"),
        "mnist", NS)  # fmt: skip
