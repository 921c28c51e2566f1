"""`tfchart upgrade`: helm upgrade made safer than raw helm.

Kubernetes forbids changing most StatefulSet spec fields, a Job's pod template, a Deployment's
selector, a JobSet's replicatedJobs and policies (JobSet's webhook and CEL rules) and a claim's spec
(its size may only grow, where its StorageClass allows expansion), and helm would fail half-way. So the
deployed release (its last deployed revision: a failed upgrade's is not what runs) is compared with the new
render first, and tfchart refuses, naming each field with its deployed and new value, unless the caller asks
to recreate those objects (--recreate: deleted, and waited for until each reads 404, before helm runs).
The guard looks at what is live, not only at helm's stored manifest: an object no longer in the
cluster (a finished chief Job removed by ttlSecondsAfterFinished) is no conflict, because helm's
upgrade creates an object of the new manifest that it does not find (helm 3.17 and 4.1 pkg/kube
Client.Update: a NotFound on Get leads to a create).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from tfchart.cluster.kube import AccessDenied, Deletion, KubeApi
from tfchart.errors import ImmutableFieldChange, KubernetesError, UsageError
from tfchart.helm.chart import Chart
from tfchart.helm.inputs import Inputs
from tfchart.helm.release import Options, base_revision, format_duration, release_args
from tfchart.helm.render import manifests
from tfchart.helm.runner import Runner, major_version
from tfchart.manifests.quantity import parse_or_none
from tfdcontract import RECREATING_ANNOTATION

# Kubernetes: "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template',
# 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".
STATEFULSET_MUTABLE = {
    "replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"
}
# A Job's template, completions (unless indexed), completionMode and podReplacementPolicy are
# immutable. Its selector is immutable too, but the API server generates it: the chart never renders it.
JOB_IMMUTABLE = ("template", "completions", "completionMode", "podReplacementPolicy")
# apps/v1: "field is immutable" for spec.selector.
DEPLOYMENT_IMMUTABLE = ("selector",)
# JobSet v0.12.0: its CRD's CEL rules (self == oldSelf) keep the policies, the network, managedBy and the claim
# policies, and its webhook's ValidateUpdate the replicatedJobs (pkg/webhooks/jobset_webhook.go); suspend and
# ttlSecondsAfterFinished may change. While the JobSet is suspended (Kueue's case) its pod templates' labels,
# annotations, nodeSelector, tolerations and schedulingGates may change too.
JOBSET_IMMUTABLE = ("replicatedJobs", "successPolicy", "failurePolicy", "startupPolicy", "network", "managedBy",
                    "volumeClaimPolicies")  # fmt: skip
JOBSET_SUSPENDED_MUTABLE = re.compile(r"spec\.replicatedJobs\[name=[^]]*\]\.template\.spec\.template\."
                                      r"(metadata\.(labels|annotations)|spec\.(nodeSelector|tolerations|schedulingGates))"
                                      r"([.\[]|$)")  # fmt: skip
RUN_SPEC = "tf-distributed.io/run-spec"
# "spec is immutable after creation except resources.requests and volumeAttributesClassName for
# bound claims"; resources.requests.storage may only grow (checked separately).
CLAIM_IMMUTABLE = ("accessModes", "storageClassName", "volumeMode", "selector", "dataSource", "dataSourceRef")
CLAIM = "PersistentVolumeClaim"
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
# The values that render the claim's fields, for the fixes.
CLAIM_VALUES = {"spec.accessModes": "storage.accessModes", "spec.storageClassName": "storage.storageClassName",
                "spec.resources.requests.storage": "storage.size"}
FIELDS_SHOWN_PER_OBJECT = 12  # more changed fields of one object are counted, not listed
LONG = 100  # values longer than this (as JSON) are shortened around the difference
CONTEXT = 30  # characters kept on each side of the difference of two long strings
DEFAULT_DELETE_TIMEOUT = 300.0  # seconds, helm's default --timeout (5m)
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class ImmutableChange:
    """One field of one object that the upgrade would change although Kubernetes forbids it. `field` is
    the full path (spec.template.spec.containers[name=trainer].image); `deployed` is the live value where
    tfchart could read it, else the one helm last deployed; `reason` says why the change is forbidden
    where that is not plain immutability, `fix` what to do where --recreate is no fix."""

    kind: str
    name: str
    field: str
    deployed: Any
    new: Any
    reason: str = ""
    fix: str = ""

    @property
    def recreatable(self) -> bool:
        return self.kind in RECREATE

    def describe(self) -> str:
        old, new = show_pair(self.deployed, self.new)
        line = f"{self.kind} {self.name}: {self.field}: {old} -> {new}"
        return f"{line} ({self.reason})" if self.reason else line


@dataclass(frozen=True)
class Waiting:
    """How long --recreate waits for its deletions, and how (tests pass a fake clock)."""

    timeout: float = DEFAULT_DELETE_TIMEOUT
    interval: float = POLL_SECONDS
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


# -- showing a change --------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _child(path: str, key: Any) -> str:
    key = str(key)
    return f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _by_name(items: list[Any]) -> dict[str, Any] | None:
    """A list of named objects (containers, env, volumes, ports) by name, or None when it is not one."""
    named: dict[str, Any] = {}
    for item in items:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or name in named:
            return None
        named[name] = item
    return named


def field_changes(path: str, old: Any, new: Any) -> Iterator[tuple[str, Any, Any]]:
    """(path, old, new) of every leaf that differs; an absent value is None. Objects are compared key
    by key; lists of named objects by name (`containers[name=trainer]`), so one added environment
    variable is one line; other lists item by item."""
    if old == new:
        return
    if isinstance(old, dict) or isinstance(new, dict):
        if isinstance(old, (dict, type(None))) and isinstance(new, (dict, type(None))):
            before_dict, after_dict = old or {}, new or {}
            for key in sorted(before_dict.keys() | after_dict.keys(), key=str):
                yield from field_changes(_child(path, key), before_dict.get(key), after_dict.get(key))
            return
    elif isinstance(old, (list, type(None))) and isinstance(new, (list, type(None))):
        before_list, after_list = old or [], new or []
        before_named, after_named = _by_name(before_list), _by_name(after_list)
        if before_named is not None and after_named is not None:
            names = list(before_named) + [name for name in after_named if name not in before_named]
            changes = [
                change for name in names
                for change in field_changes(f"{path}[name={name}]", before_named.get(name), after_named.get(name))
            ]
            yield from changes or [(path, list(before_named), list(after_named))]  # none: the same items reordered
            return
        for index, (before, after) in enumerate(zip_longest(before_list, after_list)):
            yield from field_changes(f"{path}[{index}]", before, after)
        return
    yield path, old, new


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def show(value: Any) -> str:
    """A value as JSON; a very long one summarised (a string keeps its start and end), never cut JSON."""
    if value is None:
        return "(not set)"
    text = _json(value)
    if len(text) <= LONG:
        return text
    if isinstance(value, str):
        half = LONG // 2 - 3
        return f"{_json(value[:half])[:-1]}…{_json(value[-half:])[1:]} ({len(value)} characters)"
    if isinstance(value, dict):
        keys = ", ".join(str(key) for key in list(value)[:6])
        more = ", …" if len(value) > 6 else ""
        return f"an object of {len(value)} keys ({keys}{more})"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return text


def show_pair(old: Any, new: Any) -> tuple[str, str]:
    """Both values; two long strings are shown around their first difference, with their lengths."""
    if not (isinstance(old, str) and isinstance(new, str)) or max(len(_json(old)), len(_json(new))) <= LONG:
        return show(old), show(new)
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    start = max(0, prefix - CONTEXT)

    def around(text: str) -> str:
        end = len(text) - max(0, suffix - CONTEXT)
        middle = text[start:end]
        if len(middle) > 2 * LONG:  # the difference itself is very long: keep its edges
            middle = middle[: LONG - 1] + "…" + middle[-(LONG - 1) :]
        head, tail = "…" if start > 0 else "", "…" if end < len(text) else ""
        return f'"{head}{_json(middle)[1:-1]}{tail}" ({len(text)} characters)'

    return around(old), around(new)


# -- the guard ---------------------------------------------------------------------------------------
def _index(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The guarded objects by (kind, name), without hooks (the helm test Job): helm recreates those on each run."""
    return {(d["kind"], d["metadata"]["name"]): d for d in docs
            if d.get("kind") in GUARDED and "helm.sh/hook" not in (d["metadata"].get("annotations") or {})}


def _spec_changes(kind: str, name: str, old_spec: dict[str, Any], new_spec: dict[str, Any]) -> list[ImmutableChange]:
    if kind == "StatefulSet":
        fields = sorted((old_spec.keys() | new_spec.keys()) - STATEFULSET_MUTABLE)
    else:
        fields = list({"Job": JOB_IMMUTABLE, "JobSet": JOBSET_IMMUTABLE}.get(kind, DEPLOYMENT_IMMUTABLE))
    return [ImmutableChange(kind, name, path, old, new) for key in fields
            for path, old, new in field_changes(f"spec.{key}", old_spec.get(key), new_spec.get(key))]


def immutable_changes(deployed: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[ImmutableChange]:
    """Fields the new manifests change but Kubernetes forbids changing, judged on the manifests alone:
    every object helm deployed is taken to exist as deployed (plan_upgrade judges against what is live)."""
    return GuardRun(deployed, new, None, None).changes()


@dataclass
class GuardRun:
    """One comparison of the deployed release with the new render, reading the cluster where it can."""

    deployed: list[dict[str, Any]]
    new: list[dict[str, Any]]
    live: KubeApi | None
    namespace: str | None
    notes: list[str] = field(default_factory=list)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)
    not_adoptable: set[tuple[str, str]] = field(default_factory=set)

    def read(self, kind: str, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(exists, live object): an object tfchart may not read is taken to exist, unread."""
        if self.live is None or self.namespace is None:
            return True, None
        try:
            document = self.live.read_object(kind, name, self.namespace)
        except AccessDenied as denied:
            self.notes.append(f"cannot read {kind} {name} ({denied.message}): it is taken to exist as helm last "
                              "deployed it")
            return True, None
        if document is None:
            return False, None
        if uid := (document.get("metadata") or {}).get("uid"):
            self.uids[(kind, name)] = str(uid)
        return True, document

    def changes(self) -> list[ImmutableChange]:
        old_objects, new_objects = _index(self.deployed), _index(self.new)
        found: list[ImmutableChange] = []
        for key in sorted(old_objects.keys() & new_objects.keys()):
            kind, name = key
            exists, live = self.read(kind, name)
            if not exists:
                self.notes.append(_absent_note(kind, name))
                continue
            old_spec, new_spec = old_objects[key].get("spec") or {}, new_objects[key].get("spec") or {}
            if kind == CLAIM:
                found += self.claim_changes(name, old_spec, new_spec, live)
            elif kind == "JobSet":
                found += self.jobset_changes(name, old_spec, new_objects[key], live)
            else:
                found += _spec_changes(kind, name, old_spec, new_spec)
            if kind == "StatefulSet" and not _adoptable(old_spec, new_spec):
                self.not_adoptable.add(key)
        return found

    def jobset_changes(self, name: str, old_spec: dict[str, Any], new: dict[str, Any],
                       live: dict[str, Any] | None) -> list[ImmutableChange]:  # fmt: skip
        """A JobSet's forbidden changes. One that finished this very run (Completed or Failed, and carrying the new
        render's run-spec) is kept as it is by the chart (templates/_run.tpl, runFinished): nothing changes. While
        it is suspended, what JobSet lets Kueue change of its pod templates may change."""
        status, live_spec = (live or {}).get("status") or {}, (live or {}).get("spec") or {}
        finished = status.get("terminalState") or next(
            (c["type"] for c in status.get("conditions") or [] if c.get("type") in ("Completed", "Failed")
             and c.get("status") == "True"), "")  # fmt: skip
        run_spec = ((live or {}).get("metadata") or {}).get("annotations", {}).get(RUN_SPEC)
        if finished and run_spec and run_spec == (new.get("metadata") or {}).get("annotations", {}).get(RUN_SPEC):
            self.notes.append(f"JobSet {name} finished this run ({finished}): the chart keeps it as it is, so the "
                              "upgrade does not start it again")
            return []
        changes = _spec_changes("JobSet", name, old_spec, new.get("spec") or {})
        if live_spec.get("suspend"):
            changes = [c for c in changes if not JOBSET_SUSPENDED_MUTABLE.match(c.field)]
        return changes

    # -- the claim ---------------------------------------------------------------------------------
    def claim_changes(
        self, name: str, old_spec: dict[str, Any], new_spec: dict[str, Any], live: dict[str, Any] | None
    ) -> list[ImmutableChange]:
        """What the values change in the claim, judged against the live claim where it could be read. A
        field counts when the values change it (old manifest != new one); what it is changed from is the
        live value (a class the cluster's default filled in, a size grown by hand), else the old manifest's.
        A claim grown by hand that the values would shrink back is reported as a note."""
        live_spec = (live or {}).get("spec") or {}
        base_spec = live_spec if live is not None else old_spec
        found: list[ImmutableChange] = []
        for field_name in CLAIM_IMMUTABLE:
            old, new, base = old_spec.get(field_name), new_spec.get(field_name), base_spec.get(field_name)
            if old == new or new == base:
                continue
            path = f"spec.{field_name}"
            if field_name == "storageClassName" and live is not None and base is None and new:
                self.notes.append(f"{CLAIM} {name}: spec.storageClassName is set to {show(new)}; the claim has none "
                                  "yet, which Kubernetes allows to change once")
                continue
            found += [ImmutableChange(CLAIM, name, leaf, before, after, fix=_claim_fix(path, base))
                      for leaf, before, after in field_changes(path, base, new)]
        old_resources, new_resources = _without_storage(old_spec), _without_storage(new_spec)
        found += [ImmutableChange(CLAIM, name, leaf, before, after, "only requests.storage may change")
                  for leaf, before, after in field_changes("spec.resources", old_resources, new_resources)]
        found += self.size_change(name, old_spec, new_spec, live)
        return found

    def size_change(
        self, name: str, old_spec: dict[str, Any], new_spec: dict[str, Any], live: dict[str, Any] | None
    ) -> list[ImmutableChange]:
        path = "spec.resources.requests.storage"
        old, new = _storage(old_spec), _storage(new_spec)
        base = _storage((live or {}).get("spec") or {}) if live is not None else old
        if new is None or base is None:
            return []
        if _same_quantity(old, new):
            if live is not None and _less(new, base):
                self.notes.append(f"{CLAIM} {name} was grown outside helm to {base}, the values still say {new}: helm "
                                  f"may try to shrink it, which Kubernetes refuses; pass --set storage.size={base}")
            return []
        if _same_quantity(new, base):
            return []
        if _less(new, base):
            return [ImmutableChange(CLAIM, name, path, base, new, "a claim cannot shrink", _claim_fix(path, base))]
        refused = self.growth_refused(name, base, new, live) if live is not None else None
        return [ImmutableChange(CLAIM, name, path, base, new, *refused)] if refused else []

    def growth_refused(self, name: str, base: str, new: str, live: dict[str, Any]) -> tuple[str, str] | None:
        """Why a larger size is refused, and the fix: only a Bound claim whose StorageClass has
        allowVolumeExpansion: true may grow."""
        keep = f"keep storage.size at {base}"
        phase = (live.get("status") or {}).get("phase")
        if phase != "Bound":
            unbound = f"the claim is {phase or 'not bound'}; only a Bound claim can be resized"
            return unbound, f"{keep} until it is Bound"
        class_name = (live.get("spec") or {}).get("storageClassName")
        if not class_name:
            return "the claim has no StorageClass; only a dynamically provisioned claim can grow", keep
        assert self.live is not None
        try:
            storage_class = self.live.read_object("StorageClass", class_name)
        except AccessDenied as denied:
            self.notes.append(f"{CLAIM} {name} grows from {base} to {new}; tfchart cannot read StorageClass "
                              f"{class_name} ({denied.message}) to check that it allows volume expansion: Kubernetes "
                              f"refuses the new size unless it does (`kubectl get storageclass {class_name} -o "
                              f"jsonpath='{{.allowVolumeExpansion}}'`)")
            return None
        if storage_class is None:
            return f"its StorageClass {class_name} does not exist, so nothing can expand the volume", keep
        if storage_class.get("allowVolumeExpansion") is not True:
            return (f"StorageClass {class_name} does not allow volume expansion (allowVolumeExpansion is not true)",
                    f"{keep}, or ask a cluster admin to set allowVolumeExpansion: true on StorageClass {class_name}")
        self.notes.append(f"{CLAIM} {name} grows from {base} to {new} (StorageClass {class_name} allows volume "
                          "expansion; some drivers finish resizing the file system when a pod next mounts it)")
        return None


def _adoptable(old_spec: dict[str, Any], new_spec: dict[str, Any]) -> bool:
    """Whether the new StatefulSet's selector matches the pods of the old one, so it can adopt them."""
    selector = new_spec.get("selector") or {}
    if selector.get("matchExpressions"):
        return bool(selector == old_spec.get("selector"))
    labels = ((old_spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    wanted = selector.get("matchLabels") or {}
    return bool(wanted) and all(labels.get(key) == value for key, value in wanted.items())


def _absent_note(kind: str, name: str) -> str:
    if kind in ("Job", "JobSet"):
        return (f"{kind} {name} is not in the cluster (removed by ttlSecondsAfterFinished, or deleted by hand): helm "
                "creates it again from the new values, so it runs again (a chief resumes from its last checkpoint)")
    if kind == CLAIM:
        return f"{CLAIM} {name} is not in the cluster: helm creates it again, empty"
    return f"{kind} {name} is not in the cluster: helm creates it from the new values"


def _claim_fix(path: str, deployed: Any) -> str:
    value = CLAIM_VALUES.get(path)
    if path == "spec.resources.requests.storage":
        return f"keep {value} at {deployed} or more"
    if value:
        shown = "null (the cluster's default class)" if deployed is None else _json(deployed)
        return f"keep {value} at {shown}"
    return f"keep {path} as deployed ({show(deployed)})"


def _storage(spec: dict[str, Any]) -> str | None:
    value = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    return None if value is None else str(value)


def _without_storage(spec: dict[str, Any]) -> dict[str, Any]:
    """spec.resources without requests.storage (nor requests, when that was its only request)."""
    resources = dict(spec.get("resources") or {})
    requests = {key: value for key, value in (resources.pop("requests", None) or {}).items() if key != "storage"}
    return resources | ({"requests": requests} if requests else {})


def _same_quantity(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a == b
    qa, qb = parse_or_none(a), parse_or_none(b)
    return qa == qb if qa is not None and qb is not None else a == b


def _less(a: str, b: str) -> bool:
    qa, qb = parse_or_none(a), parse_or_none(b)
    return qa is not None and qb is not None and qa < qb


# -- planning and refusing ---------------------------------------------------------------------------
@dataclass
class UpgradePlan:
    args: list[str]
    changes: list[ImmutableChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said before helm runs (objects helm creates again...)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)  # live objects read, for the deletion wait
    not_adoptable: set[tuple[str, str]] = field(default_factory=set)  # StatefulSets deleted with their pods
    recreated: list[tuple[str, str]] = field(default_factory=list)  # deleted by --recreate and gone
    already_gone: list[tuple[str, str]] = field(default_factory=list)  # --recreate found them gone

    def objects(self, recreatable: bool) -> list[tuple[str, str]]:
        return sorted({(c.kind, c.name) for c in self.changes if c.recreatable == recreatable})

    def effect(self, kind: str, name: str) -> str:
        """What --recreate does to the object's pods."""
        return NOT_ADOPTABLE if (kind, name) in self.not_adoptable else RECREATE[kind]


def plan_upgrade(
    runner: Runner, release: str, chart: Chart, inputs: Inputs, rendered: list[dict[str, Any]], options: Options,
    live: KubeApi | None = None,
) -> UpgradePlan:
    """The helm upgrade command and the forbidden changes it would hit. With `live`, each object is read
    from the cluster: one that is gone is no conflict (helm creates it), and a claim is judged against its
    live size, class and StorageClass."""
    where = ["--namespace", options.namespace] if options.namespace else []
    deployed = manifests(runner(["get", "manifest", release, *where, *base_revision(runner, release, where)]).decode())
    if live is not None and not options.namespace:
        raise UsageError("checking the release against the cluster needs its namespace",
                         "pass -n NAMESPACE (tfchart resolves it from the kubeconfig context otherwise)")
    guard = GuardRun(deployed, rendered, live, options.namespace)
    args = release_args("upgrade", major_version(runner), release, chart, inputs, options)
    return UpgradePlan(args, guard.changes(), guard.notes, guard.uids, guard.not_adoptable)


def refusal(plan: UpgradePlan, recreate: bool, namespace: str | None) -> ImmutableFieldChange:
    """Every forbidden change, per object and field with both values, then the fixes."""
    lines: list[str] = []
    by_object: dict[tuple[str, str], list[ImmutableChange]] = {}
    for change in plan.changes:
        by_object.setdefault((change.kind, change.name), []).append(change)
    for (kind, name), changes in sorted(by_object.items()):
        for change in changes[:FIELDS_SHOWN_PER_OBJECT]:
            lines.append(f"  - {change.describe()}")
            if change.fix:
                lines.append(f"      fix: {change.fix}")
        hidden = len(changes) - FIELDS_SHOWN_PER_OBJECT
        if hidden > 0:
            lines.append(f"  - {kind} {name}: {hidden} more changed field{'s' if hidden != 1 else ''}")
    claims, recreatable = plan.objects(recreatable=False), plan.objects(recreatable=True)
    hints: list[str] = []
    if recreatable and not recreate:
        listed = "".join(f"\n      {kind} {name}: {plan.effect(kind, name)}" for kind, name in recreatable)
        hints.append("re-run with --recreate to delete these objects, wait until they are gone and let helm create "
                     f"them anew, or revert the values that change them:{listed}")
    if claims:
        where = f" -n {namespace}" if namespace else ""
        names = ", ".join(name for _, name in claims)
        hints.append(f"--recreate never deletes a {CLAIM} ({names} holds the checkpoints and models): apply the fix "
                     "above, or move to a new claim (create it and pass --set storage.existingClaim=NEW-CLAIM, or "
                     f"install a new release); deleting it knowingly (`kubectl{where} delete pvc {claims[0][1]}`, its "
                     "data is lost) lets the next upgrade create it anew")
    head = "the upgrade would change fields Kubernetes forbids changing, so helm would fail half-way"
    if recreate:
        head = f"--recreate does not apply to claims; {head}"
    body = "\n".join(lines)
    return ImmutableFieldChange(f"{head}; nothing was changed:\n{body}", "\n    ".join(hints))


def upgrade(
    runner: Runner, release: str, chart: Chart, inputs: Inputs, rendered: list[dict[str, Any]], options: Options,
    recreate: bool = False, deleter: KubeApi | None = None, live: KubeApi | None = None,
    waiting: Waiting | None = None, report: Callable[[str], None] | None = None,
) -> UpgradePlan:
    """Plans, refuses forbidden changes unless `recreate` covers them, deletes and waits, upgrades.
    Deletes land in options.namespace, the namespace helm is given: the caller resolves it once, so helm
    and the Kubernetes API never act in different ones. `report` receives the notes and the progress of
    --recreate, one line each."""
    say = report or (lambda _line: None)
    plan = plan_upgrade(runner, release, chart, inputs, rendered, options, live)
    for note in plan.notes:
        say(note)
    if plan.changes and (not recreate or plan.objects(recreatable=False)):
        raise refusal(plan, recreate, options.namespace)
    if plan.changes and not options.dry_run:
        if deleter is None or not options.namespace:
            raise UsageError("recreating objects needs the Kubernetes API and the release's namespace",
                             "pass -n NAMESPACE (tfchart resolves it from the kubeconfig context otherwise)")
        recreate_objects(plan, deleter, options.namespace, waiting or Waiting(), say)
    runner(plan.args)
    return plan


def propagation(plan: UpgradePlan, kind: str, name: str) -> str:
    """How --recreate deletes an object's dependents: Orphan for a StatefulSet whose pods the new one
    adopts. Foreground otherwise (the pods go first): a Job stays terminating until its pod is gone, so
    waiting for the Job also waits for the old chief pod, and the recreated chief never writes the same
    checkpoint directory next to it."""
    return "Orphan" if kind == "StatefulSet" and (kind, name) not in plan.not_adoptable else "Foreground"


def delete_to_recreate(deleter: KubeApi, kind: str, name: str, namespace: str, propagation: str) -> Deletion:
    """Deletes one object for --recreate. A Job or JobSet is marked first (RECREATING_ANNOTATION): the run
    supervisor then waits for the new one, where a run's object deleted unmarked ends the run at once."""
    if kind in ("Job", "JobSet") and deleter.read_object(kind, name, namespace) is not None:
        deleter.patch(kind, name, namespace, {"metadata": {"annotations": {RECREATING_ANNOTATION: "true"}}})
    return deleter.delete(kind, name, namespace, propagation)


def recreate_objects(
    plan: UpgradePlan, deleter: KubeApi, namespace: str, waiting: Waiting, say: Callable[[str], None]
) -> None:
    """Deletes the objects with forbidden changes and returns once every one of them is gone."""
    terminating: list[tuple[str, str]] = []
    for kind, name in plan.objects(recreatable=True):
        outcome = delete_to_recreate(deleter, kind, name, namespace, propagation(plan, kind, name))
        if outcome == "absent":
            say(f"{kind} {name} is already gone (nothing to delete): helm creates it from the new values")
            plan.already_gone.append((kind, name))
        elif outcome == "terminating":
            say(f"deleting {kind} {name} ({plan.effect(kind, name)})")
            terminating.append((kind, name))
        else:
            say(f"deleted {kind} {name} ({plan.effect(kind, name)})")
            plan.recreated.append((kind, name))
    if terminating:
        wait_until_gone(plan, deleter, terminating, namespace, waiting, say)


def wait_until_gone(
    plan: UpgradePlan, deleter: KubeApi, terminating: list[tuple[str, str]], namespace: str, waiting: Waiting,
    say: Callable[[str], None],
) -> None:
    """Reads each object until the API answers 404 (or shows a new object of that name)."""
    say(f"waiting for {len(terminating)} deletion{'s' if len(terminating) != 1 else ''} to finish before helm runs")
    deadline = waiting.clock() + waiting.timeout
    pending = list(terminating)
    while True:
        still: list[tuple[str, str, dict[str, Any]]] = []
        for kind, name in pending:
            document = deleter.read_object(kind, name, namespace)
            uid = str((document or {}).get("metadata", {}).get("uid") or "")
            known = plan.uids.get((kind, name))
            if document is None or (known and uid and uid != known):
                plan.recreated.append((kind, name))
            else:
                still.append((kind, name, document))
        if not still:
            done = len(terminating)
            say(f"{'the deletion' if done == 1 else f'all {done} deletions'} finished: helm upgrade runs now")
            return
        if waiting.clock() >= deadline:
            raise deletion_timeout(still, namespace, waiting.timeout)
        waiting.sleep(max(0.0, min(waiting.interval, deadline - waiting.clock())))
        pending = [(kind, name) for kind, name, _ in still]


def deletion_timeout(still: list[tuple[str, str, dict[str, Any]]], namespace: str, timeout: float) -> KubernetesError:
    lines = []
    for kind, name, document in still:
        metadata = document.get("metadata") or {}
        since = metadata.get("deletionTimestamp")
        finalizers = ", ".join(metadata.get("finalizers") or []) or "none"
        state = f"terminating since {since}" if since else "not marked for deletion"
        lines.append(f"  - {kind} {name}: still there ({state}; finalizers: {finalizers})")
    first_kind, first_name, _ = still[0]
    return KubernetesError(f"timed out after {format_duration(timeout)} waiting for the deletions of --recreate to "
                           "finish; helm upgrade was not run:\n" + "\n".join(lines),
                           f"see why with `kubectl -n {namespace} get {first_kind.lower()} {first_name} -o yaml` "
                           "(finalizers are removed by the garbage collector once the pods are stopped or released); "
                           "then run the same `tfchart upgrade --recreate` again (objects already gone are created by "
                           "helm), or raise --timeout")
