"""Every command README.md, docs/, the chart README, bench/RESULTS.md and examples/ show is run from a
fresh copy of the repository, or skipped for a reason tests/docs/doccommands.py names; a test per
command, named by its document and line."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docs.doccommands import (
    NO_CLUSTER,
    REPO,
    RUN,
    SKIP,
    Command,
    commands_in,
    documents,
    fenced_blocks,
    fresh_copy,
    inline_commands,
    is_whole_command,
    notes_commands,
    option_problems,
    problems,
    refusing_kubeconfig,
    verdict,
)

COMMANDS = [command for document in documents() for command in commands_in(document)]
COMMANDS += [command for document in documents() for command in inline_commands(document) if is_whole_command(command)]


def distinct(verdict_wanted: str) -> list[list[Command]]:
    """The commands of one verdict, the same command and shown output once (the README's tour is also
    docs/cli.md's): each group is run once, its first place naming the test, every place in a failure."""
    groups: dict[tuple[str, tuple[str, ...]], list[Command]] = {}
    for command in COMMANDS:
        if (rule := verdict(command)) and rule.verdict == verdict_wanted:
            groups.setdefault((command.text, command.shown), []).append(command)
    return list(groups.values())


def places(group: list[Command]) -> str:
    return "" if len(group) == 1 else "\nthe same command is at " + ", ".join(c.where for c in group[1:])


RUNNABLE = distinct(RUN)
ASKING_A_CLUSTER = distinct(NO_CLUSTER)


@pytest.fixture(scope="module")
def repository_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_copy(tmp_path_factory.mktemp("repository"))


def test_every_documented_command_is_run_or_skipped_for_a_named_reason() -> None:
    undecided = [f"{command.where}: {command.text}" for command in COMMANDS if verdict(command) is None]
    assert not undecided, (
        "commands no rule of RULES in tests/docs/doccommands.py runs or skips (add one, with its reason):\n"
        + "\n".join(undecided))
    assert len(RUNNABLE) >= 10, "the documents' commands were not found: has the extraction broken?"


@pytest.fixture(scope="module")
def outcomes(repository_copy: Path) -> Iterator[dict[int, list[str]]]:
    """The problems of every group, by id(): the commands only read the copy, so they run side by side
    (one per core), and each test below reads its own."""
    with refusing_kubeconfig(repository_copy) as no_cluster, ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        runs = {id(group): pool.submit(problems, group[0], repository_copy) for group in RUNNABLE}
        runs |= {id(group): pool.submit(problems, group[0], repository_copy, no_cluster) for group in ASKING_A_CLUSTER}
        yield {key: run.result() for key, run in runs.items()}


@pytest.mark.parametrize("group", RUNNABLE, ids=lambda group: group[0].where)
def test_documented_command_does_what_the_document_says(
    group: list[Command], outcomes: dict[int, list[str]]
) -> None:
    assert not outcomes[id(group)], "\n".join(outcomes[id(group)]) + places(group)


@pytest.mark.parametrize("group", ASKING_A_CLUSTER, ids=lambda group: group[0].where)
def test_documented_cluster_command_gets_as_far_as_the_cluster(
    group: list[Command], outcomes: dict[int, list[str]]
) -> None:
    assert not outcomes[id(group)], "\n".join(outcomes[id(group)]) + places(group)


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(REPO)))
def test_a_block_that_names_a_file_is_that_file(document: Path) -> None:
    """`<!-- file: PATH -->` just before a fenced block says the block is PATH, word for word."""
    text = document.read_text(encoding="utf-8")
    lines = text.splitlines()
    for block in fenced_blocks(text):
        marker = next((line for line in reversed(lines[: block.start - 1]) if line.strip()), "")
        if marker.startswith("<!-- file: "):
            named = REPO / marker.removeprefix("<!-- file: ").removesuffix("-->").strip()
            shown = "".join(line + "\n" for _, line in block.lines)
            assert named.is_file(), f"{document.name}:{block.start}: {named} does not exist"
            assert shown == named.read_text(encoding="utf-8"), (
                f"{document.name}:{block.start}: the block is not {named.relative_to(REPO)} as it is")


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_command_names_options_targets_and_scripts_that_exist(document: Path, repository_copy: Path) -> None:
    """Skipped commands and the commands written in running text too: a misspelt or removed option,
    make target or benchmark script is a lie even where the command cannot run here."""
    found = [problem for command in [*commands_in(document), *inline_commands(document)]
             for problem in option_problems(command, repository_copy)]
    assert not found, "\n".join(found)


def test_the_commands_the_chart_notes_print_work_or_reach_the_cluster(repository_copy: Path) -> None:
    """NOTES.txt is documentation too: what it tells a user to type after `helm install`."""
    commands = notes_commands(repository_copy)
    assert {command.text.split()[0] for command in commands} == {"kubectl", "tfchart", "helm", "curl"}
    found = [problem for command in commands for problem in option_problems(command, repository_copy)]
    with refusing_kubeconfig(repository_copy) as no_cluster:
        for command in commands:
            rule = verdict(command)
            assert rule is not None, f"{command.where}: no rule of tests/docs/doccommands.py decides `{command.text}`"
            if rule.verdict != SKIP:
                found += problems(command, repository_copy, no_cluster if rule.verdict == NO_CLUSTER else None)
    assert not found, "\n".join(found)
