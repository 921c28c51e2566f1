"""install / upgrade / uninstall through helm (pyhelm3), made safer than raw helm.

- Values are validated before helm or the cluster sees them (the caller runs tfchart.validate).
- Before an upgrade, the StatefulSets and Jobs of the deployed release are compared with the new
  render: Kubernetes forbids changing most StatefulSet spec fields and any Job pod template, and
  helm would fail half-way. tfchart refuses up front, naming each field, unless the caller asks to
  recreate those objects (StatefulSets are deleted with orphaned pods, which the new StatefulSet
  adopts; Jobs are deleted and recreated, and the chief resumes from its checkpoint).
- uninstall keeps the shared PersistentVolumeClaim (checkpoints, models) unless asked to delete it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tfchart.errors import ImmutableFieldChange, UsageError
from tfchart.helm import Runner, major_version
from tfchart.render import manifests, template_args, values_args

# Kubernetes: "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template',
# 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".
STATEFULSET_MUTABLE = {
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
}
# A Job's selector, template, completions (unless indexed) and completionMode are immutable.
JOB_IMMUTABLE = ("selector", "template", "completions", "completionMode", "podReplacementPolicy")


@dataclass(frozen=True)
class Options:
    namespace: str | None = None
    wait: bool = False
    timeout: str | None = None
    atomic: bool = False
    dry_run: str | None = None  # None, "client" or "server"
    create_namespace: bool = False


@dataclass(frozen=True)
class ImmutableChange:
    kind: str
    name: str
    field: str
    deployed: Any
    new: Any

    def describe(self) -> str:
        return (
            f"{self.kind}/{self.name}: spec.{self.field} cannot change ({_short(self.deployed)} -> {_short(self.new)})"
        )


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


class Deleter(Protocol):
    """Deletes objects through the Kubernetes API (tfchart.kube in production, a recorder in tests)."""

    def delete_statefulset_orphan(self, name: str, namespace: str) -> None: ...

    def delete_job(self, name: str, namespace: str) -> None: ...

    def delete_pvc(self, name: str, namespace: str) -> None: ...


def _common_flags(major: int, options: Options) -> list[str]:
    args: list[str] = []
    if options.namespace:
        args += ["--namespace", options.namespace]
    if options.create_namespace:
        args.append("--create-namespace")
    if options.wait:
        args.append("--wait=watcher" if major >= 4 else "--wait")
    if options.timeout:
        args += ["--timeout", options.timeout]
    if options.atomic:
        args.append("--rollback-on-failure" if major >= 4 else "--atomic")
    if options.dry_run:
        args.append(f"--dry-run={options.dry_run}")
    return args


def release_args(
    verb: str,
    major: int,
    release: str,
    chart: Path,
    files: Sequence[Path | str],
    sets: Sequence[tuple[str, str]],
    options: Options,
) -> list[str]:
    """`helm install|upgrade RELEASE CHART` with the options and the user's values, in order."""
    return [verb, release, str(chart), *_common_flags(major, options), *values_args(files, sets)]


def immutable_changes(deployed: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[ImmutableChange]:
    """Fields of StatefulSets and Jobs that the new manifests change but Kubernetes forbids changing."""

    def index(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        # Hooks (the helm test Job) are not part of the release: helm recreates them on each run.
        return {
            (d["kind"], d["metadata"]["name"]): d
            for d in docs
            if d.get("kind") in ("StatefulSet", "Job")
            and "helm.sh/hook" not in (d["metadata"].get("annotations") or {})
        }

    old_objects, new_objects = index(deployed), index(new)
    changes: list[ImmutableChange] = []
    for key in sorted(old_objects.keys() & new_objects.keys()):
        kind, name = key
        old_spec, new_spec = old_objects[key].get("spec", {}), new_objects[key].get("spec", {})
        if kind == "StatefulSet":
            fields = sorted((old_spec.keys() | new_spec.keys()) - STATEFULSET_MUTABLE)
        else:
            fields = [f for f in JOB_IMMUTABLE if f in old_spec or f in new_spec]
        for field_name in fields:
            old_value, new_value = old_spec.get(field_name), new_spec.get(field_name)
            if kind == "Job" and field_name in ("selector",):
                continue  # generated by the API server for Jobs, never rendered by the chart
            if old_value != new_value:
                changes.append(ImmutableChange(kind, name, field_name, old_value, new_value))
    return changes


@dataclass
class UpgradePlan:
    args: list[str]
    changes: list[ImmutableChange] = field(default_factory=list)


def plan_upgrade(
    runner: Runner,
    release: str,
    chart: Path,
    files: Sequence[Path | str],
    sets: Sequence[tuple[str, str]],
    options: Options,
) -> UpgradePlan:
    """The helm upgrade command and the immutable-field changes it would hit."""
    get = ["get", "manifest", release]
    if options.namespace:
        get += ["--namespace", options.namespace]
    deployed = manifests(runner(get).decode())
    rendered = manifests(runner(template_args(chart, release, files, sets, options.namespace)).decode())
    major = major_version(runner)
    return UpgradePlan(
        release_args("upgrade", major, release, chart, files, sets, options), immutable_changes(deployed, rendered)
    )


def upgrade(
    runner: Runner,
    release: str,
    chart: Path,
    files: Sequence[Path | str],
    sets: Sequence[tuple[str, str]],
    options: Options,
    recreate: bool = False,
    deleter: Deleter | None = None,
) -> UpgradePlan:
    """Plans, refuses immutable changes unless `recreate`, deletes what must be recreated, upgrades.

    Deletes land in options.namespace, the namespace helm is given: the caller resolves it once
    (tfchart.cli.resolve_namespace), so helm and the Kubernetes API never act in different ones.
    """
    plan = plan_upgrade(runner, release, chart, files, sets, options)
    if plan.changes and not recreate:
        listed = "\n  - ".join(change.describe() for change in plan.changes)
        raise ImmutableFieldChange(
            f"the upgrade would change fields Kubernetes forbids changing, so helm would fail half-way:\n  - {listed}",
            "revert those values, or re-run with --recreate to delete and recreate these objects "
            "(StatefulSet pods are kept and adopted; a running chief restarts from its last checkpoint)",
        )
    if plan.changes and not options.dry_run:
        if deleter is None or not options.namespace:
            raise UsageError(
                "recreating objects needs the Kubernetes API and the release's namespace",
                "pass -n NAMESPACE (tfchart resolves it from the kubeconfig context otherwise)",
            )
        namespace = options.namespace
        for kind, name in sorted({(c.kind, c.name) for c in plan.changes}):
            if kind == "StatefulSet":
                deleter.delete_statefulset_orphan(name, namespace)
            else:
                deleter.delete_job(name, namespace)
    runner(plan.args)
    return plan


def install(
    runner: Runner,
    release: str,
    chart: Path,
    files: Sequence[Path | str],
    sets: Sequence[tuple[str, str]],
    options: Options,
) -> str:
    return runner(release_args("install", major_version(runner), release, chart, files, sets, options)).decode()


def uninstall(
    runner: Runner,
    release: str,
    namespace: str,
    wait: bool = False,
    timeout: str | None = None,
    delete_data: bool = False,
    deleter: Deleter | None = None,
) -> list[str]:
    """Uninstalls the release from `namespace`. Returns the claims kept (or deleted with delete_data).

    helm is given --namespace explicitly and the claims are deleted in that same namespace.
    """
    get = ["get", "manifest", release, "--namespace", namespace]
    claims = [
        d["metadata"]["name"] for d in manifests(runner(get).decode()) if d.get("kind") == "PersistentVolumeClaim"
    ]
    args = ["uninstall", release, "--namespace", namespace]
    if wait:
        args.append("--wait")
    if timeout:
        args += ["--timeout", timeout]
    runner(args)
    if delete_data:
        assert deleter is not None, "deleting the claim needs the Kubernetes API"
        for claim in claims:
            deleter.delete_pvc(claim, namespace)
    return claims
