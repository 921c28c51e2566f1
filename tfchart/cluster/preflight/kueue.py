"""kueue (pods, or a JobSet, labelled with a Kueue queue): Kueue serves LocalQueues (v1beta2, else v1beta1); under a
JobSet, Kueue's configuration enables its jobset integration; the LocalQueue exists in the namespace and is not
stopped; its ClusterQueue exists, is active and has the nominal quota (summed over flavors) for what the TensorFlow
pods request, covering every resource they request; the WorkloadPriorityClass the pods name exists."""

from __future__ import annotations

from decimal import Decimal
from functools import partial
from typing import Any

import yaml

from tfchart.cluster.preflight.plan import FAIL, GANG_ROLES, OK, WARN, Context, Finding, guarded, total
from tfchart.manifests.quantity import parse, shown
from tfdcontract.runstate import KUEUE_GROUP as KUEUE
from tfdcontract.runstate import KUEUE_VERSIONS, QUEUE_LABEL  # versions: v1beta2 since v0.15, v1beta1 before and beside

# Kueue's configuration (config/components/manager, namePrefix kueue-, namespace kueue-system; its chart alike)
CONFIG_NAMESPACE, CONFIG_MAP, CONFIG_KEY = "kueue-system", "kueue-manager-config", "controller_manager_config.yaml"
DEFAULT_FRAMEWORKS = ("batch/job",)  # Kueue v0.19 apis/config/v1beta2/defaults.go, when the list is left out
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
finding = partial(Finding, "kueue")
PICK_QUEUE = "--set scheduling.kueue.queueName=<queue> (`kubectl get localqueues -n {}`)"


def check_kueue(context: Context) -> list[Finding]:
    queue, priority = context.planned.label(QUEUE_LABEL), context.planned.label(PRIORITY_LABEL)
    if not queue:
        return []
    if (version := kueue_version(context)) is None:
        return [finding(FAIL, f"scheduling.kueue.queueName={queue} but Kueue is not installed: CRD localqueues.{KUEUE} "
                        f"is missing (the API server serves no localqueues in {KUEUE}/{' or '.join(KUEUE_VERSIONS)}), "
                        "so the pods would start unqueued", "install Kueue (`kubectl apply --server-side -f https://"
                        "github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml`), or --set "
                        'scheduling.kueue.queueName=""')]  # fmt: skip
    findings = guarded("kueue", lambda: [check_integration(context)]) if context.planned.doc("JobSet") else []
    findings += guarded("kueue", lambda: check_local_queue(context, version, queue))
    if priority:
        findings += guarded("kueue", lambda: [check_priority_class(context, version, priority)])
    return findings


def check_integration(context: Context, framework: str = JOBSET_FRAMEWORK) -> Finding:
    """Kueue queues a kind only when its configuration enables that integration (integrations.frameworks of
    ConfigMap kueue-system/kueue-manager-config, as Kueue's manifests and chart install it; without the list, only
    batch/job): else it ignores the queue label, and the workload starts unqueued."""
    where, check = f"{CONFIG_NAMESPACE}/{CONFIG_MAP}", f"check that Kueue's integrations.frameworks lists {framework}"
    found = context.api.read_object("ConfigMap", CONFIG_MAP, CONFIG_NAMESPACE)
    if found is None:
        return finding(WARN, "could not check that Kueue queues JobSets: its configuration is not in ConfigMap "
                       f"{where} (Kueue installed elsewhere?)", check)
    try:
        config = yaml.safe_load((found.get("data") or {}).get(CONFIG_KEY) or "") or {}
        frameworks = [str(each) for each in (config.get("integrations") or {}).get("frameworks") or DEFAULT_FRAMEWORKS]
    except (yaml.YAMLError, AttributeError):
        return finding(WARN, f"could not read Kueue's configuration in ConfigMap {where} ({CONFIG_KEY})", check)
    if framework not in frameworks:
        return finding(FAIL, f"Kueue's configuration (ConfigMap {where}) does not enable the {framework} integration "
                       f"(integrations.frameworks: {', '.join(frameworks)}): Kueue would ignore the JobSet's queue "
                       f"label, and it would start unqueued", f"ask the Kueue admin to add {framework} to integrations."
                       'frameworks (and restart kueue-controller-manager), or --set scheduling.kueue.queueName=""')
    return finding(OK, f"Kueue's configuration enables the {framework} integration")


def kueue_version(context: Context) -> str | None:
    """The newest Kueue API version the cluster serves LocalQueues in."""
    return next((v for v in KUEUE_VERSIONS if context.serves(KUEUE, v, "localqueues")), None)


def check_local_queue(context: Context, version: str, name: str) -> list[Finding]:
    namespace = context.namespace
    queue = context.custom(KUEUE, version, "localqueues", name, namespace)
    if queue is None:
        return [finding(FAIL, f"LocalQueue {name} does not exist in namespace {namespace}: Kueue would hold the pods "
                        f"until it does", f"`kubectl get localqueues -n {namespace}` lists the queues there: --set "
                        f"scheduling.kueue.queueName=<queue>, or ask the Kueue admin to create {name}")]  # fmt: skip
    spec = queue.get("spec") or {}
    cluster_queue, stop = str(spec.get("clusterQueue") or ""), str(spec.get("stopPolicy") or "None")
    head = finding(OK, f"LocalQueue {name} exists in namespace {namespace} (ClusterQueue {cluster_queue})")
    if stop != "None":
        head = finding(FAIL, f"LocalQueue {name} in namespace {namespace} is stopped (stopPolicy {stop}): it "
                       "admits no new workload", "ask the Kueue admin to resume it (stopPolicy None), or "
                       + PICK_QUEUE.format(namespace))  # fmt: skip
    return [head, *guarded("kueue", lambda: check_cluster_queue(context, version, name, cluster_queue))]


def check_cluster_queue(context: Context, version: str, local_queue: str, name: str) -> list[Finding]:
    cluster_queue = context.custom(KUEUE, version, "clusterqueues", name)
    if cluster_queue is None:
        return [finding(FAIL, f"ClusterQueue {name} of LocalQueue {local_queue} does not exist: nothing would "
                        "admit the pods", "ask the Kueue admin to create it (`kubectl get clusterqueues`), or "
                        + PICK_QUEUE.format(context.namespace))]  # fmt: skip
    for condition in (cluster_queue.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Active" and condition.get("status") == "False":
            why = f"{condition.get('reason', 'Unknown')}: {condition.get('message', '')}".rstrip(": ")
            return [finding(FAIL, f"ClusterQueue {name} is not active ({why}): it admits no workload, the pods "
                            "would wait gated", f"ask the Kueue admin to fix it (`kubectl describe clusterqueue "
                            f"{name}`)"), kueue_quota(context, cluster_queue)]  # fmt: skip
    return [kueue_quota(context, cluster_queue)]


def kueue_quota(context: Context, cluster_queue: dict[str, Any]) -> Finding:
    """Kueue admits the pod group (the TensorFlow pods, requests defaulted from limits) whole or not at all: its
    requests against the ClusterQueue's nominalQuota summed over every flavor (borrowing and lending limits aside),
    `pods` too when covered; a requested resource the ClusterQueue does not cover makes it inadmissible (`resource X
    unavailable in ClusterQueue`, pkg/scheduler/flavorassigner, Kueue v0.19.2)."""
    name, spec = str(cluster_queue["metadata"]["name"]), cluster_queue.get("spec") or {}
    groups = spec.get("resourceGroups") or []
    entries = [entry for group in groups for flavor in group.get("flavors") or [] for entry in flavor.get("resources")
               or []]  # fmt: skip
    quotas = {str(resource): Decimal(0) for group in groups for resource in group.get("coveredResources") or []}
    for entry in entries:
        quotas[str(entry["name"])] = quotas.get(str(entry["name"]), Decimal(0)) + parse(entry.get("nominalQuota", 0))
    roles = [role for role in context.planned.roles if role.role in GANG_ROLES]
    pods = sum(role.replicas for role in roles)
    keys = sorted({key for role in roles for key in role.requests} | ({"pods"} & set(quotas)))
    asks = {key: ask for key in keys if (ask := Decimal(pods) if key == "pods" else total(roles, "requests", key)) > 0}
    short = [key for key, ask in asks.items() if ask > quotas.get(key, Decimal(0))]
    if not short:
        offered = ", ".join(f"{key} {shown(value)} of {shown(quotas[key])}" for key, value in asks.items())
        return finding(OK, f"ClusterQueue {name} has the nominal quota for the {pods} TensorFlow pods: {offered} "
                       "(other workloads' usage not counted)")
    said = "; ".join(f"{key}: the release asks {shown(asks[key])}, ClusterQueue {name} " + (
        f"offers {shown(quotas[key])} nominal" if key in quotas else f"does not cover {key}") for key in short)
    listing = f"`kubectl get clusterqueue {name} -o yaml` shows its quota"
    cohort = str(spec.get("cohortName") or spec.get("cohort") or "")  # v1beta2 cohortName, v1beta1 cohort
    lends = {str(entry["name"]) for entry in entries  # no borrowingLimit: unlimited
             if entry.get("borrowingLimit") is None or parse(entry["borrowingLimit"]) > 0}
    if cohort and all(key in quotas and key in lends for key in short):
        return finding(WARN, f"{said}: admitted only by borrowing from cohort {cohort}, while other "
                       "ClusterQueues leave that much unused", f"{listing}: ask the Kueue admin for more "
                       "nominalQuota, or lower the TensorFlow pods' requests")  # fmt: skip
    uncovered = [key for key in short if key not in quotas]
    wants = ["more nominalQuota"] * (len(uncovered) < len(short)) + [
        f"{', '.join(uncovered)} in its coveredResources"] * bool(uncovered)
    return finding(FAIL, f"{said}: it can never be admitted (Kueue admits the {pods} TensorFlow pods together)",
                   f"{listing}: lower the replicas or requests of the TensorFlow pods, ask the Kueue admin for "
                   f"{' and '.join(wants)}, or {PICK_QUEUE.format(context.namespace)}")


def check_priority_class(context: Context, version: str, name: str) -> Finding:
    """The pods' label kueue.x-k8s.io/priority-class names a WorkloadPriorityClass; Kueue makes no Workload for a
    pod group whose class does not exist."""
    found = context.api.read_custom_object(KUEUE, version, "workloadpriorityclasses", name)
    if found is None:
        return finding(FAIL, f"WorkloadPriorityClass {name} does not exist: Kueue would not admit the pods",
                       "`kubectl get workloadpriorityclasses` lists them: --set scheduling.kueue.priorityClass="
                       '<class>, or --set scheduling.kueue.priorityClass="" for the default priority')
    return finding(OK, f"WorkloadPriorityClass {name} exists (value {found.get('value')})")
