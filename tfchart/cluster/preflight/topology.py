"""topology (the render places pods by network topology, scheduling.topology): with Kueue, the LocalQueue's
ClusterQueue has a flavor whose Topology (ResourceFlavor spec.topologyName) has each level the pods ask for,
and nodes of that flavor carry it; with Volcano, HyperNodes (topology.volcano.sh) of the tier the PodGroup
asks for exist. A missing LocalQueue or ClusterQueue is the kueue check's to report."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfchart.cluster.preflight.findings import FAIL, OK, WARN, Finding
from tfchart.cluster.preflight.kueue import KUEUE, kueue_version
from tfchart.cluster.preflight.plan import QUEUE_LABEL
from tfdcontract import CHIEF, COMPONENT_LABEL, PS, WORKER

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

CHECK = "topology"
PLACED = (PS, WORKER, CHIEF)  # the roles scheduling.topology places (never the evaluator)
TAS = {"required": f"{KUEUE}/podset-required-topology", "preferred": f"{KUEUE}/podset-preferred-topology"}
HYPERNODES = ("topology.volcano.sh", "v1alpha1", "hypernodes")
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Ask:
    """Pods of some roles placed together: Kueue by a Topology level (a node label), Volcano within a tier."""

    roles: tuple[str, ...]
    mode: str  # required | preferred
    level: str = ""
    tier: int | None = None

    @property
    def pods(self) -> str:
        return pods_of(self.roles)


def pods_of(roles: tuple[str, ...]) -> str:
    """`the ps, worker and chief pods`."""
    return f"the {' and '.join(filter(None, (', '.join(roles[:-1]), roles[-1])))} pods"


def mappings(node: Any) -> Iterator[dict[str, Any]]:
    """Every mapping of the manifests, at any depth (a JobSet's pod templates sit deeper than a Job's)."""
    if isinstance(node, dict):
        yield node
    for value in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        yield from mappings(value)


def templates(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod template's metadata (StatefulSet, Job, a JobSet's replicatedJobs...)."""
    return [m["metadata"] for m in mappings(docs)
            if isinstance(m.get("metadata"), dict) and isinstance(m.get("spec"), dict) and "containers" in m["spec"]]


def role_of(metadata: dict[str, Any]) -> str:
    return str((metadata.get("labels") or {}).get(COMPONENT_LABEL, ""))


def kueue_asks(docs: list[dict[str, Any]]) -> list[Ask]:
    """One Ask per (mode, level) the TensorFlow pod templates carry, with the roles that carry it."""
    found: dict[tuple[str, str], list[str]] = {}
    for metadata in templates(docs):
        notes = metadata.get("annotations") or {}
        for mode, key in TAS.items():
            if key in notes and role_of(metadata) not in found.setdefault((mode, str(notes[key])), []):
                found[(mode, str(notes[key]))].append(role_of(metadata))
    return [Ask(tuple(roles), mode, level) for (mode, level), roles in found.items()]


def volcano_asks(docs: list[dict[str, Any]], rendered: tuple[str, ...]) -> list[Ask]:
    """The Volcano PodGroup's network topology: its own (every placed pod of the gang) and each subGroupPolicy's."""
    group = next((d for d in docs if d.get("kind") == "PodGroup" and str(d.get("apiVersion")).startswith(
        "scheduling.volcano.sh/")), {})  # fmt: skip
    spec = group.get("spec") or {}
    units = [(rendered, spec.get("networkTopology"))] if spec.get("networkTopology") else []
    for policy in spec.get("subGroupPolicy") or []:
        selector = (policy.get("labelSelector") or {}).get("matchExpressions") or [{}]
        units.append((tuple(selector[0].get("values") or ()), policy.get("networkTopology")))
    return [Ask(roles, "required" if topo.get("mode", "hard") == "hard" else "preferred",
                tier=topo.get("highestTierAllowed")) for roles, topo in units if topo]  # fmt: skip


def queue_of(docs: list[dict[str, Any]]) -> str:
    """The Kueue LocalQueue the render names (on the pod templates, or on the workload itself)."""
    return next((str(m["labels"][QUEUE_LABEL]) for m in mappings(docs)
                 if isinstance(m.get("labels"), dict) and m["labels"].get(QUEUE_LABEL)), "")  # fmt: skip


def rendered_roles(docs: list[dict[str, Any]]) -> tuple[str, ...]:
    roles = {role_of(metadata) for metadata in templates(docs)}
    return tuple(role for role in PLACED if role in roles)


def sets(field: str, ask: Ask, rendered: tuple[str, ...], value: object) -> str:
    """The --set that gives `ask` another level or tier: the shared key when every placed role of the render asks
    the same, else each asking role's own (which wins whether or not the role set one)."""
    shared = set(ask.roles) == set(rendered)
    keys = [f"scheduling.topology.{field}"] if shared else [f"scheduling.topology.{r}.{field}" for r in ask.roles]
    return " ".join(f"--set {key}={value}" for key in keys)


def asked(docs: list[dict[str, Any]]) -> bool:
    """Whether the render places pods by topology (Kueue annotations or the Volcano PodGroup's)."""
    return bool(kueue_asks(docs) or volcano_asks(docs, ()))


def check_topology(api: KubeApi, docs: list[dict[str, Any]], namespace: str, nodes: Callable[[], list[Any]]) -> list[
        Finding]:  # fmt: skip
    rendered = rendered_roles(docs)
    if asks := kueue_asks(docs):
        return check_kueue_topology(api, asks, queue_of(docs), namespace, rendered, nodes)
    if asks := volcano_asks(docs, rendered):
        return check_hypernodes(api, asks, rendered)
    return []


# -- Kueue: LocalQueue -> ClusterQueue -> ResourceFlavors -> Topology levels ------------------------------------


@dataclass(frozen=True)
class TasFlavor:
    flavor: str
    topology: str
    levels: tuple[str, ...] | None  # None: the Topology does not exist
    node_labels: dict[str, str]


def check_kueue_topology(api: KubeApi, asks: list[Ask], queue: str, namespace: str, rendered: tuple[str, ...],
                         nodes: Callable[[], list[Any]]) -> list[Finding]:  # fmt: skip
    version = kueue_version(api)
    if version is None or not queue:
        return []  # the kueue check says Kueue is missing
    if "topologies" not in (api.served_resources(KUEUE, version) or []):
        return [Finding(CHECK, FAIL, f"Kueue serves no Topology in {KUEUE}/{version}: its topology-aware scheduling "
                        "(beta and on by default since Kueue v0.14) is missing, so nothing would admit the pods that "
                        "ask for a topology",
                        "upgrade Kueue to v0.14 or later, or --set scheduling.topology.mode=none")]  # fmt: skip
    local_queue = api.read_custom_object(KUEUE, version, "localqueues", queue, namespace)
    name = str(((local_queue or {}).get("spec") or {}).get("clusterQueue") or "")
    cluster_queue = api.read_custom_object(KUEUE, version, "clusterqueues", name) if name else None
    if cluster_queue is None:
        return []  # the kueue check says the LocalQueue or ClusterQueue is missing
    flavors = tas_flavors(api, version, cluster_queue)
    if not flavors:
        return [Finding(CHECK, FAIL, f"ClusterQueue {name} has no flavor with a Topology (no ResourceFlavor of it "
                        "names one in spec.topologyName): Kueue admits no pod that asks for a topology there",
                        "ask the Kueue admin for a topology-aware flavor (a Topology and a ResourceFlavor with "
                        "spec.topologyName) in it, or --set scheduling.topology.mode=none")]
    findings = [Finding(CHECK, FAIL, f"Topology {f.topology} of ResourceFlavor {f.flavor} does not exist: Kueue keeps "
                        f"ClusterQueue {name} inactive (TopologyNotFound)",
                        "ask the Kueue admin to create it (`kubectl get topologies` lists those there are)")
                for f in flavors if f.levels is None]  # fmt: skip
    return findings + [level_finding(ask, name, flavors, rendered, nodes) for ask in asks]


def tas_flavors(api: KubeApi, version: str, cluster_queue: dict[str, Any]) -> list[TasFlavor]:
    """The ClusterQueue's flavors that name a Topology, with its levels (None when it does not exist)."""
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    names = dict.fromkeys(str(f["name"]) for group in groups for f in group.get("flavors") or [])
    found, topologies = [], {}
    for flavor in names:
        spec = (api.read_custom_object(KUEUE, version, "resourceflavors", flavor) or {}).get("spec") or {}
        if topology := str(spec.get("topologyName") or ""):
            if topology not in topologies:
                read = api.read_custom_object(KUEUE, version, "topologies", topology)
                topologies[topology] = None if read is None else tuple(
                    str(level.get("nodeLabel")) for level in (read.get("spec") or {}).get("levels") or [])
            found.append(TasFlavor(flavor, topology, topologies[topology], dict(spec.get("nodeLabels") or {})))
    return found


def level_finding(ask: Ask, cluster_queue: str, flavors: list[TasFlavor], rendered: tuple[str, ...],
                  nodes: Callable[[], list[Any]]) -> Finding:  # fmt: skip
    having = [f for f in flavors if f.levels and ask.level in f.levels]
    if not having:
        known = [f for f in flavors if f.levels]
        shown = "; ".join(f"Topology {f.topology} (ResourceFlavor {f.flavor}): {', '.join(f.levels or ())}"
                          for f in known) or "none of its Topologies exists"  # fmt: skip
        levels = [level for f in known for level in f.levels or ()]
        use = f"{sets('level', ask, rendered, suggest(ask.level, levels))} (a level there), or " if levels else ""
        return Finding(CHECK, FAIL, f"no Topology of ClusterQueue {cluster_queue} has the level {ask.level} that "
                       f"{ask.pods} ask for ({ask.mode}): Kueue would not admit them; the levels: {shown}",
                       f"{use}ask the Kueue admin to add {ask.level} to a Topology of ClusterQueue {cluster_queue}")
    flavor = having[0]
    carrying = [node for node in nodes() if matches(node, flavor.node_labels) and ask.level in labels_of(node)]
    domains = len({labels_of(node)[ask.level] for node in carrying})
    where = f"level {ask.level} of Topology {flavor.topology} (ResourceFlavor {flavor.flavor})"
    if not carrying:
        return Finding(CHECK, WARN, f"{ask.pods} ask for {where}, but no schedulable node of that flavor carries the "
                       f"label {ask.level}: Kueue finds no domain to place them in until one does",
                       f"`kubectl get nodes -L {ask.level}` shows the label; ask the Kueue admin to label the nodes")
    return Finding(CHECK, OK, f"{ask.pods} ask for {where} ({ask.mode}): {len(carrying)} schedulable node(s) in "
                   f"{domains} domain(s)")


def suggest(level: str, levels: list[str]) -> str:
    """The level meant: the nearest spelling, else the lowest shared one (a node is a domain of one)."""
    close = difflib.get_close_matches(level, levels, n=1, cutoff=0.6)
    shared = [candidate for candidate in levels if candidate != HOSTNAME]
    return close[0] if close else (shared or levels)[-1]


def labels_of(node: Any) -> dict[str, str]:
    return dict((node.metadata.labels if node.metadata else None) or {})


def matches(node: Any, selector: dict[str, str]) -> bool:
    labels = labels_of(node)
    return all(labels.get(key) == value for key, value in selector.items())


# -- Volcano: HyperNodes of the tier -------------------------------------------------------------------------


def check_hypernodes(api: KubeApi, asks: list[Ask], rendered: tuple[str, ...]) -> list[Finding]:
    """Volcano v1.15.1 places a hard unit in one HyperNode of a tier at most highestTierAllowed, below a virtual
    HyperNode of the whole cluster one tier above the highest (tier 1 without any; framework/session.go
    addClusterTopHyperNode); a soft unit in the lowest tier that fits it."""
    hard = [ask for ask in asks if ask.mode == "required"]
    group, version, plural = HYPERNODES
    if plural not in (api.served_resources(group, version) or []):
        return [Finding(CHECK, FAIL if hard else WARN, f"Volcano serves no HyperNodes ({group}/{version}): before "
                        "v1.12 Volcano has no network topology, its PodGroup CRD drops networkTopology and the pods "
                        "would be placed without one", "upgrade Volcano to v1.14 or later (subGroupPolicy) and build "
                        "its HyperNodes, or --set scheduling.topology.mode=none")]  # fmt: skip
    tiers = Counter(int((node.get("spec") or {}).get("tier", 0)) for node in api.list_custom_objects(*HYPERNODES))
    shown = ", ".join(f"{count} of tier {tier}" for tier, count in sorted(tiers.items())) or "none"
    findings = [tier_finding(ask, tiers, shown, rendered) for ask in hard]
    if preferred := tuple(role for ask in asks if ask.mode == "preferred" for role in ask.roles):
        soft = pods_of(preferred)
        findings.append(
            Finding(CHECK, OK, f"HyperNodes ({shown}): Volcano keeps {soft} in the lowest tier that fits them")
            if tiers else Finding(CHECK, WARN, f"no HyperNode exists: Volcano places {soft} without a network "
                                  "topology", "build the HyperNodes (by hand or by Volcano's HyperNode "
                                  "auto-discovery; `kubectl get hypernodes`)"))  # fmt: skip
    return findings


def tier_finding(ask: Ask, tiers: Counter[int], shown: str, rendered: tuple[str, ...]) -> Finding:
    tier, top = int(ask.tier or 0), max(tiers, default=0) + 1
    below = [known for known in tiers if known <= tier]

    def hint(value: int) -> str:
        return f"{sets('tier', ask, rendered, value)}, or build HyperNodes of tier {tier} (`kubectl get hypernodes`)"

    if tier >= top:
        return Finding(CHECK, WARN, f"{ask.pods} may spread across a HyperNode of tier {tier}, but the highest tier "
                       f"there is is {top - 1} ({shown}): tier {top} is the whole cluster, the pods are not kept "
                       "together", hint(top - 1) if tiers else "build the HyperNodes (by hand or by Volcano's "
                       "HyperNode auto-discovery)")  # fmt: skip
    if not below:
        return Finding(CHECK, FAIL, f"no HyperNode of tier {tier} or lower ({shown}): Volcano would hold {ask.pods} "
                       "forever", hint(min(tiers)))
    if tier not in tiers:
        return Finding(CHECK, WARN, f"no HyperNode of tier {tier} ({shown}): {ask.pods} must fit in one HyperNode of "
                       f"tier {max(below)}", hint(max(below)))
    return Finding(CHECK, OK, f"{ask.pods} stay within one HyperNode of tier {tier} at most ({shown})")
