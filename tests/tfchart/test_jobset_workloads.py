"""tfchart reads a JobSet render (workload.kind=jobset) as it reads a native one: every replicatedJob is a pod
template with its role and pods (replicas x parallelism), so `tfchart images`, preflight's plan and GPU count
and a policy's GPU rules say the same of both renders of one set of values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from tests import kubeapi as kf
from tests.chartlib import REPO, helm_path, render
from tests.kubeapi import kube_server
from tfchart.cluster import preflight
from tfchart.cluster.preflight.resources import check_gpus
from tfchart.manifests.images import pulled_images
from tfchart.manifests.workloads import gpus, resources, running, workloads

NS = "ml-training"
GPU_VALUES = REPO / "values" / "gpu.yaml"
JOBSET = ("workload.kind=jobset",)
TF_ROLES = {"ps", "worker", "chief", "evaluator"}
SUPERVISOR = "supervisor"  # both kinds: under a JobSet (which frees the pods) for the chief's progress and stalls


@cache
def _rendered(kind: str) -> str:
    sets = ["evaluator.enabled=true", f"workload.kind={kind}"]
    return json.dumps(render(values=[GPU_VALUES], sets=sets, namespace=NS))


def docs(kind: str) -> list[dict[str, Any]]:
    """values/gpu.yaml with the evaluator on, as helm 4 renders it for that workload kind (a fresh copy)."""
    rendered: list[dict[str, Any]] = json.loads(_rendered(kind))
    return rendered


def shape(kind: str) -> list[tuple[str, int, bool, list[Any], dict[str, str]]]:
    """(component, pods, helm hook, containers' images and resources, pod labels) of every pod template."""
    return sorted((w.component, w.replicas, w.hook, [(c["image"], c.get("resources")) for c in w.containers],
                   w.pod_labels) for w in workloads(docs(kind)) if w.component != SUPERVISOR)  # fmt: skip


def test_every_replicated_job_is_a_pod_template_of_its_role_with_replicas_times_parallelism() -> None:
    found = {w.component: w for w in workloads(docs("jobset")) if w.component in TF_ROLES}
    assert {role: (w.kind, w.name, w.replicas) for role, w in found.items()} == {
        "ps": ("JobSet", "mnist-tf-distributed-ps", 2),
        "worker": ("JobSet", "mnist-tf-distributed-worker", 4),
        "chief": ("JobSet", "mnist-tf-distributed-chief", 1),
        "evaluator": ("JobSet", "mnist-tf-distributed-evaluator", 1),
    }
    # the pod count is the JobSet's: replicas Jobs of parallelism pods each
    jobset = next(doc for doc in docs("jobset") if doc["kind"] == "JobSet")
    jobset["spec"]["replicatedJobs"][1]["replicas"] = 3
    worker = next(w for w in workloads([jobset]) if w.component == "worker")
    assert worker.replicas == 3 * 4
    # a replicatedJob without the chart's labels is named by its replicatedJob
    del jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert next(w.component for w in running([jobset])) == "ps"


def test_the_pods_of_both_kinds_are_the_same_pod_templates() -> None:
    """Role, pods, images and resources of every pod template, and its labels: what the readers count."""
    assert shape("jobset") == shape("native")
    supervisors = [[w for w in workloads(docs(kind)) if w.component == SUPERVISOR] for kind in ("native", "jobset")]
    assert [[(w.kind, w.replicas, w.containers[0]["image"]) for w in each] for each in supervisors] == [
        [("Deployment", 1, "ghcr.io/tf-distributed/trainer:0.1.0")]] * 2  # the CPU image: it needs no GPU


def test_tfchart_images_lists_the_same_images_with_the_same_pullers() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "tfchart", "images", "mnist", "-n", NS, "-f", str(GPU_VALUES), "--set",
         "evaluator.enabled=true", "--set", JOBSET[0], "-o", "json"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TFCHART_HELM": str(helm_path("4"))},
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    native = {image["image"]: sorted(image["components"]) for image in pulled_images(docs("native"))}
    assert {entry["image"]: sorted(entry["components"]) for entry in json.loads(listed.stdout)} == native
    assert {"ps", "worker", "chief", "evaluator"} <= set(native["ghcr.io/tf-distributed/trainer:0.1.0-gpu"])


def test_preflight_plans_and_counts_the_same_gpus() -> None:
    native, jobset = (preflight.Context(None, docs(kind), NS, "mnist") for kind in ("native", "jobset"))
    pods = [sorted(((r.role, r.replicas, resources(r.spec), gpus(r.spec)) for r in plan.roles), key=str)
            for plan in (native, jobset)]  # fmt: skip
    assert pods[0] == pods[1]
    assert jobset.adds["pods"] == 2 + 4 + 1 + 1 + 1 + 1 + 1  # ps, workers, chief, evaluator, TB, Serving, supervisor
    with kube_server(read_only=True) as cluster:
        cluster.add(*[kf.node(f"gpu-{i}", gpus={"nvidia.com/gpu": 2}) for i in range(2)])
        findings = [check_gpus(preflight.Context(cluster.api(), plan.docs, NS, "mnist")) for plan in (native, jobset)]
    assert findings[0] == findings[1]
    assert "4 nvidia.com/gpu needed (worker 4x1)" in findings[1][0].message


def test_a_policy_counts_the_gpus_of_a_jobset_render(tmp_path: Path) -> None:
    rules = tmp_path / "policy.yaml"
    rules.write_text("apiVersion: tf-distributed.io/policy/v1\nrules: {maxGpus: {perRole: {worker: 2}}}\n")
    reports = []
    for sets in ((), JOBSET):
        result = subprocess.run(
            [sys.executable, "-m", "tfchart", "validate", "-f", str(GPU_VALUES), "--policy", str(rules), "-o", "json",
             *(arg for item in sets for arg in ("--set", item))],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "COLUMNS": "400", "TFCHART_HELM": str(helm_path("4"))},
        )  # fmt: skip
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        reports.append(json.loads(result.stdout)["policy"]["violations"])
    native, jobset = reports
    assert [(v["rule"], v["path"], v["message"], v["fix"]) for v in jobset] == [
        (v["rule"], v["path"], v["message"], v["fix"]) for v in native]
    assert [v["rule"] for v in jobset] == ["maxGpus.perRole"] and "4 GPUs" in jobset[0]["message"]
