"""The cluster contract lives in tfdcontract alone: no other copy of a role name or of the progress and
status line formats in tfchart/, trainer/, scripts/ or bench/, and the contract agrees with the chart."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest

import tfdcontract as contract
from tests.chartlib import REPO, render

SCANNED = ("tfchart", "trainer", "scripts", "bench")
ROLE_NAMES = {contract.CHIEF, contract.PS, contract.WORKER, contract.EVALUATOR, contract.TENSORBOARD,
              contract.SERVING, contract.SUPERVISOR}
# what only the formats spell: the status line's prefix, the step line's separators, the phase lines' wording
FORMAT_PIECES = (contract.STATUS_LINE_PREFIX.strip(), "examples/sec;", "sec/batch", ", loss = ", "(cluster from ",
                 "finished its steps; waiting for the chief", "starting at step 0", "resumed from checkpoint at step",
                 "received: stopping within", "training Succeeded at step", "server listening on", "replica(s) in sync")


def python_files() -> list[Path]:
    return sorted(path for folder in SCANNED for path in (REPO / folder).rglob("*.py"))


def strings(tree: ast.AST) -> list[tuple[ast.Constant, ast.AST | None]]:
    """Every string constant that is not a docstring, with its parent node."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return [
        (node, parents.get(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and not isinstance(parents.get(node), ast.Expr)
    ]


def test_the_scan_sees_the_code() -> None:
    files = python_files()
    assert len(files) > 40 and any(path.parts[-2:] == ("cli", "app.py") for path in files)


def test_no_role_name_is_spelled_outside_the_contract() -> None:
    found = []
    for path in python_files():
        for node, parent in strings(ast.parse(path.read_text())):
            if node.value in ROLE_NAMES and not isinstance(parent, (ast.JoinedStr, ast.FormattedValue)):
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                found.append(f"{where}: {node.value!r} (use tfdcontract.{node.value.upper()})")
    assert not found, "\n".join(found)


def test_no_progress_or_status_line_format_outside_the_contract() -> None:
    found = []
    for path in python_files():
        for node, _ in strings(ast.parse(path.read_text())):
            for piece in FORMAT_PIECES:
                if piece in node.value:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r} spells {piece!r}")
    assert not found, "\n".join(found)


def test_the_run_s_annotations_are_named_in_the_contract_only() -> None:
    """The ending, suspension and wanted-state records are spelled in tfdcontract alone: no literal of their names
    and no `ANNOTATION_PREFIX + ...` of one's own elsewhere (issue 35's acceptance)."""
    from tfdcontract.lifecycle import WANTED_ANNOTATION

    names = (contract.ENDING_ANNOTATION, contract.END_REASON_ANNOTATION, contract.ENDED_AT_ANNOTATION,
             contract.SUSPENDED_ANNOTATION, WANTED_ANNOTATION)  # fmt: skip
    found = []
    for path in python_files():
        tree = ast.parse(path.read_text())
        where = path.relative_to(REPO)
        found += [f"{where}:{node.lineno}: {node.value!r}" for node, _ in strings(tree) if node.value in names]
        found += [f"{where}:{node.lineno}: ANNOTATION_PREFIX + ..." for node in ast.walk(tree)
                  if isinstance(node, ast.BinOp) and "ANNOTATION_PREFIX" in ast.unparse(node.left)]  # fmt: skip
    assert not found, "\n".join(found)


def test_the_scan_fails_on_a_copy(tmp_path: Path) -> None:
    """A copy of each kind is caught (the scan's own check)."""
    copy = ast.parse('ROLES = ("ps", "worker")\nLINE = re.compile(r"step (\\d+), loss = (\\S+) sec/batch")\n'
                     'PREFIX = f"tfd-status: {x}"\n')
    values = [node.value for node, _ in strings(copy)]
    assert {"ps", "worker"} <= set(values)
    assert any("loss = " in value for value in values) and any("tfd-status:" in value for value in values)


# -- the formats: one writer, one parser -------------------------------------------------------------


def test_step_line_round_trip_and_prefixes() -> None:
    line = contract.format_step_line(1200, 0.0470123, 2117.31, 0.12088)
    assert line == "step 1200, loss = 0.0470 (2117.3 examples/sec; 0.121 sec/batch)"
    assert contract.parse_step_line(f"worker-0 | {line}") == contract.StepLine(1200, 0.047, 2117.3, 0.121)
    assert contract.parse_step_line("step 3, loss = nan (1.0 examples/sec; 2.0 sec/batch)") is not None
    assert contract.parse_step_line("step x, loss = 1") is None


def test_status_line_round_trip_and_what_it_refuses(tmp_path: Path) -> None:
    status = contract.Status(
        state=contract.SUCCEEDED, strategy=contract.PARAMETER_SERVER, step=2000, train_steps=2000, loss=0.047,
        accuracy=0.9861, examples_per_sec=2117.3, export_path="/data/export/mnist/1", started_at="t0",
        updated_at="t1", message="training completed", run_id="abc", model_name="mnist", dataset="digits",
    )  # fmt: skip
    line = contract.format_status_line(status)
    assert line.startswith("tfd-status: {") and "\n" not in line
    assert contract.parse_status_line(f"2026-11-24 INFO {line}") == status
    (tmp_path / "status.json").write_text(status.as_json(indent=2))
    assert contract.read_status_file(tmp_path) == status == contract.read_status_file(tmp_path / "status.json")
    document = json.loads(status.as_json())
    for broken in ({**document, "state": "Done"}, {**document, "step": "12"}, {**document, "loss": True},
                   {k: v for k, v in document.items() if k != "message"}, ["not", "a", "document"]):
        assert contract.status_from_document(broken) is None, broken
    assert contract.parse_status_line("tfd-status: {not json") is None
    assert contract.read_status_file(tmp_path / "missing.json") is None


# -- the contract agrees with the chart --------------------------------------------------------------


@pytest.mark.parametrize("strategy", contract.STRATEGIES)
def test_each_strategy_renders_the_roles_the_contract_names(strategy: str) -> None:
    sets = [f"training.strategy={strategy}"]
    if strategy == contract.MULTI_WORKER_MIRRORED:
        sets.append("training.batchSize=63")
    docs = render(sets=sets)
    rendered = {
        doc["metadata"]["labels"][contract.COMPONENT_LABEL]
        for doc in docs
        if doc["kind"] in ("StatefulSet", "Job") and "helm.sh/hook" not in (doc["metadata"].get("annotations") or {})
    }
    assert rendered == set(contract.STRATEGY_ROLES[strategy])
    chief = next(doc for doc in docs if doc["metadata"]["name"].endswith(f"-{contract.CHIEF}") and doc["kind"] == "Job")
    env = {e["name"]: e.get("value") for e in chief["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert set(json.loads(env["TFD_CLUSTER"])) == set(contract.STRATEGY_ROLES[strategy]) & set(contract.CLUSTER_JOBS)
    assert f"--strategy={strategy}" in chief["spec"]["template"]["spec"]["containers"][0]["args"]  # the one switch
    statefulsets = {doc["metadata"]["labels"][contract.COMPONENT_LABEL] for doc in docs if doc["kind"] == "StatefulSet"}
    assert statefulsets == set(contract.STRATEGY_ROLES[strategy]) - {contract.CHIEF}
    selector = contract.release_selector("mnist")
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert all(labels.get(key) == value for key, value in (term.split("=") for term in selector.split(",")))


def test_every_annotation_and_label_the_chart_writes_is_named_in_the_contract() -> None:
    """The chart's templates spell the run's annotations, the Kubernetes labels and the API version tfchart renders
    the chart with literally; each must be one of tfdcontract's (any of its modules)."""
    modules = [contract, *(importlib.import_module(f"tfdcontract.{module.name}")
                           for module in pkgutil.iter_modules(contract.__path__))]  # fmt: skip
    named = {value for module in modules for key, value in vars(module).items()
             if key.endswith(("_ANNOTATION", "_LABEL", "_API_VERSION")) and isinstance(value, str)}  # fmt: skip
    templates = REPO / "charts" / "tf-distributed" / "templates"
    texts = [path.read_text() for path in templates.rglob("*") if path.is_file()]
    keys = r"\b(?:tf-distributed\.io|apps?\.kubernetes\.io|batch\.kubernetes\.io)/[a-z-]+"
    spelled = {name for text in texts for name in re.findall(keys, text)}
    assert {contract.RUN_SPEC_ANNOTATION, contract.VERSION_LABEL, contract.COMPLETION_INDEX_ANNOTATION} <= spelled
    assert spelled <= named, sorted(spelled - named)
