"""kueue (pods, or a JobSet, labelled with a Kueue queue): Kueue serves LocalQueues (v1beta2, else v1beta1); under a
JobSet, Kueue's configuration enables its jobset integration; the
LocalQueue exists in the namespace and is not stopped; its ClusterQueue exists, is active and has the
nominal quota (summed over flavors) for what the TensorFlow pods request, covering every resource they
request; the WorkloadPriorityClass the pods name exists."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import yaml

from tfchart.cluster.preflight.findings import FAIL, OK, WARN, Context, Finding, guarded
from tfchart.cluster.preflight.plan import GANG_ROLES, PRIORITY_LABEL, QUEUE_LABEL, Plan, total
from tfchart.manifests.quantity import parse, shown
from tfdcontract.runstate import KUEUE_GROUP as KUEUE
from tfdcontract.runstate import KUEUE_VERSIONS  # v1beta2 since Kueue v0.15, v1beta1 (deprecated) before and beside it

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

# Kueue's configuration (config/components/manager, namePrefix kueue-, namespace kueue-system; its chart alike)
CONFIG_NAMESPACE, CONFIG_MAP, CONFIG_KEY = "kueue-system", "kueue-manager-config", "controller_manager_config.yaml"
DEFAULT_FRAMEWORKS = ("batch/job",)  # Kueue v0.19 apis/config/v1beta2/defaults.go, when the list is left out
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"


def check_kueue(context: Context) -> list[Finding]:
    planned, api = context.planned, context.api
    queue, priority = planned.label(QUEUE_LABEL), planned.label(PRIORITY_LABEL)
    version = kueue_version(context)
    if version is None:
        return [Finding("kueue", FAIL, f"scheduling.kueue.queueName={queue} but Kueue is not installed: CRD "
                        f"localqueues.{KUEUE} is missing (the API server serves no localqueues in "
                        f"{KUEUE}/{' or '.join(KUEUE_VERSIONS)}), so the pods would start unqueued",
                        "install Kueue (`kubectl apply --server-side -f "
                        "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml`), "
                        'or --set scheduling.kueue.queueName=""')]
    findings = guarded("kueue", lambda: [check_integration(api, JOBSET_FRAMEWORK)]) if planned.jobset else []
    findings += guarded("kueue", lambda: check_local_queue(context, version, queue))
    if priority:
        findings += guarded("kueue", lambda: [check_priority_class(api, version, priority)])
    return findings


def check_integration(api: KubeApi, framework: str) -> Finding:
    """Kueue queues a kind only when its configuration enables that integration (integrations.frameworks of
    ConfigMap kueue-system/kueue-manager-config, as Kueue's manifests and chart install it; without the list, only
    batch/job): else it ignores the queue label, and the workload starts unqueued."""
    where = f"{CONFIG_NAMESPACE}/{CONFIG_MAP}"
    found = api.read_object("ConfigMap", CONFIG_MAP, CONFIG_NAMESPACE)
    if found is None:
        return Finding("kueue", WARN, f"could not check that Kueue queues JobSets: its configuration is not in "
                       f"ConfigMap {where} (Kueue installed elsewhere?)",
                       f"check that Kueue's integrations.frameworks lists {framework}")
    try:
        config = yaml.safe_load((found.get("data") or {}).get(CONFIG_KEY) or "") or {}
        frameworks = [str(each) for each in (config.get("integrations") or {}).get("frameworks") or DEFAULT_FRAMEWORKS]
    except (yaml.YAMLError, AttributeError):
        return Finding("kueue", WARN, f"could not read Kueue's configuration in ConfigMap {where} ({CONFIG_KEY})",
                       f"check that Kueue's integrations.frameworks lists {framework}")
    if framework not in frameworks:
        return Finding("kueue", FAIL, f"Kueue's configuration (ConfigMap {where}) does not enable the {framework} "
                       f"integration (integrations.frameworks: {', '.join(frameworks)}): Kueue would ignore the "
                       "JobSet's queue label, and it would start unqueued",
                       f"ask the Kueue admin to add {framework} to integrations.frameworks (and restart "
                       "kueue-controller-manager), or --set scheduling.kueue.queueName=\"\"")
    return Finding("kueue", OK, f"Kueue's configuration enables the {framework} integration")


def kueue_version(context: Context) -> str | None:
    """The newest Kueue API version the cluster serves LocalQueues in."""
    return next((v for v in KUEUE_VERSIONS if context.serves(KUEUE, v, "localqueues")), None)


def check_local_queue(context: Context, version: str, name: str) -> list[Finding]:
    namespace = context.namespace
    queue = context.custom(KUEUE, version, "localqueues", name, namespace)
    if queue is None:
        return [Finding("kueue", FAIL, f"LocalQueue {name} does not exist in namespace {namespace}: Kueue would hold "
                        "the pods until it does",
                        f"`kubectl get localqueues -n {namespace}` lists the queues there: "
                        f"--set scheduling.kueue.queueName=<queue>, or ask the Kueue admin to create {name}")]
    spec = queue.get("spec") or {}
    cluster_queue = str(spec.get("clusterQueue") or "")
    stop = str(spec.get("stopPolicy") or "None")
    if stop != "None":
        head = Finding("kueue", FAIL, f"LocalQueue {name} in namespace {namespace} is stopped (stopPolicy {stop}): it "
                       "admits no new workload",
                       "ask the Kueue admin to resume it (stopPolicy None), or --set "
                       f"scheduling.kueue.queueName=<queue> (`kubectl get localqueues -n {namespace}`)")
    else:
        head = Finding("kueue", OK, f"LocalQueue {name} exists in namespace {namespace} (ClusterQueue {cluster_queue})")
    return [head, *guarded("kueue", lambda: check_cluster_queue(context, version, name, cluster_queue))]


def check_cluster_queue(context: Context, version: str, local_queue: str, name: str) -> list[Finding]:
    cluster_queue = context.custom(KUEUE, version, "clusterqueues", name)
    if cluster_queue is None:
        return [Finding("kueue", FAIL, f"ClusterQueue {name} of LocalQueue {local_queue} does not exist: nothing "
                        "would admit the pods",
                        "ask the Kueue admin to create it (`kubectl get clusterqueues`), or "
                        f"--set scheduling.kueue.queueName=<queue> (`kubectl get localqueues -n {context.namespace}`)")]
    return [*inactive(cluster_queue), kueue_quota(cluster_queue, context.planned, context.namespace)]


def inactive(cluster_queue: dict[str, Any]) -> list[Finding]:
    name = str(cluster_queue["metadata"]["name"])
    for condition in (cluster_queue.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Active" and condition.get("status") == "False":
            why = f"{condition.get('reason', 'Unknown')}: {condition.get('message', '')}".rstrip(": ")
            return [Finding("kueue", FAIL, f"ClusterQueue {name} is not active ({why}): it admits no workload, "
                            "the pods would wait gated",
                            f"ask the Kueue admin to fix it (`kubectl describe clusterqueue {name}`)")]
    return []


def kueue_asks(planned: Plan, covered: set[str]) -> tuple[int, dict[str, Decimal]]:
    """The TensorFlow pods (Kueue's pod group) and their requests, defaulted from limits as the API server does;
    `pods` too when the ClusterQueue covers it (Kueue then counts pods)."""
    roles = [role for role in planned.roles if role.role in GANG_ROLES]
    pods = sum(role.replicas for role in roles)
    keys = sorted({key for role in roles for key in role.requests} | ({"pods"} & covered))
    asks = {key: Decimal(pods) if key == "pods" else total(roles, "requests", key) for key in keys}
    return pods, {key: value for key, value in asks.items() if value > 0}


def flavor_quotas(cluster_queue: dict[str, Any]) -> list[dict[str, Any]]:
    """The quotas (name, nominalQuota, borrowingLimit...) of every flavor of every resource group."""
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    flavors = [flavor for group in groups for flavor in group.get("flavors") or []]
    return [entry for flavor in flavors for entry in flavor.get("resources") or []]


def nominal_quotas(cluster_queue: dict[str, Any]) -> dict[str, Decimal]:
    """nominalQuota per covered resource, summed over every flavor (borrowing and lending limits aside)."""
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    quotas = {str(resource): Decimal(0) for group in groups for resource in group.get("coveredResources") or []}
    for entry in flavor_quotas(cluster_queue):
        key = str(entry["name"])
        quotas[key] = quotas.get(key, Decimal(0)) + parse(entry.get("nominalQuota", 0))
    return quotas


def cohort_of(cluster_queue: dict[str, Any]) -> str:
    """The cohort it may borrow from: v1beta2 spec.cohortName, v1beta1 spec.cohort; empty when none."""
    spec = cluster_queue.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def borrowable(cluster_queue: dict[str, Any], resource: str) -> bool:
    """In a cohort, with a flavor of `resource` whose borrowingLimit (none = unlimited) allows borrowing."""
    limits = [entry.get("borrowingLimit") for entry in flavor_quotas(cluster_queue) if entry.get("name") == resource]
    return bool(cohort_of(cluster_queue)) and any(limit is None or parse(limit) > 0 for limit in limits)


def kueue_quota(cluster_queue: dict[str, Any], planned: Plan, namespace: str) -> Finding:
    """Kueue admits the pod group whole or not at all: its requests against the ClusterQueue's nominal quota; a
    requested resource the ClusterQueue does not cover makes it inadmissible (`resource X unavailable in
    ClusterQueue`, pkg/scheduler/flavorassigner, Kueue v0.19.2)."""
    name = str(cluster_queue["metadata"]["name"])
    quotas = nominal_quotas(cluster_queue)
    pods, asks = kueue_asks(planned, set(quotas))
    short = [key for key, ask in asks.items() if ask > quotas.get(key, Decimal(0))]
    if not short:
        offered = ", ".join(f"{key} {shown(value)} of {shown(quotas[key])}" for key, value in asks.items())
        return Finding("kueue", OK, f"ClusterQueue {name} has the nominal quota for the {pods} TensorFlow pods: "
                       f"{offered} (other workloads' usage not counted)")
    said = "; ".join(shortfall(key, asks[key], quotas, name) for key in short)
    listing = f"`kubectl get clusterqueue {name} -o yaml` shows its quota"
    if all(key in quotas and borrowable(cluster_queue, key) for key in short):
        return Finding("kueue", WARN, f"{said}: admitted only by borrowing from cohort {cohort_of(cluster_queue)}, "
                       "while other ClusterQueues leave that much unused",
                       f"{listing}: ask the Kueue admin for more nominalQuota, or lower the TensorFlow pods' requests")
    return Finding("kueue", FAIL,
                   f"{said}: it can never be admitted (Kueue admits the {pods} TensorFlow pods together)",
                   f"{listing}: lower the replicas or requests of the TensorFlow pods, ask the Kueue admin for "
                   f"{admin_fix(short, quotas)}, or --set scheduling.kueue.queueName=<queue> "
                   f"(`kubectl get localqueues -n {namespace}`)")


def shortfall(key: str, ask: Decimal, quotas: dict[str, Decimal], name: str) -> str:
    offers = f"offers {shown(quotas[key])} nominal" if key in quotas else f"does not cover {key}"
    return f"{key}: the release asks {shown(ask)}, ClusterQueue {name} {offers}"


def admin_fix(short: list[str], quotas: dict[str, Decimal]) -> str:
    uncovered = [key for key in short if key not in quotas]
    wants = ["more nominalQuota"] if len(uncovered) < len(short) else []
    return " and ".join(wants + ([f"{', '.join(uncovered)} in its coveredResources"] if uncovered else []))


def check_priority_class(api: KubeApi, version: str, name: str) -> Finding:
    """The pods' label kueue.x-k8s.io/priority-class names a WorkloadPriorityClass; Kueue makes no Workload for a
    pod group whose class does not exist."""
    found = api.read_custom_object(KUEUE, version, "workloadpriorityclasses", name)
    if found is None:
        return Finding("kueue", FAIL, f"WorkloadPriorityClass {name} does not exist: Kueue would not admit the pods",
                       "`kubectl get workloadpriorityclasses` lists them: --set scheduling.kueue.priorityClass=<class>"
                       ', or --set scheduling.kueue.priorityClass="" for the default priority')
    return Finding("kueue", OK, f"WorkloadPriorityClass {name} exists (value {found.get('value')})")
