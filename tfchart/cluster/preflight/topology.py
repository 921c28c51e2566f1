"""topology (the render places pods by network topology, scheduling.topology), checked by the check that reads the
queue or the PodGroup the pods are placed through (kueue, gang-scheduling), as findings of its own: with Kueue, the
ClusterQueue has a flavor whose Topology (ResourceFlavor spec.topologyName) has each level the pods ask for, and nodes
of that flavor carry it; with Volcano, HyperNodes (topology.volcano.sh) of the tier the PodGroup asks for exist. A
missing LocalQueue or ClusterQueue, or one Kueue keeps inactive (TopologyNotFound), is the kueue check's to report."""

from __future__ import annotations

import difflib
from collections import Counter
from functools import partial
from typing import Any, NamedTuple

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


class Ask(NamedTuple):
    """Pods of some roles placed together: Kueue by a Topology level (a node label), Volcano within a tier."""

    roles: tuple[str, ...]
    mode: str  # required | preferred
    level: str = ""
    tier: int = 0


def pods_of(roles: tuple[str, ...]) -> str:
    """`the ps, worker and chief pods`."""
    return f"the {' and '.join(filter(None, (', '.join(roles[:-1]), roles[-1])))} pods"


def kueue_asks(context: Context) -> list[Ask]:
    """One Ask per (mode, level) the TensorFlow pod templates carry, with the roles that carry it."""
    found: dict[tuple[str, str], list[str]] = {}
    for role in context.roles:
        for mode, key in TAS.items():
            if key in role.pod_annotations and role.role not in found.setdefault((mode, role.pod_annotations[key]), []):
                found[(mode, role.pod_annotations[key])].append(role.role)
    return [Ask(tuple(roles), mode, level) for (mode, level), roles in found.items()]


def volcano_asks(context: Context, spec: dict[str, Any]) -> list[Ask]:
    """The Volcano PodGroup's network topology: its own (every placed pod of the gang) and each subGroupPolicy's."""
    units = [(rendered_roles(context), spec.get("networkTopology"))]
    for policy in spec.get("subGroupPolicy") or []:
        selector = (policy.get("labelSelector") or {}).get("matchExpressions") or [{}]
        units.append((tuple(selector[0].get("values") or ()), policy.get("networkTopology")))
    return [Ask(roles, "required" if topo.get("mode", "hard") == "hard" else "preferred",
                tier=int(topo.get("highestTierAllowed") or 0)) for roles, topo in units if topo]  # fmt: skip


def rendered_roles(context: Context) -> tuple[str, ...]:
    roles = {role.role for role in context.roles}
    return tuple(role for role in PLACED if role in roles)


def sets(field: str, ask: Ask, context: Context, value: object) -> str:
    """The --set that gives `ask` another level or tier: the shared key when every placed role of the render asks
    the same, else each asking role's own (which wins whether or not the role set one)."""
    shared = set(ask.roles) == set(rendered_roles(context))
    keys = [f"scheduling.topology.{field}"] if shared else [f"scheduling.topology.{r}.{field}" for r in ask.roles]
    return " ".join(f"--set {key}={value}" for key in keys)


# -- Kueue: LocalQueue -> ClusterQueue -> ResourceFlavors -> Topology levels ------------------------------------
class TasFlavor(NamedTuple):
    flavor: str
    topology: str
    levels: tuple[str, ...]
    node_labels: dict[str, str]


def check_kueue_topology(context: Context, version: str, served: list[str], queue: dict[str, Any]) -> list[Finding]:
    """The levels the pods ask for, against the Topologies of ClusterQueue `queue` (the kueue check read it) in Kueue's
    API `version`, which serves `served`."""
    if not (asks := kueue_asks(context)):
        return []
    if "topologies" not in served:
        return [finding(FAIL, f"Kueue serves no Topology in {KUEUE}/{version}: its topology-aware scheduling (beta and "
                        "on by default since Kueue v0.14) is missing, so nothing would admit the pods that ask for a "
                        f"topology", f"upgrade Kueue to v0.14 or later, or {NO_TOPOLOGY}")]
    name, flavors = str(queue["metadata"]["name"]), tas_flavors(context, version, queue)
    if not flavors:
        return [finding(FAIL, f"ClusterQueue {name} has no flavor with a Topology (no ResourceFlavor of it names one "
                        "in spec.topologyName): Kueue admits no pod that asks for a topology there", "ask the Kueue "
                        "admin for a topology-aware flavor (a Topology and a ResourceFlavor with spec.topologyName) in "
                        f"it, or {NO_TOPOLOGY}")]  # fmt: skip
    return [level_finding(context, ask, name, flavors) for ask in asks]


def tas_flavors(context: Context, version: str, cluster_queue: dict[str, Any]) -> list[TasFlavor]:
    """The ClusterQueue's flavors that name a Topology, with its levels (none when it does not exist)."""
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    found = []
    for flavor in dict.fromkeys(str(f["name"]) for group in groups for f in group.get("flavors") or []):
        spec = (context.api.read_object(f"resourceflavors.{version}.{KUEUE}", flavor) or {}).get("spec") or {}
        if topology := str(spec.get("topologyName") or ""):
            read = context.api.read_object(f"topologies.{version}.{KUEUE}", topology) or {}
            levels = tuple(str(level.get("nodeLabel")) for level in (read.get("spec") or {}).get("levels") or [])
            found.append(TasFlavor(flavor, topology, levels, dict(spec.get("nodeLabels") or {})))
    return found


def level_finding(context: Context, ask: Ask, cluster_queue: str, flavors: list[TasFlavor]) -> Finding:
    having, pods = [f for f in flavors if ask.level in f.levels], pods_of(ask.roles)
    if not having:
        known = [f for f in flavors if f.levels]
        shown = "; ".join(f"Topology {f.topology} (ResourceFlavor {f.flavor}): {', '.join(f.levels)}"
                          for f in known) or "none of its Topologies exists"  # fmt: skip
        levels = [level for f in known for level in f.levels]
        use = sets("level", ask, context, suggest(ask.level, levels)) + " (a level there), or " if levels \
            else ""
        return finding(FAIL, f"no Topology of ClusterQueue {cluster_queue} has the level {ask.level} that {pods} ask "
                       f"for ({ask.mode}): Kueue would not admit them; the levels: {shown}", f"{use}ask the Kueue "
                       f"admin to add {ask.level} to a Topology of ClusterQueue {cluster_queue}")  # fmt: skip
    flavor = having[0]
    carrying = [labels for node in context.nodes if ask.level in (labels := node["metadata"].get("labels") or {})
                and all(labels.get(key) == value for key, value in flavor.node_labels.items())]  # the flavor's nodes
    domains = len({labels[ask.level] for labels in carrying})
    where = f"{pods} ask for level {ask.level} of Topology {flavor.topology} (ResourceFlavor {flavor.flavor})"
    if not carrying:
        return finding(WARN, f"{where}, but no schedulable node of that flavor carries the label {ask.level}: Kueue "
                       "finds no domain to place them in until one does", f"`kubectl get nodes -L {ask.level}` shows "
                       "the label; ask the Kueue admin to label the nodes")  # fmt: skip
    return finding(OK, f"{where} ({ask.mode}): {len(carrying)} schedulable node(s) in {domains} domain(s)")


def suggest(level: str, levels: list[str]) -> str:
    """The level meant: the nearest spelling, else the lowest shared one (a node is a domain of one)."""
    close = difflib.get_close_matches(level, levels, n=1, cutoff=0.6)
    shared = [candidate for candidate in levels if candidate != HOSTNAME]
    return close[0] if close else (shared or levels)[-1]


# -- Volcano: HyperNodes of the tier -------------------------------------------------------------------------
def check_hypernodes(context: Context, podgroup: dict[str, Any]) -> list[Finding]:
    """The network topology the Volcano PodGroup's spec asks for, against the HyperNodes. Volcano v1.15.1 places a
    hard unit in one HyperNode of a tier at most highestTierAllowed, below a virtual HyperNode of the whole cluster one
    tier above the highest (tier 1 without any; framework/session.go addClusterTopHyperNode); a soft unit in the lowest
    tier that fits it."""
    if not (asks := volcano_asks(context, podgroup)):
        return []
    hard = [ask for ask in asks if ask.mode == "required"]
    if not context.serves(*HYPERNODES):
        return [finding(FAIL if hard else WARN, f"Volcano serves no HyperNodes ({'/'.join(HYPERNODES[:2])}): before "
                        "v1.12 Volcano has no network topology, its PodGroup CRD drops networkTopology and the pods "
                        "would be placed without one", "upgrade Volcano to v1.14 or later (subGroupPolicy) and build "
                        f"its HyperNodes, or {NO_TOPOLOGY}")]  # fmt: skip
    listed = context.api.items("hypernodes.v1alpha1.topology.volcano.sh", page_size=500)
    tiers = Counter(int((node.get("spec") or {}).get("tier", 0)) for node in listed)
    shown = ", ".join(f"{count} of tier {tier}" for tier, count in sorted(tiers.items())) or "none"
    findings = [tier_finding(context, ask, tiers, shown) for ask in hard]
    if preferred := tuple(role for ask in asks if ask.mode == "preferred" for role in ask.roles):
        soft = pods_of(preferred)
        findings.append(finding(OK, f"HyperNodes ({shown}): Volcano keeps {soft} in the lowest tier that fits them")
                        if tiers else finding(WARN, f"no HyperNode exists: Volcano places {soft} without a network "
                                              f"topology", f"{BUILD}; `kubectl get hypernodes`)"))  # fmt: skip
    return findings


def tier_finding(context: Context, ask: Ask, tiers: Counter[int], shown: str) -> Finding:
    tier, top, pods = ask.tier, max(tiers, default=0) + 1, pods_of(ask.roles)
    below = [known for known in tiers if known <= tier]
    tip = f", or build HyperNodes of tier {tier} (`kubectl get hypernodes`)"
    if tier >= top:
        return finding(WARN, f"{pods} may spread across a HyperNode of tier {tier}, but the highest tier there is is "
                       f"{top - 1} ({shown}): tier {top} is the whole cluster, the pods are not kept together",
                       sets("tier", ask, context, top - 1) + tip if tiers else f"{BUILD})")
    if not below:
        return finding(FAIL, f"no HyperNode of tier {tier} or lower ({shown}): Volcano would hold {pods} forever",
                       sets("tier", ask, context, min(tiers)) + tip)
    if tier not in tiers:
        return finding(WARN, f"no HyperNode of tier {tier} ({shown}): {pods} must fit in one HyperNode of tier "
                       f"{max(below)}", sets("tier", ask, context, max(below)) + tip)
    return finding(OK, f"{pods} stay within one HyperNode of tier {tier} at most ({shown})")
