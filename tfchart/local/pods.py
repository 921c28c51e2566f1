"""The rendered release's pods as their controllers would create them (`LocalPod`: a StatefulSet's by ordinal,
a Job's, TensorBoard's Deployment's, a JobSet's as JobSet and the Job controller make them, jobset.py), and the
controllers they run under on this machine (`workload_of`, run by jobsetrun.py): what both engines start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from tfchart.errors import UsageError
from tfchart.local import jobset
from tfdcontract import CHIEF, COMPONENT_LABEL, TENSORBOARD, TF_ROLES, WORKER
from tfdcontract.env import CLUSTER_ENV


@dataclass
class LocalPod:
    """One pod as its controller (StatefulSet, Job, Deployment) would create it from the rendered template: its
    command and args, its env (the downward API resolved, `pod_of`), where its readiness probe connects (in the
    pod's network; None: no probe); each engine rewrites what it must before starting it."""

    name: str
    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    probe_port: int | None = None
    controller: dict[str, Any] = field(default_factory=dict)  # the workload document
    labels: dict[str, str] = field(default_factory=dict)  # apps.kubernetes.io/pod-index included for StatefulSet pods
    annotations: Mapping[str, str] = field(default_factory=dict)  # those the controller adds (completion index)

    @property
    def spec(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.controller["spec"]["template"]["spec"])  # the pod template's

    @property
    def container(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.spec["containers"][0])

    @property
    def is_chief(self) -> bool:
        """The chief task, or worker 0 where the cluster map has no chief (TensorFlow's convention)."""
        no_chief = '"chief"' not in self.env.get(CLUSTER_ENV, '"chief"')
        return self.role == CHIEF or (self.role == WORKER and self.index == 0 and no_chief)


def pod_of(name: str, role: str, index: int, controller: dict[str, Any], labels: dict[str, str], namespace: str,
           annotations: Mapping[str, str] = MappingProxyType({})) -> LocalPod:  # fmt: skip
    """The pod, its env's downward API metadata fields resolved as the kubelet does (with the `annotations` its
    controller adds: the completion index); secretKeyRef and configMapKeyRef cannot be resolved without a
    cluster: left unset. Its readiness probe's port: tcpSocket, grpc, httpGet, a named port looked up."""
    container = controller["spec"]["template"]["spec"]["containers"][0]
    fields = {"metadata.name": name, "metadata.namespace": namespace}
    env: dict[str, str] = {}
    for item in container.get("env", []):
        field_path = (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath", "")
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif field_path in fields:
            env[item["name"]] = fields[field_path]
        elif field_path.startswith(("metadata.labels[", "metadata.annotations[")):  # metadata.labels['<key>']
            keyed = labels if field_path.startswith("metadata.labels[") else annotations
            env[item["name"]] = keyed.get(field_path[field_path.index("[") + 2 : -2], "")
    probe = container.get("readinessProbe") or {}
    port = next((probe[kind].get("port") for kind in ("tcpSocket", "grpc", "httpGet") if kind in probe), None)
    if isinstance(port, str) and not port.isdigit():
        port = next((p.get("containerPort") for p in container.get("ports") or [] if p.get("name") == port), None)
    argv = [*container.get("command", []), *container.get("args", [])]
    return LocalPod(name, role, index, argv, env, None if port is None else int(port), controller, labels, annotations)


def rendered_pods(docs: Sequence[dict[str, Any]], namespace: str = "default") -> list[LocalPod]:
    """The TensorFlow pods (ps, workers, chief, evaluator) and TensorBoard of a rendered release, each as its
    controller creates it (hostname, index, labels and annotations); a JobSet's as JobSet and the Job controller
    create them (jobset.py)."""
    found = [pod for doc in docs if doc.get("kind") in ("JobSet", "StatefulSet", "Job", "Deployment")
             and "helm.sh/hook" not in (doc["metadata"].get("annotations") or {})
             for pod in jobset.pods_of(doc, namespace)]  # fmt: skip
    return [pod_of(hostname, role, index, controller, labels, namespace, annotations)
            for hostname, index, controller, labels, annotations in found
            if (role := labels.get(COMPONENT_LABEL, "")) in (*TF_ROLES, TENSORBOARD)]  # fmt: skip


def workload_of(docs: Sequence[dict[str, Any]], namespace: str, pods: Sequence[LocalPod]) -> dict[str, Any]:
    """The controllers the pods run under: the render's JobSet (workload.kind=jobset), read as its controller
    reads it, else its Jobs and StatefulSets (TensorBoard's Deployment aside: started once), the chief's Job (or
    the workers' without a chief) the run's; one line where there is no chief."""
    found = [doc for doc in docs if doc.get("kind") == "JobSet"]
    if len(found) > 1:
        raise UsageError(f"the release renders {len(found)} JobSets: tfchart local runs one")
    workloads = {pod.controller["metadata"]["name"]: pod.controller for pod in pods if pod.role != TENSORBOARD}
    jobs = {pod.role: pod.controller["metadata"]["name"] for pod in reversed(pods) if pod.controller["kind"] == "Job"}
    if (run_job := jobs.get(CHIEF) or jobs.get(WORKER)) is None:
        raise UsageError("the rendered release has no chief",
                         "every topology renders a chief Job, or workers whose worker 0 is the chief: check --chart")
    return jobset.read(found[0], namespace) if found else jobset.native(list(workloads.values()), run_job, namespace)
