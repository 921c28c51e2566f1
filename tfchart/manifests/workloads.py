"""The pods a render creates: every pod template (and bare pod) of the manifests with its component,
pod count and spec, read from `helm template`'s output; nothing is re-derived from the values. A JobSet
(workload.kind=jobset) holds one pod template per replicatedJob: replicas Jobs of parallelism pods each."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tfchart.manifests import quantity
from tfdcontract import COMPONENT_LABEL, HELM_TEST

POD_SPEC_KEYS = ("containers", "initContainers", "ephemeralContainers")
HOOK = "helm.sh/hook"


#: Extended resources counted as GPUs (shell patterns): the well-known vendors' GPUs and AI accelerators
#: (nvidia.com/gpu and MIG slices, amd.com/gpu, gpu.intel.com/i915, habana.ai/gaudi, aws.amazon.com/neuron,
#: google.com/tpu) and any resource named *gpu*. A policy's maxGpus.resources replaces the list.
ACCELERATORS = ("*gpu*", "nvidia.com/*", "amd.com/*", "gpu.intel.com/*", "habana.ai/*", "aws.amazon.com/neuron*",
                "google.com/tpu*")


def is_gpu_resource(name: str, accelerators: Sequence[str] = ACCELERATORS) -> bool:
    """An extended resource (<domain>/<name>) that one of `accelerators` names."""
    return "/" in name and any(fnmatch.fnmatchcase(name.lower(), pattern) for pattern in accelerators)


@dataclass(frozen=True)
class Workload:
    """One pod template of the render: its object, component, pods, pod spec, and whether it is a helm hook."""

    kind: str
    name: str
    component: str
    replicas: int
    spec: dict[str, Any]
    hook: bool
    pod_labels: dict[str, str]
    pod_annotations: dict[str, str] = field(default_factory=dict)

    @property
    def role(self) -> str:
        """The component, or `helm test` for the test hook (how storage messages name it)."""
        return "helm test" if self.hook and self.component == HELM_TEST else self.component

    @property
    def containers(self) -> list[dict[str, Any]]:
        return [container for key in POD_SPEC_KEYS for container in self.spec.get(key) or []]

    @property
    def images(self) -> list[tuple[str, str | None]]:
        """Every image the pod pulls: its containers' (None), and its image volumes' with the volume's name
        (Kubernetes ImageVolume: `volumes[].image.reference`)."""
        containers: list[tuple[str, str | None]] = [(str(c.get("image", "")), None) for c in self.containers]
        return containers + [(str(v["image"].get("reference", "")), str(v.get("name")))
                             for v in self.spec.get("volumes") or [] if isinstance(v.get("image"), dict)]  # fmt: skip

    def claims(self) -> list[str]:
        return [str(volume["persistentVolumeClaim"].get("claimName")) for volume in self.spec.get("volumes") or []
                if isinstance(volume.get("persistentVolumeClaim"), dict)]  # fmt: skip


def resources(spec: Mapping[str, Any], kind: str = "requests") -> dict[str, Decimal]:
    """What a pod spec's containers request together (kind `requests`; the API server defaults a request left out to
    the limit) or are limited to (`limits`), per resource; init containers, smaller in the chart, left out."""
    totals: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        given = container.get("resources") or {}
        for key, value in {**(given.get("limits") or {}), **(given.get(kind) or {})}.items():
            totals[key] = totals.get(key, Decimal(0)) + quantity.parse(value)
    return totals


def gpus(spec: Mapping[str, Any]) -> dict[str, int]:
    """The GPUs a pod spec asks for (a limit is the request), per resource in name order."""
    return {key: int(value) for key, value in sorted(resources(spec).items()) if is_gpu_resource(key)}


def workloads(docs: list[dict[str, Any]]) -> list[Workload]:
    """Every pod template (and bare pod) of the manifests, with its pod count; a Pod is its own template."""
    found = []
    for doc in docs:
        kind, spec, meta = str(doc.get("kind")), doc.get("spec") or {}, doc.get("metadata") or {}
        name, component = str(meta.get("name")), str((meta.get("labels") or {}).get(COMPONENT_LABEL, kind))
        if kind == "Pod":
            templates = [(name, component, doc, 1)]
        elif kind == "JobSet":  # a replicatedJob's Job template: its pods carry the role's component
            templates = []
            for rjob in spec.get("replicatedJobs") or []:
                job = (rjob.get("template") or {}).get("spec") or {}
                labels = ((job.get("template") or {}).get("metadata") or {}).get("labels") or {}
                pods = int(rjob.get("replicas", 1)) * int(job.get("parallelism", 1))
                templates.append((f"{name}-{rjob.get('name')}", str(labels.get(COMPONENT_LABEL, rjob.get("name"))),
                                  job.get("template") or {}, pods))  # fmt: skip
        else:
            count = spec.get("parallelism", 1) if kind == "Job" else spec.get("replicas", 1)
            templates = [(name, component, spec.get("template") or {}, int(count))]
        for name, component, template, replicas in templates:
            pod, pod_meta = template.get("spec"), template.get("metadata") or {}
            if isinstance(pod, dict):
                found.append(Workload(kind, name, component, replicas, pod, HOOK in (meta.get("annotations") or {}),
                                      dict(pod_meta.get("labels") or {}), dict(pod_meta.get("annotations") or {})))
    return found


def running(docs: list[dict[str, Any]]) -> list[Workload]:
    """The release's own pods (not the helm test pod, which runs only on `helm test`)."""
    return [w for w in workloads(docs) if not w.hook and w.replicas > 0]
