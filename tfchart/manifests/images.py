"""`tfchart images`: every image a release pulls, read from a render of the chart (the helm test pod's
included), for mirroring into an air-gapped registry with `skopeo copy` or `crane copy`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tfchart.manifests.workloads import workloads

# [registry/]repository[:tag][@digest]; a first component with a dot, a colon or "localhost" is a registry
REFERENCE = re.compile(
    r"^(?:(?P<registry>[^/]+)/)?(?P<repository>[^:@]+(?:/[^:@]+)*)(?::(?P<tag>[^@]+))?(?:@(?P<digest>.+))?$"
)


@dataclass
class PulledImage:
    """One image reference and the components whose pods pull it."""

    image: str
    registry: str
    repository: str
    tag: str
    digest: str
    components: list[str] = field(default_factory=list)


def parse_reference(image: str) -> PulledImage:
    match = REFERENCE.match(image)
    parts = match.groupdict() if match else {}
    registry, repository = parts.get("registry") or "", parts.get("repository") or image
    if registry and not ("." in registry or ":" in registry or registry == "localhost"):
        registry, repository = "", f"{registry}/{repository}"  # docker.io's library-style "org/name"
    return PulledImage(image, registry, repository, parts.get("tag") or "", parts.get("digest") or "")


def pulled_images(docs: list[dict[str, Any]]) -> list[PulledImage]:
    """Every image of every pod template (and bare pod) in the manifests, its containers' and image volumes',
    sorted."""
    found: dict[str, PulledImage] = {}
    for workload in workloads(docs):
        for image, _ in workload.images:
            entry = found.setdefault(image, parse_reference(image))
            if workload.component not in entry.components:
                entry.components.append(workload.component)
    return [found[image] for image in sorted(found)]
