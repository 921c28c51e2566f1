"""tfchart validate: every invalid document rejected with its key path and file:line, helm parity."""

from __future__ import annotations

import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chartlib import CHART, REPO, Result, template, values_files
from tests.tfchart.corpus import Case, cases
from tfchart import schema
from tfchart.cli import main
from tfchart.validate import validate

CASES = cases()
WORK = REPO / ".pytest_cache" / "tfchart-corpus"


def case_path(case: Case) -> Path:
    return WORK / (case.name.replace(":", "__").replace("/", "_") + ".yaml")


@cache
def helm_verdicts() -> dict[str, Result]:
    WORK.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        case_path(case).write_bytes(case.content)
    with ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 1))) as pool:
        results = pool.map(lambda case: template("4", values=[case_path(case)]), CASES)
        return {case.name: result for case, result in zip(CASES, results, strict=True)}


def test_corpus_is_large_and_mutates_every_values_file() -> None:
    invalid = [case for case in CASES if not case.name.endswith(":empty")]
    assert len(invalid) >= 200
    stems = {case.name.split(":")[0] for case in CASES}
    assert stems == {path.stem for path in (REPO / "values").glob("*.yaml")}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_validate_matches_helm_and_names_the_problem(case: Case) -> None:
    path = case_path(case)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(case.content)
    report = validate(CHART, [path])
    helm = helm_verdicts()[case.name]
    assert "Traceback" not in helm.stderr
    if case.name.endswith(":empty"):
        # helm accepts an empty values file as {}; tfchart agrees and warns that it sets nothing.
        assert helm.returncode == 0 and report.valid and report.warnings
        return
    assert (helm.returncode != 0) == (not report.valid), (
        f"parity: helm rc={helm.returncode} {helm.stderr}\ntfchart: {report.problems}"
    )
    if ":fixture:" in case.name and report.valid:
        return  # a cross-field fixture that this topology makes harmless: both accept it
    assert not report.valid, f"{case.name} accepted"
    for problem in report.problems:
        assert problem.path and problem.message
    if case.key_path:
        assert any(p.path == case.key_path or p.path.startswith(case.key_path + ".") for p in report.problems), [
            p.path for p in report.problems
        ]
    if case.expect_line:
        assert any(p.file == str(path) and p.line for p in report.problems), [(p.file, p.line) for p in report.problems]


def test_fixture_combinations_are_mostly_rejected() -> None:
    fixtures = [case for case in CASES if ":fixture:" in case.name]
    rejected = [case for case in fixtures if not validate(CHART, [case_path(case)]).valid]
    assert len(rejected) >= 0.8 * len(fixtures)


@pytest.mark.parametrize("values_file", values_files(), ids=lambda p: p.name)
def test_every_values_file_validates_cleanly(values_file: Path) -> None:
    report = validate(CHART, [values_file])
    assert report.valid, report.problems
    assert not report.warnings


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
        raise SystemExit(0)
    captured = capsys.readouterr()
    code = exit_info.value.code
    return int(code) if isinstance(code, int) else 1, captured.out, captured.err


def test_cli_exit_codes_and_messages(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["validate", "-f", str(REPO / "values" / "gpu.yaml")], capsys)[0] == 0
    code, _, err = run_cli(
        ["validate", "-f", str(REPO / "tests/fixtures/bad-values/typo-in-key.yaml"), "--set", "ps.replicas=-1"], capsys
    )
    assert code == 1
    assert "typo-in-key.yaml:4" in err and "worker.replica" in err and "did you mean worker.replicas?" in err
    assert "ps.replicas" in err and "--set ps.replicas=1" in err
    assert "Traceback" not in err
    code, _, err = run_cli(["validate", "-f", "does-not-exist.yaml"], capsys)
    assert code == 2 and "values file not found" in err
    code, _, err = run_cli(["validate", "--set", "x[a]=1"], capsys)
    assert code == 2 and "failed parsing --set" in err
    code, _, err = run_cli(["validate", "--no-such-flag"], capsys)
    assert code == 2


def test_cli_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        ["validate", "-o", "json", "--set", "worker.gpu.count=two", "--set", "storage.create=false"], capsys
    )
    assert code == 1
    report: dict[str, Any] = json.loads(out)
    assert report["valid"] is False
    paths = {problem["path"] for problem in report["problems"]}
    assert {"worker.gpu.count", "storage"} <= paths
    count = next(p for p in report["problems"] if p["path"] == "worker.gpu.count")
    assert count["file"] == "--set worker.gpu.count=two" and count["value"] == "two"


def test_fast_and_complete_validators_agree() -> None:
    schema_path = CHART / "values.schema.json"
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for case in CASES[:150]:
        report = validate(CHART, [case_path(case)]) if case_path(case).exists() else None
        if report is None:
            continue
        fast = schema.is_valid(schema_path, report.values)
        complete = not schema.problems(schema_path, report.values, defaults)
        assert fast == complete, case.name


def test_validate_does_not_import_tensorflow_or_kubernetes() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from tfchart.cli import main\n"
        "try:\n    main(['validate', '-f', 'values/gpu.yaml'])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in ('tensorflow', 'kubernetes', 'pyhelm3', 'jsonschema') if m in sys.modules]\n"
        "print('IMPORTED', bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert "IMPORTED []" in result.stdout, result.stdout


# -- shared storage: the access mode the values need, said by validate and by the chart's NOTES ----

NEEDS = {
    "cpu.yaml": "storage: needs ReadWriteOnce: 7 pods mount the claim (ps 1, worker 2, chief 1, tensorboard 1, "
    "serving 1, helm test 1) from one node (co-located), so any StorageClass will do",
    "gpu.yaml": "storage: needs ReadWriteMany: 10 pods mount the claim (ps 2, worker 4, chief 1, tensorboard 1, "
    "serving 1, helm test 1) from any node, so the StorageClass must offer ReadWriteMany (NFS, CephFS, EFS, "
    "Azure Files, Filestore, Longhorn...)",
    "multi-gpu.yaml": "storage: needs ReadWriteOnce: 4 pods mount the claim (chief 1, tensorboard 1, serving 1, "
    "helm test 1) from one node (co-located), so any StorageClass will do",
    "sync-allreduce.yaml": "storage: needs ReadWriteMany: 7 pods mount the claim (worker 3, chief 1, tensorboard 1, "
    "serving 1, helm test 1) from any node, so the StorageClass must offer ReadWriteMany (NFS, CephFS, EFS, "
    "Azure Files, Filestore, Longhorn...)",
}
ONE_POD = [
    "training.strategy=single_device",
    "tensorboard.enabled=false",
    "serving.enabled=false",
    "tests.enabled=false",
]


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_validate_states_the_access_mode_each_values_file_needs(name: str) -> None:
    assert validate(CHART, [REPO / "values" / name]).notes == [NEEDS[name]]


def test_validate_cli_prints_the_storage_need(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["validate", "-f", str(REPO / "values" / "cpu.yaml")], capsys)
    assert code == 0
    assert out.splitlines()[-1] == NEEDS["cpu.yaml"]
    code, out, _ = run_cli(["validate", "-o", "json", "-f", str(REPO / "values" / "gpu.yaml")], capsys)
    assert code == 0 and json.loads(out)["notes"] == [NEEDS["gpu.yaml"]]
    code, out, _ = run_cli(["validate", "-o", "json", "--set", "storage.accessModes={ReadOnlyMany}"], capsys)
    assert code == 1 and json.loads(out)["notes"] == []  # invalid values need nothing


def mounting_pods(docs: list[dict[str, Any]]) -> int:
    """Pods the rendered workloads run that mount the release's claim (the helm test Job's included)."""
    count = 0
    for doc in docs:
        if doc["kind"] not in ("StatefulSet", "Deployment", "Job"):
            continue
        volumes = doc["spec"]["template"]["spec"]["volumes"]
        if any("persistentVolumeClaim" in volume for volume in volumes):
            count += doc["spec"].get("replicas", doc["spec"].get("parallelism", 1))
    return count


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["ps.replicas=3", "worker.replicas=5", "evaluator.enabled=true", "serving.replicas=2"],
        ["training.strategy=multi_worker_mirrored", "ps.replicas=4", "tests.enabled=false", "training.batchSize=99"],
        ["training.strategy=mirrored", "tensorboard.replicas=3", "serving.enabled=false"],
        ONE_POD,
    ],
    ids=["defaults", "bigger", "sync", "mirrored", "one-pod"],
)
def test_pods_counted_by_the_rules_are_the_pods_the_chart_renders(sets: list[str]) -> None:
    from tests.chartlib import render
    from tfchart.rules import claim_pods

    report = validate(CHART, sets=[("--set", item) for item in sets])
    assert report.valid, report.problems
    docs = render("4", sets=sets)
    assert sum(count for _, count in claim_pods(report.values)) == mounting_pods(docs)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_notes_after_install_state_the_same_need(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.chartlib import helm

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-cluster"))  # helm 4 renders NOTES client-side
    result = helm(
        "4", "install", "mnist", str(CHART), "-n", "ml-training", "--dry-run=client", "-f", str(REPO / "values" / name)
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert NEEDS[name] in notes.splitlines()
    colocated = "needs ReadWriteOnce" in NEEDS[name]
    assert ("follows the first one scheduled to its node" in notes) == colocated
    assert ("-f values/cpu.yaml" in notes) == (not colocated)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ["storage.accessModes={ReadWriteOncePod}"],
            "ReadWriteOncePod lets a single pod mount the claim, but 7 pods mount it "
            "(ps 1, worker 2, chief 1, tensorboard 1, serving 1, helm test 1)",
        ),
        (
            ["storage.accessModes={ReadWriteOncePod}", *ONE_POD[:-1]],
            "ReadWriteOncePod lets a single pod mount the claim, but 2 pods mount it (chief 1, helm test 1)",
        ),
        (
            ["storage.accessModes={ReadWriteOncePod,ReadWriteOnce}"],
            "ReadWriteOncePod cannot be combined with other access modes (Kubernetes rejects such a claim)",
        ),
        (
            ["storage.accessModes={ReadOnlyMany}"],
            "ReadOnlyMany alone is not writable, but training writes checkpoints, logs and exports to the claim",
        ),
    ],
    ids=["rwop-many-pods", "rwop-helm-test-pod", "rwop-combined", "read-only"],
)
def test_access_mode_rules_match_helm(sets: list[str], message: str, helm_major: str) -> None:
    report = validate(CHART, sets=[("--set", item) for item in sets])
    [problem] = report.problems
    assert (problem.path, problem.message, problem.file) == ("storage.accessModes", message, f"--set {sets[0]}")
    assert problem.fix.startswith("--set storage.accessModes={ReadWriteOnce}")
    helm = template(helm_major, sets=sets)
    assert helm.returncode != 0
    assert (
        f"tf-distributed: 1 problem(s) in values:\n  - storage.accessModes: {message}. Fix: {problem.fix}"
        in helm.stderr
    )


def test_read_write_once_pod_is_fine_for_a_single_pod(helm_major: str) -> None:
    sets = ["storage.accessModes={ReadWriteOncePod}", *ONE_POD]
    report = validate(CHART, sets=[("--set", item) for item in sets])
    assert report.valid, report.problems
    assert report.notes == ["storage: needs ReadWriteOncePod: 1 pod mounts the claim (chief 1)"]
    assert template(helm_major, sets=sets).returncode == 0


# -- rules that need the release's names, or compare quantities: rules.py word for word with helm ----

LONG_RELEASE, LONG_NAMESPACE = "a" * 53, "n" * 63


def helm_problem_lines(stderr: str) -> list[str]:
    """The `  - <path>: <message>. Fix: <fix>` lines of the chart's validateValues failure."""
    if "problem(s) in values:" not in stderr:
        return []
    block = stderr.split("problem(s) in values:\n", 1)[1].split("\n\n", 1)[0]
    return [line[4:] for line in block.splitlines() if line.startswith("  - ")]


def our_problem_lines(values: dict[str, Any], release: str, namespace: str) -> list[str]:
    from tfchart.rules import Release, check

    return [f"{p.path}: {p.message}. Fix: {p.fix}" for p in check(values, Release(release, namespace))]


NAMED_CASES = {
    "release-starts-with-a-digit": ("1abc", "ml-training", []),
    "release-with-a-dot": ("team.a", "ml-training", []),
    "fullname-override-lifts-it": ("1abc", "ml-training", ["fullnameOverride=run-1abc"]),
    "task-host-over-253": (LONG_RELEASE, LONG_NAMESPACE, ["clusterDomain=" + "d" * 60 + "." + "e" * 30]),
    "cluster-map-over-128k": (LONG_RELEASE, LONG_NAMESPACE, ["ps.replicas=400", "worker.replicas=400"]),
    "cluster-map-ps-must-shrink": (
        LONG_RELEASE,
        LONG_NAMESPACE,
        ["ps.replicas=510", "worker.replicas=1", "evaluator.enabled=true", f"clusterDomain={'d' * 50}.{'e' * 49}"],
    ),
    "short-names-fit-more": ("mnist", "ml", ["ps.replicas=510", "worker.replicas=499"]),
    "owned-labels-mounts-volumes": (
        "mnist",
        "ml-training",
        [
            "commonLabels.app\\.kubernetes\\.io/part-of=other",
            "serving.podLabels.helm\\.sh/chart=x",
            "storage.mountPath=/var",
            "chief.extraVolumes[0].name=kube-api-access",
            "chief.extraVolumeMounts[0].name=x",
            "chief.extraVolumeMounts[0].mountPath=/var/run/secrets/kubernetes.io/serviceaccount",
            "worker.gpu.count=1",
            "worker.extraVolumeMounts[0].name=x",
            "worker.extraVolumeMounts[0].mountPath=/dev/shm",
            "ps.extraVolumeMounts[0].name=x",
            "ps.extraVolumeMounts[0].mountPath=/dev/shm",
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(NAMED_CASES))
def test_rules_with_release_names_match_helm_word_for_word(name: str, helm_major: str) -> None:
    release, namespace, sets = NAMED_CASES[name]
    report = validate(CHART, sets=[("--set", item) for item in sets])
    assert not [p for p in report.problems if p.path not in {"worker.replicas", "ps.replicas", "clusterDomain"}] or (
        name == "owned-labels-mounts-volumes"
    )
    ours = our_problem_lines(report.values, release, namespace)
    result = template(helm_major, sets=sets, release=release, namespace=namespace)
    assert "Traceback" not in result.stderr
    assert (result.returncode == 0) == (not ours), result.stderr
    assert helm_problem_lines(result.stderr) == ours
    if name in ("fullname-override-lifts-it", "short-names-fit-more"):
        assert ours == []  # the same counts are refused with the longest names, not with these
    else:
        assert ours


def test_validate_without_a_release_assumes_the_longest_names() -> None:
    sets = [("--set", "ps.replicas=400"), ("--set", "worker.replicas=400")]
    [problem] = validate(CHART, sets=sets).problems
    assert "with the longest release name and namespace" in problem.message
    pinned = [*sets, ("--set", "fullnameOverride=mnist"), ("--set", "namespaceOverride=ml")]
    assert validate(CHART, sets=pinned).valid  # the names are known: exact, and these fit


# Quantities: rules.py's exact arithmetic (quantity_nanos) and the chart's digit strings
# (tf-distributed.quantityKey) must agree on every pair, including what the API server rounds
# (below 1n, up) and caps (2^63-1).
EQUIVALENT = [
    ["1", "1000m", "0.001k", "+1", "1.", "1.000", "01", 1, 1.0],
    ["1Ki", "1024", "1.024k", 1024, "0.0009765625Mi"],
    ["1Gi", "1073741824", "1.073741824G", 1073741824, "1024Mi"],
    ["0.1", "100m", ".1", 0.1, "1e-1", "0.0001k"],
    ["1E", "1e18", "1000P", "1000000T", "1E18"],
    ["1Ei", "1152921504606846976", "1024Pi"],
    ["9223372036854775807", "9223372036854775808", "1e19", "8Ei", "9Ei", "1e400", 1e21],
    ["1.0000000001", "1.000000001", "1.0000000009"],
    ["0.0000000001", "1e-10", "0.000000001", "1e-400", 1e-07 / 100],
    ["0", "0m", "0Ei", "0.0", 0, "0e5"],
]


def random_quantity(rng: random.Random) -> str | int | float:
    kind = rng.random()
    if kind < 0.45:
        return rng.choice(rng.choice(EQUIVALENT))
    if kind < 0.55:
        return rng.choice([rng.randrange(0, 10**12), rng.random() * 10 ** rng.randrange(-8, 22)])
    whole = str(rng.randrange(0, 10 ** rng.randrange(1, 10)))
    fraction = "." + str(rng.randrange(0, 10**6)).zfill(rng.randrange(1, 12)) if rng.random() < 0.5 else ""
    suffix = rng.choice(["", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "exp"])
    if suffix == "exp":
        suffix = rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 30))
    return f"{whole}{fraction}{suffix}"[:64]


@pytest.mark.parametrize("seed", range(3))
def test_requests_above_limits_are_found_alike_by_rules_py_and_the_chart(
    seed: int, helm_major: str, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    document: dict[str, Any] = {}
    for role in ("ps", "worker", "chief", "evaluator", "tensorboard", "serving"):
        requests: dict[str, Any] = {}
        limits: dict[str, Any] = {}
        for index in range(40):
            # plain names are overcommitable (request <= limit); extended resources need request == limit
            name = f"r{index}" if index % 4 else f"example.com/e{index}"
            requests[name], limits[name] = random_quantity(rng), random_quantity(rng)
        document[role] = {"resources": {"requests": requests, "limits": limits}}
    path = tmp_path / "quantities.yaml"
    path.write_text(json.dumps(document))
    report = validate(CHART, [path])
    assert all(p.path.split(".")[1:3] == ["resources", "requests"] for p in report.problems), report.problems
    ours = [f"{p.path}: {p.message}. Fix: {p.fix}" for p in report.problems]
    assert len(ours) > 40  # both verdicts are well represented
    result = template(helm_major, values=[path])
    assert helm_problem_lines(result.stderr) == ours


def test_quantities_are_read_as_the_kubernetes_client_reads_them() -> None:
    from decimal import Decimal, localcontext

    from kubernetes.utils import parse_quantity

    from tfchart.rules import quantity_nanos

    rng = random.Random(7)
    checked = 0
    for _ in range(3000):
        quantity = random_quantity(rng)
        if isinstance(quantity, float):
            continue  # the client reads floats through str(), not as Go prints them
        nanos = quantity_nanos(quantity)
        assert nanos is not None, quantity
        with localcontext() as context:
            context.prec = 200  # the client computes with the context's precision (28 digits by default)
            exact = Decimal(parse_quantity(quantity)) * 10**9  # type: ignore[no-untyped-call]
        if exact == exact.to_integral_value() and exact < (2**63 - 1) * 10**9:
            assert nanos == int(exact), quantity  # no rounding, no cap: the same number
            checked += 1
        elif exact >= (2**63 - 1) * 10**9:
            assert nanos == (2**63 - 1) * 10**9, quantity
        else:
            assert nanos == int(exact) + 1, quantity  # below 1n: rounded up, as the API server does
    assert checked > 1000


@pytest.mark.parametrize(
    ("key", "value"),
    [("fullnameOverride", "team-a"), ("image.tag", "1.0"), ("commonLabels.team", "a"), ("storage.mountPath", "/data")],
)
def test_a_trailing_newline_fails_the_pattern_as_in_helm(key: str, value: str, helm_major: str, tmp_path: Path) -> None:
    """RE2's `$` (helm) matches only at the end of the text, Python's also before a final newline: tfchart
    reads the schema's patterns as RE2 does, so "team-a\\n" is refused by both."""
    document: dict[str, Any] = {}
    node = document
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    for text, valid in ((value, True), (value + "\n", False)):
        node[last] = text
        path = tmp_path / "values.yaml"
        path.write_text(json.dumps(document))
        report = validate(CHART, [path])
        assert report.valid == valid, report.problems
        assert (template(helm_major, values=[path]).returncode == 0) == valid
        if not valid:
            assert [problem.path for problem in report.problems] == [key]
