"""Every command README.md, docs/, the chart README, bench/RESULTS.md and examples/ show is run from a
fresh copy of the repository, or skipped for a reason tests/docs/doccommands.py names; a test per
command, named by its document and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.doccommands import (
    REPO,
    RUN,
    Command,
    commands_in,
    documents,
    fenced_blocks,
    fresh_copy,
    inline_commands,
    option_problems,
    problems,
    verdict,
)

COMMANDS = [command for document in documents() for command in commands_in(document)]
RUNNABLE = [command for command in COMMANDS if (rule := verdict(command)) and rule.verdict == RUN]


@pytest.fixture(scope="module")
def repository_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_copy(tmp_path_factory.mktemp("repository"))


def test_every_documented_command_is_run_or_skipped_for_a_named_reason() -> None:
    undecided = [f"{command.where}: {command.text}" for command in COMMANDS if verdict(command) is None]
    assert not undecided, (
        "commands no rule of RULES in tests/docs/doccommands.py runs or skips (add one, with its reason):\n"
        + "\n".join(undecided))
    assert len(RUNNABLE) >= 10, "the documents' commands were not found: has the extraction broken?"


@pytest.mark.parametrize("command", RUNNABLE, ids=lambda command: command.where)
def test_documented_command_does_what_the_document_says(command: Command, repository_copy: Path) -> None:
    found = problems(command, repository_copy)
    assert not found, "\n".join(found)


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
