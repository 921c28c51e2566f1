"""jobset (workload.kind=jobset): the API server serves JobSets (jobset.x-k8s.io/v1alpha2; API discovery, which
every user may read), and JobSet's controller runs. JobSet v0.12.0's manifests install, besides the CRD, the
Deployment jobset-controller-manager in jobset-system, the Service jobset-webhook-service in front of it, and
the webhook configurations jobset-{validating,mutating}-webhook-configuration, failurePolicy Fail: without a
ready controller the API server refuses every JobSet, and none is run. So the check finds the validating webhook
that guards jobsets and counts the ready endpoints of its Service (EndpointSlices: the controller's pods that
are Ready). Reading webhook configurations takes a ClusterRole: a denied read is a `could not check` warning."""

from __future__ import annotations

from functools import partial

from tfchart.cluster.preflight.plan import FAIL, OK, WARN, Context, Finding, guarded
from tfchart.cluster.runs import JOBSET

CHECK = "jobset"
INSTALL = ("install JobSet (`kubectl apply --server-side -f "
           "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml`)")  # fmt: skip
SERVICE_LABEL = "kubernetes.io/service-name"
finding = partial(Finding, CHECK)


def check_jobset(context: Context) -> list[Finding]:
    if context.planned.doc("JobSet") is None:
        return []
    if not context.serves(JOBSET.group, JOBSET.version, JOBSET.plural):
        return [finding(FAIL, f"workload.kind=jobset but JobSet is not installed: the API server serves no "
                        f"{JOBSET.plural} in {JOBSET.group}/{JOBSET.version}, so the release cannot be installed",
                        f"{INSTALL}, or --set workload.kind=native")]
    served_ok = finding(OK, f"the API server serves {JOBSET.name}/{JOBSET.version}")
    return [served_ok, *guarded(CHECK, lambda: [controller(context)])]


def controller(context: Context) -> Finding:
    """Whether JobSet's controller answers: the ready endpoints of the Service its jobsets webhook calls."""
    api = context.api
    hooks = [hook for config in api.list_objects("ValidatingWebhookConfiguration") for hook in config.webhooks or []
             if any(JOBSET.group in (rule.api_groups or []) and JOBSET.plural in (rule.resources or [])
                    for rule in hook.rules or [])]  # fmt: skip
    if not hooks:
        return finding(FAIL, f"no validating webhook guards {JOBSET.name}: JobSet's controller is not installed "
                       "(its manifests add jobset-validating-webhook-configuration), so nothing would run the JobSet",
                       f"{INSTALL}; `kubectl get validatingwebhookconfigurations` lists what is there")
    service = hooks[0].client_config.service if hooks[0].client_config else None
    if service is None:  # a webhook at a URL: outside the cluster, nothing to count
        url = hooks[0].client_config.url if hooks[0].client_config else ""
        return finding(WARN, f"JobSet's webhook {hooks[0].name} calls {url or 'no service'}: whether its "
                       "controller runs was not checked", "make sure JobSet's controller answers there")
    where = f"{service.namespace}/{service.name}"
    slices = api.list_objects("EndpointSlice", service.namespace, f"{SERVICE_LABEL}={service.name}")
    ready = sum(1 for each in slices for point in each.endpoints or []
                if point.conditions is None or point.conditions.ready is not False)  # fmt: skip
    if not ready:
        return finding(FAIL, f"JobSet's controller is not running: its webhook Service {where} has no ready "
                       f"endpoint, so the API server refuses every JobSet (webhook {hooks[0].name}, failurePolicy "
                       f"{hooks[0].failure_policy or 'Fail'})",
                       f"`kubectl -n {service.namespace} get deployments,pods` shows why (JobSet's Deployment "
                       "jobset-controller-manager); ask the cluster admin to fix it")
    return finding(OK, f"JobSet's controller runs: its webhook Service {where} has {ready} ready endpoint(s)")
