"""gang-scheduling (a PodGroup in the render: Volcano or coscheduling): the API server serves the PodGroup
at the chart's version (API discovery, which every user may read: reading CRDs needs a ClusterRole);
the Volcano Queue the PodGroup names exists and is Open. That a scheduler runs under the pods'
schedulerName is not checked (its name lives in its own config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfchart.cluster.preflight.findings import FAIL, OK, WARN, Finding, guarded
from tfchart.cluster.preflight.plan import GANG_ROLES, Plan

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi


@dataclass(frozen=True)
class GangProvider:
    """Where a gang provider's PodGroup is served, the scheduler the chart names by default, how to install it."""

    group: str
    version: str
    scheduler: str
    install: str


GANG_PROVIDERS = {
    "volcano": GangProvider(
        "scheduling.volcano.sh", "v1beta1", "volcano",
        "install Volcano (`helm repo add volcano-sh https://volcano-sh.github.io/helm-charts && "
        "helm install volcano volcano-sh/volcano -n volcano-system --create-namespace`)",
    ),
    "coscheduling": GangProvider(
        "scheduling.x-k8s.io", "v1alpha1", "scheduler-plugins-scheduler",
        "install kubernetes-sigs/scheduler-plugins as a second scheduler with the Coscheduling plugin "
        "(its chart manifests/install/charts/as-a-second-scheduler)",
    ),
}


def check_gang(api: KubeApi, planned: Plan) -> list[Finding]:
    """The PodGroup's CRD serves the chart's version (API discovery); Volcano's named queue exists and is Open."""
    group = planned.pod_group or {}
    name = next(key for key, known in GANG_PROVIDERS.items() if str(group.get("apiVersion")).startswith(known.group))
    provider = GANG_PROVIDERS[name]
    crd, served = f"podgroups.{provider.group}", f"{provider.group}/{provider.version}"
    if "podgroups" not in (api.served_resources(provider.group, provider.version) or []):
        return [Finding("gang-scheduling", FAIL, f"scheduling.gang.provider={name} but CRD {crd} is not installed "
                        f"(the API server serves no podgroups in {served}): the chart's PodGroup cannot be created",
                        f"{provider.install}, or --set scheduling.gang.provider=none")]
    named = [role.scheduler for role in planned.roles if role.role in GANG_ROLES and role.scheduler]
    scheduler = named[0] if named else provider.scheduler
    checked = f"CRD {crd} serves {served} (that a scheduler runs as {scheduler} is not checked)"
    findings = [Finding("gang-scheduling", OK, checked)]
    queue = str((group.get("spec") or {}).get("queue") or "")
    if name == "volcano" and queue:
        findings += guarded("gang-scheduling", lambda: [check_volcano_queue(api, queue)])
    return findings


def check_volcano_queue(api: KubeApi, name: str) -> Finding:
    """Volcano's admission webhook refuses a PodGroup whose queue is missing or not Open
    (pkg/webhooks/admission/podgroups/validate, Volcano v1.15.1); its scheduler skips such a queue."""
    pick = "pick another (`kubectl get queues.scheduling.volcano.sh`): --set scheduling.gang.volcanoQueue=<queue>"
    queue = api.read_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)
    if queue is None:
        return Finding("gang-scheduling", FAIL,
                       f"Volcano Queue {name} does not exist: Volcano refuses a PodGroup in an unknown queue",
                       f'create the queue, {pick}, or --set scheduling.gang.volcanoQueue="" for Volcano\'s default '
                       "queue")
    state = str((queue.get("status") or {}).get("state") or "")
    if state == "Open":
        return Finding("gang-scheduling", OK, f"Volcano Queue {name} is Open")
    if not state:
        return Finding("gang-scheduling", WARN,
                       f"Volcano Queue {name} has no state yet: Volcano accepts PodGroups only in an Open queue",
                       "Volcano's controller sets it: check that it runs (`kubectl get pods -n volcano-system`)")
    return Finding("gang-scheduling", FAIL,
                   f"Volcano Queue {name} is {state}: Volcano refuses new PodGroups in a queue that is not Open",
                   f"open it (`vcctl queue operate --name {name} --action open`) or {pick}")
