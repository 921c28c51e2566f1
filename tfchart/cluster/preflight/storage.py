"""storage: the access mode the release needs (ReadWriteMany when pods may spread over nodes, ReadWriteOnce when the
chart co-locates them) against the existing claim's own access modes, or against the StorageClass the created claim
would use (named, else the default), judged by its provisioner (PROVISIONERS); every StorageClass of the cluster is
listed with what it offers, so the message names the ones that would do."""

from __future__ import annotations

from functools import partial
from typing import Any

from tfchart.cluster.kube import AccessDenied
from tfchart.cluster.preflight.plan import FAIL, OK, WARN, Context, Finding, name
from tfchart.manifests.quantity import parse_or_none
from tfchart.values.storage import RWX_EXAMPLES, StorageNeed

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
finding = partial(Finding, "storage")


def check_storage(context: Context) -> list[Finding]:
    need = context.storage
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
         f"ReadWriteMany: {need.pods_phrase} from any node", f"{COLOCATE_FIX}, or use a claim that offers "
         f"ReadWriteMany ({RWX_EXAMPLES})"),
        (need.total > 1 and not {"ReadWriteOnce", RWM} & has, f"claim {claim} has access modes {modes}: not one that "
         f"{need.total} pods can share ({need.pods_phrase})", "use a ReadWriteOnce claim (the chart co-locates the "
         "pods) or a ReadWriteMany one"),
        (not {"ReadWriteOnce", RWM, "ReadWriteOncePod"} & has, f"claim {claim} has access modes {modes}: not "
         "writable", "use a writable claim"),
    )  # fmt: skip
    if refused := next((refusal for refusal in refusals if refusal[0]), None):
        return finding(FAIL, *refused[1:])
    state = "Bound" if phase == "Bound" else "Pending (binds when the first pod is scheduled, or waits for a volume)"
    spread = "; it offers ReadWriteMany: --set storage.accessModes={ReadWriteMany} lets the pods spread over nodes" \
        if need.colocated and RWM in has and need.total > 1 else ""  # fmt: skip
    return finding(OK, f"claim {claim} is {state} with {modes}: the release needs {need.mode}{spread}")


def offers(storage_class: dict[str, Any], mode: str) -> tuple[str, str]:
    """What the class offers for `mode` (RWX: offers it, RWO_ONLY, NODE_LOCAL, DEPENDS or UNKNOWN), and what that
    depends on. Every provisioner offers ReadWriteOnce (and a one-pod ReadWriteOncePod)."""
    driver = str(storage_class["provisioner"])
    key = next((key for key in PROVISIONERS if driver == key or driver.endswith(f".{key}")), "")
    return PROVISIONERS.get(key, UNKNOWN) if mode == RWM else RWX, DEPENDING.get(
        key, f"{driver} is not a provisioner tfchart knows")


def is_default_class(storage_class: dict[str, Any]) -> bool:
    annotations = storage_class["metadata"].get("annotations") or {}
    return any(annotations.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


def check_storage_class(context: Context, class_name: str | None, need: StorageNeed) -> Finding:
    mode = need.mode
    classes = [] if class_name == "" else context.api.items("StorageClass")
    defaults = [c for c in classes if is_default_class(c)]
    if (class_name == "" or (class_name is None and not defaults)) and (volume := static_volume(context, need, "")):
        return finding(OK, f"needs {mode}: the claim has no StorageClass and binds to {volume}")
    if class_name == "":
        return finding(WARN, f'storage.storageClassName is "": the claim binds only to a pre-created PersistentVolume '
                       f"with {mode}", "create a matching PersistentVolume, or set storage.storageClassName (null = "
                       "the default class)")  # fmt: skip
    listing = "StorageClasses: " + ("; ".join(
        f"{name(c)} ({c['provisioner']}{', default' * is_default_class(c)}): "
        + CAPABILITY[offers(c, mode)[0]].format(mode=mode) for c in classes) or "none")  # fmt: skip
    offering = [name(c) for c in classes if offers(c, mode)[0] == RWX]
    choose = f"<one that offers {mode}: {', '.join(offering)}>" if offering else \
        f"<one of: {', '.join(map(name, classes))}>"  # fmt: skip
    fix = (f"--set storage.storageClassName={choose}" if classes else "the cluster has no StorageClass: install a "
           f"provisioner that offers {mode}{f' ({RWX_EXAMPLES})' * (mode == RWM)}, or create a "
           f'PersistentVolume that does and --set storage.storageClassName=""')  # fmt: skip
    if class_name is None and not defaults:
        return finding(FAIL, "no default StorageClass and storage.storageClassName is not set: the claim would stay "
                       f"Pending. {listing}", fix + ", or mark a class as default" * bool(classes))
    if class_name is None:  # Kubernetes picks the newest default
        chosen = max(defaults, key=lambda c: str(c["metadata"].get("creationTimestamp") or ""))
        label = f"default StorageClass {name(chosen)}" + (f" (one of {len(defaults)} default classes: Kubernetes "
                                                             "picks the newest)" if len(defaults) > 1 else "")
    elif (found := next((c for c in classes if name(c) == class_name), None)) is None:
        return finding(FAIL, f"StorageClass {class_name} does not exist. {listing}", fix)
    else:
        chosen, label = found, f"StorageClass {class_name}"
    label += f" ({chosen['provisioner']})"
    capability, provisioner = offers(chosen, mode)
    if capability != RWX and (volume := static_volume(context, need, name(chosen))):
        return finding(OK, f"needs {mode}: the claim of {label} binds to {volume}. {listing}")
    if capability == RWX:
        spread = [name(c) for c in classes if offers(c, RWM)[0] == RWX] if need.colocated and need.total > 1 else []
        tip = (f" ({spread[0]} offers ReadWriteMany: --set storage.accessModes={{ReadWriteMany}} "
               f"--set storage.storageClassName={spread[0]} lets the pods spread over nodes)") if spread else ""
        return finding(OK, f"needs {mode}: {label} offers it{tip}. {listing}")
    if others := [each for each in offering if each != name(chosen)]:
        hint = f"--set storage.storageClassName={others[0]} (it offers {mode}), or {COLOCATE_FIX}"
    else:
        hint = (f"on one node: {COLOCATE_FIX}; across nodes: install a provisioner that offers {mode} "
                f"({RWX_EXAMPLES}) and --set storage.storageClassName=<its class>")
    why = f"needs {mode}: {need.pods_phrase} from any node"
    if capability == RWO_ONLY:
        severity, message = FAIL, f"{why}, but {label} offers ReadWriteOnce only: the claim would stay Pending"
    elif capability == NODE_LOCAL and (count := len(context.nodes)) > 1:
        severity, message = FAIL, f"{why}, but {label} keeps each volume on one node's disk: pods on the other " \
            f"{count - 1} node(s) would not see the data"  # fmt: skip
    elif capability == NODE_LOCAL:
        severity, message = WARN, f"{why}: {label} keeps each volume on one node's disk, shared only because this " \
            f"cluster has one schedulable node (if the claim stays Pending, it refuses {mode})"  # fmt: skip
    else:
        severity, message = WARN, f"{why}: whether {label} offers it is unknown ({provisioner}): check its docs"
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
            return f"PersistentVolume {name(volume)} (pre-created, Available, {capacity}, {need.mode})"
    return None
