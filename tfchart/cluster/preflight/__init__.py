"""`tfchart preflight`: will this release fit the cluster? Checked before `helm install`, from the render of the
release (what it would create), each check a list of Findings (ok | warn | fail, with a hint): whether its requests fit
(resources: gpu-capacity, co-location, quota), storage, what it needs running (controllers: network-policy, jobset,
gang-scheduling, kueue, and the topology the pods ask of the last two), and images, here: every image the release
pulls (`tfchart images`' list) resolves in its registry, needing no cluster. A missing image is named with the command
that builds and pushes it (the project's image) or pushes it (the user's); a refusal names the registry and the login;
a registry this machine cannot reach is only a warning, as the nodes may pull through a mirror it cannot see. A read
that RBAC forbids turns only its own part into a `could not check` warning."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Any

from tfchart.cluster.preflight import controllers, resources
from tfchart.cluster.preflight.context import FAIL, OK, WARN, Context, Finding, guarded
from tfchart.errors import TfchartError
from tfchart.images.build import DEFAULT_REPOSITORY
from tfchart.images.registry import DOCKER_HUB, MISSING, PLAIN_HTTP, PRESENT, UNAUTHORISED, resolve
from tfchart.manifests.images import pulled_images
from tfdcontract import HELM_TEST, SUPERVISOR

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.cluster.kube import KubeApi


def run(api: KubeApi | None, docs: list[dict[str, Any]], release: str, namespace: str,
        registries: frozenset[str] | None = None) -> list[Finding]:  # fmt: skip
    """Every check's findings in CHECKS' order (only with an api; a check of what the render does not ask for finds
    nothing and reads nothing), then the images' (only with `registries`: those asked over plain HTTP)."""
    context = None if api is None else Context(api, docs, namespace, release)
    found = [finding for name, check in CHECKS if context for finding in guarded(name, partial(check, context))]
    return found + (check_images(docs, registries) if registries is not None else [])


CHECKS: tuple[tuple[str, Callable[[Context], list[Finding]]], ...] = (
    ("gpu-capacity", resources.check_gpus), ("storage", resources.check_storage),
    ("co-location", resources.check_colocation), ("quota", resources.check_quota),
    ("network-policy", controllers.check_network_policy), ("jobset", controllers.check_jobset),
    ("gang-scheduling", controllers.check_gang), ("kueue", controllers.check_kueue),
)  # fmt: skip
SEVERITY_STYLE = {OK: ("green", "✓ ok"), WARN: ("yellow", "! warn"), FAIL: ("red", "✗ fail")}


def render(findings: list[Finding], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Preflight", title_justify="left")
    for column in ("CHECK", "RESULT", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for finding in findings:
        style, label = SEVERITY_STYLE[finding.severity]
        message = escape(finding.message) + (f"\n[dim]hint: {escape(finding.hint)}[/]" if finding.hint else "")
        table.add_row(finding.check, f"[{style}]{label}[/]", message)
    console.print(table)
    counts = report(findings)["counts"]
    console.print(f"{counts[FAIL]} failed, {counts[WARN]} warning(s), {counts[OK]} ok")


def report(findings: list[Finding], release: str = "", namespace: str = "") -> dict[str, Any]:
    """`tfchart preflight -o json|yaml`: the findings in the order run, and whether the release may go on."""
    counts = Counter(finding.severity for finding in findings)
    return {"release": release, "namespace": namespace, "passed": not counts[FAIL],
            "counts": {severity: counts[severity] for severity in (OK, WARN, FAIL)},
            "findings": [asdict(finding) for finding in findings]}  # fmt: skip


def refusal(findings: list[Finding]) -> TfchartError | None:
    """The error that stops a command after a failed check: the first failure and its fix on one line."""
    failures = [finding for finding in findings if finding.severity == FAIL]
    if not failures:
        return None
    first, more = failures[0], f" (and {len(failures) - 1} more above)" if len(failures) > 1 else ""
    skip = "--skip-image-check" if first.check == "images" else "--skip-preflight"
    return TfchartError(f"preflight checks failed: {first.message}{more}",
                        f"{first.hint or 'fix the failures above'} (or pass {skip} to go on anyway)")


# -- images -----------------------------------------------------------------------------------------------------------
PROJECT_COMPONENTS = (SUPERVISOR, HELM_TEST)  # they always run the project's own image (its CPU build)


def check_images(docs: list[dict[str, Any]], insecure: frozenset[str]) -> list[Finding]:
    pulled = pulled_images(docs)
    project = {DEFAULT_REPOSITORY} | {image["repository"] for image in pulled
                                      if set(image["components"]) & set(PROJECT_COMPONENTS)}  # fmt: skip
    return [image_finding(image, insecure, image["repository"] in project) for image in pulled]


def image_finding(image: dict[str, Any], insecure: frozenset[str], built_here: bool) -> Finding:
    """The registry's answer for the image, by state: (severity, message, hint); unreachable: a warning."""
    reference = image["digest"] or image["tag"] or "latest"
    state, detail = resolve(image["registry"], image["repository"], reference, insecure)
    name, registry = image["image"], image["registry"] or DOCKER_HUB
    pulled_by = f"(pulled by {', '.join(sorted(image['components']))})"
    push = push_command(image, registry, insecure) if built_here else (
        f"push it (podman push {name}, or docker push), or set the component's image.* to an image that exists")
    severity, message, hint = {
        PRESENT: (OK, f"{name} is in {registry}", ""),
        MISSING: (FAIL, f"{name} is not in {registry} {pulled_by}", push),
        UNAUTHORISED: (FAIL, f"{registry} refused {name} {pulled_by}: {detail}; it is private, or does not exist",
                       f"podman login {registry} (or docker login {registry}), then run this again; the nodes need "
                       "the same credentials: global.imagePullSecrets"),
        PLAIN_HTTP: (FAIL, f"{registry} ({name}): {detail}", f"--insecure-registry {registry} if it is meant to serve "
                     "plain HTTP (the nodes' container runtime must allow it too)"),
    }.get(state, (WARN, f"could not check {name}: {registry} unreachable from here ({detail})", "the nodes "
                          "may reach it (a mirror, a private network); --skip-image-check skips this check"))
    return Finding("images", severity, message, hint)


def push_command(image: dict[str, Any], registry: str, insecure: frozenset[str]) -> str:
    """The `tfchart build` that builds the project's image and pushes it under this exact reference."""
    repository, tag = image["repository"], image["tag"]
    if image["digest"]:
        return (f"a digest names one exact build: push that build, or leave image.digest empty to pull the tag "
                f"(tfchart build --push --registry {registry} --repository {repository})")
    variant, tag = ("--gpu", tag.removesuffix("-gpu")) if tag.endswith("-gpu") else ("--cpu", tag)
    plain = " --no-tls-verify" if registry in insecure else ""
    return (f"build and push it from a tf-distributed checkout: tfchart build {variant} --push --registry {registry} "
            f"--repository {repository} --tag {tag}{plain}")
