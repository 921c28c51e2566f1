"""`tfchart upgrade`: helm upgrade made safer than raw helm, which fails half-way on a change the API server refuses.

Before helm runs, the guard sends each change of the deployed release (its last deployed revision: a failed upgrade's
is not what runs) to the API server as helm will (a JSON merge patch from the deployed manifest to the new one) in a
server-side dry run (dryRun=All), and reports each field the server refuses, with its live and new value and what to
do, unless --recreate deletes those objects (a Job or JobSet marked first, so the run supervisor waits for the new one)
and waits until each reads 404. Its own is only what the server cannot know: a finished JobSet of this very run is
kept as it is by the chart, how --recreate deletes, the values behind a claim's fields. An object gone from the cluster
(a chief Job removed by ttlSecondsAfterFinished) is no conflict: helm creates it (helm 3.17 and 4.1 pkg/kube
Client.Update: a NotFound on Get leads to a create).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, NamedTuple

from tfchart.cluster.fields import LONG, field_changes, json_text, show, show_pair
from tfchart.cluster.kube import AccessDenied, Deletion, KubeApi
from tfchart.errors import ImmutableFieldChange, KubernetesError, UsageError
from tfchart.helm.chart import Chart, Inputs, manifests, release_args
from tfchart.helm.runner import Options, Runner, base_revision, go_duration, major_version
from tfchart.manifests.quantity import parse_or_none
from tfdcontract import RECREATING_ANNOTATION, RUN_SPEC_ANNOTATION
from tfdcontract.runstate import annotations_of, jobset_ending

CLAIM = "PersistentVolumeClaim"
STORAGE = "spec.resources.requests.storage"
# What --recreate does with each kind it may delete (a claim is never deleted: it holds the checkpoints).
RECREATE = {
    "StatefulSet": "its pods are kept and adopted by the new StatefulSet",
    "Job": "its pod is stopped first; the chief resumes from its last checkpoint",
    "Deployment": "its pods are replaced",
    "JobSet": "its Jobs and pods are stopped first; the new JobSet's chief resumes from the last checkpoint",
}
# A StatefulSet whose new selector does not match its pods cannot adopt them: orphaned, they would
# keep the pod names the new StatefulSet needs. It is deleted with its pods instead.
NOT_ADOPTABLE = "its pods do not match the new selector, so they are stopped with it and created anew"
GUARDED = (*RECREATE, CLAIM)
ABSENT = {  # what helm does with a guarded object gone from the cluster; a Job's also says for a JobSet
    CLAIM: ": helm creates it again, empty", "StatefulSet": ": helm creates it from the new values",
    "Deployment": ": helm creates it from the new values", "Job": " (removed by ttlSecondsAfterFinished, or deleted by "
    "hand): helm creates it again from the new values, so it runs again (a chief resumes from its last checkpoint)",
}  # fmt: skip
# The values that render the claim's fields, for the fixes.
CLAIM_VALUES = {"spec.accessModes": "storage.accessModes", "spec.storageClassName": "storage.storageClassName",
                STORAGE: "storage.size"}
FIELDS_SHOWN_PER_OBJECT = 12  # more changed fields of one object are counted, not listed
TIMEOUT, POLL_SECONDS = 300.0, 2.0  # how long --recreate waits for its deletions (helm's default --timeout), polling
Causes = list[tuple[str, str]]  # (field, what the server said); field "" for a refusal without causes (403)


class ImmutableChange(NamedTuple):
    """A field whose change the server refuses: `field` its path (spec.template.spec.containers[name=c].image),
    `deployed` as helm deployed it (a claim's: as live), `reason` what the server said of it, `fix` what to do."""

    kind: str
    name: str
    field: str
    deployed: Any
    new: Any
    reason: str = ""
    fix: str = ""


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) from `old` to `new`: what changed, null for what is gone."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return new
    keys = sorted(old.keys() | new.keys(), key=str)
    return {key: merge_patch(old.get(key), new[key]) if key in new else None for key in keys
            if key not in new or old.get(key) != new[key]}  # fmt: skip


def causes(answer: dict[str, Any] | None) -> Causes:
    """What the server refused in its answer to a dry run, the values it echoes left out."""
    if answer is None:
        return []
    said = [(str(c.get("field") or ""), str(c.get("message") or "")) for c in (answer.get("details") or {}).get(
        "causes") or []] or [("", str(answer.get("message") or answer.get("reason") or "refused"))]  # fmt: skip
    return [(path, re.sub(r"^Forbidden: ", "", re.sub(r"Invalid value: .*?: (?=[^:]*$)", "", text)))
            for path, text in said]  # fmt: skip


@dataclass
class UpgradePlan:
    """One comparison of the deployed release with the new render, asking the API server about each change; the helm
    upgrade command; what --recreate found and did."""

    live: KubeApi
    namespace: str
    args: list[str] = field(default_factory=list)
    changes: list[ImmutableChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said before helm runs (objects helm creates again...)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)  # live objects read, for the deletion wait
    effects: dict[tuple[str, str], str] = field(default_factory=dict)  # what --recreate does to each object's pods
    answers: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # what the server said, per object
    recreated: list[tuple[str, str]] = field(default_factory=list)  # deleted by --recreate and gone
    already_gone: list[tuple[str, str]] = field(default_factory=list)  # --recreate found them gone

    def objects(self, recreatable: bool) -> list[tuple[str, str]]:
        return sorted({(c.kind, c.name) for c in self.changes if (c.kind in RECREATE) == recreatable})

    def compare(self, deployed: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[ImmutableChange]:
        """The refused changes of the guarded objects, hooks left out (the helm test Job: helm recreates those on each
        run); an object tfchart may not read is taken to exist, unread."""
        old_objects, new_objects = ({(d["kind"], d["metadata"]["name"]): d for d in docs if d.get("kind") in GUARDED
                                     and "helm.sh/hook" not in annotations_of(d)} for docs in (deployed, new))
        found: list[ImmutableChange] = []
        for key in sorted(old_objects.keys() & new_objects.keys()):
            kind, name = key
            try:
                live = self.live.read_object(kind, name, self.namespace)
            except AccessDenied as denied:
                self.notes.append(f"cannot read {kind} {name} ({denied.message}): its fields are shown as helm last "
                                  "deployed them")  # fmt: skip
                live = {}
            if live is None:
                self.notes.append(f"{kind} {name} is not in the cluster{ABSENT.get(kind, ABSENT['Job'])}")
                continue
            if uid := (live.get("metadata") or {}).get("uid"):
                self.uids[key] = str(uid)
            run_spec = annotations_of(new_objects[key]).get(RUN_SPEC_ANNOTATION)
            ending = jobset_ending(live) if live and kind == "JobSet" else None
            if ending and run_spec and annotations_of(live).get(RUN_SPEC_ANNOTATION) == run_spec:  # templates/_run.tpl
                finished = "Completed" if ending.kind == "succeeded" else "Failed"
                self.notes.append(f"JobSet {name} finished this run ({finished}): the chart keeps it as it is, so the "
                                  "upgrade does not start it again")  # fmt: skip
                continue
            old_spec, new_spec = old_objects[key].get("spec") or {}, new_objects[key].get("spec") or {}
            live_spec = live.get("spec") or {}
            base = live_spec if kind == CLAIM and live else old_spec  # a claim's class and size as live
            refused = self.refused(kind, name, old_spec, new_spec)
            found += [change for path, said in refused.items()
                      for change in _field_changes(kind, name, path, base, new_spec, said, live_spec)]  # fmt: skip
            deployed_size, new_size, live_size = (_size(spec) for spec in (old_spec, new_spec, live_spec))
            if kind == CLAIM and live and _order(deployed_size, new_size) == 0 and _order(new_size, live_size) == -1:
                self.notes.append(f"{CLAIM} {name} was grown outside helm to {live_size}, the values still say "
                                  f"{new_size}: helm may try to shrink it, which Kubernetes refuses; pass --set "
                                  f"storage.size={live_size}")  # fmt: skip
            elif kind == CLAIM and live and "resources" not in refused and _order(live_size, new_size) == -1:
                self.notes.append(f"{CLAIM} {name} grows from {live_size} to {new_size} (StorageClass "
                                  f"{live_spec.get('storageClassName')} allows volume expansion: the API server accepts"
                                  " the new size; some drivers finish resizing the file system when a pod next mounts "
                                  "it)")  # fmt: skip
            adoptable = kind != "StatefulSet" or _adoptable(old_spec, new_spec)
            self.effects[key] = RECREATE.get(kind, "") if adoptable else NOT_ADOPTABLE
        return found

    def refused(self, kind: str, name: str, old_spec: dict[str, Any], new_spec: dict[str, Any]) -> dict[str, Causes]:
        """The changed spec keys the server refuses, with what it said. The whole change is sent first, as helm
        sends it; where it is refused, each key alone tells which of them the refusal is about (a key alone may be
        refused for what only the others fix, like a selector and the labels that match it)."""
        patch = merge_patch(old_spec, new_spec)
        whole = causes(self.live.patch(kind, name, self.namespace, {"spec": patch}, dry_run=True) if patch else None)
        if not whole:
            return {}
        self.answers[(kind, name)] = [f"{path or 'the request'}: {said}" for path, said in whole]
        alone = {key: causes(self.live.patch(kind, name, self.namespace, {"spec": {key: value}}, dry_run=True))
                 for key, value in patch.items()} if len(patch) > 1 else {key: whole for key in patch}  # fmt: skip
        paths = {path for path, _ in whole}
        return {key: said for key, said in alone.items() if {path for path, _ in said} & paths} or {
            key: whole for key in patch}


def _field_changes(kind: str, name: str, key: str, base: dict[str, Any], new: dict[str, Any], said: Causes,
                   live: dict[str, Any]) -> list[ImmutableChange]:  # fmt: skip
    """The leaves of a refused spec key, each with what the server said of it and, for a claim, the fix (a refusal by
    admission, 403 without causes, is its StorageClass's for a size)."""
    top, reasons = f"spec.{key}", dict(said)
    leaves = [(path, old, value, reasons.get(path, "").replace("field is immutable", ""))
              for path, old, value in field_changes(top, base.get(key), new.get(key))
              if isinstance(old, (dict, list)) or _order(str(old), str(value)) != 0]  # 1 and "1" alike
    return [ImmutableChange(kind, name, path, old, value, reason, "" if kind != CLAIM else _claim_fix(
                *((path, old) if path == STORAGE else (top, base.get(key))), value, "" in reasons,
                live.get("storageClassName")))
            for path, old, value, reason in leaves or [(top, base.get(key), new.get(key), "")]]  # fmt: skip


def _adoptable(old_spec: dict[str, Any], new_spec: dict[str, Any]) -> bool:
    """Whether the new StatefulSet's selector matches the pods of the old one, so it can adopt them."""
    selector = new_spec.get("selector") or {}
    if selector.get("matchExpressions"):
        return bool(selector == old_spec.get("selector"))
    labels = ((old_spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    wanted = selector.get("matchLabels") or {}
    return bool(wanted) and all(labels.get(key) == value for key, value in wanted.items())


def _claim_fix(path: str, deployed: Any, new: Any, admission: bool, storage_class: Any) -> str:
    if path == STORAGE:
        if _order(str(deployed), str(new)) != -1:
            return f"keep storage.size at {deployed} or more"
        expand = f", or ask a cluster admin to set allowVolumeExpansion: true on StorageClass {storage_class}"
        return f"keep storage.size at {deployed}{expand if admission else ''}"
    if value := CLAIM_VALUES.get(path):
        shown = "null (the cluster's default class)" if deployed is None else json_text(deployed)
        return f"keep {value} at {shown}"
    return f"keep {path} as deployed ({show(deployed)})"


def _size(spec: dict[str, Any]) -> str | None:
    value = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    return None if value is None else str(value)


def _order(a: str | None, b: str | None) -> int | None:
    """-1, 0 or 1 as quantity `a` is less than, as much as or more than `b`; not quantities: 0 for the same text."""
    qa, qb = parse_or_none(a or ""), parse_or_none(b or "")
    return (qa > qb) - (qa < qb) if qa is not None and qb is not None else 0 if a == b else None


# -- refusing, or recreating and upgrading ---------------------------------------------------------------
def refusal(plan: UpgradePlan, recreate: bool) -> ImmutableFieldChange:
    """Every forbidden change, per object and field with both values, then the fixes."""
    lines: list[str] = []
    for (kind, name), each in groupby(sorted(plan.changes, key=(key := lambda c: (c.kind, c.name))), key):
        changes = list(each)
        for change in changes[:FIELDS_SHOWN_PER_OBJECT]:
            old, new = show_pair(change.deployed, change.new)
            reason = f" ({change.reason})" if change.reason else ""
            lines.append(f"  - {kind} {name}: {change.field}: {old} -> {new}{reason}")
            if change.fix:
                lines.append(f"      fix: {change.fix}")
        hidden = len(changes) - FIELDS_SHOWN_PER_OBJECT
        if hidden > 0:
            lines.append(f"  - {kind} {name}: {hidden} more changed field{'s' if hidden != 1 else ''}")
        lines += [f"      the API server: {said if len(said) <= 2 * LONG else said[: 2 * LONG] + '…'}"
                  for said in plan.answers.get((kind, name), [])]  # fmt: skip
    claims, recreatable = plan.objects(recreatable=False), plan.objects(recreatable=True)
    hints: list[str] = []
    if recreatable and not recreate:
        listed = "".join(f"\n      {kind} {name}: {plan.effects[(kind, name)]}" for kind, name in recreatable)
        hints.append("re-run with --recreate to delete these objects, wait until they are gone and let helm create "
                     f"them anew, or revert the values that change them:{listed}")
    if claims:
        names = ", ".join(name for _, name in claims)
        hints.append(f"--recreate never deletes a {CLAIM} ({names} holds the checkpoints and models): apply the fix "
                     "above, or move to a new claim (create it and pass --set storage.existingClaim=NEW-CLAIM, or "
                     f"install a new release); deleting it knowingly (`kubectl -n {plan.namespace} delete pvc "
                     f"{claims[0][1]}`, its data is lost) lets the next upgrade create it anew")
    head = "--recreate does not apply to claims; " if recreate else ""
    return ImmutableFieldChange(f"{head}the API server refuses to change these fields (asked with a dry run), so helm "
                                "would fail half-way; nothing was changed:\n" + "\n".join(lines), "\n    ".join(hints))


def upgrade(
    runner: Runner, release: str, chart: Chart, inputs: Inputs, rendered: list[dict[str, Any]], options: Options,
    live: KubeApi, recreate: bool = False, report: Callable[[str], None] | None = None, timeout: float = TIMEOUT,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> UpgradePlan:
    """Plans (the helm upgrade command and the changes the API server refuses), refuses what the server refuses unless
    `recreate` covers it, deletes and waits (at most `timeout` seconds, on `clock`), upgrades. Deletes land in
    options.namespace, the one helm is given; `report` receives the notes and --recreate's progress, a line each."""
    say, namespace = report or (lambda _line: None), options.namespace
    if not namespace:
        raise UsageError("checking the release against the cluster needs its namespace",
                         "pass -n NAMESPACE (tfchart resolves it from the kubeconfig context otherwise)")
    where = ["--namespace", namespace]
    deployed = manifests(runner(["get", "manifest", release, *where, *base_revision(runner, release, where)]).decode())
    plan = UpgradePlan(live, namespace)
    plan.changes = plan.compare(deployed, rendered)
    plan.args = release_args("upgrade", major_version(runner), release, chart, inputs, options)
    for note in plan.notes:
        say(note)
    if plan.changes and (not recreate or plan.objects(recreatable=False)):
        raise refusal(plan, recreate)
    if plan.changes and not options.dry_run:
        recreate_objects(plan, say, timeout, clock, sleep)
    runner(plan.args)
    return plan


def delete_to_recreate(deleter: KubeApi, kind: str, name: str, namespace: str, propagation: str) -> Deletion:
    """Deletes one object for --recreate. A Job or JobSet is marked first (RECREATING_ANNOTATION): the run
    supervisor then waits for the new one, where a run's object deleted unmarked ends the run at once."""
    if kind in ("Job", "JobSet") and deleter.read_object(kind, name, namespace) is not None:
        deleter.patch(kind, name, namespace, {"metadata": {"annotations": {RECREATING_ANNOTATION: "true"}}})
    return deleter.delete(kind, name, namespace, propagation)


def recreate_objects(plan: UpgradePlan, say: Callable[[str], None], timeout: float, clock: Callable[[], float],
                     sleep: Callable[[float], None]) -> None:  # fmt: skip
    """Deletes the objects with refused changes and returns once every one of them is gone: Orphan for a StatefulSet
    whose pods the new one adopts, else Foreground (the pods go first: a Job stays terminating until its pod is gone,
    so the recreated chief never writes the same checkpoint directory next to the old one). A deletion is finished when
    the API answers 404, or shows an object of that name whose uid is not the one the guard read; after `timeout`
    seconds, what is still there is said."""
    pending: list[tuple[str, str]] = []
    api, namespace = plan.live, plan.namespace
    for kind, name in plan.objects(recreatable=True):
        effect = plan.effects[(kind, name)]
        adopted = kind == "StatefulSet" and effect != NOT_ADOPTABLE
        outcome = delete_to_recreate(api, kind, name, namespace, "Orphan" if adopted else "Foreground")
        if outcome == "absent":
            say(f"{kind} {name} is already gone (nothing to delete): helm creates it from the new values")
            plan.already_gone.append((kind, name))
        else:
            say(f"{'deleting' if outcome == 'terminating' else 'deleted'} {kind} {name} ({effect})")
            (pending if outcome == "terminating" else plan.recreated).append((kind, name))
    if not (count := len(pending)):
        return
    say(f"waiting for {count} deletion{'s' if count != 1 else ''} to finish before helm runs")
    deadline = clock() + timeout
    while True:
        found = {key: api.read_object(*key, namespace) for key in pending}
        still = {key: doc for key, doc in found.items() if doc is not None  # gone: 404, or a new object (another uid)
                 and doc["metadata"].get("uid") in (None, "", plan.uids.get(key, doc["metadata"].get("uid")))}
        plan.recreated += [key for key in pending if key not in still]
        if not still:
            say(f"{'the deletion' if count == 1 else f'all {count} deletions'} finished: helm upgrade runs now")
            return
        if clock() >= deadline:
            break
        sleep(max(0.0, min(POLL_SECONDS, deadline - clock())))
        pending = list(still)
    lines = []
    for (kind, name), document in still.items():
        metadata = document.get("metadata") or {}
        since, finalizers = metadata.get("deletionTimestamp"), ", ".join(metadata.get("finalizers") or []) or "none"
        state = f"terminating since {since}" if since else "not marked for deletion"
        lines.append(f"  - {kind} {name}: still there ({state}; finalizers: {finalizers})")
    kind, name = next(iter(still))
    raise KubernetesError(f"timed out after {go_duration(timeout)} waiting for the deletions of --recreate to finish; "
                          "helm upgrade was not run:\n" + "\n".join(lines),
                          f"see why with `kubectl -n {namespace} get {kind.lower()} {name} -o yaml` "
                          "(finalizers are removed by the garbage collector once the pods are stopped or released); "
                          "then run the same `tfchart upgrade --recreate` again (objects already gone are created by "
                          "helm), or raise --timeout")
