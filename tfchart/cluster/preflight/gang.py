"""gang-scheduling (a PodGroup in the render: Volcano or coscheduling): the API server serves the PodGroup
at the chart's version (API discovery, which every user may read: reading CRDs needs a ClusterRole);
the Volcano Queue the PodGroup names exists and is Open. That a scheduler runs under the pods'
schedulerName is not checked (its name lives in its own config)."""

from __future__ import annotations

from functools import partial

from tfchart.cluster.preflight.plan import FAIL, GANG_ROLES, OK, WARN, Context, Finding, guarded

# The PodGroup's API group (its version is the render's): the provider named in the values, and how to install it.
GANG_PROVIDERS = {
    "scheduling.volcano.sh": ("volcano", "install Volcano (`helm repo add volcano-sh https://volcano-sh.github.io/"
                              "helm-charts && helm install volcano volcano-sh/volcano -n volcano-system "
                              "--create-namespace`)"),
    "scheduling.x-k8s.io": ("coscheduling", "install kubernetes-sigs/scheduler-plugins as a second scheduler with the "
                            "Coscheduling plugin (its chart manifests/install/charts/as-a-second-scheduler)"),
}  # fmt: skip
finding = partial(Finding, "gang-scheduling")


def check_gang(context: Context) -> list[Finding]:
    """The PodGroup's CRD serves the render's version (API discovery); Volcano's named queue exists and is Open."""
    if (group := context.planned.doc("PodGroup")) is None:
        return []
    api_group, _, version = str(group.get("apiVersion")).partition("/")
    name, install = GANG_PROVIDERS[api_group]
    crd, served = f"podgroups.{api_group}", f"{api_group}/{version}"
    if not context.serves(api_group, version, "podgroups"):
        return [finding(FAIL, f"scheduling.gang.provider={name} but CRD {crd} is not installed (the API server serves "
                        f"no podgroups in {served}): the chart's PodGroup cannot be created",
                        f"{install}, or --set scheduling.gang.provider=none")]
    # the chart names the provider's scheduler on the TensorFlow pods unless the values name another
    scheduler = next((r.scheduler for r in context.planned.roles if r.role in GANG_ROLES and r.scheduler), "")
    findings = [finding(OK, f"CRD {crd} serves {served} (that a scheduler runs as {scheduler} is not checked)")]
    if name == "volcano" and (queue := str((group.get("spec") or {}).get("queue") or "")):
        findings += guarded("gang-scheduling", lambda: [check_volcano_queue(context, queue)])
    return findings


def check_volcano_queue(context: Context, name: str) -> Finding:
    """Volcano's admission webhook refuses a PodGroup whose queue is missing or not Open
    (pkg/webhooks/admission/podgroups/validate, Volcano v1.15.1); its scheduler skips such a queue."""
    pick = "pick another (`kubectl get queues.scheduling.volcano.sh`): --set scheduling.gang.volcanoQueue=<queue>"
    queue = context.api.read_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)
    if queue is None:
        return finding(FAIL, f"Volcano Queue {name} does not exist: Volcano refuses a PodGroup in an unknown queue",
                       f'create the queue, {pick}, or --set scheduling.gang.volcanoQueue="" for Volcano\'s default '
                       "queue")
    state = str((queue.get("status") or {}).get("state") or "")
    if state == "Open":
        return finding(OK, f"Volcano Queue {name} is Open")
    if not state:
        return finding(WARN, f"Volcano Queue {name} has no state yet: Volcano accepts PodGroups only in an Open queue",
                       "Volcano's controller sets it: check that it runs (`kubectl get pods -n volcano-system`)")
    return finding(FAIL, f"Volcano Queue {name} is {state}: Volcano refuses new PodGroups in a queue that is not Open",
                   f"open it (`vcctl queue operate --name {name} --action open`) or {pick}")
