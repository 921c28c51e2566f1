"""images: every image the release pulls (`tfchart images`' list) resolves in its registry. A missing one
is named with the command that builds and pushes it (the project's image) or pushes it (the user's); a
refusal names the registry and the login; a registry this machine cannot reach is only a warning, as the
nodes may pull through a mirror it cannot see."""

from __future__ import annotations

from functools import partial
from typing import Any

from tfchart.cluster.preflight.plan import FAIL, OK, WARN, Finding
from tfchart.images.build import DEFAULT_REPOSITORY
from tfchart.images.registry import MISSING, PLAIN_HTTP, PRESENT, UNAUTHORISED, Access, resolve
from tfchart.manifests.images import PulledImage, pulled_images
from tfdcontract import HELM_TEST, SUPERVISOR

CHECK = "images"
PROJECT_COMPONENTS = (SUPERVISOR, HELM_TEST)  # they always run the project's own image (its CPU build)
finding = partial(Finding, CHECK)


def check_images(docs: list[dict[str, Any]], access: Access) -> list[Finding]:
    pulled = pulled_images(docs)
    project = {DEFAULT_REPOSITORY} | {image.repository for image in pulled
                                      if set(image.components) & set(PROJECT_COMPONENTS)}  # fmt: skip
    return [image_finding(image, access, image.repository in project) for image in pulled]


def image_finding(image: PulledImage, access: Access, built_here: bool) -> Finding:
    verdict = resolve(image.registry, image.repository, image.digest or image.tag or "latest", access)
    pulled_by, registry = f"(pulled by {', '.join(sorted(image.components))})", verdict.registry
    if verdict.state == PRESENT:
        return finding(OK, f"{image.image} is in {registry}")
    if verdict.state == MISSING:
        return finding(FAIL, f"{image.image} is not in {registry} {pulled_by}", push_command(image, registry, access)
                       if built_here else f"push it (podman push {image.image}, or docker push), or set the "
                       "component's image.* to an image that exists")  # fmt: skip
    if verdict.state == UNAUTHORISED:
        return finding(FAIL, f"{registry} refused {image.image} {pulled_by}: {verdict.detail}; it is private, or does "
                       f"not exist", f"podman login {registry} (or docker login {registry}), then run this again; the "
                       "nodes need the same credentials: global.imagePullSecrets")  # fmt: skip
    if verdict.state == PLAIN_HTTP:
        return finding(FAIL, f"{registry} ({image.image}): {verdict.detail}", f"--insecure-registry {registry} if it "
                       "is meant to serve plain HTTP (the nodes' container runtime must allow it too)")  # fmt: skip
    return finding(WARN, f"could not check {image.image}: {registry} unreachable from here ({verdict.detail})",
                   "the nodes may reach it (a mirror, a private network); --skip-image-check skips this check")


def push_command(image: PulledImage, registry: str, access: Access) -> str:
    """The `tfchart build` that builds the project's image and pushes it under this exact reference."""
    if image.digest:
        return (f"a digest names one exact build: push that build, or leave image.digest empty to pull the tag "
                f"(tfchart build --push --registry {registry} --repository {image.repository})")
    variant, tag = ("--gpu", image.tag.removesuffix("-gpu")) if image.tag.endswith("-gpu") else ("--cpu", image.tag)
    insecure = " --no-tls-verify" if registry in access.insecure else ""
    return (f"build and push it from a tf-distributed checkout: tfchart build {variant} --push --registry {registry} "
            f"--repository {image.repository} --tag {tag}{insecure}")
