"""`tfchart preflight`: will this release fit the cluster? Checked before `helm install`, from the render
of the release (what it would create), one module per check, each a list of Findings (ok | warn |
fail, with a hint): gpus, storage (and co-location), quota, network, gang, kueue. A read that RBAC
forbids turns only its own part into a `could not check` warning."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfchart.cluster.preflight import gang, gpus, kueue, network, quota, storage
from tfchart.cluster.preflight.findings import FAIL, OK, WARN, Finding, guarded, schedulable_nodes
from tfchart.cluster.preflight.plan import QUEUE_LABEL, Plan, plan
from tfchart.errors import TfchartError

if TYPE_CHECKING:
    from rich.console import Console

    from tfchart.cluster.kube import KubeApi

__all__ = ["FAIL", "OK", "WARN", "Finding", "Plan", "enforce", "plan", "run"]


def run(api: KubeApi, docs: list[dict[str, Any]], release: str, namespace: str) -> list[Finding]:
    """Every check's findings, in order: GPUs, storage, co-location (co-located releases only), quota,
    network policy, then gang scheduling and Kueue when the render asks for them."""
    planned = plan(docs)
    need = planned.storage
    nodes = schedulable_nodes(api)
    checks: list[tuple[str, Callable[[], list[Finding]]]] = [
        ("gpu-capacity", lambda: gpus.check_gpus(api, planned, release, namespace, nodes)),
        ("storage", lambda: storage.check_storage(api, planned, namespace, nodes)),
    ]
    if need is not None and need.colocated:
        checks.append(("co-location", lambda: storage.check_colocation(planned, need, nodes)))
    checks += [
        ("quota", lambda: quota.check_quota(api, planned, namespace)),
        ("network-policy", lambda: network.check_network_policy(api, planned)),
    ]
    if planned.pod_group is not None:
        checks.append(("gang-scheduling", lambda: gang.check_gang(api, planned)))
    if planned.label(QUEUE_LABEL):
        checks.append(("kueue", lambda: kueue.check_kueue(api, planned, namespace)))
    return [finding for name, check in checks for finding in guarded(name, check)]


SEVERITY_STYLE = {OK: ("green", "✓ ok"), WARN: ("yellow", "! warn"), FAIL: ("red", "✗ fail")}


def has_failures(findings: list[Finding]) -> bool:
    return any(finding.severity == FAIL for finding in findings)


def render(findings: list[Finding], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Preflight", title_justify="left")
    for column in ("CHECK", "RESULT", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for finding in findings:
        style, label = SEVERITY_STYLE.get(finding.severity, ("white", finding.severity))
        message = escape(finding.message) + (f"\n[dim]hint: {escape(finding.hint)}[/]" if finding.hint else "")
        table.add_row(finding.check, f"[{style}]{label}[/]", message)
    console.print(table)
    counts = Counter(finding.severity for finding in findings)
    console.print(f"{counts[FAIL]} failed, {counts[WARN]} warning(s), {counts[OK]} ok")


def enforce(api: KubeApi, docs: list[dict[str, Any]], release: str, namespace: str) -> None:
    """Runs every check, shows the findings on stderr and refuses to go on after a failure."""
    from rich.console import Console

    findings = run(api, docs, release, namespace)
    render(findings, Console(stderr=True))
    if has_failures(findings):
        fix = "fix the failures above, or pass --skip-preflight to install anyway"
        raise TfchartError("preflight checks failed", fix)
