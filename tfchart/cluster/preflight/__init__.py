"""`tfchart preflight`: will this release fit the cluster? Checked before `helm install`, from the render
of the release (what it would create), one module per check, each a list of Findings (ok | warn |
fail, with a hint): gpus, storage (and co-location), quota, network, jobset, gang, kueue, topology, and images
(each image resolves in its registry; no cluster needed). A read that RBAC forbids turns only its own part
into a `could not check` warning."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Any

from tfchart.cluster.preflight import gang, gpus, images, jobset, kueue, network, quota, storage, topology
from tfchart.cluster.preflight.plan import FAIL, OK, WARN, Context, Finding, Plan, guarded, plan
from tfchart.errors import TfchartError

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.cluster.kube import KubeApi
    from tfchart.images.registry import Access

__all__ = ["FAIL", "OK", "WARN", "Context", "Finding", "Plan", "enforce", "plan", "refusal", "report", "run"]


def run(api: KubeApi | None, docs: list[dict[str, Any]], release: str, namespace: str,
        registries: Access | None = None) -> list[Finding]:  # fmt: skip
    """Every check's findings in CHECKS' order (only with an api; a check of what the render does not ask for finds
    nothing and reads nothing), then the images' (only with `registries`)."""
    checks: list[tuple[str, Callable[[], list[Finding]]]] = []
    if api is not None:
        context = Context(api, plan(docs), namespace, release)
        checks = [(name, partial(check, context)) for name, check in CHECKS]
    if registries is not None:
        checks.append((images.CHECK, partial(images.check_images, docs, registries)))
    return [finding for name, check in checks for finding in guarded(name, check)]


CHECKS: tuple[tuple[str, Callable[[Context], list[Finding]]], ...] = (
    ("gpu-capacity", gpus.check_gpus), ("storage", storage.check_storage), ("co-location", storage.check_colocation),
    ("quota", quota.check_quota), ("network-policy", network.check_network_policy), (jobset.CHECK, jobset.check_jobset),
    ("gang-scheduling", gang.check_gang), ("kueue", kueue.check_kueue), (topology.CHECK, topology.check_topology),
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
    skip = "--skip-image-check" if first.check == images.CHECK else "--skip-preflight"
    return TfchartError(f"preflight checks failed: {first.message}{more}",
                        f"{first.hint or 'fix the failures above'} (or pass {skip} to go on anyway)")


def enforce(api: KubeApi | None, docs: list[dict[str, Any]], release: str, namespace: str,
            registries: Access | None = None) -> None:  # fmt: skip
    """Runs the checks (those of the cluster with an api, the images' with registries), shows the findings
    on stderr (what install or upgrade says on its way) and refuses to go on after a failure."""
    from tfchart.console import console

    findings = run(api, docs, release, namespace, registries)
    render(findings, console(stderr=True))
    if (error := refusal(findings)) is not None:
        raise error
