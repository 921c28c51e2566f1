"""workload.kind=jobset: one JobSet runs every TensorFlow pod (docs/architecture.md, sections 1-3).

Each case renders once with helm 4 in both kinds (and once with helm 3, which must say the same), and
every assertion reads those renders. The JobSet is checked against JobSet v0.12.0's CRD (tests/crds) and
against what its admission webhook refuses (pkg/webhooks/jobset_webhook.go at that tag, re-stated in
webhook_problems); everything else, and each Job the JobSet will create, against Kubernetes' OpenAPI
schemas of 1.31 to 1.37. The pods must be the native ones: the same containers (but for the cluster map
and where the task index comes from), the same pod spec and the same cluster, under the DNS names
Kubernetes gives a JobSet's pods.
"""

from __future__ import annotations

import copy
import json
import random
import re
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.chart.test_cluster_limits import domain_of_length, hosts, map_sets, size_probe_chart
from tests.chart.test_render import run_prelude
from tests.chartlib import (
    CHART,
    VALUES_DIR,
    by_kind,
    component,
    env_of,
    helm,
    named,
    openapi_problems,
    parse_all,
    pod_spec,
    pod_template,
    render,
    selects,
    workloads,
)
from tests.crds import crdlib

NS = "ml-training"  # not the default namespace: the names must carry it
PREFIX = "mnist-tf-distributed"
DOMAIN = "cluster.local"
TF_ROLES = ("ps", "worker", "chief", "evaluator")  # the replicatedJobs' order
KUBERNETES = [f"1.{minor}.0" for minor in range(31, 38)]
JOBSET_SETS = ["workload.kind=jobset"]
WORKERS_ONLY = ["training.strategy=multi_worker_mirrored", "chief.replicas=0", "worker.replicas=3",
                "training.batchSize=99"]
KUEUE_KEYS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class", "kueue.x-k8s.io/pod-group-name",
              "kueue.x-k8s.io/pod-group-total-count")
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

# case -> (values files, --set arguments common to both kinds)
CASES: dict[str, tuple[list[Path], list[str]]] = {
    "defaults": ([], []),
    "evaluator": ([], ["evaluator.enabled=true", "ps.replicas=3", "worker.replicas=5",
                       "chief.activeDeadlineSeconds=7200"]),
    "workers-only": ([], [*WORKERS_ONLY, "evaluator.enabled=true"]),
    "sync": ([], ["training.strategy=multi_worker_mirrored", "worker.replicas=3", "training.batchSize=100"]),
    "mirrored": ([], ["training.strategy=mirrored", "chief.gpu.count=2"]),
    "volcano": ([], ["scheduling.gang.provider=volcano", "scheduling.gang.volcanoQueue=research",
                     "evaluator.enabled=true"]),
    "coscheduling": ([], [*WORKERS_ONLY, "scheduling.gang.provider=coscheduling",
                          "scheduling.gang.scheduleTimeoutSeconds=300"]),
    "kueue": ([], ["scheduling.kueue.queueName=team-a", "scheduling.kueue.priorityClass=high",
                   "evaluator.enabled=true"]),
    "kueue-workers-only": ([], [*WORKERS_ONLY, "scheduling.kueue.queueName=team-a"]),
    "metrics": ([], ["metrics.enabled=true", "metrics.serviceMonitor.enabled=true", "evaluator.enabled=true"]),
    **{f"values/{path.name}": ([path], []) for path in sorted(VALUES_DIR.glob("*.yaml"))},
}
# settings only a JobSet has, per case
JOBSET_ONLY = {"evaluator": ["workload.jobset.maxRestarts=2", "workload.jobset.ttlSecondsAfterFinished=600"]}


def jobset_sets(case: str) -> list[str]:
    return [*CASES[case][1], *JOBSET_SETS, *JOBSET_ONLY.get(case, [])]


@cache
def renders() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(case, kind) -> the helm 4 render; one pool, every render once."""
    keys = [(case, kind) for case in CASES for kind in ("native", "jobset")]

    def one(key: tuple[str, str]) -> list[dict[str, Any]]:
        case, kind = key
        values, sets = CASES[case]
        return render(values=values, sets=jobset_sets(case) if kind == "jobset" else sets, namespace=NS)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(keys, pool.map(one, keys), strict=True))


def native(case: str) -> list[dict[str, Any]]:
    return renders()[(case, "native")]


def jobset_render(case: str) -> list[dict[str, Any]]:
    return renders()[(case, "jobset")]


def the_jobset(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [jobset] = by_kind(docs, "JobSet")
    return jobset


def native_workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """role -> the native StatefulSet or Job of that TensorFlow role."""
    return {component(doc): doc for doc in workloads(docs) if component(doc) in TF_ROLES}


def native_pods(doc: dict[str, Any]) -> int:
    return int(doc["spec"]["replicas"] if doc["kind"] == "StatefulSet" else doc["spec"]["parallelism"])


def replicated_jobs(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rjob["name"]: rjob for rjob in jobset["spec"]["replicatedJobs"]}


def child_jobs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    """The Jobs JobSet creates: <jobset>-<replicatedJob>-<jobIndex>, with the template's metadata and spec."""
    jobs = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        for index in range(rjob.get("replicas", 1)):
            metadata = {"name": f"{jobset['metadata']['name']}-{rjob['name']}-{index}", "namespace": NS,
                        **copy.deepcopy(rjob["template"].get("metadata") or {})}
            jobs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
                         "spec": copy.deepcopy(rjob["template"]["spec"])})
    return jobs


def pod_dns_names(jobset: dict[str, Any], role: str) -> list[str]:
    """The DNS names Kubernetes gives the pods of one replicatedJob, by completion index (job 0 only: one Job
    per role): the Job controller sets an Indexed pod's hostname to <job>-<index>, JobSet its subdomain to
    spec.network.subdomain and names the headless Service after it."""
    rjob = replicated_jobs(jobset)[role]
    job = rjob["template"]["spec"]
    subdomain = jobset["spec"]["network"]["subdomain"]
    assert job["completionMode"] == "Indexed" and rjob["replicas"] == 1
    job_name = f"{jobset['metadata']['name']}-{role}-0"
    return [f"{job_name}-{index}.{subdomain}.{NS}.svc.{DOMAIN}" for index in range(job["completions"])]


# -- what JobSet's admission webhook refuses (v0.12.0 pkg/webhooks/jobset_webhook.go ValidateCreate) -----------

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOB_FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                       "PodFailurePolicy"}


def dns_1035(value: str, what: str) -> list[str]:
    problems = [f"{what} {value!r} is longer than 63 characters"] if len(value) > 63 else []
    return problems + ([] if DNS_1035.match(value) else [f"{what} {value!r} is not a DNS-1035 label"])


def webhook_problems(jobset: dict[str, Any]) -> list[str]:
    spec, name = jobset["spec"], jobset["metadata"]["name"]
    problems: list[str] = []
    rjobs = spec["replicatedJobs"]
    if rjobs and rjobs[0].get("dependsOn"):
        problems.append("dependsOn can't be set for the first replicatedJob")
    subdomain = (spec.get("network") or {}).get("subdomain", "")
    if subdomain:
        problems += dns_1035(subdomain, "network.subdomain")
        problems += [] if DNS_1123_SUBDOMAIN.match(subdomain) else ["network.subdomain is not a DNS subdomain"]
    names: list[str] = []
    for rjob in rjobs:
        job, replicas = rjob["template"]["spec"], rjob.get("replicas", 1)
        if job.get("parallelism", 1) * replicas > 2**31 - 1:
            problems.append(f"{rjob['name']}: replicas x parallelism exceeds int32")
        problems += dns_1035(rjob.get("groupName", "default"), "groupName")
        problems += dns_1035(f"{name}-{rjob['name']}-{replicas - 1}", "the longest Job name")
        if job.get("completionMode") == "Indexed" and "completions" in job:
            pod = f"{name}-{rjob['name']}-{replicas - 1}-{job['completions'] - 1}-abcde"
            problems += dns_1035(pod, "the longest pod name")
        for dependency in rjob.get("dependsOn") or []:
            if dependency["name"] not in names:  # only an earlier replicatedJob (the webhook lets itself pass)
                problems.append(f"{rjob['name']} cannot depend on {dependency['name']}")
        if len(rjob.get("dependsOn") or []) > 1:
            problems.append(f"{rjob['name']}: only one dependsOn item is supported")
        names.append(rjob["name"])
    for target in (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []:
        if target not in names:
            problems.append(f"success policy target {target} is no replicatedJob")
    rules = (spec.get("failurePolicy") or {}).get("rules") or []
    rule_names = [rule.get("name", f"failurePolicyRule{index}") for index, rule in enumerate(rules)]
    if len(set(rule_names)) != len(rule_names):
        problems.append(f"failure policy rule names are not unique: {rule_names}")
    for rule, rule_name in zip(rules, rule_names, strict=True):
        if not (1 <= len(rule_name) <= 128 and RULE_NAME.match(rule_name)):
            problems.append(f"failure policy rule name {rule_name!r} is invalid")
        problems += [f"failure policy target {t} is no replicatedJob" for t in rule.get("targetReplicatedJobs") or []
                     if t not in names]  # fmt: skip
        problems += [f"failure reason {reason} is unknown" for reason in rule.get("onJobFailureReasons") or []
                     if reason not in JOB_FAILURE_REASONS]  # fmt: skip
    # the CRD's one CEL rule that is not about immutability
    if (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder" and any(
            r.get("dependsOn") for r in rjobs):  # fmt: skip
        problems.append("startupPolicy InOrder and dependsOn are mutually exclusive")
    return problems


def test_the_webhook_checks_catch_what_jobset_refuses() -> None:
    good = the_jobset(jobset_render("evaluator"))
    assert webhook_problems(good) == []
    broken = copy.deepcopy(good)
    broken["metadata"]["name"] = "a" * 44
    broken["spec"]["failurePolicy"]["rules"][0]["name"] = "exit-code-2"
    broken["spec"]["failurePolicy"]["rules"][1]["onJobFailureReasons"] = ["Deadline"]
    broken["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "chief", "status": "Ready"}]
    broken["spec"]["successPolicy"]["targetReplicatedJobs"] = ["master"]
    broken["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    found = "\n".join(webhook_problems(broken))
    for expected in ("the longest pod name", "'exit-code-2' is invalid", "Deadline is unknown",
                     "dependsOn can't be set for the first", "ps cannot depend on chief", "target master",
                     "mutually exclusive"):  # fmt: skip
        assert expected in found, found


# -- validity ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_the_jobset_and_everything_else_are_valid(case: str) -> None:
    docs = jobset_render(case)
    jobset = the_jobset(docs)
    problems = [f"JobSet: {problem}" for problem in crdlib.validate(jobset)]
    problems += [f"JobSet webhook: {problem}" for problem in webhook_problems(jobset)]
    custom = [doc for doc in docs if doc["kind"] in ("JobSet", "PodGroup", "ServiceMonitor", "PodMonitor")]
    for doc in custom[1:]:
        problems += [f"{doc['kind']}: {problem}" for problem in crdlib.validate(doc)]
    # every other object, and each Job the JobSet creates from its templates
    problems += openapi_problems([*(doc for doc in docs if doc not in custom), *child_jobs(jobset)], KUBERNETES)
    assert not problems, "\n".join(problems)


# -- the JobSet carries the native pods under JobSet's names --------------------------------------------------


def without(items: list[dict[str, Any]], names: tuple[str, ...]) -> list[dict[str, Any]]:
    return [item for item in items if item["name"] not in names]


def dropped(mapping: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in (mapping or {}).items() if key not in keys}


@pytest.mark.parametrize("case", list(CASES))
def test_policies_order_names_and_pods_are_the_native_runs(case: str) -> None:
    docs, natives = jobset_render(case), native(case)
    jobset = the_jobset(docs)
    spec = jobset["spec"]
    by_role = native_workloads(natives)
    roles = [role for role in TF_ROLES if role in by_role]
    rjobs = replicated_jobs(jobset)
    assert list(rjobs) == roles  # ps, worker, chief, evaluator: the ones the strategy runs
    run_role = "chief" if "chief" in roles else "worker"

    # success: the chief's Job (the workers' without a chief); failure: exit 2 and deadlines end the run
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [run_role]}
    restarts = 2 if case == "evaluator" else 0
    assert spec["failurePolicy"] == {"maxRestarts": restarts, "rules": [
        {"name": "ExitCode2FailsTheRun", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
        {"name": "DeadlineEndsTheRun", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
    ]}  # fmt: skip
    assert spec.get("ttlSecondsAfterFinished") == (600 if case == "evaluator" else None)
    assert "startupPolicy" not in spec and "suspend" not in spec
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": PREFIX}

    # the startup order: each role once the previous one is Ready; none under a gang scheduler (deadlock)
    gang = case in ("volcano", "coscheduling")
    for index, role in enumerate(roles):
        expected = [{"name": roles[index - 1], "status": "Ready"}] if index and not gang else None
        assert rjobs[role].get("dependsOn") == expected, role

    # the cluster map: the native one with JobSet's names, each the DNS name of its pod, the same ports
    native_cluster = json.loads(env_of(pod_spec(by_role[run_role])["containers"][0])["TFD_CLUSTER"])
    cluster = json.loads(env_of(rjobs[run_role]["template"]["spec"]["template"]["spec"]["containers"][0])
                         ["TFD_CLUSTER"])  # fmt: skip
    assert list(cluster) == list(native_cluster) and cluster.keys() <= {"chief", "ps", "worker"}
    for job, addresses in cluster.items():
        container = rjobs[job]["template"]["spec"]["template"]["spec"]["containers"][0]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "tf-grpc")
        assert addresses == [f"{name}:{port}" for name in pod_dns_names(jobset, job)], job
        assert len(addresses) == len(native_cluster[job]) == native_pods(by_role[job])
        native_name = re.compile(rf"^{PREFIX}-{job}(-(\d+))?\.{PREFIX}-{job}\.")
        mapped = [native_name.sub(lambda m, job=job: f"{PREFIX}-{job}-0-{m[2] or 0}.{PREFIX}.", address)
                  for address in native_cluster[job]]  # fmt: skip
        assert addresses == mapped, job

    # every pod: the native pod spec and containers, but for its name and where its index comes from
    for role in roles:
        job = rjobs[role]["template"]["spec"]
        native_doc = by_role[role]
        assert rjobs[role]["replicas"] == 1
        assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed",) + (
            native_pods(native_doc),) * 2
        assert "ttlSecondsAfterFinished" not in job  # the JobSet's TTL covers its Jobs
        assert job["podReplacementPolicy"] == "Failed" and job["template"]["spec"]["restartPolicy"] == "Never"
        assert job["podFailurePolicy"]["rules"] == [
            {"action": "FailJob", "onExitCodes": {"containerName": role, "operator": "In", "values": [2]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
        if native_doc["kind"] == "Job":  # chief, evaluator, the workers without a chief: the same Job
            assert dropped(job, ("completionMode", "template")) == dropped(
                native_doc["spec"], ("completionMode", "template", "ttlSecondsAfterFinished"))
        else:  # a StatefulSet's role: chief.backoffLimit per task, as the native workers' Job
            assert job["backoffLimit"] == 6 * native_pods(native_doc) and "activeDeadlineSeconds" not in job
        pod, native_pod = job["template"], pod_template(native_doc)
        # (a StatefulSet's pods restart Always: no restartPolicy in its template)
        assert dropped(pod["spec"], ("containers", "hostname", "subdomain", "restartPolicy")) == dropped(
            native_pod["spec"], ("containers", "hostname", "subdomain", "restartPolicy"))
        assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"]  # JobSet's and the Job's own
        assert dropped(pod["metadata"]["labels"], KUEUE_KEYS) == dropped(native_pod["metadata"]["labels"], KUEUE_KEYS)
        assert dropped(pod["metadata"].get("annotations"), KUEUE_KEYS) == dropped(
            native_pod["metadata"].get("annotations"), KUEUE_KEYS)
        [container], [native_container] = pod["spec"]["containers"], native_pod["spec"]["containers"]
        source = next(item for item in container["env"] if item["name"] == "TFD_TASK_INDEX")
        assert source == {"name": "TFD_TASK_INDEX", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}}
        assert {**container, "env": without(container["env"], ("TFD_CLUSTER", "TFD_TASK_INDEX"))} == {
            **native_container, "env": without(native_container["env"], ("TFD_CLUSTER", "TFD_TASK_INDEX"))}, role

    # the run's identity is the native workloads'
    run_spec = jobset["metadata"]["annotations"]["tf-distributed.io/run-spec"]
    assert run_spec == pod_template(by_role[run_role])["metadata"]["annotations"]["tf-distributed.io/run-spec"]

    # Kueue: the queue on the JobSet alone (one Workload), never on a pod, a Job template or anything else
    queue = {"kueue.x-k8s.io/queue-name": "team-a"} if case.startswith("kueue") else {}
    if case == "kueue":
        queue["kueue.x-k8s.io/priority-class"] = "high"
    labels = jobset["metadata"]["labels"]
    assert {key: value for key, value in labels.items() if key.startswith("kueue.x-k8s.io/")} == queue
    text = json.dumps([doc for doc in docs if doc is not jobset] + [spec])
    assert "kueue.x-k8s.io/" not in text

    # nothing native is left: no StatefulSet, PDB, no Job but the helm test hook
    kinds = {doc["kind"] for doc in docs}
    assert not kinds & {"StatefulSet", "PodDisruptionBudget"}
    assert [doc["metadata"]["name"] for doc in by_kind(docs, "Job")] == [f"{PREFIX}-test"]
    # the supervisor (the chief's progress, by default) follows the JobSet and the chief's Job JobSet creates, by
    # name; it may scale nothing but itself, and touch no StatefulSet and no other Job
    chief_job = f"{jobset['metadata']['name']}-{run_role}-0"
    env = env_of(pod_spec(named(docs, "Deployment", f"{PREFIX}-supervisor"))["containers"][0])
    assert named(docs, "Role", f"{PREFIX}-supervisor")["rules"] == [
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "resourceNames": [PREFIX],
         "verbs": ["get", "list", "patch", "watch"]},  # watched by name (a metadata.name field selector)
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": [chief_job], "verbs": ["get", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "resourceNames": [f"{PREFIX}-supervisor"],
         "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},  # a suspension waits for them
        # Kueue's Workload of the JobSet, whose spec.active suspends it (named by Kueue: not by name)
        *([{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "patch"]}] if queue else []),
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]  # fmt: skip
    assert (env["TFD_RUN_KIND"], env["TFD_RUN_NAME"], env["TFD_CHIEF_JOB"], env["TFD_PROGRESS_JOB"],
            env["TFD_PROGRESS_CONTAINER"], env["TFD_STATEFULSETS"], env["TFD_EVALUATOR_JOB"]) == (
        "JobSet", PREFIX, chief_job, chief_job, run_role, "", "")  # fmt: skip
    assert env["TFD_EXPECTED_PODS"] == str(sum(rjob["template"]["spec"]["parallelism"] for rjob in rjobs.values()))
    assert {named(docs, kind, f"{PREFIX}-supervisor")["kind"] for kind in ("ServiceAccount", "RoleBinding",
                                                                           "NetworkPolicy")}  # fmt: skip
    # JobSet creates the Service <fullname> and the Jobs <fullname>-<role>-0: the chart names nothing so
    names = {(doc["kind"], doc["metadata"]["name"]) for doc in docs}
    assert ("Service", PREFIX) not in names
    assert not {("Job", f"{PREFIX}-{role}-0") for role in roles} & names
    # per-role headless Services only for a ServiceMonitor, with the metrics port alone
    services = {doc["metadata"]["name"]: doc for doc in by_kind(docs, "Service")}
    role_services = {name for name in services if name.removeprefix(f"{PREFIX}-") in TF_ROLES}
    assert role_services == ({f"{PREFIX}-{role}" for role in roles} if case == "metrics" else set())
    for name in role_services:
        assert [port["name"] for port in services[name]["spec"]["ports"]] == ["metrics"]
        assert services[name]["spec"]["clusterIP"] == "None"

    # the NetworkPolicies isolate and admit the JobSet's pods as they do the native ones
    policies = {doc["metadata"]["name"]: doc for doc in by_kind(docs, "NetworkPolicy")}
    tensorflow = policies[f"{PREFIX}-tensorflow"]
    for role in roles:
        pod_labels = rjobs[role]["template"]["spec"]["template"]["metadata"]["labels"]
        assert selects(tensorflow["spec"]["podSelector"], pod_labels), role
        assert selects(tensorflow["spec"]["ingress"][0]["from"][0]["podSelector"], pod_labels), role


def test_the_gangs_group_every_jobset_pod_and_keep_their_scheduler() -> None:
    for case, provider, scheduler in (("volcano", "volcano", "volcano"),
                                      ("coscheduling", "coscheduling", "scheduler-plugins-scheduler")):  # fmt: skip
        docs = jobset_render(case)
        [group] = by_kind(docs, "PodGroup")
        assert group == next(doc for doc in native(case) if doc["kind"] == "PodGroup")
        pods = [rjob["template"]["spec"] for rjob in the_jobset(docs)["spec"]["replicatedJobs"]]
        assert group["spec"]["minMember"] == sum(job["parallelism"] for job in pods), provider
        for job in pods:
            assert job["template"]["spec"]["schedulerName"] == scheduler
            metadata = job["template"]["metadata"]
            marks = {**metadata["labels"], **metadata.get("annotations", {})}
            assert marks.get("scheduling.k8s.io/group-name" if provider == "volcano"
                             else "scheduling.x-k8s.io/pod-group") == group["metadata"]["name"]  # fmt: skip


@pytest.mark.parametrize(("role", "index"), [("ps", 2), ("worker", 4), ("chief", 0), ("evaluator", 0)])
def test_the_prelude_gives_each_jobset_pod_its_task(role: str, index: int) -> None:
    jobset = the_jobset(jobset_render("evaluator"))
    container = replicated_jobs(jobset)[role]["template"]["spec"]["template"]["spec"]["containers"][0]
    hostname = f"{PREFIX}-{role}-0-{index}"
    cluster = json.loads(env_of(container)["TFD_CLUSTER"])
    # the completion index through the downward API, else the hostname's suffix
    for from_annotation in (str(index), None):
        result = run_prelude(container, hostname, from_annotation)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"cluster": cluster, "task": {"type": role, "index": index}}
    if role != "evaluator":
        assert cluster[role][index].startswith(f"{hostname}.{PREFIX}.{NS}.svc.")


# -- names: the budget JobSet's webhook allows -------------------------------------------------------------


def test_the_longest_names_pass_the_webhook_and_stay_dns_labels() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    limits = {role: schema["properties"][role]["properties"]["replicas"]["maximum"] for role in ("ps", "worker")}
    shapes = {"workers": ["training.strategy=multi_worker_mirrored", f"worker.replicas={limits['worker']}",
                          f"training.batchSize={limits['worker'] + 1}"],
              "ps": [f"ps.replicas={limits['ps']}", "worker.replicas=1"]}  # fmt: skip
    for shape, sets in shapes.items():
        docs = render(release="a" * 53, sets=[*sets, *JOBSET_SETS, "evaluator.enabled=true"], namespace=NS)
        jobset = the_jobset(docs)
        name = jobset["metadata"]["name"]
        assert len(name) == 43 and name.startswith("a" * 34 + "-"), name  # 34 characters and a hash
        assert webhook_problems(jobset) == [], shape
        for rjob in jobset["spec"]["replicatedJobs"]:
            job = rjob["template"]["spec"]
            hostname = f"{name}-{rjob['name']}-0-{job['completions'] - 1}"
            assert len(hostname) <= 63 and len(f"{name}-{rjob['name']}-0") <= 63  # the job-name label
        assert all(len(label) <= 63 for host in hosts(json.loads(env_of(
            child_jobs(jobset)[0]["spec"]["template"]["spec"]["containers"][0])["TFD_CLUSTER"])) for label in
            host.split("."))  # fmt: skip
    # a 45-character name (a release that contains the chart's name is the prefix) keeps it natively and
    # is hashed within 43 here
    release = "r" * 30 + "-tf-distributed"
    assert named(render(release=release), "Service", f"{release}-worker")
    hashed = the_jobset(render(release=release, sets=JOBSET_SETS))["metadata"]["name"]
    assert len(hashed) <= 43 and hashed.startswith("r" * 30 + "-tf")  # (a cut that ends in "-" loses it)
    # the longest fullnameOverride allowed passes the webhook too
    docs = render(sets=[*JOBSET_SETS, "fullnameOverride=" + "f" * 43, "evaluator.enabled=true"])
    assert webhook_problems(the_jobset(docs)) == []


# -- the size rules of validateValues measure the JobSet's map ------------------------------------------------


@pytest.fixture(scope="module")
def probe_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return size_probe_chart(tmp_path_factory)


@pytest.mark.parametrize("seed", range(4))
def test_the_charts_size_helpers_match_the_jobset_map(seed: int, probe_chart: Path) -> None:
    rng = random.Random(seed)
    release = rng.choice(["mnist", "r" + "e" * rng.randrange(0, 52)])
    namespace = "n" * rng.randrange(1, 64)
    strategy = ["parameter_server", "multi_worker_mirrored"][seed % 2]
    ports = [rng.choice([1, 80, 2222, 65535]) for _ in range(3)]
    sets = [*map_sets(strategy, rng.randrange(1, 40), rng.randrange(1, 130), domain_of_length(rng.randrange(3, 60)),
                      ports), *JOBSET_SETS]  # fmt: skip
    result = helm("4", "template", release, str(probe_chart), "--namespace", namespace,
                  *(arg for item in sets for arg in ("--set", item)))  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = parse_all(result.stdout)
    computed = named(docs, "ConfigMap", "size-probe")["data"]
    jobset = the_jobset(docs)
    text = env_of(child_jobs(jobset)[0]["spec"]["template"]["spec"]["containers"][0])["TFD_CLUSTER"]
    assert int(computed["mapBytes"]) == len(text)
    cluster = json.loads(text)
    longest = json.loads(computed["longestTaskHost"])
    role, _, index = longest["task"].partition(" ")
    assert longest["length"] == len(cluster[role][int(index or 0)].rsplit(":", 1)[0]) == max(map(len, hosts(cluster)))


def test_the_supervisor_runs_under_a_jobset_for_the_chief_s_progress_and_stalls_only() -> None:
    """JobSet frees the pods itself: without the chief's progress (nor so a stall timeout) the supervisor has
    nothing to do and nothing of it renders; with a stall timeout it ends a stalled run through the chief's Job,
    never the evaluator's (JobSet deletes it)."""
    quiet = render(sets=[*JOBSET_SETS, "supervisor.progress.enabled=false"], namespace=NS)
    assert not [doc for doc in quiet if doc["metadata"]["name"] == f"{PREFIX}-supervisor"]
    assert not by_kind(quiet, "Role") and not by_kind(quiet, "RoleBinding")
    stalls = render(sets=[*JOBSET_SETS, "training.stallTimeoutSeconds=1800", "evaluator.enabled=true"], namespace=NS)
    env = env_of(pod_spec(named(stalls, "Deployment", f"{PREFIX}-supervisor"))["containers"][0])
    # the run starts once its 5 pods run: 1 ps, 2 workers, the chief, the evaluator
    assert (env["TFD_STALL_TIMEOUT_SECONDS"], env["TFD_START_TIMEOUT_SECONDS"], env["TFD_EVALUATOR_JOB"],
            env["TFD_EXPECTED_PODS"]) == ("1800", "0", "", "5")  # fmt: skip
    jobs = next(rule for rule in named(stalls, "Role", f"{PREFIX}-supervisor")["rules"] if "jobs" in rule["resources"])
    assert jobs["resourceNames"] == [f"{PREFIX}-chief-0"]
