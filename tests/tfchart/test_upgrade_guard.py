"""The upgrade guard against a live cluster: objects that are gone, the claim, Deployment selectors, the
wait of --recreate, and how a refusal reads. What is refused is the fake API server's answer to the guard's
dry runs (tests/kubeapi_rules.py: the API server's validation and admission); the advice is tfchart's.

helm is real for `template` and `version`; `get manifest` is a real `helm template --no-hooks` of
what was deployed, and `upgrade` is recorded (tests/tfchart/test_release.py). The cluster is the
fake API server on the loopback (tests/kubeapi.py) holding the deployed render as the API server
serves it, reached by the real kubernetes client; DELETE is answered like the API server does
(finalizers pending with Orphan/Foreground propagation, the object readable for N more GETs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import CHART
from tests.kubeapi import Call, KubeServer, kube_server
from tests.tfchart.test_namespace import Tfchart, cluster_calls, tfchart  # noqa: F401 (a fixture)
from tests.tfchart.test_release import DEFAULT_CLASS, RecordingHelm, deployed_docs, inputs, live_cluster, upgrade
from tfchart.cluster import fields
from tfchart.cluster import upgrade as guard
from tfchart.cluster.kube import KubeApi
from tfchart.errors import ImmutableFieldChange, KubernetesError, UsageError
from tfchart.helm.chart import manifests
from tfchart.helm.runner import Options

NS = "ml-training"
CHIEF = "mnist-tf-distributed-chief"
WORKER = "mnist-tf-distributed-worker"
PS = "mnist-tf-distributed-ps"
TENSORBOARD = "mnist-tf-distributed-tensorboard"
SERVING = "mnist-tf-distributed-serving"
SUPERVISOR = "mnist-tf-distributed-supervisor"
CLAIM = "mnist-tf-distributed-data"


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    with kube_server() as server:
        yield server


class Clock:
    """A monotonic clock that only moves when tfchart sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Helm(RecordingHelm):
    """RecordingHelm that also notes what the cluster looked like when `helm upgrade` ran."""

    def __init__(self, cluster: KubeServer, deployed: Sequence[str], failed: Sequence[str] | None = None,
                 deployed_chart: Path = CHART) -> None:  # fmt: skip
        super().__init__("4", deployed, deployed_chart, failed)
        self.cluster = cluster
        self.at_upgrade: tuple[int, set[tuple[str, str | None, str]]] | None = None

    def __call__(self, args: Sequence[str], stdin: bytes | None = None) -> bytes:
        if list(args[:1]) == ["upgrade"]:
            self.at_upgrade = (len(self.cluster.calls), set(self.cluster.objects))
        return super().__call__(args, stdin)

    def upgraded(self) -> bool:
        return any(call[0] == "upgrade" for call in self.calls)


def as_args(items: Sequence[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def run_upgrade(cluster: KubeServer, deployed: Sequence[str], sets: Sequence[str], *, recreate: bool = False,
                clock: Clock | None = None, timeout: float = 300.0, failed: Sequence[str] | None = None,
                deployed_chart: Path = CHART, **live: Any) -> tuple[Helm, list[str], guard.UpgradePlan | Exception]:
    """tfchart's upgrade of `deployed` (by `deployed_chart`) to `sets` against the cluster (the deployed release as
    `live_cluster` leaves it, unless the test put objects there already): (helm, what it said, plan or error)."""
    if not cluster.objects:
        live_cluster(cluster, RecordingHelm("4", as_args(deployed), deployed_chart), **live)
    helm = Helm(cluster, as_args(deployed), None if failed is None else as_args(failed), deployed_chart)
    clock = clock or Clock()
    said: list[str] = []
    outcome: guard.UpgradePlan | Exception
    try:
        outcome = upgrade(helm, inputs(sets=[("--set", item) for item in sets]), Options(namespace=NS),
                          recreate=recreate, live=cluster.api(), report=said.append, timeout=timeout, clock=clock,
                          sleep=clock.sleep)
    except (ImmutableFieldChange, KubernetesError, UsageError) as error:
        outcome = error
    return helm, said, outcome


def refused(outcome: guard.UpgradePlan | Exception) -> ImmutableFieldChange:
    assert isinstance(outcome, ImmutableFieldChange), f"expected a refusal, got {outcome!r}"
    return outcome


def planned(outcome: guard.UpgradePlan | Exception) -> guard.UpgradePlan:
    assert isinstance(outcome, guard.UpgradePlan), f"expected an upgrade, got {outcome}"
    return outcome


def deletes(cluster: KubeServer) -> list[Call]:
    return [call for call in cluster.calls if call.verb == "delete"]


# -- 1. a finished chief Job removed by ttlSecondsAfterFinished --------------------------------------

TTL = ["chief.ttlSecondsAfterFinished=600", "training.trainSteps=2000"]
RETRAIN = ["chief.ttlSecondsAfterFinished=600", "training.trainSteps=4000"]


def test_the_guard_refuses_a_template_change_of_a_chief_job_that_is_still_there(cluster: KubeServer) -> None:
    """The control for the TTL case: the same change against a live Job is a real conflict."""
    helm, _, outcome = run_upgrade(cluster, TTL, RETRAIN, chief=True)
    message = refused(outcome).message
    assert f"Job {CHIEF}: spec.template.spec.containers[name=chief]" in message
    assert "4000" in message and "2000" in message
    assert not helm.upgraded() and deletes(cluster) == []


@pytest.mark.parametrize("recreate", [False, True], ids=["plain", "recreate"])
def test_a_chief_job_removed_by_its_ttl_is_no_conflict(recreate: bool, cluster: KubeServer) -> None:
    helm, said, outcome = run_upgrade(cluster, TTL, RETRAIN, chief=False, recreate=recreate)
    plan = planned(outcome)
    assert plan.changes == []
    assert 404 in cluster.answered(Call("get", "jobs", NS, CHIEF))
    assert any(f"Job {CHIEF} is not in the cluster" in line and "ttlSecondsAfterFinished" in line for line in said)
    assert deletes(cluster) == [], "nothing to delete: helm creates the Job"
    # helm is given the new values and its render holds the Job, which helm's Update creates when its
    # Get answers NotFound (helm 3.17 and 4.1 pkg/kube/client.go).
    upgraded = helm.cluster_calls()[-1]
    assert upgraded[:5] == ["upgrade", "mnist", str(CHART), "--namespace", NS]
    assert "training.trainSteps=4000" in upgraded
    rendered = manifests(helm.real(["template", "mnist", str(CHART), "--namespace", NS, *upgraded[5:]]).decode())
    chief = next(d for d in rendered if d["kind"] == "Job" and d["metadata"]["name"] == CHIEF)
    assert "--train-steps=4000" in chief["spec"]["template"]["spec"]["containers"][0]["args"]


def test_recreate_skips_a_job_that_went_away_meanwhile_and_says_so(cluster: KubeServer) -> None:
    """The Job is there when the guard reads it and gone when --recreate deletes it (its TTL fired)."""
    live_cluster(cluster, RecordingHelm("4", as_args(TTL)), chief=True)
    cluster.fail("delete", "jobs", 404, f'jobs.batch "{CHIEF}" not found', NS)
    helm, said, outcome = run_upgrade(cluster, TTL, RETRAIN, recreate=True)
    plan = planned(outcome)
    assert plan.already_gone == [("Job", CHIEF)] and plan.recreated == []
    assert f"Job {CHIEF} is already gone (nothing to delete): helm creates it from the new values" in said
    assert helm.upgraded()


# -- 2. the claim --------------------------------------------------------------------------------------

CLAIM_LINE = f"PersistentVolumeClaim {CLAIM}: "
SHRINK = "(field can not be less than status.capacity)"  # the API server's cause
RESIZE = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support " \
    "resize"  # the PersistentVolumeClaimResize admission plugin's refusal


@pytest.mark.parametrize("recreate", [False, True], ids=["plain", "recreate"])
def test_a_failed_upgrade_is_judged_from_the_last_deployed_revision(recreate: bool, cluster: KubeServer) -> None:
    """A plain `helm upgrade` to RETRAIN failed half-way: it changed the StatefulSets, the API server refused the
    chief Job's new template, and helm's newest revision (failed) holds RETRAIN's manifest. The Job still runs TTL's
    template, so the guard compares with revision 1 (deployed), and --recreate deletes the Job."""
    live_cluster(cluster, RecordingHelm("4", as_args(TTL)))
    cluster.add(*(kf.stateful_set(doc) for doc in deployed_docs(RecordingHelm("4", as_args(RETRAIN)))
                  if doc["kind"] == "StatefulSet"))  # fmt: skip
    helm, _, outcome = run_upgrade(cluster, TTL, RETRAIN, recreate=recreate, failed=RETRAIN)
    if recreate:
        assert {(c.kind, c.name) for c in planned(outcome).changes} == {("Job", CHIEF)}
        assert [(call.resource, call.name) for call in deletes(cluster)] == [("jobs", CHIEF)] and helm.upgraded()
    else:
        assert f"Job {CHIEF}: spec.template" in str(refused(outcome)) and not helm.upgraded()
    assert ["get", "manifest", "mnist", "--namespace", NS, "--revision", "1"] in helm.calls


def claim_lines(message: str) -> list[str]:
    return [line.strip() for line in message.splitlines() if CLAIM_LINE in line or line.strip().startswith("fix:")]


def test_a_smaller_claim_is_refused_with_its_live_size_and_the_fix(cluster: KubeServer) -> None:
    helm, _, outcome = run_upgrade(cluster, ["storage.size=20Gi"], ["storage.size=10Gi"])
    error = refused(outcome)
    assert claim_lines(error.message) == [
        f'- {CLAIM_LINE}spec.resources.requests.storage: "20Gi" -> "10Gi" {SHRINK}',
        "fix: keep storage.size at 20Gi or more",
    ]
    assert Call("patch", "persistentvolumeclaims", NS, CLAIM, params=(("dryRun", "All"),)) in cluster.calls
    assert "--recreate never deletes a PersistentVolumeClaim" in error.hint
    assert "storage.existingClaim" in error.hint and f"kubectl -n {NS} delete pvc {CLAIM}" in error.hint
    assert not helm.upgraded() and deletes(cluster) == []


def test_a_claim_grown_by_hand_is_judged_by_its_live_size(cluster: KubeServer) -> None:
    """Deployed at 10Gi, grown to 50Gi with kubectl: 30Gi is a shrink although the values grow."""
    _, _, outcome = run_upgrade(cluster, ["storage.size=10Gi"], ["storage.size=30Gi"], claim_size="50Gi")
    assert f'{CLAIM_LINE}spec.resources.requests.storage: "50Gi" -> "30Gi" {SHRINK}' in (
        refused(outcome).message
    )


def test_an_unchanged_size_on_a_claim_grown_by_hand_is_a_note(cluster: KubeServer) -> None:
    helm, said, outcome = run_upgrade(cluster, [], ["tensorboard.replicas=2"], claim_size="50Gi")
    assert planned(outcome).changes == []
    assert any("was grown outside helm to 50Gi" in line and "storage.size=50Gi" in line for line in said), said
    assert helm.upgraded()


@pytest.mark.parametrize(("deployed", "new", "line", "fix"), [
    (["storage.storageClassName=nfs"], ["storage.storageClassName=fast"], 'spec.storageClassName: "nfs" -> "fast"',
     'keep storage.storageClassName at "nfs"'),
    ([], ["storage.storageClassName=fast"],  # null: the cluster's default class, which the API server wrote in
     f'spec.storageClassName: "{DEFAULT_CLASS}" -> "fast"', f'keep storage.storageClassName at "{DEFAULT_CLASS}"'),
    (["storage.storageClassName=nfs"], ["storage.storageClassName=null"], 'spec.storageClassName: "nfs" -> (not set)',
     'keep storage.storageClassName at "nfs"'),
    ([], ["storage.accessModes={ReadWriteOnce}"], 'spec.accessModes[0]: "ReadWriteMany" -> "ReadWriteOnce"',
     'keep storage.accessModes at ["ReadWriteMany"]'),
], ids=["class", "class-from-default", "class-removed", "access-mode"])  # fmt: skip
@pytest.mark.parametrize("recreate", [False, True], ids=["plain", "recreate"])
def test_claim_class_and_access_mode_changes_are_refused_even_with_recreate(
    deployed: list[str], new: list[str], line: str, fix: str, recreate: bool, cluster: KubeServer
) -> None:
    helm, _, outcome = run_upgrade(cluster, deployed, new, recreate=recreate)
    error = refused(outcome)
    lines = claim_lines(error.message)
    assert f"- {CLAIM_LINE}{line}" in lines, error.message
    assert lines[lines.index(f"- {CLAIM_LINE}{line}") + 1] == f"fix: {fix}"
    if recreate:
        assert error.message.startswith("--recreate does not apply to claims")
    assert deletes(cluster) == [], "a refused upgrade deletes nothing, and a claim is never deleted"
    assert not helm.upgraded()


@pytest.mark.parametrize(("deployed", "new"), [([], [f"storage.storageClassName={DEFAULT_CLASS}"]),
                                               (["storage.size=10Gi"], ["storage.size=10240Mi"])],
                         ids=["the-live-default-class-set-explicitly", "a-size-written-another-way"])  # fmt: skip
def test_the_same_claim_written_another_way_is_no_change(deployed: list[str], new: list[str], cluster: KubeServer
                                                         ) -> None:  # fmt: skip
    helm, _, outcome = run_upgrade(cluster, deployed, new)
    assert planned(outcome).changes == [] and helm.upgraded()
    assert not any(call.resource == "storageclasses" for call in cluster.calls)


def test_a_class_for_a_claim_that_has_none_is_allowed_once(cluster: KubeServer) -> None:
    """nil -> a class is the one storageClassName change the API server allows (retroactive default class)."""
    live_cluster(cluster, RecordingHelm("4", []))
    cluster.update("PersistentVolumeClaim", NS, CLAIM, {"spec": {"storageClassName": None}})
    helm, _, outcome = run_upgrade(cluster, [], ["storage.storageClassName=fast"])
    assert planned(outcome).changes == [] and helm.upgraded()


@pytest.mark.parametrize("expandable", [None, False], ids=["unset", "false"])
def test_growing_a_claim_whose_class_cannot_expand_is_refused(expandable: bool | None, cluster: KubeServer) -> None:
    helm, _, outcome = run_upgrade(cluster, [], ["storage.size=20Gi"], expandable=expandable)
    message = refused(outcome).message
    lines = claim_lines(message)
    assert lines[0] == f'- {CLAIM_LINE}spec.resources.requests.storage: "10Gi" -> "20Gi"'
    assert lines[1] == (f"fix: keep storage.size at 10Gi, or ask a cluster admin to set allowVolumeExpansion: true on "
                        f"StorageClass {DEFAULT_CLASS}")  # fmt: skip
    assert f'the API server: the request: persistentvolumeclaims "{CLAIM}" is forbidden: {RESIZE}' in message
    assert not helm.upgraded()


def test_growing_a_claim_whose_class_expands_is_allowed_and_said(cluster: KubeServer) -> None:
    helm, said, outcome = run_upgrade(cluster, [], ["storage.size=20Gi"], expandable=True)
    assert planned(outcome).changes == []
    assert any(f"grows from 10Gi to 20Gi (StorageClass {DEFAULT_CLASS} allows volume expansion" in x for x in said)
    assert Call("patch", "persistentvolumeclaims", NS, CLAIM, params=(("dryRun", "All"),)) in cluster.calls
    assert helm.upgraded() and cluster.writes() == []


def test_growing_a_claim_that_is_not_bound_is_refused(cluster: KubeServer) -> None:
    _, _, outcome = run_upgrade(cluster, [], ["storage.size=20Gi"], expandable=True, claim_phase="Pending")
    message = refused(outcome).message
    assert f'- {CLAIM_LINE}spec.resources.requests.storage: "10Gi" -> "20Gi"' in claim_lines(message)
    assert "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound " \
        "claims" in message  # fmt: skip


def test_growing_a_claim_whose_class_is_gone_is_refused(cluster: KubeServer) -> None:
    live_cluster(cluster, RecordingHelm("4", []))
    cluster.delete("StorageClass", None, DEFAULT_CLASS)
    _, _, outcome = run_upgrade(cluster, [], ["storage.size=20Gi"])
    message = refused(outcome).message
    assert RESIZE in message and f"allowVolumeExpansion: true on StorageClass {DEFAULT_CLASS}" in message


def test_a_claim_that_cannot_be_read_is_judged_on_the_manifests_and_said(cluster: KubeServer) -> None:
    live_cluster(cluster, RecordingHelm("4", as_args(["storage.size=20Gi"])))
    cluster.fail("get", "persistentvolumeclaims", 403, "persistentvolumeclaims is forbidden", NS)
    _, said, outcome = run_upgrade(cluster, ["storage.size=20Gi"], ["storage.size=10Gi"])
    assert f'{CLAIM_LINE}spec.resources.requests.storage: "20Gi" -> "10Gi"' in refused(outcome).message
    assert any(f"cannot read PersistentVolumeClaim {CLAIM}" in line for line in said)


# -- 3. Deployment selectors ---------------------------------------------------------------------------

# Another chart name with the same object names: every selector's app.kubernetes.io/name changes.
RENAMED = ["nameOverride=tfd", "fullnameOverride=mnist-tf-distributed"]


def test_a_deployment_selector_change_is_refused_with_each_label(cluster: KubeServer) -> None:
    helm, _, outcome = run_upgrade(cluster, [], RENAMED)
    error = refused(outcome)
    for name in (TENSORBOARD, SERVING):
        assert (
            f'Deployment {name}: spec.selector.matchLabels["app.kubernetes.io/name"]: "tf-distributed" -> "tfd"'
            in error.message
        )
    assert f"Deployment {TENSORBOARD}: its pods are replaced" in error.hint
    assert f"StatefulSet {WORKER}: its pods do not match the new selector" in error.hint
    assert not helm.upgraded() and deletes(cluster) == []


def test_recreate_deletes_deployments_in_the_foreground_and_waits_for_them(cluster: KubeServer) -> None:
    live_cluster(cluster, RecordingHelm("4", []))
    for name in (TENSORBOARD, SERVING):
        cluster.linger[("deployments", NS, name)] = 2
    clock = Clock()
    helm, said, outcome = run_upgrade(cluster, [], RENAMED, recreate=True, clock=clock)
    plan = planned(outcome)
    assert [(call.resource, call.name, dict(call.params)) for call in deletes(cluster)] == [
        ("deployments", SERVING, {"propagationPolicy": "Foreground"}),
        ("deployments", SUPERVISOR, {"propagationPolicy": "Foreground"}),
        ("deployments", TENSORBOARD, {"propagationPolicy": "Foreground"}),
        ("jobs", CHIEF, {"propagationPolicy": "Foreground"}),
        # the new selector cannot adopt the old pods: they go with their StatefulSet
        ("statefulsets", PS, {"propagationPolicy": "Foreground"}),
        ("statefulsets", WORKER, {"propagationPolicy": "Foreground"}),
    ]
    assert sorted(plan.recreated) == sorted(plan.objects(recreatable=True))
    assert helm.at_upgrade is not None
    _, objects_then = helm.at_upgrade
    for name in (TENSORBOARD, SERVING):
        assert ("deployments", NS, name) not in objects_then
        statuses = cluster.answered(Call("get", "deployments", NS, name))
        assert statuses[-3:] == [200, 200, 404], statuses
    assert clock.sleeps == [2.0, 2.0]
    assert "waiting for 6 deletions to finish before helm runs" in said


# -- 4. --recreate waits for its deletions ---------------------------------------------------------------


def old_chart_upgrade(
    cluster: KubeServer, old_chart: Path, linger: int | None, clock: Clock, timeout: float = 300.0
) -> tuple[Helm, list[str], guard.UpgradePlan | Exception]:
    live_cluster(cluster, RecordingHelm("4", [], deployed_chart=old_chart))
    cluster.linger[("statefulsets", NS, WORKER)] = linger
    return run_upgrade(cluster, [], [], recreate=True, clock=clock, timeout=timeout, deployed_chart=old_chart)


def test_recreate_polls_each_deletion_until_404_and_only_then_runs_helm(old_chart: Path, cluster: KubeServer) -> None:
    clock = Clock()
    helm, said, outcome = old_chart_upgrade(cluster, old_chart, linger=3, clock=clock)
    plan = planned(outcome)
    assert [(call.resource, call.name, dict(call.params)) for call in deletes(cluster)] == [
        ("statefulsets", PS, {"propagationPolicy": "Orphan"}),
        ("statefulsets", WORKER, {"propagationPolicy": "Orphan"}),
    ]
    worker = cluster.answered(Call("get", "statefulsets", NS, WORKER))
    # one read by the guard, then three polls that still find it terminating, then the 404
    assert worker == [200, 200, 200, 200, 404]
    assert clock.sleeps == [2.0, 2.0, 2.0]
    assert helm.at_upgrade is not None
    calls_then, objects_then = helm.at_upgrade
    assert calls_then == len(cluster.calls), "helm ran after the last poll, and nothing was read after it"
    assert ("statefulsets", NS, WORKER) not in objects_then
    assert sorted(plan.recreated) == [("StatefulSet", PS), ("StatefulSet", WORKER)]
    assert f"deleting StatefulSet {WORKER} (its pods are kept and adopted by the new StatefulSet)" in said


def test_recreate_times_out_naming_what_is_still_terminating_and_never_runs_helm(
    old_chart: Path, cluster: KubeServer
) -> None:
    clock = Clock()
    helm, _, outcome = old_chart_upgrade(cluster, old_chart, linger=None, clock=clock, timeout=10.0)
    assert isinstance(outcome, KubernetesError), outcome
    assert outcome.message.splitlines() == [
        "timed out after 10s waiting for the deletions of --recreate to finish; helm upgrade was not run:",
        f"  - StatefulSet {WORKER}: still there (terminating since {kf.timestamp(kf.NOW)}; finalizers: orphan)",
    ]
    assert f"kubectl -n {NS} get statefulset {WORKER} -o yaml" in outcome.hint
    assert "tfchart upgrade --recreate" in outcome.hint and "--timeout" in outcome.hint
    assert not helm.upgraded()
    assert clock.now - 1000.0 == pytest.approx(10.0)
    assert ("statefulsets", NS, PS) not in cluster.objects, "the deletion that finished is not listed"


# -- 5. how a refusal reads ----------------------------------------------------------------------------


def test_every_problem_is_listed_at_once_with_field_old_and_new(old_chart: Path, cluster: KubeServer) -> None:
    new = ["storage.storageClassName=fast", *RENAMED]
    helm, _, outcome = run_upgrade(cluster, ["storage.storageClassName=nfs"], new, deployed_chart=old_chart)
    lines = refused(outcome).message.splitlines()
    assert lines[0] == (
        "the API server refuses to change these fields (asked with a dry run), so helm would fail half-way; nothing "
        "was changed:"
    )
    for expected in (
        f'  - StatefulSet {WORKER}: spec.serviceName: "{WORKER}-headless" -> "{WORKER}"',
        f'  - StatefulSet {PS}: spec.serviceName: "{PS}-headless" -> "{PS}"',
        f'  - StatefulSet {WORKER}: spec.selector.matchLabels["app.kubernetes.io/name"]: "tf-distributed" -> "tfd"',
        f'  - Deployment {SERVING}: spec.selector.matchLabels["app.kubernetes.io/name"]: "tf-distributed" -> "tfd"',
        f'  - {CLAIM_LINE}spec.storageClassName: "nfs" -> "fast"',
        '      fix: keep storage.storageClassName at "nfs"',
    ):
        assert expected in lines, f"{expected!r} not in:\n" + "\n".join(lines)
    hint = refused(outcome).hint
    assert hint.startswith("re-run with --recreate") and "--recreate never deletes a PersistentVolumeClaim" in hint
    assert not helm.upgraded()


def test_a_long_value_is_shown_around_its_difference_never_cut_json() -> None:
    old = json.dumps({"cluster": {"worker": [f"w-{i}.svc:2222" for i in range(40)]}, "task": {"index": 0}})
    new = old.replace("w-17.svc", "w-17.svc.cluster.local")
    shown_old, shown_new = fields.show_pair(old, new)
    assert "w-17.svc" in shown_old and "w-17.svc.cluster.local" in shown_new
    assert shown_old.endswith(f"({len(old)} characters)") and shown_new.endswith(f"({len(new)} characters)")
    assert shown_old.startswith('"…') and len(shown_old) < 200
    # structured values are summarised, not cut in the middle of their JSON
    assert fields.show({f"k{i}": "v" * 20 for i in range(10)}) == "an object of 10 keys (k0, k1, k2, k3, k4, k5, …)"
    assert fields.show(list(range(100))) == "a list of 100 items"
    assert fields.show("short") == '"short"' and fields.show(None) == "(not set)"


def test_named_list_items_are_compared_by_name() -> None:
    old = {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]}
    new = {
        "containers": [
            {
                "name": "a",
                "env": [{"name": "W", "value": "0"}, {"name": "X", "value": "1"}, {"name": "Y", "value": "3"}],
            }
        ]
    }
    assert list(fields.field_changes("spec", old, new)) == [
        ("spec.containers[name=a].env[name=Y].value", "2", "3"),
        ("spec.containers[name=a].env[name=W].name", None, "W"),
        ("spec.containers[name=a].env[name=W].value", None, "0"),
    ]


def test_many_changed_fields_of_one_object_are_counted_after_the_first_ones() -> None:
    change = guard.ImmutableChange
    changes = [change("Job", CHIEF, f"spec.template.spec.x{i}", i, i + 1) for i in range(15)]
    plan = guard.UpgradePlan(KubeApi(dict), NS, changes=changes, effects={("Job", CHIEF): guard.RECREATE["Job"]})
    message = guard.refusal(plan, recreate=False).message
    assert message.count(f"  - Job {CHIEF}: spec.template.spec.x") == guard.FIELDS_SHOWN_PER_OBJECT
    assert f"  - Job {CHIEF}: 3 more changed fields" in message


# -- the command line, through the real client against the fake API server over HTTP --------------------


def test_cli_prints_each_refused_field_then_the_fix(tfchart: Tfchart, cluster: KubeServer) -> None:  # noqa: F811
    live_cluster(cluster, RecordingHelm("4", ["--set", "storage.size=20Gi"]), namespace="team-a")
    run = tfchart(
        cluster.kubeconfig("team-a"),
        "upgrade",
        "mnist",
        "--set",
        "storage.size=10Gi",
        "--recreate",
        "--skip-image-check",
        deployed=["--set", "storage.size=20Gi"],
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert f'  - {CLAIM_LINE}spec.resources.requests.storage: "20Gi" -> "10Gi" {SHRINK}' in run.stderr
    assert "      fix: keep storage.size at 20Gi or more" in run.stderr
    assert "  hint: --recreate never deletes a PersistentVolumeClaim" in run.stderr
    assert cluster.writes() == [] and not any(call[0] == "upgrade" for call in cluster_calls(run))


def test_cli_upgrades_past_a_chief_job_removed_by_its_ttl(tfchart: Tfchart, cluster: KubeServer) -> None:  # noqa: F811
    deployed = ["--set", "chief.ttlSecondsAfterFinished=600", "--set", "training.trainSteps=2000"]
    live_cluster(cluster, RecordingHelm("4", deployed), namespace="team-a", chief=False)
    run = tfchart(
        cluster.kubeconfig("team-a"),
        "upgrade",
        "mnist",
        "--set",
        "chief.ttlSecondsAfterFinished=600",
        "--set",
        "training.trainSteps=4000",
        "--skip-image-check",
        deployed=deployed,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"Job {CHIEF} is not in the cluster" in run.stderr
    assert cluster_calls(run)[-1][:2] == ["upgrade", "mnist"]
    assert 404 in cluster.answered(Call("get", "jobs", "team-a", CHIEF))
    assert cluster.writes() == []
