"""Whether the release's requests fit. gpu-capacity: GPUs the release's pods request (per extended resource) against
the allocatable GPUs of schedulable nodes, minus what running pods of other releases hold (best effort), and whether
one node can host the largest pod (a pod cannot span nodes). co-location (co-located releases only): one schedulable
node must hold the requests of every pod of the release (allocatable, other pods' requests not counted). quota: every
ResourceQuota of the namespace: used + what the release adds, against hard. nodeSelector/tolerations/affinity are not
evaluated; the messages say so when a role sets them. storage: the access mode the release needs (ReadWriteMany when
pods may spread over nodes, ReadWriteOnce when the chart co-locates them) against the existing claim's own access modes,
or against the StorageClass the created claim would use (named, else the default), judged by its provisioner
(PROVISIONERS); every StorageClass of the cluster is listed with what it offers, so the message names the ones that
would do."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from functools import partial
from typing import Any, NamedTuple

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.preflight.context import FAIL, OK, WARN, Context, Finding, allocatable, requested
from tfchart.manifests.quantity import parse, parse_or_none, shown
from tfchart.manifests.workloads import Workload, gpus, resources, workloads
from tfdcontract import CHART_NAME, COMPONENTS, INSTANCE_LABEL, PART_OF_LABEL, SUPERVISOR
from tfdcontract.runstate import name_of

gpu, colocation, quota, finding = (partial(Finding, check) for check in ("gpu-capacity", "co-location", "quota",
                                                                         "storage"))  # fmt: skip

# -- gpu-capacity -----------------------------------------------------------------------------------------------------
def check_gpus(context: Context) -> list[Finding]:
    """The GPUs the release asks for, per resource, against the schedulable nodes' and those that unfinished pods of
    other releases hold there (a release of the same name in another namespace is another release); best effort, read
    a page at a time: a large cluster's pods never all at once."""
    asks: dict[str, list[tuple[Workload, int]]] = {}  # per GPU resource: the roles and their GPUs per pod
    for role in context.roles:
        for resource, count in gpus(role.spec).items():
            asks.setdefault(resource, []).append((role, count))
    if not asks:
        return [gpu(OK, "the release requests no GPUs")]
    nodes, used, note = context.nodes, Counter[tuple[str, str]](), ""  # GPUs held per (node, resource)
    own = (context.namespace, context.release, CHART_NAME)
    try:
        for page in context.api.pages("Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed"):
            for metadata, spec in ((pod.get("metadata") or {}, pod.get("spec") or {}) for pod in page):
                labels = metadata.get("labels") or {}
                if spec.get("nodeName") and own != (metadata.get("namespace"), labels.get(INSTANCE_LABEL),
                                                    labels.get(PART_OF_LABEL)):  # fmt: skip
                    used.update({(spec["nodeName"], resource): count for resource, count in gpus(spec).items()})
    except AccessDenied:
        used, note = Counter(), " (other pods' GPU use is unknown: listing pods in all namespaces is forbidden)"
    return [gpu_finding(resource, asks[resource], nodes, used, note) for resource in sorted(asks)]


def gpu_finding(resource: str, asks: list[tuple[Workload, int]], nodes: list[dict[str, Any]],
                used: Counter[tuple[str, str]], usage_note: str) -> Finding:  # fmt: skip
    pods = [count for role, count in asks for _ in range(role.replicas)]
    needed, who = sum(pods), ", ".join(f"{role.role} {role.replicas}x{count}" for role, count in asks)
    capacity = {name_of(node): int(allocatable(node, resource)) for node in nodes}
    free = {node: max(0, count - used[(node, resource)]) for node, count in capacity.items()}
    placed = placement([role for role, _ in asks])
    note = usage_note + (f" ({placed} of the GPU roles not evaluated: counted every schedulable node)"
                         if placed else "")  # fmt: skip
    total, largest, biggest_node = sum(capacity.values()), max(pods), max(capacity.values(), default=0)
    if total == 0:
        return gpu(FAIL, f"the release needs {needed} {resource} ({who}) but no schedulable node advertises "
                       f"{resource}{note}", f"install the device plugin for {resource} (e.g. the NVIDIA GPU operator) "
                       "or add GPU nodes; check with `kubectl describe nodes | grep -i gpu`")  # fmt: skip
    if biggest_node < largest:
        return gpu(FAIL, f"a pod needs {largest} {resource} but the largest node has {biggest_node}: a pod cannot "
                       f"span nodes{note}", f"lower gpu.count per pod (and raise replicas) or add a node with "
                       f"{largest} {resource}")  # fmt: skip
    if total < needed or not fits(pods, capacity):
        return gpu(FAIL, f"the release needs {needed} {resource} ({who}); schedulable nodes have {total} "
                       f"({describe_nodes(capacity)}){note}", "lower the replicas or gpu.count of the GPU roles, or "
                       "add GPU nodes")  # fmt: skip
    available = f"{sum(free.values())} of {total}"
    if not fits(pods, free):
        return gpu(WARN, f"tight: the release needs {needed} {resource} ({who}); {available} are free now "
                       f"({describe_nodes(free)}){note}", "some pods will stay Pending until other workloads release "
                       "GPUs (`kubectl describe nodes`)")  # fmt: skip
    return gpu(OK, f"{needed} {resource} needed ({who}); {available} free ({describe_nodes(free)}){note}")


def fits(pods: list[int], capacity: dict[str, int]) -> bool:
    """First-fit decreasing: can every pod get its GPUs on one node?"""
    left = dict(capacity)
    for need in sorted(pods, reverse=True):
        if (node := next((node for node, count in sorted(left.items()) if count >= need), None)) is None:
            return False
        left[node] -= need
    return True


def placement(roles: list[Workload]) -> str:
    """The placement the values set on the roles (nodeSelector, tolerations, node affinity), which is not evaluated."""
    chosen = {key for role in roles for key in ("nodeSelector", "tolerations") if role.spec.get(key)}
    affinity = {"affinity" for role in roles if (role.spec.get("affinity") or {}).get("nodeAffinity")}
    return "/".join(sorted(chosen | affinity))


def describe_nodes(counts: dict[str, int]) -> str:
    return ", ".join(f"{node}: {count}" for node, count in sorted(counts.items()) if count) or "none"


# -- quota ------------------------------------------------------------------------------------------------------------
def check_quota(context: Context) -> list[Finding]:
    quotas = context.api.items("ResourceQuota", context.namespace)
    if not quotas:
        return [quota(OK, f"no ResourceQuota in namespace {context.namespace}")]
    return [quota_finding(context, each) for each in quotas]


def quota_finding(context: Context, resource_quota: dict[str, Any]) -> Finding:
    status = resource_quota.get("status") or {}
    hard, used = status.get("hard") or (resource_quota.get("spec") or {}).get("hard") or {}, status.get("used") or {}
    over, tight, missing = [], [], []
    for key in sorted(hard):
        if not (adds := context.adds.get(key)):
            continue
        limit, now = parse(hard[key]), parse(used.get(key, "0"))
        if now + adds > limit:
            over.append(f"{key}: {shown(now)} used + {shown(adds)} > {shown(limit)}")
        elif now + adds > limit * Decimal("0.9"):
            tight.append(f"{key}: {shown(now + adds)} of {shown(limit)} after install")
        kind, _, resource = key.partition(".")  # quota on a compute resource rejects pods that do not set it
        missing += [f"{role.role} pods set no {key} and would be rejected by the quota"
                    for role in context.roles if kind in ("requests", "limits")
                    and resource in ("cpu", "memory") and resource not in resources(role.spec, kind)]  # fmt: skip
    called = name_of(resource_quota)
    if over or missing:
        return quota(FAIL, f"ResourceQuota {called} would be exceeded: " + "; ".join(over + missing),
                       f"lower replicas/resources, or ask for more quota (`kubectl describe resourcequota {called}`)")
    if tight:
        return quota(WARN, f"ResourceQuota {called} is almost full: " + "; ".join(tight),
                       "a restart or an upgrade's extra pod may not fit")
    return quota(OK, f"ResourceQuota {called} has room for the release")


# -- co-location -----------------------------------------------------------------------------------------------------
def check_colocation(context: Context) -> list[Finding]:
    """Co-located pods must all fit one node: their requests against each schedulable node's allocatable.
    The supervisor mounts no claim, so it is free to run elsewhere. Run only when the values co-locate the pods."""
    if not ((storage := storage_need(context.docs)) and storage.mode != RWM):
        return []
    roles = [role for role in context.roles if role.role != SUPERVISOR]
    pods = sum(role.replicas for role in roles)
    needed = requested(roles)
    what = ", ".join(f"{shown(value)} {key}" for key, value in needed.items()) or "nothing"
    note = f" ({placed} not evaluated)" if (placed := placement(roles)) else ""
    listed = context.nodes
    fitting = [name_of(n) for n in listed if all(allocatable(n, key) >= value for key, value in needed.items())]
    head = f"storage needs {storage.mode}, so all {pods} pods run on one node: they request {what}"
    if fitting:
        return [colocation(OK, f"{head}; fits {', '.join(fitting)} (allocatable, before other pods){note}")]
    sizes = "; ".join(f"{name_of(node)}: " + ", ".join(f"{shown(allocatable(node, key))} {key}" for key in needed)
                      for node in listed)
    return [colocation(FAIL, f"{head}; no schedulable node has that much allocatable ({sizes or 'no schedulable node'})"
                       f"{note}", "lower the requests (values/cpu.yaml fits a 4-CPU, 8 GiB node), add a bigger node, "
                       "or --set storage.accessModes={ReadWriteMany} with a StorageClass that offers it, so pods may "
                       "spread")]


# -- storage ---------------------------------------------------------------------------------------------------------
RWX, RWO_ONLY, NODE_LOCAL, DEPENDS, UNKNOWN = "rwx", "rwo-only", "node-local", "depends", "unknown"
RWM = "ReadWriteMany"

# Well-known provisioners by what they offer for ReadWriteMany (every provisioner offers ReadWriteOnce), from each
# driver's documentation (and source where named). A class is matched by its provisioner, exactly or as a suffix
# after a dot (Rook names its Ceph drivers <operator-namespace>.cephfs.csi.ceph.com). Anything else is unknown.
DEPENDING = {  # ReadWriteMany depending on the class's parameters or backend: what it depends on
    "csi.vsphere.vmware.com": "vSphere: ReadWriteMany only for vSAN file volumes",
    "csi.trident.netapp.io": "NetApp Trident: ReadWriteMany with NAS backends only",
    "pxd.portworx.com": "Portworx: ReadWriteMany with sharedv4 volumes only",
}
OFFERS: dict[str, tuple[str, ...]] = {
    # ReadWriteOnce only: a ReadWriteMany claim stays Pending (ProvisioningFailed). local-path (kind, k3d, k3s) says
    # "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes"; Ceph RBD offers ReadWriteMany
    # only as raw block.
    RWO_ONLY: ("rancher.io/local-path", "kubernetes.io/no-provisioner", "openebs.io/local", "ebs.csi.aws.com",
               "kubernetes.io/aws-ebs", "pd.csi.storage.gke.io", "kubernetes.io/gce-pd", "disk.csi.azure.com",
               "kubernetes.io/azure-disk", "cinder.csi.openstack.org", "dobs.csi.digitalocean.com", "rbd.csi.ceph.com"),
    # hostPath on one node's disk, any access mode accepted (minikube copies the claim's modes into
    # a hostPath volume: kubernetes/minikube pkg/storage/storage_provisioner.go): ReadWriteMany
    # binds, but pods on other nodes would not see the data.
    NODE_LOCAL: ("k8s.io/minikube-hostpath", "docker.io/hostpath"),
    # ReadWriteMany: shared file systems (Longhorn through its share manager).
    RWX: ("nfs.csi.k8s.io", "k8s-sigs.io/nfs-subdir-external-provisioner", "cephfs.csi.ceph.com", "efs.csi.aws.com",
          "cluster.local/nfs-subdir-external-provisioner", "fsx.csi.aws.com", "file.csi.azure.com", "smb.csi.k8s.io",
          "kubernetes.io/azure-file", "filestore.csi.storage.gke.io", "driver.longhorn.io"),
    DEPENDS: tuple(DEPENDING),
}  # fmt: skip
PROVISIONERS = {name: offer for offer, names in OFFERS.items() for name in names}
CAPABILITY = {RWX: "offers {mode}", RWO_ONLY: "ReadWriteOnce only", NODE_LOCAL: "one node's disk",
              DEPENDS: "{mode} depends on the class", UNKNOWN: "unknown provisioner, check its docs"}  # fmt: skip
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")
COLOCATE_FIX = ("--set storage.accessModes={ReadWriteOnce} to co-locate every pod on one node, which any StorageClass "
                "serves (as values/cpu.yaml does; the node must fit them all)")
RWX_EXAMPLES = "NFS, CephFS, EFS, Azure Files, Filestore, Longhorn..."
CLAIM_PODS = (*COMPONENTS, "helm test")  # the chart's claimPods order


class StorageNeed(NamedTuple):
    """What the release asks of its claim, read from the render (the chart says it in words, tf-distributed.storageNeed:
    in NOTES and to `tfchart validate`)."""

    mode: str  # ReadWriteMany | ReadWriteOnce | ReadWriteOncePod; any but ReadWriteMany co-locates the pods
    total: int  # the pods that mount the claim
    pods: str  # "N pods mount the claim (ps 1, worker 2, ...)", as the chart's claimPodsPhrase says it
    claim: str
    claim_spec: dict[str, Any] | None  # the PersistentVolumeClaim the chart creates; None: an existing claim


def storage_need(docs: list[dict[str, Any]]) -> StorageNeed | None:
    """The release's storage need; None when nothing mounts a claim."""
    mounting = [w for w in workloads(docs) if w.claims() and w.replicas > 0]
    if not mounting:
        return None
    claim = mounting[0].claims()[0]
    spec = next((doc.get("spec") or {} for doc in docs if doc.get("kind") == "PersistentVolumeClaim"
                 and (doc.get("metadata") or {}).get("name") == claim), None)  # fmt: skip
    counts: dict[str, int] = {}
    for w in sorted(mounting, key=lambda w: CLAIM_PODS.index(w.role) if w.role in CLAIM_PODS else len(CLAIM_PODS)):
        counts[w.role] = counts.get(w.role, 0) + w.replicas
    total, roles = sum(counts.values()), ", ".join(f"{role} {count}" for role, count in counts.items())
    modes = list(spec.get("accessModes") or []) if spec else []
    if not modes:  # an existing claim: the chart co-locates the pods unless the values asked for ReadWriteMany
        modes = ["ReadWriteOnce"] if any(_colocated(w.spec) for w in mounting) else [RWM]
    mode = next((m for m in (RWM, "ReadWriteOnce") if m in modes), modes[0])
    return StorageNeed(mode, total, f"{total} {'pod mounts' if total == 1 else 'pods mount'} the claim ({roles})",
                       claim, spec)  # fmt: skip


def _colocated(pod: dict[str, Any]) -> bool:
    """A required podAffinity on the node: how the chart co-locates the pods."""
    terms = ((pod.get("affinity") or {}).get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return any(term.get("topologyKey") == "kubernetes.io/hostname" for term in terms or [])


def check_storage(context: Context) -> list[Finding]:
    need = storage_need(context.docs)
    if need is None:
        return [finding(FAIL, "no pod of the release mounts a volume for checkpoints, logs and exports",
                        "--set storage.create=true or --set storage.existingClaim=<pvc-name>")]
    if need.claim_spec is None:
        return [check_existing_claim(context, need)]
    return [check_storage_class(context, need.claim_spec.get("storageClassName"), need)]


def check_existing_claim(context: Context, need: StorageNeed) -> Finding:
    """The claim's own access modes (as bound, else as requested) against what the values need."""
    claim, namespace = need.claim, context.namespace
    pvc = context.api.read_object("PersistentVolumeClaim", claim, namespace)
    if pvc is None:
        return finding(FAIL, f"storage.existingClaim {claim} does not exist in namespace {namespace}", "create the "
                       f"PersistentVolumeClaim first (`kubectl -n {namespace} get pvc`) or unset storage.existingClaim")
    status, spec = pvc.get("status") or {}, pvc.get("spec") or {}
    phase = status.get("phase") or "Pending"
    listed = list((status.get("accessModes") if phase == "Bound" else None) or spec.get("accessModes") or [])
    has, modes = set(listed), ", ".join(listed) or "none"
    refusals = (
        (phase not in ("Bound", "Pending"), f"claim {claim} is {phase}", "its volume is gone: recreate the claim"),
        (need.mode == RWM and RWM not in has, f"claim {claim} has access modes {modes}, the release needs "
         f"ReadWriteMany: {need.pods} from any node", f"{COLOCATE_FIX}, or use a claim that offers "
         f"ReadWriteMany ({RWX_EXAMPLES})"),
        (need.total > 1 and not {"ReadWriteOnce", RWM} & has, f"claim {claim} has access modes {modes}: not one that "
         f"{need.total} pods can share ({need.pods})", "use a ReadWriteOnce claim (the chart co-locates the "
         "pods) or a ReadWriteMany one"),
        (not {"ReadWriteOnce", RWM, "ReadWriteOncePod"} & has, f"claim {claim} has access modes {modes}: not "
         "writable", "use a writable claim"),
    )  # fmt: skip
    if refused := next((refusal for refusal in refusals if refusal[0]), None):
        return finding(FAIL, *refused[1:])
    state = "Bound" if phase == "Bound" else "Pending (binds when the first pod is scheduled, or waits for a volume)"
    spread = "; it offers ReadWriteMany: --set storage.accessModes={ReadWriteMany} lets the pods spread over nodes" \
        if need.mode != RWM and RWM in has and need.total > 1 else ""  # fmt: skip
    return finding(OK, f"claim {claim} is {state} with {modes}: the release needs {need.mode}{spread}")


def offers(storage_class: dict[str, Any], mode: str) -> tuple[str, str]:
    """What the class offers for `mode` (RWX: offers it, RWO_ONLY, NODE_LOCAL, DEPENDS or UNKNOWN), and what that
    depends on. Every provisioner offers ReadWriteOnce (and a one-pod ReadWriteOncePod)."""
    driver = str(storage_class["provisioner"])
    key = next((key for key in PROVISIONERS if driver == key or driver.endswith(f".{key}")), "")
    return PROVISIONERS.get(key, UNKNOWN) if mode == RWM else RWX, DEPENDING.get(
        key, f"{driver} is not a provisioner tfchart knows")


def check_storage_class(context: Context, class_name: str | None, need: StorageNeed) -> Finding:
    mode = need.mode
    classes = [] if class_name == "" else context.api.items("StorageClass")
    defaults = [c for c in classes if any((c["metadata"].get("annotations") or {}).get(key) == "true"
                                          for key in DEFAULT_CLASS_ANNOTATIONS)]  # fmt: skip
    if (class_name == "" or (class_name is None and not defaults)) and (volume := static_volume(context, need, "")):
        return finding(OK, f"needs {mode}: the claim has no StorageClass and binds to {volume}")
    if class_name == "":
        return finding(WARN, f'storage.storageClassName is "": the claim binds only to a pre-created PersistentVolume '
                       f"with {mode}", "create a matching PersistentVolume, or set storage.storageClassName (null = "
                       "the default class)")  # fmt: skip
    listing = "StorageClasses: " + ("; ".join(
        f"{name_of(c)} ({c['provisioner']}{', default' * (c in defaults)}): "
        + CAPABILITY[offers(c, mode)[0]].format(mode=mode) for c in classes) or "none")  # fmt: skip
    offering = [name_of(c) for c in classes if offers(c, mode)[0] == RWX]
    choose = f"<one that offers {mode}: {', '.join(offering)}>" if offering else \
        f"<one of: {', '.join(map(name_of, classes))}>"  # fmt: skip
    fix = (f"--set storage.storageClassName={choose}" if classes else "the cluster has no StorageClass: install a "
           f"provisioner that offers {mode}{f' ({RWX_EXAMPLES})' * (mode == RWM)}, or create a "
           f'PersistentVolume that does and --set storage.storageClassName=""')  # fmt: skip
    if class_name is None and not defaults:
        return finding(FAIL, "no default StorageClass and storage.storageClassName is not set: the claim would stay "
                       f"Pending. {listing}", fix + ", or mark a class as default" * bool(classes))
    chosen = next((c for c in classes if name_of(c) == class_name), None) if class_name else max(
        defaults, key=lambda c: str(c["metadata"].get("creationTimestamp") or ""))  # the newest default, as Kubernetes
    if chosen is None:
        return finding(FAIL, f"StorageClass {class_name} does not exist. {listing}", fix)
    label = f"StorageClass {class_name}" if class_name else f"default StorageClass {name_of(chosen)}" + (
        f" (one of {len(defaults)} default classes: Kubernetes picks the newest)" if len(defaults) > 1 else "")
    label += f" ({chosen['provisioner']})"
    capability, provisioner = offers(chosen, mode)
    if capability != RWX and (volume := static_volume(context, need, name_of(chosen))):
        return finding(OK, f"needs {mode}: the claim of {label} binds to {volume}. {listing}")
    if capability == RWX:
        spread = [name_of(c) for c in classes if offers(c, RWM)[0] == RWX] if mode != RWM and need.total > 1 else []
        tip = (f" ({spread[0]} offers ReadWriteMany: --set storage.accessModes={{ReadWriteMany}} "
               f"--set storage.storageClassName={spread[0]} lets the pods spread over nodes)") if spread else ""
        return finding(OK, f"needs {mode}: {label} offers it{tip}. {listing}")
    if others := [each for each in offering if each != name_of(chosen)]:
        hint = f"--set storage.storageClassName={others[0]} (it offers {mode}), or {COLOCATE_FIX}"
    else:
        hint = (f"on one node: {COLOCATE_FIX}; across nodes: install a provisioner that offers {mode} "
                f"({RWX_EXAMPLES}) and --set storage.storageClassName=<its class>")
    why, count = f"needs {mode}: {need.pods} from any node", len(context.nodes) if capability == NODE_LOCAL else 0
    severity, message = {  # by what the class offers (a node-local one: by how many nodes could share the volume)
        RWO_ONLY: (FAIL, f"{why}, but {label} offers ReadWriteOnce only: the claim would stay Pending"),
        NODE_LOCAL: (FAIL, f"{why}, but {label} keeps each volume on one node's disk: pods on the other {count - 1} "
                     "node(s) would not see the data") if count > 1 else (WARN, f"{why}: {label} keeps each volume on "
                     "one node's disk, shared only because this cluster has one schedulable node (if the claim stays "
                     f"Pending, it refuses {mode})"),
    }.get(capability, (WARN, f"{why}: whether {label} offers it is unknown ({provisioner}): check its docs"))
    return finding(severity, f"{message}. {listing}", hint)


def static_volume(context: Context, need: StorageNeed, class_name: str) -> str | None:
    """A pre-created PersistentVolume of the class ("": none) that the new claim binds to before any is provisioned:
    Available, reserved for no other claim, with the mode and the size; None also where volumes may not be listed."""
    try:
        volumes = context.api.items("PersistentVolume")
    except AccessDenied:
        return None
    wanted = parse_or_none((((need.claim_spec or {}).get("resources") or {}).get("requests") or {}).get("storage")) or 0
    for volume in volumes:
        spec, phase = volume.get("spec") or {}, (volume.get("status") or {}).get("phase")
        size = parse_or_none(capacity := (spec.get("capacity") or {}).get("storage")) or 0
        if (phase, spec.get("claimRef"), spec.get("storageClassName") or "", spec.get("volumeMode") or "Filesystem") \
                == ("Available", None, class_name, "Filesystem") and need.mode in (spec.get("accessModes") or []) \
                and size >= wanted:  # fmt: skip
            return f"PersistentVolume {name_of(volume)} (pre-created, Available, {capacity}, {need.mode})"
    return None
