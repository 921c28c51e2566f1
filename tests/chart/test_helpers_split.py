"""The chart's named templates: split by concern, one calling convention.

A helper that needs only the root context takes it as is (``include "tf-distributed.fullname" .``);
one that needs more takes a dict with the root under "context", as Bitnami's common library does
(``include "tf-distributed.volumes" (dict "context" $ "component" .Values.worker "readOnly" true)``),
never a positional ``(list $ ...)`` whose elements only their order names.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.chartlib import CHART

TEMPLATES = CHART / "templates"
HELPER_FILES = sorted(TEMPLATES.glob("_*.tpl"))
ALL_FILES = sorted(p for p in TEMPLATES.rglob("*") if p.is_file())

CALL = re.compile(r'\b(?:include|template) "(tf-distributed\.[A-Za-z]+)" ?(\S+)')
DICT_CALL = re.compile(r'(?:include|template) "(tf-distributed\.[A-Za-z]+)" \(dict ("[A-Za-z]+")? ?(\S*)')
DEFINE = re.compile(r'\{\{-? ?define "(tf-distributed\.[A-Za-z]+)"')


def relative(path: Path) -> str:
    return str(path.relative_to(TEMPLATES))


def calls() -> list[tuple[str, int, str, str]]:
    """(file, line, helper, first token of its argument) of every include in every template."""
    found = []
    for path in ALL_FILES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in CALL.finditer(line):
                found.append((relative(path), number, match.group(1), match.group(2)))
    return found


def defines() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path in ALL_FILES:
        for name in DEFINE.findall(path.read_text()):
            where[name].append(relative(path))
    return where


def test_the_calls_are_found() -> None:
    found = calls()
    assert len(found) > 200
    assert {helper for _, _, helper, _ in found} >= {"tf-distributed.volumes", "tf-distributed.componentName"}


def test_no_template_calls_a_helper_with_a_positional_list() -> None:
    positional = [f"{file}:{line}: {helper} (list" for file, line, helper, arg in calls() if arg.startswith("(list")]
    assert positional == []
    # the same in any spelling, across line breaks too
    for path in ALL_FILES:
        text = re.sub(r"\s+", " ", path.read_text())
        assert not re.search(r'(?:include|template) "tf-distributed\.[A-Za-z]+" \(\s*list\b', text), relative(path)


def test_dict_arguments_carry_the_root_as_context() -> None:
    wrong = []
    for path in ALL_FILES:
        text = re.sub(r"\s+", " ", path.read_text())
        for match in DICT_CALL.finditer(text):
            if match.group(2) != '"context"' or match.group(3) not in (".", "$", "$root"):
                wrong.append(f"{relative(path)}: {match.group(0)}")
    assert wrong == []


def test_each_helper_has_one_calling_convention() -> None:
    styles: dict[str, set[str]] = defaultdict(set)
    for _, _, helper, arg in calls():
        styles[helper].add("dict" if arg.startswith("(dict") else "single")
    mixed = {helper: sorted(kinds) for helper, kinds in styles.items() if len(kinds) > 1}
    assert mixed == {}
    # the usage lines of the doc comments say the same as the calls
    for path in HELPER_FILES:
        for helper, arg in re.findall(r'Usage: include "(tf-distributed\.[A-Za-z]+)" (\S+)', path.read_text()):
            kind = "dict" if arg.startswith("(dict") else "single"
            assert styles.get(helper, {kind}) == {kind}, f"{relative(path)}: usage of {helper}"


def test_every_helper_is_defined_once_and_every_call_has_a_definition() -> None:
    where = defines()
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
    assert all(files[0].startswith("_") and files[0].endswith(".tpl") for files in where.values())
    undefined = sorted({helper for _, _, helper, _ in calls()} - set(where))
    assert undefined == []


def test_helpers_tpl_is_gone_or_an_index() -> None:
    helpers = TEMPLATES / "_helpers.tpl"
    if helpers.exists():
        text = helpers.read_text()
        assert not DEFINE.search(text)
        assert len(text.splitlines()) <= 40


@pytest.mark.parametrize(
    ("file", "helper"),
    [
        ("_names.tpl", "fullname"),
        ("_names.tpl", "componentName"),
        ("_names.tpl", "namespace"),
        ("_labels.tpl", "selectorLabels"),
        ("_labels.tpl", "metadata"),
        ("_labels.tpl", "podMetadata"),
        ("_images.tpl", "image"),
        ("_images.tpl", "imagePullPolicy"),
        ("_podspec.tpl", "podCommon"),
        ("_podspec.tpl", "volumes"),
        ("_podspec.tpl", "tfContainer"),
        ("_tfcluster.tpl", "clusterSpec"),
        ("_tfcluster.tpl", "prelude"),
        ("_tfcluster.tpl", "trainerArgs"),
        ("_storage.tpl", "claimPods"),
        ("_run.tpl", "runSpec"),
        ("_run.tpl", "supervisorEnv"),
        ("_scheduling.tpl", "gangPodMetadata"),
        ("_scheduling.tpl", "topologyPodAnnotations"),
    ],
)
def test_helpers_live_in_the_file_of_their_concern(file: str, helper: str) -> None:
    assert defines()[f"tf-distributed.{helper}"] == [file]


def test_no_helper_file_is_a_grab_bag() -> None:
    sizes = {relative(path): len(path.read_text().splitlines()) for path in HELPER_FILES}
    assert len(sizes) >= 8
    assert {name: size for name, size in sizes.items() if size > 350} == {}


def test_the_helm_test_pod_runs_the_trainer_module_not_an_inline_program() -> None:
    text = (TEMPLATES / "tests" / "test-endpoints.yaml").read_text()
    assert "trainer.endpoint_probe" in text
    assert "import " not in text and "- -c" not in text
