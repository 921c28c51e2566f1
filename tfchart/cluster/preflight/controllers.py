"""What the render needs running in the cluster, each checked only when the render asks for it: JobSet and its
controller (workload.kind=jobset), the gang scheduler's PodGroup and Volcano queue (scheduling.gang), Kueue's queues,
quota and priority class (a queue label), a CNI that enforces the NetworkPolicy. CRDs are found by API discovery, which
every user may read (reading CRDs needs a ClusterRole); that a scheduler runs under the pods' schedulerName is not
checked (its name lives in its own config)."""

from __future__ import annotations

from decimal import Decimal
from functools import partial
from typing import Any

import yaml

from tfchart.cluster.objects import JOBSET
from tfchart.cluster.preflight import topology
from tfchart.cluster.preflight.context import FAIL, GANG_ROLES, OK, WARN, Context, Finding, guarded, requested
from tfchart.manifests.quantity import parse, shown
from tfdcontract.runstate import KUEUE_GROUP as KUEUE  # its versions: v1beta2 since v0.15, v1beta1 before and beside
from tfdcontract.runstate import KUEUE_VERSIONS, QUEUE_LABEL, name_of

jobsets, gang, kueue, network = (partial(Finding, check) for check in ("jobset", "gang-scheduling", "kueue",
                                                                        "network-policy"))  # fmt: skip


# -- jobset ----------------------------------------------------------------------------------------------------------
INSTALL = ("install JobSet (`kubectl apply --server-side -f "
           "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml`)")  # fmt: skip


def check_jobset(context: Context) -> list[Finding]:
    if context.doc("JobSet") is None:
        return []
    if JOBSET.plural not in (context.api.served_resources(JOBSET.group, JOBSET.version) or []):
        return [jobsets(FAIL, f"workload.kind=jobset but JobSet is not installed: the API server serves no "
                        f"{JOBSET.plural} in {JOBSET.group}/{JOBSET.version}, so the release cannot be installed",
                        f"{INSTALL}, or --set workload.kind=native")]
    return [jobsets(OK, f"the API server serves {JOBSET.plural}.{JOBSET.group}/{JOBSET.version}"),
            *guarded("jobset", lambda: [controller(context)])]


def controller(context: Context) -> Finding:
    """Whether JobSet's controller answers. JobSet v0.12.0's manifests install, besides the CRD, the Deployment
    jobset-controller-manager in jobset-system, the Service jobset-webhook-service in front of it, and the webhook
    configurations jobset-{validating,mutating}-webhook-configuration, failurePolicy Fail: without a ready controller
    the API server refuses every JobSet. So: the ready endpoints (EndpointSlices: the controller's Ready pods) of the
    Service the validating webhook that guards jobsets calls. Reading webhook configurations takes a ClusterRole."""
    configs = context.api.items("ValidatingWebhookConfiguration")
    hooks = [hook for config in configs for hook in config.get("webhooks") or []
             if any(JOBSET.group in (rule.get("apiGroups") or []) and JOBSET.plural in (rule.get("resources") or [])
                    for rule in hook.get("rules") or [])]  # fmt: skip
    if not hooks:
        return jobsets(FAIL, f"no validating webhook guards {JOBSET.plural}.{JOBSET.group}: JobSet's controller is "
                       "not installed (its manifests add jobset-validating-webhook-configuration), so nothing would run"
                       " the JobSet", f"{INSTALL}; `kubectl get validatingwebhookconfigurations` lists what is there")
    hook, called = hooks[0], hooks[0].get("clientConfig") or {}
    if (service := called.get("service")) is None:  # a webhook at a URL: outside the cluster, nothing to count
        return jobsets(WARN, f"JobSet's webhook {hook['name']} calls {called.get('url') or 'no service'}: whether its "
                       "controller runs was not checked", "make sure JobSet's controller answers there")
    where, namespace = f"{service['namespace']}/{service['name']}", service["namespace"]
    slices = context.api.items("EndpointSlice", namespace, f"kubernetes.io/service-name={service['name']}")
    ready = sum(1 for each in slices for point in each.get("endpoints") or []
                if (point.get("conditions") or {}).get("ready") is not False)  # fmt: skip
    if not ready:
        return jobsets(FAIL, f"JobSet's controller is not running: its webhook Service {where} has no ready "
                       f"endpoint, so the API server refuses every JobSet (webhook {hook['name']}, failurePolicy "
                       f"{hook.get('failurePolicy') or 'Fail'})",
                       f"`kubectl -n {namespace} get deployments,pods` shows why (JobSet's Deployment "
                       "jobset-controller-manager); ask the cluster admin to fix it")
    return jobsets(OK, f"JobSet's controller runs: its webhook Service {where} has {ready} ready endpoint(s)")


# -- gang-scheduling -------------------------------------------------------------------------------------------------
# The PodGroup's API group (its version is the render's): the provider named in the values, and how to install it.
GANG_PROVIDERS = {
    "scheduling.volcano.sh": ("volcano", "install Volcano (`helm repo add volcano-sh https://volcano-sh.github.io/"
                              "helm-charts && helm install volcano volcano-sh/volcano -n volcano-system "
                              "--create-namespace`)"),
    "scheduling.x-k8s.io": ("coscheduling", "install kubernetes-sigs/scheduler-plugins as a second scheduler with the "
                            "Coscheduling plugin (its chart manifests/install/charts/as-a-second-scheduler)"),
}  # fmt: skip


def check_gang(context: Context) -> list[Finding]:
    """The PodGroup's CRD serves the render's version (API discovery); Volcano's named queue exists and is Open, and
    its HyperNodes hold the network topology the PodGroup asks for."""
    if (group := context.doc("PodGroup")) is None:
        return []
    (api_group, _, version), spec = str(group.get("apiVersion")).partition("/"), group.get("spec") or {}
    name, install = GANG_PROVIDERS[api_group]
    crd, served = f"podgroups.{api_group}", f"{api_group}/{version}"
    if "podgroups" not in (context.api.served_resources(api_group, version) or []):
        return [gang(FAIL, f"scheduling.gang.provider={name} but CRD {crd} is not installed (the API server serves "
                        f"no podgroups in {served}): the chart's PodGroup cannot be created",
                        f"{install}, or --set scheduling.gang.provider=none")]
    # the chart names the provider's scheduler on the TensorFlow pods unless the values name another
    scheduler = next(filter(None, (r.spec.get("schedulerName") for r in context.roles if r.role in GANG_ROLES)), "")
    findings = [gang(OK, f"CRD {crd} serves {served} (that a scheduler runs as {scheduler} is not checked)")]
    if name != "volcano":
        return findings
    if queue := str(spec.get("queue") or ""):
        findings += guarded("gang-scheduling", lambda: [check_volcano_queue(context, queue)])
    return findings + guarded("topology", lambda: topology.check_hypernodes(context, spec))


def check_volcano_queue(context: Context, name: str) -> Finding:
    """Volcano's admission webhook refuses a PodGroup whose queue is missing or not Open
    (pkg/webhooks/admission/podgroups/validate, Volcano v1.15.1); its scheduler skips such a queue."""
    pick = "pick another (`kubectl get queues.scheduling.volcano.sh`): --set scheduling.gang.volcanoQueue=<queue>"
    queue = context.api.read_object("queues.v1beta1.scheduling.volcano.sh", name)
    if queue is None:
        return gang(FAIL, f"Volcano Queue {name} does not exist: Volcano refuses a PodGroup in an unknown queue",
                       f'create the queue, {pick}, or --set scheduling.gang.volcanoQueue="" for Volcano\'s default '
                       "queue")
    state = str((queue.get("status") or {}).get("state") or "")
    if state == "Open":
        return gang(OK, f"Volcano Queue {name} is Open")
    if not state:
        return gang(WARN, f"Volcano Queue {name} has no state yet: Volcano accepts PodGroups only in an Open queue",
                       "Volcano's controller sets it: check that it runs (`kubectl get pods -n volcano-system`)")
    return gang(FAIL, f"Volcano Queue {name} is {state}: Volcano refuses new PodGroups in a queue that is not Open",
                   f"open it (`vcctl queue operate --name {name} --action open`) or {pick}")


# -- kueue -----------------------------------------------------------------------------------------------------------
# Kueue's configuration (config/components/manager, namePrefix kueue-, namespace kueue-system; its chart alike)
CONFIG_NAMESPACE, CONFIG_MAP, CONFIG_KEY = "kueue-system", "kueue-manager-config", "controller_manager_config.yaml"
DEFAULT_FRAMEWORKS = ("batch/job",)  # Kueue v0.19 apis/config/v1beta2/defaults.go, when the list is left out
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PICK_QUEUE = "--set scheduling.kueue.queueName=<queue> (`kubectl get localqueues -n {}`)"


def check_kueue(context: Context) -> list[Finding]:
    queue, priority = context.label(QUEUE_LABEL), context.label(PRIORITY_LABEL)
    if not queue:
        return []
    for version in KUEUE_VERSIONS:  # the newest Kueue API version the cluster serves LocalQueues in
        if "localqueues" in (served := context.api.served_resources(KUEUE, version) or []):
            break
    else:
        return [kueue(FAIL, f"scheduling.kueue.queueName={queue} but Kueue is not installed: CRD localqueues.{KUEUE} "
                        f"is missing (the API server serves no localqueues in {KUEUE}/{' or '.join(KUEUE_VERSIONS)}), "
                        "so the pods would start unqueued", "install Kueue (`kubectl apply --server-side -f https://"
                        "github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml`), or --set "
                        'scheduling.kueue.queueName=""')]  # fmt: skip
    findings = guarded("kueue", lambda: [check_integration(context)]) if context.doc("JobSet") else []
    findings += guarded("kueue", lambda: check_local_queue(context, version, served, queue))
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
        return kueue(WARN, "could not check that Kueue queues JobSets: its configuration is not in ConfigMap "
                       f"{where} (Kueue installed elsewhere?)", check)
    try:
        config = yaml.safe_load((found.get("data") or {}).get(CONFIG_KEY) or "") or {}
        frameworks = [str(each) for each in (config.get("integrations") or {}).get("frameworks") or DEFAULT_FRAMEWORKS]
    except (yaml.YAMLError, AttributeError):
        return kueue(WARN, f"could not read Kueue's configuration in ConfigMap {where} ({CONFIG_KEY})", check)
    if framework not in frameworks:
        return kueue(FAIL, f"Kueue's configuration (ConfigMap {where}) does not enable the {framework} integration "
                       f"(integrations.frameworks: {', '.join(frameworks)}): Kueue would ignore the JobSet's queue "
                       f"label, and it would start unqueued", f"ask the Kueue admin to add {framework} to integrations."
                       'frameworks (and restart kueue-controller-manager), or --set scheduling.kueue.queueName=""')
    return kueue(OK, f"Kueue's configuration enables the {framework} integration")


def check_local_queue(context: Context, version: str, served: list[str], name: str) -> list[Finding]:
    namespace = context.namespace
    queue = context.api.read_object(f"localqueues.{version}.{KUEUE}", name, namespace)
    if queue is None:
        return [kueue(FAIL, f"LocalQueue {name} does not exist in namespace {namespace}: Kueue would hold the pods "
                        f"until it does", f"`kubectl get localqueues -n {namespace}` lists the queues there: --set "
                        f"scheduling.kueue.queueName=<queue>, or ask the Kueue admin to create {name}")]  # fmt: skip
    spec = queue.get("spec") or {}
    cluster_queue, stop = str(spec.get("clusterQueue") or ""), str(spec.get("stopPolicy") or "None")
    head = kueue(OK, f"LocalQueue {name} exists in namespace {namespace} (ClusterQueue {cluster_queue})")
    if stop != "None":
        head = kueue(FAIL, f"LocalQueue {name} in namespace {namespace} is stopped (stopPolicy {stop}): it "
                       "admits no new workload", "ask the Kueue admin to resume it (stopPolicy None), or "
                       + PICK_QUEUE.format(namespace))  # fmt: skip
    return [head, *guarded("kueue", lambda: check_cluster_queue(context, version, served, name, cluster_queue))]


def check_cluster_queue(context: Context, version: str, served: list[str], of: str, name: str) -> list[Finding]:
    """ClusterQueue `name` (of LocalQueue `of`) is active and has the quota for the pods, and the Topology they ask
    for, if any."""
    if (cluster_queue := context.api.read_object(f"clusterqueues.{version}.{KUEUE}", name)) is None:
        return [kueue(FAIL, f"ClusterQueue {name} of LocalQueue {of} does not exist: nothing would "
                        "admit the pods", "ask the Kueue admin to create it (`kubectl get clusterqueues`), or "
                        + PICK_QUEUE.format(context.namespace))]  # fmt: skip
    findings = [kueue(FAIL, f"ClusterQueue {name} is not active ({why}): it admits no workload, the pods would wait "
                      "gated", f"ask the Kueue admin to fix it (`kubectl describe clusterqueue {name}`)")
                for condition in (cluster_queue.get("status") or {}).get("conditions") or []
                if condition.get("type") == "Active" and condition.get("status") == "False"
                and (why := f"{condition.get('reason', 'Unknown')}: {condition.get('message', '')}".rstrip(": "))]
    findings.append(kueue_quota(context, cluster_queue))
    return findings + guarded("topology", lambda: topology.check_kueue_topology(context, version, served,
                                                                                cluster_queue))


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
    roles = [role for role in context.roles if role.role in GANG_ROLES]
    pods = sum(role.replicas for role in roles)
    asks = dict(sorted((requested(roles) | ({"pods": Decimal(pods)} if "pods" in quotas else {})).items()))
    short = [key for key, ask in asks.items() if ask > quotas.get(key, Decimal(0))]
    if not short:
        offered = ", ".join(f"{key} {shown(value)} of {shown(quotas[key])}" for key, value in asks.items())
        return kueue(OK, f"ClusterQueue {name} has the nominal quota for the {pods} TensorFlow pods: {offered} "
                       "(other workloads' usage not counted)")
    said = "; ".join(f"{key}: the release asks {shown(asks[key])}, ClusterQueue {name} " + (
        f"offers {shown(quotas[key])} nominal" if key in quotas else f"does not cover {key}") for key in short)
    listing = f"`kubectl get clusterqueue {name} -o yaml` shows its quota"
    cohort = str(spec.get("cohortName") or spec.get("cohort") or "")  # v1beta2 cohortName, v1beta1 cohort
    lends = {str(entry["name"]) for entry in entries  # no borrowingLimit: unlimited
             if entry.get("borrowingLimit") is None or parse(entry["borrowingLimit"]) > 0}
    if cohort and all(key in quotas and key in lends for key in short):
        return kueue(WARN, f"{said}: admitted only by borrowing from cohort {cohort}, while other "
                       "ClusterQueues leave that much unused", f"{listing}: ask the Kueue admin for more "
                       "nominalQuota, or lower the TensorFlow pods' requests")  # fmt: skip
    uncovered = [key for key in short if key not in quotas]
    wants = ["more nominalQuota"] * (len(uncovered) < len(short)) + [
        f"{', '.join(uncovered)} in its coveredResources"] * bool(uncovered)
    return kueue(FAIL, f"{said}: it can never be admitted (Kueue admits the {pods} TensorFlow pods together)",
                   f"{listing}: lower the replicas or requests of the TensorFlow pods, ask the Kueue admin for "
                   f"{' and '.join(wants)}, or {PICK_QUEUE.format(context.namespace)}")


def check_priority_class(context: Context, version: str, name: str) -> Finding:
    """The pods' label kueue.x-k8s.io/priority-class names a WorkloadPriorityClass; Kueue makes no Workload for a
    pod group whose class does not exist."""
    found = context.api.read_object(f"workloadpriorityclasses.{version}.{KUEUE}", name)
    if found is None:
        return kueue(FAIL, f"WorkloadPriorityClass {name} does not exist: Kueue would not admit the pods",
                       "`kubectl get workloadpriorityclasses` lists them: --set scheduling.kueue.priorityClass="
                       '<class>, or --set scheduling.kueue.priorityClass="" for the default priority')
    return kueue(OK, f"WorkloadPriorityClass {name} exists (value {found.get('value')})")


# -- network-policy --------------------------------------------------------------------------------------------------
ENFORCING_CNIS = ("calico-node", "cilium", "weave-net", "antrea-agent", "kube-router", "canal")


def check_network_policy(context: Context) -> list[Finding]:
    if not context.doc("NetworkPolicy"):
        return [network(WARN, "networkPolicy.enabled=false: any pod can reach the TensorFlow gRPC ports, which run any "
                        "graph sent", "--set networkPolicy.enabled=true (the default) on a cluster whose CNI enforces "
                        "NetworkPolicies")]  # fmt: skip
    daemon_sets = [name_of(ds) for ds in context.api.items("DaemonSet", "kube-system")]
    if found := sorted({cni for cni in ENFORCING_CNIS for ds in daemon_sets if ds == cni or ds.startswith(f"{cni}-")}):
        return [network(OK, f"NetworkPolicies are enforced by {', '.join(found)}")]
    return [network(WARN, "NetworkPolicies are likely NOT enforced (no known enforcing CNI found in kube-system: "
                    f"{', '.join(ENFORCING_CNIS)})", "install a CNI that enforces them (Calico, Cilium, Antrea...), or "
                    "check your provider's setting (e.g. GKE Dataplane V2, EKS VPC CNI network policy agent)")]
