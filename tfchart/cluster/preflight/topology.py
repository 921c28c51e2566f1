"""topology (the render places pods by network topology, scheduling.topology), checked by the check that reads the
queue or the PodGroup the pods are placed through (kueue, gang-scheduling), as findings of its own: with Kueue, the
ClusterQueue has a flavor whose Topology (ResourceFlavor spec.topologyName) has each level the pods ask for, and nodes
of that flavor carry it; with Volcano, HyperNodes (topology.volcano.sh) of the tier the PodGroup asks for exist. A
missing LocalQueue or ClusterQueue, or one Kueue keeps inactive (TopologyNotFound), is the kueue check's to report.
An ask is (roles, mode, level or tier): the pods of those roles placed together, required or preferred, Kueue's by a
Topology level (a node label), Volcano's within a tier."""

from __future__ import annotations

import difflib
from collections import Counter
from functools import partial
from typing import Any

from tfchart.cluster.preflight.context import FAIL, OK, WARN, Context, Finding
from tfdcontract import CHIEF, PS, WORKER
from tfdcontract.runstate import KUEUE_GROUP as KUEUE

PLACED = (PS, WORKER, CHIEF)  # the roles scheduling.topology places (never the evaluator)
TAS = {"required": f"{KUEUE}/podset-required-topology", "preferred": f"{KUEUE}/podset-preferred-topology"}
HYPERNODES = ("topology.volcano.sh", "v1alpha1", "hypernodes")
HOSTNAME = "kubernetes.io/hostname"
NO_TOPOLOGY = "--set scheduling.topology.mode=none"
BUILD = "build the HyperNodes (by hand or by Volcano's HyperNode auto-discovery"
finding = partial(Finding, "topology")


def pods_of(roles: tuple[str, ...]) -> str:
    """`the ps, worker and chief pods`."""
    return f"the {' and '.join(filter(None, (', '.join(roles[:-1]), roles[-1])))} pods"


def rendered_roles(context: Context) -> tuple[str, ...]:
    roles = {role.role for role in context.roles}
    return tuple(role for role in PLACED if role in roles)


def sets(field: str, roles: tuple[str, ...], context: Context, value: object) -> str:
    """The --set that gives the ask of `roles` another level or tier: the shared key when every placed role of the
    render asks the same, else each asking role's own (which wins whether or not the role set one)."""
    shared = set(roles) == set(rendered_roles(context))
    keys = [f"scheduling.topology.{field}"] if shared else [f"scheduling.topology.{r}.{field}" for r in roles]
    return " ".join(f"--set {key}={value}" for key in keys)


# -- Kueue: LocalQueue -> ClusterQueue -> ResourceFlavors -> Topology levels ------------------------------------
def check_kueue_topology(context: Context, version: str, served: list[str], queue: dict[str, Any]) -> list[Finding]:
    """The levels the pods ask for (one ask per mode and level the TensorFlow pod templates carry) against the
    Topologies of ClusterQueue `queue` (the kueue check read it) in Kueue's API `version`, which serves `served`."""
    asks: dict[tuple[str, str], list[str]] = {}  # (mode, level): the roles that ask for it
    for role in context.roles:
        for mode, key in TAS.items():
            if key in role.pod_annotations and role.role not in asks.setdefault((mode, role.pod_annotations[key]), []):
                asks[(mode, role.pod_annotations[key])].append(role.role)
    if not asks:
        return []
    if "topologies" not in served:
        return [finding(FAIL, f"Kueue serves no Topology in {KUEUE}/{version}: its topology-aware scheduling (beta and "
                        "on by default since Kueue v0.14) is missing, so nothing would admit the pods that ask for a "
                        f"topology", f"upgrade Kueue to v0.14 or later, or {NO_TOPOLOGY}")]
    name, groups = str(queue["metadata"]["name"]), (queue.get("spec") or {}).get("resourceGroups") or []
    flavors: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {}  # flavor: its Topology, levels, node labels
    for flavor in dict.fromkeys(str(f["name"]) for group in groups for f in group.get("flavors") or []):
        spec = (context.api.read_object(f"resourceflavors.{version}.{KUEUE}", flavor) or {}).get("spec") or {}
        if topology := str(spec.get("topologyName") or ""):  # a Topology that does not exist has no level
            read = (context.api.read_object(f"topologies.{version}.{KUEUE}", topology) or {}).get("spec") or {}
            levels = tuple(str(level.get("nodeLabel")) for level in read.get("levels") or [])
            flavors[flavor] = (topology, levels, dict(spec.get("nodeLabels") or {}))
    if not flavors:
        return [finding(FAIL, f"ClusterQueue {name} has no flavor with a Topology (no ResourceFlavor of it names one "
                        "in spec.topologyName): Kueue admits no pod that asks for a topology there", "ask the Kueue "
                        "admin for a topology-aware flavor (a Topology and a ResourceFlavor with spec.topologyName) in "
                        f"it, or {NO_TOPOLOGY}")]  # fmt: skip
    return [level_finding(context, tuple(roles), mode, level, name, flavors) for (mode, level), roles in asks.items()]


def level_finding(context: Context, roles: tuple[str, ...], mode: str, level: str, cluster_queue: str,
                  flavors: dict[str, tuple[str, tuple[str, ...], dict[str, str]]]) -> Finding:  # fmt: skip
    pods = pods_of(roles)
    having = [(flavor, topology, labels) for flavor, (topology, levels, labels) in flavors.items() if level in levels]
    if not having:
        shown = "; ".join(f"Topology {topology} (ResourceFlavor {flavor}): {', '.join(levels)}"
                          for flavor, (topology, levels, _) in flavors.items() if levels)
        known = [each for _, levels, _ in flavors.values() for each in levels]
        use = sets("level", roles, context, suggest(level, known)) + " (a level there), or " if known else ""
        return finding(FAIL, f"no Topology of ClusterQueue {cluster_queue} has the level {level} that {pods} ask for "
                       f"({mode}): Kueue would not admit them; the levels: {shown or 'none of its Topologies exists'}",
                       f"{use}ask the Kueue admin to add {level} to a Topology of ClusterQueue {cluster_queue}")
    flavor, topology, node_labels = having[0]
    carrying = [labels for node in context.nodes if level in (labels := node["metadata"].get("labels") or {})
                and all(labels.get(key) == value for key, value in node_labels.items())]  # the flavor's nodes
    domains = len({labels[level] for labels in carrying})
    where = f"{pods} ask for level {level} of Topology {topology} (ResourceFlavor {flavor})"
    if not carrying:
        return finding(WARN, f"{where}, but no schedulable node of that flavor carries the label {level}: Kueue "
                       "finds no domain to place them in until one does", f"`kubectl get nodes -L {level}` shows "
                       "the label; ask the Kueue admin to label the nodes")  # fmt: skip
    return finding(OK, f"{where} ({mode}): {len(carrying)} schedulable node(s) in {domains} domain(s)")


def suggest(level: str, levels: list[str]) -> str:
    """The level meant: the nearest spelling, else the lowest shared one (a node is a domain of one)."""
    close = difflib.get_close_matches(level, levels, n=1, cutoff=0.6)
    shared = [candidate for candidate in levels if candidate != HOSTNAME]
    return close[0] if close else (shared or levels)[-1]


# -- Volcano: HyperNodes of the tier -------------------------------------------------------------------------
def check_hypernodes(context: Context, podgroup: dict[str, Any]) -> list[Finding]:
    """The network topology the Volcano PodGroup's spec asks for, its own (every placed pod of the gang) and each
    subGroupPolicy's, against the HyperNodes. Volcano v1.15.1 places a hard unit in one HyperNode of a tier at most
    highestTierAllowed, below a virtual HyperNode of the whole cluster one tier above the highest (tier 1 without any;
    framework/session.go addClusterTopHyperNode); a soft unit in the lowest tier that fits it."""
    units = [(rendered_roles(context), podgroup.get("networkTopology"))]
    for policy in podgroup.get("subGroupPolicy") or []:
        selector = (policy.get("labelSelector") or {}).get("matchExpressions") or [{}]
        units.append((tuple(selector[0].get("values") or ()), policy.get("networkTopology")))
    hard = [(roles, int(topo.get("highestTierAllowed") or 0)) for roles, topo in units
            if topo and topo.get("mode", "hard") == "hard"]  # fmt: skip
    preferred = tuple(role for roles, topo in units if topo and topo.get("mode", "hard") != "hard" for role in roles)
    if not (hard or preferred):
        return []
    if HYPERNODES[2] not in (context.api.served_resources(*HYPERNODES[:2]) or []):
        return [finding(FAIL if hard else WARN, f"Volcano serves no HyperNodes ({'/'.join(HYPERNODES[:2])}): before "
                        "v1.12 Volcano has no network topology, its PodGroup CRD drops networkTopology and the pods "
                        "would be placed without one", "upgrade Volcano to v1.14 or later (subGroupPolicy) and build "
                        f"its HyperNodes, or {NO_TOPOLOGY}")]  # fmt: skip
    listed = context.api.items("hypernodes.v1alpha1.topology.volcano.sh", page_size=500)
    tiers = Counter(int((node.get("spec") or {}).get("tier", 0)) for node in listed)
    shown = ", ".join(f"{count} of tier {tier}" for tier, count in sorted(tiers.items())) or "none"
    findings = [tier_finding(context, roles, tier, tiers, shown) for roles, tier in hard]
    if preferred:
        soft = pods_of(preferred)
        findings.append(finding(OK, f"HyperNodes ({shown}): Volcano keeps {soft} in the lowest tier that fits them")
                        if tiers else finding(WARN, f"no HyperNode exists: Volcano places {soft} without a network "
                                              f"topology", f"{BUILD}; `kubectl get hypernodes`)"))  # fmt: skip
    return findings


def tier_finding(context: Context, roles: tuple[str, ...], tier: int, tiers: Counter[int], shown: str) -> Finding:
    top, pods = max(tiers, default=0) + 1, pods_of(roles)
    below = [known for known in tiers if known <= tier]
    tip = f", or build HyperNodes of tier {tier} (`kubectl get hypernodes`)"
    if tier >= top:
        return finding(WARN, f"{pods} may spread across a HyperNode of tier {tier}, but the highest tier there is is "
                       f"{top - 1} ({shown}): tier {top} is the whole cluster, the pods are not kept together",
                       sets("tier", roles, context, top - 1) + tip if tiers else f"{BUILD})")
    if not below:
        return finding(FAIL, f"no HyperNode of tier {tier} or lower ({shown}): Volcano would hold {pods} forever",
                       sets("tier", roles, context, min(tiers)) + tip)
    if tier not in tiers:
        return finding(WARN, f"no HyperNode of tier {tier} ({shown}): {pods} must fit in one HyperNode of tier "
                       f"{max(below)}", sets("tier", roles, context, max(below)) + tip)
    return finding(OK, f"{pods} stay within one HyperNode of tier {tier} at most ({shown})")
