"""A rendered JobSet (jobset.x-k8s.io/v1alpha2) as JobSet v0.12.0 and the Job controller turn it into pods, for
`tfchart local` (docs/architecture.md, section 8). Everything that decides the run is the rendered object's (never
the values'), with JobSet's webhook defaults written in (`read`): each replicatedJob's Jobs <jobset>-<rjob>-<jobIndex>
(`jobs_of`) with their completions, parallelism, backoffLimit, podFailurePolicy and activeDeadlineSeconds, the
dependsOn order (or the deprecated startupPolicy InOrder), the successPolicy and the failurePolicy's rules and
maxRestarts. `pods_of` names the pods as Kubernetes does (hostname <job>-<completionIndex> under the
subdomain network.subdomain, else the JobSet's name) and labels and annotates them as JobSet and the Job
controller do, so the downward API resolves as the kubelet would; `headless_service` is the Service JobSet creates
for their DNS names. jobsetrun.py runs them.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfchart.errors import UsageError
from tfdcontract.runstate import GANG_MARKERS, JOBSET_NAME_LABEL

RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # what the Job controller adds to every container of an Indexed Job
FAIL_JOBSET, RESTART_JOBSET, RESTART_UNCOUNTED = "FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"
ACTIONS = (FAIL_JOBSET, RESTART_JOBSET, RESTART_UNCOUNTED)  # RestartJob*: behind JobSet's RestartJob gate (off)
FAIL_JOB, IGNORE = "FailJob", "Ignore"  # else Count
READY, COMPLETE = "Ready", "Complete"
DEFAULT_GRACE_SECONDS = 30.0  # a pod's terminationGracePeriodSeconds when its template sets none


@dataclass
class PodRun:
    name: str  # its hostname (here: its name)
    index: int  # its completion index (a StatefulSet's pod: its ordinal)
    alive: bool = False
    ready: bool = False
    succeeded: bool = False
    due: float | None = None  # when its (next) pod starts
    probed: float = -math.inf


def condition(doc: Mapping[str, Any]) -> dict[str, Any]:
    """An object's Complete (a JobSet's: Completed) or Failed condition, as its controller writes it; {}: running."""
    return next(iter(doc["status"]["conditions"]), {})


def ended_as(doc: dict[str, Any], kind: str, reason: str, message: str) -> None:
    doc["status"]["conditions"] = [{"type": kind, "status": "True", "reason": reason, "message": message}]


@dataclass
class JobRun:
    """One Job JobSet creates for a replicatedJob (a native release's: a Job or StatefulSet as rendered), read as its
    controller reads it, and what the controller keeps of it: the object with its status (`doc`: spec.suspend, a
    StatefulSet's spec.replicas, status.conditions, the records tfdcontract.lifecycle writes on it) and its pods."""

    rjob: str
    doc: dict[str, Any]  # the Job (or StatefulSet: its pods never complete, each starts again whenever it exits)
    pods: list[PodRun]  # by completion index (a StatefulSet's: by ordinal)
    created: float | None = None
    failures: int = 0
    ended: float = 0.0
    culprit: str | None = None  # the pod whose exit failed it

    @classmethod
    def of(cls, rjob: str, doc: dict[str, Any]) -> JobRun:
        """The Job as created; no gang scheduler runs here, so the plan orders a resume as without one."""
        doc = {**copy.deepcopy(doc), "status": {"conditions": []}}
        template = doc["spec"]["template"].get("metadata") or {}
        for key, marker in itertools.product(("labels", "annotations"), GANG_MARKERS):
            (template.get(key) or {}).pop(marker, None)
        return cls(rjob, doc, [PodRun(name, i) for i, name in enumerate(pod_names(doc))])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def state(self) -> str:
        """Complete or Failed, "" while it runs."""
        return str(condition(self.doc).get("type", ""))

    def runs(self, pod: PodRun) -> bool:
        """Whether its controller keeps the pod running: its Job is not suspended, its ordinal is wanted."""
        spec = self.doc["spec"]
        return not spec.get("suspend") and pod.index < int(spec.get("replicas", len(self.pods)))

    @property
    def parallelism(self) -> int:
        """How many of its pods run at once (a StatefulSet's: all)."""
        return int(self.doc["spec"].get("parallelism", 1 if self.doc["kind"] == "Job" else len(self.pods)))

    @property
    def ready(self) -> bool:
        """Counted Ready in its replicatedJob's status: active, with succeeded + ready pods >= its pods."""
        pods = min(self.parallelism, len(self.pods))
        return not self.state and sum(p.succeeded or p.ready for p in self.pods) >= pods

    @property
    def container(self) -> dict[str, Any]:
        """Its pods' (first) container, as podFailurePolicy names it."""
        return dict((self.doc["spec"]["template"]["spec"].get("containers") or [{}])[0])

    @property
    def grace(self) -> float:
        """Its pods' terminationGracePeriodSeconds."""
        return float(self.doc["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))

    def first_rule(self, code: int) -> tuple[int, dict[str, Any]] | None:
        """The first rule of its podFailurePolicy (and its index) that matches its container's exit. onPodConditions
        rules (DisruptionTarget: preemption, eviction, a node drain) never match here: nothing disrupts a local pod."""
        name = self.container.get("name", "")
        for index, rule in enumerate((self.doc["spec"].get("podFailurePolicy") or {}).get("rules") or ()):
            codes = rule.get("onExitCodes") or {}
            values = codes.get("values") or ()
            if codes and (codes.get("containerName") or name) == name and (
                    code in values if codes["operator"] == "In" else code != 0 and code not in values):  # fmt: skip
                return index, rule
        return None


def pod_names(doc: Mapping[str, Any]) -> list[str]:
    """The pods' names (hostnames) as their controller names them: a StatefulSet's <name>-<ordinal>, an Indexed Job's
    <name>-<completion index>, another Job's its hostname, else its name; a Deployment's (TensorBoard's) <name>-0."""
    spec, name = doc.get("spec") or {}, doc["metadata"]["name"]
    if doc["kind"] == "StatefulSet":
        return [f"{name}-{ordinal}" for ordinal in range(int(spec.get("replicas", 1)))]
    if doc["kind"] == "Job" and spec.get("completionMode") == "Indexed":
        return [f"{name}-{index}" for index in range(int(spec.get("completions", 1)))]
    return [spec["template"]["spec"].get("hostname") or name] if doc["kind"] == "Job" else [f"{name}-0"]


def failure_rule_applies(rule: dict[str, Any], rjob: str, failed: Mapping[str, Any]) -> bool:
    """Whether a rule of the JobSet's failurePolicy applies to a failed Job (its Failed condition; a list left out:
    any)."""
    reasons, targets, patterns = (rule.get(key) for key in ("onJobFailureReasons", "targetReplicatedJobs",
                                                            "onJobFailureMessagePatterns"))  # fmt: skip
    return ((not reasons or failed["reason"] in reasons) and (not targets or rjob in targets)
            and (not patterns or any(re.search(p, failed["message"]) for p in patterns)))  # fmt: skip


def waits_for(rjob: Mapping[str, Any]) -> str:
    """A replicatedJob's dependsOn, as a line says it: `ps Ready, chief Complete`."""
    return ", ".join(f"{d['name']} {d['status']}" for d in rjob["dependsOn"])


def read(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The rendered JobSet as its controller reads it, refused in one line where tfchart local cannot run it: a copy
    with what JobSet's webhook defaults and the API server adds written in (each failurePolicy rule named, maxRestarts,
    the successPolicy's operator, each replicatedJob's dependsOn, from the deprecated startupPolicy InOrder too, the
    namespace, a uid)."""
    doc = copy.deepcopy(doc)
    spec, name = doc.setdefault("spec", {}), str(doc["metadata"]["name"])
    if spec.get("suspend"):
        raise UsageError(f"JobSet {name} is rendered suspended (spec.suspend): tfchart local would never start it",
                         "render it unsuspended; `tfchart suspend NAME --local` suspends a local run")
    failure = spec["failurePolicy"] = {"maxRestarts": 0, **(spec.get("failurePolicy") or {})}
    if failure.get("restartStrategy", "Recreate") not in ("Recreate", "BlockingRecreate"):
        raise UsageError(f"JobSet {name}: failurePolicy.restartStrategy {failure['restartStrategy']} (alpha, "
                         "behind a JobSet feature gate) is not emulated", "leave it unset (Recreate)")
    failure["rules"] = failure.get("rules") or []
    for index, rule in enumerate(failure["rules"]):
        if rule.get("action") not in ACTIONS:
            raise UsageError(f"JobSet {name}: failure policy action {rule.get('action')} is not one JobSet v0.12.0 "
                             "runs by default (RestartJob needs its alpha RestartJob feature gate)",
                             f"use one of {', '.join(ACTIONS)}")  # fmt: skip
        rule["name"] = str(rule.get("name") or f"failurePolicyRule{index}")
    spec["successPolicy"] = {"operator": "All", **(spec.get("successPolicy") or {})}
    in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"  # deprecated: dependsOn
    earlier: list[str] = []
    for rjob in spec.setdefault("replicatedJobs", []):
        rjob["dependsOn"] = rjob.get("dependsOn") or ([{"name": earlier[-1], "status": READY}] if in_order and earlier
                                                      else [])  # fmt: skip
        if unknown := [d["name"] for d in rjob["dependsOn"] if d["name"] not in earlier]:
            raise UsageError(f"JobSet {name}: replicatedJob {rjob['name']} depends on {unknown[0]}, which is "
                             "not an earlier replicatedJob (JobSet's webhook refuses it)")  # fmt: skip
        job = (rjob.get("template") or {}).get("spec") or {}
        if job.get("completionMode", "Indexed") != "Indexed" or job.get("backoffLimitPerIndex") is not None:
            raise UsageError(f"JobSet {name}: replicatedJob {rjob['name']} is not a plain Indexed Job "
                             "(completionMode NonIndexed or backoffLimitPerIndex): tfchart local emulates Indexed "
                             "Jobs only")  # fmt: skip
        earlier.append(str(rjob["name"]))
    doc["metadata"].setdefault("namespace", namespace)
    doc["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"jobset/{namespace}/{name}"))  # no API server here
    return doc


def native(docs: Sequence[dict[str, Any]], run_job: str, namespace: str) -> dict[str, Any]:
    """A native release's Jobs and StatefulSets as one workload that JobSetRun runs, as a JobSet of one replicatedJob
    each (a List: `items` their objects): all created at once, StatefulSet pods started again whenever they exit,
    the Jobs as the Job controller runs them; the run's Job (`run_job`: the chief's, else the workers') ends the run,
    another Job's failure does not."""
    return {"kind": "List", "metadata": {"name": run_job, "namespace": namespace}, "items": list(docs), "spec": {
        "replicatedJobs": [{"name": doc["metadata"]["name"], "dependsOn": []} for doc in docs],
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [run_job]},
        "failurePolicy": {"maxRestarts": 0, "rules": [{"name": run_job, "action": FAIL_JOBSET,
                                                       "targetReplicatedJobs": [run_job]}]}}}  # fmt: skip


def jobs_of(workload: dict[str, Any]) -> list[JobRun]:
    """The workload's Jobs as created: a JobSet's as JobSet creates them (marked as it marks them), a native
    release's Jobs and StatefulSets as rendered."""
    if workload["kind"] != "JobSet":
        return [JobRun.of(str(doc["metadata"]["name"]), doc) for doc in workload["items"]]
    metadata, specs = workload["metadata"], workload["spec"]["replicatedJobs"]
    name, namespace = metadata["name"], metadata["namespace"]
    counts = [int(r.get("replicas", 1)) for r in specs]
    groups = [str(r.get("groupName") or "default") for r in specs]  # the CRD's default group
    jobs = []
    for position, rjob in enumerate(specs):
        in_group = [count if g == groups[position] else 0 for count, g in zip(counts, groups, strict=True)]
        for job_index in range(counts[position]):  # the Jobs JobSet creates, marked as it marks them
            job_name = f"{name}-{rjob['name']}-{job_index}"
            marks = {f"jobset.sigs.k8s.io/{key}": str(value) for key, value in {
                "jobset-name": name, "jobset-uid": metadata["uid"], "replicatedjob-name": rjob["name"],
                "restart-attempt": 0, "replicatedjob-replicas": counts[position], "global-replicas": sum(counts),
                "job-index": job_index, "job-key": hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),
                "job-global-index": sum(counts[:position]) + job_index, "group-name": groups[position],
                "group-replicas": sum(in_group), "job-group-index": sum(in_group[:position]) + job_index}.items()}
            jobs.append(JobRun.of(str(rjob["name"]), job_document(workload, rjob, job_name, marks)))
    return jobs


def subdomain(doc: dict[str, Any]) -> str | None:
    """The pods' subdomain: network.subdomain, else the JobSet's name; None when enableDNSHostnames is false."""
    network = (doc.get("spec") or {}).get("network") or {}
    if network.get("enableDNSHostnames") is False:
        return None
    return str(network.get("subdomain") or doc["metadata"]["name"])


def headless_service(doc: dict[str, Any], namespace: str) -> dict[str, Any] | None:
    """The headless Service JobSet creates for its pods' DNS names (none without DNS hostnames)."""
    if (name := subdomain(doc)) is None:
        return None
    network = (doc.get("spec") or {}).get("network") or {}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": "None", "selector": {JOBSET_NAME_LABEL: doc["metadata"]["name"]},
                     "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)}}  # fmt: skip


PodTemplate = tuple[str, int, dict[str, Any], dict[str, str], dict[str, str]]


def pods_of(doc: dict[str, Any], namespace: str) -> list[PodTemplate]:
    """A workload's pods as its controller makes them: (hostname, index, the workload, the pod's labels, its
    annotations), the Job controller's labels and completion index on a Job's; a JobSet's as JobSet makes its Jobs,
    in the replicatedJobs' order, as its first attempt (restart attempt 0: jobsetrun.py sets the env its restarts
    change)."""
    if doc["kind"] == "JobSet":
        return [pod for job in jobs_of(read(doc, namespace)) for pod in pods_of(job.doc, namespace)]
    template, name = doc["spec"]["template"].get("metadata") or {}, doc["metadata"]["name"]
    owner = str(uuid.uuid5(uuid.NAMESPACE_URL, f"job/{namespace}/{name}"))
    pods = []
    for index, hostname in enumerate(pod_names(doc)):
        labels, annotations = dict(template.get("labels") or {}), dict(template.get("annotations") or {})
        if doc["kind"] == "StatefulSet":
            labels["apps.kubernetes.io/pod-index"] = str(index)
        if doc["kind"] == "Job":
            labels |= {"batch.kubernetes.io/controller-uid": owner, "batch.kubernetes.io/job-name": name,
                       "controller-uid": owner, "job-name": name}  # fmt: skip
        if doc["kind"] == "Job" and doc["spec"].get("completionMode") == "Indexed":
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        pods.append((hostname, index, doc, labels, annotations))
    return pods


def job_document(doc: dict[str, Any], rjob: dict[str, Any], job_name: str, marks: dict[str, str]) -> dict[str, Any]:
    """The Job JobSet creates (constructJob): the replicatedJob's template, its Job and pod template labelled and
    annotated with the JobSet's marks, the pods' subdomain set; and, as the Job controller adds it to an Indexed
    Job's containers, JOB_COMPLETION_INDEX from the completion-index annotation."""
    template = copy.deepcopy(rjob.get("template") or {})
    metadata, spec = template.get("metadata") or {}, template.get("spec") or {}
    pod = spec.setdefault("template", {})
    for meta, key in itertools.product((metadata, pod.setdefault("metadata", {})), ("labels", "annotations")):
        meta[key] = {**(meta.get(key) or {}), **marks}
    spec.setdefault("completionMode", "Indexed")  # JobSet's webhook default; completions: the Job's
    spec.setdefault("completions", spec.get("parallelism", 1))
    pod_spec = pod.setdefault("spec", {})
    pod_spec.pop("hostname", None)  # the Job controller names each pod's host <job>-<index> (pods_of)
    if (domain := subdomain(doc)) is not None:
        pod_spec["subdomain"] = domain
    index_env = {"name": COMPLETION_INDEX_ENV,
                 "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        if not any(item.get("name") == COMPLETION_INDEX_ENV for item in container.get("env") or []):
            container["env"] = [*(container.get("env") or []), index_env]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name, "namespace": (doc.get("metadata") or {}).get("namespace"),
                         "labels": metadata["labels"], "annotations": metadata["annotations"]},
            "spec": spec}  # fmt: skip
