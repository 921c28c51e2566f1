"""The doc-command check itself: it finds the commands a Markdown document shows, passes the ones that
work and names, by file and line, one that stopped working."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.doccommands import (
    RUN,
    SKIP,
    Command,
    Rule,
    commands_in,
    fresh_copy,
    inline_commands,
    is_whole_command,
    option_problems,
    problems,
    refusing_kubeconfig,
    verdict,
)

DOCUMENT = """\
# Trying it

```bash
tfchart validate -f values/cpu.yaml      # works
tfchart validate -f values/gpu.yaml \\
  --set worker.replicas=2                # stops working below
tfchart images -f values/cpu.yaml --no-such-flag
```

```text
$ tfchart validate -f values/cpu.yaml
✗ 1 problem in values
```
"""


@pytest.fixture
def copy_with_document(tmp_path: Path) -> Path:
    copy = fresh_copy(tmp_path)
    (copy / "TRYING.md").write_text(DOCUMENT, encoding="utf-8")
    return copy


def test_commands_are_taken_from_the_markdown_with_their_lines(copy_with_document: Path) -> None:
    found = commands_in(copy_with_document / "TRYING.md", copy_with_document)
    assert [(c.where, c.text) for c in found] == [
        ("TRYING.md:4", "tfchart validate -f values/cpu.yaml"),
        ("TRYING.md:5", "tfchart validate -f values/gpu.yaml --set worker.replicas=2"),
        ("TRYING.md:7", "tfchart images -f values/cpu.yaml --no-such-flag"),
        ("TRYING.md:11", "tfchart validate -f values/cpu.yaml"),
    ]
    assert found[3].shown == ("✗ 1 problem in values",) and found[3].expected_exit == 1


def test_a_working_command_passes_and_one_that_stops_working_is_named_by_file_and_line(
    copy_with_document: Path,
) -> None:
    works, breaks, _, _ = commands_in(copy_with_document / "TRYING.md", copy_with_document)
    assert problems(works, copy_with_document) == []
    assert problems(breaks, copy_with_document) == []
    values = copy_with_document / "values" / "gpu.yaml"
    values.write_text(values.read_text().replace("strategy: parameter_server", "strategy: master"))
    assert problems(works, copy_with_document) == []
    (reported,) = problems(breaks, copy_with_document)
    assert reported.startswith("TRYING.md:5: `tfchart validate -f values/gpu.yaml --set worker.replicas=2` exited 1")
    assert "training.strategy" in reported


def test_an_unknown_flag_and_an_exit_the_document_does_not_show_are_reported(copy_with_document: Path) -> None:
    _, _, unknown_flag, transcript = commands_in(copy_with_document / "TRYING.md", copy_with_document)
    (reported,) = problems(unknown_flag, copy_with_document)
    assert reported.startswith("TRYING.md:7: ") and "exited 2" in reported and "--no-such-flag" in reported
    reported_lines = problems(transcript, copy_with_document)
    assert reported_lines[0].startswith("TRYING.md:11: ") and "exited 0, the document expects 1" in reported_lines[0]
    assert "does not print the line the document shows:\n  ✗ 1 problem in values" in reported_lines[1]


def test_shown_output_with_an_ellipsis_matches_what_it_leaves_out(tmp_path: Path) -> None:
    command = Command("X.md", 1, "printf 'one two three\\nfour\\n'", ("one ... three", "...", "four"))
    assert problems(command, tmp_path) == []
    lying = Command("X.md", 1, "printf 'one two three\\n'", ("one ... four",))
    assert "X.md:1: " in problems(lying, tmp_path)[0]


def test_a_command_no_rule_decides_about_is_left_for_the_test_to_report() -> None:
    rules = (Rule(r"tfchart validate\b", RUN, "renders"), Rule(r"kubectl\b", SKIP, "needs a cluster"))
    assert verdict(Command("X.md", 1, "tfchart validate -f v.yaml"), rules) == rules[0]
    assert verdict(Command("X.md", 2, "kubectl get pods"), rules) == rules[1]
    assert verdict(Command("X.md", 3, "rm -rf build"), rules) is None


def test_comments_continuations_loops_and_prompts(tmp_path: Path) -> None:
    document = tmp_path / "D.md"
    document.write_text(
        "```sh\n"
        "echo '# not a comment' # a comment\n"
        "\n"
        "for name in a b; do\n"
        "  echo \"$name\"\n"
        "done\n"
        "cat <<EOF\n"
        "  # kept: a here-document is the command's\n"
        "EOF\n"
        "```\n"
        "```console\n"
        "$ echo one \\\n"
        "> two\n"
        "one two\n"
        "$ true\n"
        "```\n"
        "```yaml\n"
        "key: value  # not a command\n"
        "```\n",
        encoding="utf-8",
    )
    found = commands_in(document, tmp_path)
    assert [(c.line, c.text, c.shown) for c in found] == [
        (2, "echo '# not a comment'", ()),
        (4, 'for name in a b; do\necho "$name"\ndone', ()),
        (7, "cat <<EOF\n  # kept: a here-document is the command's\nEOF", ()),
        (12, "echo one two", ("one two",)),
        (15, "true", ()),
    ]


def test_options_targets_and_scripts_that_do_not_exist_are_named(tmp_path: Path) -> None:
    copy = fresh_copy(tmp_path)
    lying = Command("X.md", 3, "tfchart logs mnist --folow && make runn && python bench/run.py --onlyy "
                               "&& python -m trainer --train-stepz 3 && helm install mnist . --crate-namespace")
    text = lying.text
    assert option_problems(lying, copy) == [
        f"X.md:3: `{text}`: `tfchart logs mnist` has no option --folow",
        f"X.md:3: `{text}`: the Makefile has no target runn",
        f"X.md:3: `{text}`: bench/run.py has no option --onlyy",
        f"X.md:3: `{text}`: trainer has no option --train-stepz",
        f"X.md:3: `{text}`: `helm install mnist` has no option --crate-namespace",
    ]
    truthful = Command("X.md", 4, "tfchart logs mnist -n ml --role worker --index 1 --follow && make run && "
                                  "python bench/run.py --only B3 && helm install mnist . --create-namespace")
    assert option_problems(truthful, copy) == []


def test_a_cluster_command_passes_when_only_the_cluster_is_missing(tmp_path: Path) -> None:
    copy = fresh_copy(tmp_path)
    reaches = Command("X.md", 1, "helm install mnist charts/tf-distributed -f values/cpu.yaml -n ml-training")
    missing_file = Command("X.md", 2, "helm install mnist charts/tf-distributed -f values/nope.yaml")
    refused_values = Command("X.md", 3, "tfchart install mnist -f values/cpu.yaml --set ps.replicas=-1")
    with refusing_kubeconfig(tmp_path) as no_cluster:
        assert problems(reaches, copy, no_cluster) == []
        (reported,) = problems(missing_file, copy, no_cluster)
        assert reported.startswith("X.md:2: `helm install mnist charts/tf-distributed -f values/nope.yaml` did not "
                                   "get as far as asking the cluster") and "values/nope.yaml" in reported
        (reported,) = problems(refused_values, copy, no_cluster)
        assert reported.startswith("X.md:3: ") and "ps.replicas" in reported


def test_a_command_in_running_text_is_run_when_it_is_whole(tmp_path: Path) -> None:
    """bench/RESULTS.md once said `tfchart validate values/gpu.yaml` (a release named values/gpu.yaml)."""
    copy = fresh_copy(tmp_path)
    (copy / "B.md").write_text(
        "B3 measures `tfchart validate values/gpu.yaml` against `helm lint charts/tf-distributed -f values/gpu.yaml`;\n"
        "`tfchart validate -f FILE` and `helm template --dry-run=server` are placeholders, not commands.\n",
        encoding="utf-8")
    spans = inline_commands(copy / "B.md", copy)
    assert [(c.where, c.text, is_whole_command(c, copy)) for c in spans] == [
        ("B.md:1", "tfchart validate values/gpu.yaml", True),
        ("B.md:1", "helm lint charts/tf-distributed -f values/gpu.yaml", True),
        ("B.md:2", "tfchart validate -f FILE", False),
        ("B.md:2", "helm template --dry-run=server", False),
    ]
    (reported,) = problems(spans[0], copy)
    assert reported.startswith("B.md:1: `tfchart validate values/gpu.yaml` exited 2")
    assert "is a values file, not a release name or a chart: pass it with -f values/gpu.yaml" in reported
    assert problems(spans[1], copy) == []
