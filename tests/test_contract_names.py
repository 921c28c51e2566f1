"""Every TFD_* environment name is defined once, in tfdcontract/env.py: the chart renders exactly its RENDERED
names, the docs, values and examples name no other, and no code in tfchart/, trainer/, scripts/ or bench/ spells
one in a string (it imports the constant)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.chartlib import REPO
from tfdcontract import env

NAME = re.compile(r"\bTFD_[A-Z0-9_]*[A-Z0-9]")
SCANNED = ("tfchart", "trainer", "scripts", "bench")
CHART = REPO / "charts" / "tf-distributed"
#: Variables of the test and bench harness (set by .ci/run, the Makefile or the user, read by tests/, scripts/
#: and bench/ only): never in a chart's container nor read by the trainer, so not the cluster contract's.
HARNESS = {
    "TFD_TEST_CRDS": "the upstream CRDs the tests check against (tests/crds)",
    "TFD_KUBE_TRANSCRIPTS": "recorded API server exchanges the fake is checked against",
    "TFD_HELM_MAJORS": "which helm majors scripts/install_helm.sh installs",
    "TFD_TOOLS_DIR": "where the scripts install helm, kubectl and the container tools",
    "TFD_TEST_BASE_IMAGE": "the Python base image the image builds start from",
    "TFD_TEST_TENSORFLOW_BASE_IMAGE": "the TensorFlow base image of the same builds",
    "TFD_MNIST_NPZ": "a real mnist.npz for bench/large_input.py",
}
CONTRACT = {value for key, value in vars(env).items() if key.endswith("_ENV") and isinstance(value, str)}


def names_in(paths: list[Path]) -> dict[str, set[str]]:
    """name -> the files (relative to the repository) that spell it."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def spelled_in_code(source: str) -> list[tuple[int, str]]:
    """(line, name) of every TFD_* name inside a string constant that is not a docstring (f-string parts too)."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return sorted(
        (node.lineno, name)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        for name in NAME.findall(node.value)
    )


def test_the_contract_explains_every_name_it_defines() -> None:
    explained = env.RENDERED | set(env.NOT_RENDERED)
    assert explained == CONTRACT, sorted(CONTRACT ^ explained)
    assert not env.RENDERED & set(env.NOT_RENDERED)
    assert all(why.strip() for why in env.NOT_RENDERED.values())
    assert not CONTRACT & set(HARNESS)
    assert len(CONTRACT) == len([key for key in vars(env) if key.endswith("_ENV")]), "two constants, one name"


def test_the_chart_renders_exactly_the_contracts_names() -> None:
    rendered = names_in(sorted(path for path in (CHART / "templates").rglob("*") if path.is_file()))
    assert set(rendered) == env.RENDERED, {
        "rendered, not in tfdcontract.env.RENDERED": sorted(set(rendered) - env.RENDERED),
        "in RENDERED, not rendered": sorted(env.RENDERED - set(rendered)),
    }


def test_docs_values_and_examples_name_only_contract_or_harness_variables() -> None:
    folders = (REPO / "docs", CHART, REPO / "examples", REPO / "values")
    documents = [REPO / "README.md", *(path for folder in folders for path in folder.rglob("*") if path.is_file()
                                       and path.suffix in (".md", ".yaml", ".json", ".py", ".txt"))]  # fmt: skip
    named = names_in(sorted(documents))
    unknown = {name: sorted(files) for name, files in named.items() if name not in CONTRACT | set(HARNESS)}
    assert len(named) > 20 and not unknown, unknown


def test_no_code_spells_a_tfd_name() -> None:
    found = []
    for path in sorted(path for folder in SCANNED for path in (REPO / folder).rglob("*.py")):
        for line, name in spelled_in_code(path.read_text(encoding="utf-8")):
            if name not in HARNESS:
                fix = next((f"tfdcontract.env.{k}" for k, v in vars(env).items() if v == name and k.endswith("_ENV")),
                           "a new constant in tfdcontract/env.py")  # fmt: skip
                found.append(f"{path.relative_to(REPO)}:{line}: {name} (use {fix})")
    assert not found, "\n".join(found)


def test_the_scan_finds_a_spelled_name() -> None:
    """The scan's own check: a literal, an f-string's text and a message are found; a docstring is not."""
    source = ('"""Reads TFD_CLUSTER."""\nA = env["TFD_CLUSTER"]\nB = f"TFD_RUN_KIND={kind!r} is wrong"\n'
              'C = "set TFD_DEBUG=1"\nD = "TFD_X_"\n')  # fmt: skip
    assert spelled_in_code(source) == [(2, "TFD_CLUSTER"), (3, "TFD_RUN_KIND"), (4, "TFD_DEBUG"), (5, "TFD_X")]
