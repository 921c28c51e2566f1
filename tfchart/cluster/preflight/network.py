"""network-policy: whether a CNI that enforces NetworkPolicies runs (DaemonSets in kube-system)."""

from __future__ import annotations

from functools import partial

from tfchart.cluster.objects import name_of
from tfchart.cluster.preflight.plan import OK, WARN, Context, Finding

ENFORCING_CNIS = ("calico-node", "cilium", "weave-net", "antrea-agent", "kube-router", "canal")
finding = partial(Finding, "network-policy")


def check_network_policy(context: Context) -> list[Finding]:
    if not context.planned.doc("NetworkPolicy"):
        return [finding(WARN, "networkPolicy.enabled=false: any pod can reach the TensorFlow gRPC ports, which run any "
                        "graph sent", "--set networkPolicy.enabled=true (the default) on a cluster whose CNI enforces "
                        "NetworkPolicies")]  # fmt: skip
    daemon_sets = [name_of(ds) for ds in context.api.list_objects("DaemonSet", "kube-system")]
    if found := sorted({cni for cni in ENFORCING_CNIS for ds in daemon_sets if ds == cni or ds.startswith(f"{cni}-")}):
        return [finding(OK, f"NetworkPolicies are enforced by {', '.join(found)}")]
    return [finding(WARN, "NetworkPolicies are likely NOT enforced (no known enforcing CNI found in kube-system: "
                    f"{', '.join(ENFORCING_CNIS)})", "install a CNI that enforces them (Calico, Cilium, Antrea...), or "
                    "check your provider's setting (e.g. GKE Dataplane V2, EKS VPC CNI network policy agent)")]
