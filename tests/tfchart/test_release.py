"""install / upgrade / uninstall: the exact helm invocations, and the upgrade guard on real renders.

helm itself runs for real wherever it can without a cluster (template, version); the calls that
need an API server (install, upgrade, uninstall, get manifest) are recorded at tfchart's Runner
boundary, with `get manifest` answered by a real `helm template` of what is "deployed". The guard asks
the fake API server (tests/kubeapi.py) holding the deployed render for its dry runs.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import CHART, REPO, helm_path
from tests.kubeapi import KubeServer, kube_server
from tfchart.cluster.upgrade import UpgradePlan
from tfchart.cluster.upgrade import upgrade as guarded_upgrade
from tfchart.errors import ImmutableFieldChange
from tfchart.helm import chart as release
from tfchart.helm.chart import Chart, Inputs, manifests, read, template
from tfchart.helm.runner import Helm, Options, deployed
from tfchart.helm.runner import failure as runner_failure

GPU = REPO / "values" / "gpu.yaml"
DEFAULT_CLASS = "standard"
NS = "ml-training"


class RecordingHelm:
    """Runs `version` and `template` with the real helm; records and answers the cluster calls."""

    def __init__(self, major: str, deployed: Sequence[str] = (), deployed_chart: Path = CHART,
                 failed: Sequence[str] | None = None) -> None:  # fmt: skip
        self.binary = str(helm_path(major))
        self.calls: list[list[str]] = []
        self.deployed = list(deployed)
        self.deployed_chart = deployed_chart
        self.failed = failed  # the values of a failed upgrade: revision 2, after `deployed` (revision 1)

    def real(self, args: list[str]) -> bytes:
        return subprocess.run([self.binary, *args], capture_output=True, check=True).stdout

    def __call__(self, args: Sequence[str], stdin: bytes | None = None) -> bytes:
        args = list(args)
        self.calls.append(args)
        if args[0] in ("version", "template"):
            return self.real(args)
        if args[0] == "history":
            failed = [{"revision": 2, "status": "failed"}] if self.failed is not None else []
            return json.dumps([{"revision": 1, "status": "deployed"}, *failed]).encode()
        if args[:2] == ["get", "manifest"]:
            namespace = args[args.index("--namespace") + 1] if "--namespace" in args else "default"
            revision = args[args.index("--revision") + 1] if "--revision" in args else "newest"
            values = self.deployed if self.failed is None or revision == "1" else list(self.failed)
            # `helm get manifest` holds the release's objects without its hooks.
            return self.real(
                ["template", args[2], str(self.deployed_chart), "--namespace", namespace, "--no-hooks", *values]
            )
        return b""

    def cluster_calls(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] not in ("version", "template")]


def chart_at(path: Path = CHART) -> Chart:
    return Chart(path, str(path))


def inputs(files: Sequence[Path] = (), sets: Sequence[tuple[str, str]] = ()) -> Inputs:
    """The -f files and --set family as the command line reads them."""
    return read([str(file) for file in files], list(sets))


def upgrade(
    helm: RecordingHelm, given: Inputs, options: Options, chart: Path = CHART, **guard: Any
) -> UpgradePlan:
    """`tfchart upgrade mnist` as the command runs it: helm renders the new values, then the guard plans (asking the
    API server: `live`, else a fake one holding the deployed release), refuses or recreates, and helm upgrades."""
    rendered = manifests(template(Helm(helm.binary), chart_at(chart), "mnist", given, options.namespace))
    if "live" in guard:
        return guarded_upgrade(helm, "mnist", chart_at(chart), given, rendered, options, **guard)
    with kube_server() as cluster:
        live_cluster(cluster, helm, namespace=options.namespace or "default")
        return guarded_upgrade(helm, "mnist", chart_at(chart), given, rendered, options, live=cluster.api(), **guard)


def deployed_docs(helm: RecordingHelm, namespace: str = NS) -> list[dict[str, Any]]:
    """What `helm get manifest` holds: the deployed render without its hooks."""
    text = helm.real(["template", "mnist", str(helm.deployed_chart), "--namespace", namespace, "--no-hooks",
                      *helm.deployed])  # fmt: skip
    return manifests(text.decode())


def live_claim(doc: dict[str, Any], phase: str = "Bound", size: str | None = None) -> dict[str, Any]:
    """The claim as the API server serves it: the default class filled in, a volume, a status."""
    obj = json.loads(json.dumps(doc))
    spec = obj["spec"]
    spec.setdefault("storageClassName", DEFAULT_CLASS)
    spec.setdefault("volumeMode", "Filesystem")
    if size:
        spec["resources"]["requests"]["storage"] = size
    obj["status"] = {"phase": phase}
    if phase == "Bound":
        spec["volumeName"] = "pvc-0b5e6c1d"
        obj["status"] |= {
            "accessModes": spec["accessModes"],
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
        }
    return obj


def live_cluster(cluster: KubeServer, helm: RecordingHelm, *, namespace: str = NS, chief: bool = True,
                 claim_phase: str = "Bound", claim_size: str | None = None, expandable: bool | None = None
                 ) -> KubeServer:  # fmt: skip
    """The deployed release as a running training leaves it (without `chief`, the chief Job removed by its TTL)."""
    for doc in deployed_docs(helm, namespace):
        kind = doc["kind"]
        if kind == "StatefulSet":
            cluster.add(kf.stateful_set(doc))
        elif kind == "Deployment":
            cluster.add(kf.deployment(doc))
        elif kind == "Job" and chief:
            cluster.add(kf.job(doc, "running"))
        elif kind == "PersistentVolumeClaim":
            cluster.add(live_claim(doc, claim_phase, claim_size))
    cluster.add(kf.storage_class(DEFAULT_CLASS, "ebs.csi.aws.com", default=True, allow_volume_expansion=expandable))
    return cluster


@pytest.mark.parametrize(
    ("major", "wait", "atomic"), [("3", "--wait", "--atomic"), ("4", "--wait=watcher", "--rollback-on-failure")]
)
def test_install_invocation(major: str, wait: str, atomic: str) -> None:
    helm = RecordingHelm(major)
    options = Options(namespace="ml-training", wait=True, timeout=900, atomic=True, create_namespace=True)
    given = inputs([GPU], [("--set", "worker.replicas=3"), ("--set-string", "image.tag=0.1.0-gpu")])
    release.install(helm, "mnist", chart_at(), given, options)
    assert helm.cluster_calls() == [["install", "mnist", str(CHART), "--namespace", "ml-training", "--create-namespace",
                                     wait, "--timeout", "15m", atomic, "--values", str(GPU), "--set",
                                     "worker.replicas=3", "--set-string", "image.tag=0.1.0-gpu"]]  # fmt: skip


def test_install_dry_run_client() -> None:
    helm = RecordingHelm("4")
    release.install(helm, "mnist", chart_at(), inputs(), Options(dry_run="client"))
    assert helm.cluster_calls() == [["install", "mnist", str(CHART), "--dry-run=client"]]


def test_upgrade_with_an_allowed_change() -> None:
    deployed = ["--values", str(GPU)]
    helm = RecordingHelm("4", deployed)
    sets = [("--set", item) for item in ("tensorboard.resources.limits.memory=6Gi", "tensorboard.replicas=2",
                                         "serving.pollSeconds=10")]  # fmt: skip
    plan = upgrade(helm, inputs([GPU], sets), Options(namespace="ml-training"))
    assert plan.changes == []
    assert helm.cluster_calls() == [
        ["history", "mnist", "--namespace", "ml-training", "--output", "json"],
        ["get", "manifest", "mnist", "--namespace", "ml-training", "--revision", "1"],
        ["upgrade", "mnist", str(CHART), "--namespace", "ml-training", "--values", str(GPU),
         *(arg for pair in sets for arg in pair)],
    ]  # fmt: skip


@pytest.mark.parametrize("change", ["ps.resources.limits.memory=6Gi", "worker.replicas=8"])
def test_upgrade_that_changes_the_training_spec_is_a_new_run(change: str) -> None:
    """ps resources and the workers are part of the run's spec: the chief's pod template carries the run's identity,
    so the chief Job would change and --recreate starts a new run."""
    helm = RecordingHelm("4", ["--values", str(GPU)])
    with pytest.raises(ImmutableFieldChange) as refused:
        upgrade(helm, inputs([GPU], [("--set", change)]), Options(namespace="ml-training"))
    lines = refused.value.message.splitlines()
    run_spec = 'Job mnist-tf-distributed-chief: spec.template.metadata.annotations["tf-distributed.io/run-spec"]'
    assert any(run_spec in line for line in lines)
    assert "--recreate" in refused.value.hint
    assert not any(call[0] == "upgrade" for call in helm.calls), "helm upgrade must not run"
    if change.startswith("worker."):  # the leaf that changes, both values shown around their difference
        line = next(line for line in lines if "Job mnist-tf-distributed-chief:" in line and "TFD_CLUSTER" in line)
        field = "spec.template.spec.containers[name=chief].env[name=TFD_CLUSTER].value: "
        assert f"Job mnist-tf-distributed-chief: {field}" in line
        old, new = line.split(".value: ", 1)[1].split(" -> ")
        assert "worker-7" not in old and "mnist-tf-distributed-worker-7.mnist-tf-distributed-worker.ml-training" in new


def test_upgrade_that_changes_statefulset_fields_is_refused_with_each_field_named(old_chart: Path) -> None:
    helm = RecordingHelm("4", ["--values", str(GPU)], deployed_chart=old_chart)
    with pytest.raises(ImmutableFieldChange) as refused:
        upgrade(helm, inputs([GPU]), Options(namespace="ml-training"))
    message = refused.value.message
    for role in ("ps", "worker"):
        name = f"mnist-tf-distributed-{role}"
        assert f'StatefulSet {name}: spec.podManagementPolicy: "OrderedReady" -> "Parallel"' in message
        assert f'StatefulSet {name}: spec.serviceName: "{name}-headless" -> "{name}"' in message
    assert "Job " not in message


def test_recreate_deletes_exactly_the_changed_objects_then_upgrades(old_chart: Path) -> None:
    helm = RecordingHelm("3", ["--values", str(GPU)], deployed_chart=old_chart)
    # deleted by the fake API server (each deletion's propagation: test_upgrade_guard, from its request log)
    plan = upgrade(helm, inputs([GPU], [("--set", "worker.replicas=6")]),
                   Options(namespace="ml-training", atomic=True), recreate=True)
    recreated = [("Job", "mnist-tf-distributed-chief"), ("StatefulSet", "mnist-tf-distributed-ps"),
                 ("StatefulSet", "mnist-tf-distributed-worker")]  # fmt: skip
    assert sorted({(c.kind, c.name) for c in plan.changes}) == recreated and plan.recreated == recreated
    assert helm.cluster_calls()[-1] == ["upgrade", "mnist", str(CHART), "--namespace", "ml-training", "--atomic",
                                        "--values", str(GPU), "--set", "worker.replicas=6"]  # fmt: skip


def test_uninstall_keeps_the_claim_unless_asked() -> None:
    helm = RecordingHelm("4", [])
    kept = release.uninstall(helm, "mnist", "ml-training", wait=True, timeout=300)
    assert kept == ["mnist-tf-distributed-data"]
    assert helm.cluster_calls() == [
        ["get", "manifest", "mnist", "--namespace", "ml-training"],
        ["uninstall", "mnist", "--namespace", "ml-training", "--wait", "--timeout", "5m"],
    ]


def test_uninstall_with_existing_claim_deletes_nothing_of_the_user() -> None:
    """--delete-data deletes the claims uninstall returns (tests/tfchart/test_namespace.py): none of the user's."""
    helm = RecordingHelm("4", ["--set", "storage.existingClaim=team-data"])
    assert release.uninstall(helm, "mnist", "ml-training") == []


def test_the_created_claim_survives_helm_uninstall() -> None:
    rendered = RecordingHelm("4").real(["template", "mnist", str(CHART)]).decode()
    assert "helm.sh/resource-policy: keep" in rendered


def test_template_is_byte_identical_to_helm_template(tmp_path: Path) -> None:
    sets = [("--set", "worker.replicas=5"), ("--set-string", "image.tag=2026.11"),
            ("--set", "commonAnnotations.note=a\\,b")]  # fmt: skip
    for major in ("3", "4"):
        ours = template(Helm(str(helm_path(major))), chart_at(), "mnist", inputs([GPU], sets), "ml-training")
        theirs = subprocess.run([str(helm_path(major)), "template", "mnist", str(CHART), "--namespace", "ml-training",
                                 "-f", str(GPU), *(arg for pair in sets for arg in pair)],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert ours == theirs


def test_cli_template_is_byte_identical(capfd: pytest.CaptureFixture[str]) -> None:
    from tfchart.cli.app import main

    with pytest.raises(SystemExit) as done:
        main(["--helm", str(helm_path("4")), "template", "mnist", "-n", "ml", "-f", str(GPU), "--set", "ps.replicas=3"])
        raise SystemExit(0)
    assert done.value.code in (0, None)
    ours = capfd.readouterr().out
    theirs = subprocess.run([str(helm_path("4")), "template", "mnist", str(CHART), "--namespace", "ml", "--values",
                             str(GPU), "--set", "ps.replicas=3"], capture_output=True, text=True, check=True).stdout
    assert ours == theirs


def helm_help(major: str, verb: str) -> str:
    return subprocess.run([str(helm_path(major)), verb, "--help"], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("major", ["3", "4"])
@pytest.mark.parametrize(
    ("options", "flags"),
    [
        (Options(install=True, create_namespace=True), ["--create-namespace", "--install"]),
        (Options(reuse_values="reuse"), ["--reuse-values"]),
        (Options(reuse_values="reset-then-reuse"), ["--reset-then-reuse-values"]),
    ],
)
def test_upgrade_passes_helms_install_and_reuse_flags(major: str, options: Options, flags: list[str]) -> None:
    args = release.release_args("upgrade", int(major), "mnist", chart_at(), inputs([GPU]), options)
    assert args == ["upgrade", "mnist", str(CHART), *flags, "--values", str(GPU)]
    usage = helm_help(major, "upgrade")  # each flag is this helm's, with the meaning tfchart gives it
    assert all(re.search(rf"\s{re.escape(flag)}\s", usage) for flag in flags), usage


@pytest.mark.parametrize("major", ["3", "4"])
def test_uninstall_keep_history_and_wait_are_helms(major: str) -> None:
    helm = RecordingHelm(major, [])
    release.uninstall(helm, "mnist", "ml-training", wait=True, timeout=90, keep_history=True)
    assert helm.cluster_calls()[-1] == [
        "uninstall", "mnist", "--namespace", "ml-training", "--wait", "--timeout", "1m30s", "--keep-history"
    ]  # fmt: skip
    usage = helm_help(major, "uninstall")
    assert all(re.search(rf"\s{flag}\s", usage) for flag in ("--wait", "--timeout", "--keep-history"))


class HistoryHelm:
    """Answers `helm history` as helm does: a JSON list, or `release: not found`."""

    def __init__(self, history: list[dict[str, Any]] | None) -> None:
        self.history = history
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str], stdin: bytes | None = None) -> bytes:
        self.calls.append(list(args))
        if self.history is None:
            raise runner_failure("Error: release: not found\n")
        return json.dumps(self.history).encode()


@pytest.mark.parametrize(
    ("history", "held"),
    [(None, False), ([{"revision": 2, "status": "uninstalled"}], False),
     ([{"revision": 3, "status": "deployed"}], True), ([{"revision": 1, "status": "failed"}], True)],
)  # fmt: skip
def test_upgrade_install_installs_what_helm_does_not_hold(history: list[dict[str, Any]] | None, held: bool) -> None:
    helm = HistoryHelm(history)
    assert deployed(helm, "mnist", "ml-training") is held
    assert helm.calls == [["history", "mnist", "--namespace", "ml-training", "--max", "1", "--output", "json"]]
