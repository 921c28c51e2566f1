"""`tfchart images`: every image a release pulls, read from a render of the chart (the helm test pod's
included), for mirroring into an air-gapped registry with `skopeo copy` or `crane copy`."""

from __future__ import annotations

from typing import Any

from tfchart.manifests.workloads import workloads


def parse_reference(image: str) -> dict[str, str]:
    """`[registry/]repository[:tag][@digest]` as `image`, `registry`, `repository`, `tag` and `digest`: a first
    component with a dot, a colon or "localhost" is a registry (else it is docker.io's library-style "org/name")."""
    name, _, digest = image.partition("@")
    first, _, rest = name.partition("/")
    registry = first if rest and ("." in first or ":" in first or first == "localhost") else ""
    repository, _, tag = (rest if registry else name).partition(":")
    return {"image": image, "registry": registry, "repository": repository, "tag": tag, "digest": digest}


def pulled_images(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every image of every pod template (and bare pod) in the manifests, its containers' and image volumes', sorted:
    its reference's parts and the `components` whose pods pull it."""
    found: dict[str, dict[str, Any]] = {}
    for workload in workloads(docs):
        for image, _ in workload.images:
            entry = found.setdefault(image, {**parse_reference(image), "components": []})
            if workload.component not in entry["components"]:
                entry["components"].append(workload.component)
    return [found[image] for image in sorted(found)]
