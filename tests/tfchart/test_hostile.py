"""The hostile-input corpus (tests/tfchart/hostile.py) through `tfchart validate` with helm 3.17 and 4.1.

helm is the one source of truth for values, so for every case and both helm majors `tfchart validate`
on the tf-distributed chart must give `helm template`'s verdict on the same inputs, and when it rejects:

- name the key the case is about (hostile.Case.chart_key, else .key), in the problem's key path;
- locate a problem of a values file at that file (and its line where the key is in it);
- print no traceback, exit 1 (or 2 for a usage error);
- finish within 2 s (or twice helm's own time on the input plus 0.5 s, for the inputs helm itself is
  slow on) and 500 MB of peak memory, helm's processes included (wait4 of the process tree).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chartlib import CHART, HELM_MAJORS, helm_path
from tests.tfchart.hostile import TIME_LIMIT_S, Case, corpus, helm_env, measured, quietest, within_limits

CASES = corpus()


# -- inputs of a case ---------------------------------------------------------------------------------


@dataclass
class Prepared:
    args: list[str]  # -f and --set-family arguments, pipes as {fdN}
    stdin: bytes
    pipes: list[bytes]
    sets_in_process: list[tuple[str, str]]  # the --set family with a regular file for a --set-file pipe


def prepare(case: Case, where: Path) -> Prepared:
    """The command-line arguments for a case; pipes get fresh descriptors per process."""
    where.mkdir(parents=True, exist_ok=True)
    args: list[str] = []
    pipes: list[bytes] = []
    stdin = b""
    stdin_used = False
    for number, item in enumerate(case.files):
        if item.kind in ("file", "named"):
            path = where / (f"{number}-{item.name}" if item.kind == "file" else item.name)
            path.write_bytes(item.content)
            args += ["-f", str(path)]
        elif item.kind == "stdin":
            if not stdin_used:
                stdin, stdin_used = item.content, True
            args += ["-f", "-"]
        elif item.kind == "pipe":
            args += ["-f", f"/dev/fd/{{fd{len(pipes)}}}"]
            pipes.append(item.content)
        elif item.kind == "dir":
            (where / "a-directory").mkdir(exist_ok=True)
            args += ["-f", str(where / "a-directory")]
        else:
            args += ["-f", str(where / "missing.yaml")]
    sets_in_process: list[tuple[str, str]] = []
    for flag, argument in case.sets:
        in_process = argument
        if "{file}" in argument:
            path = where / "set-file.txt"
            path.write_bytes(case.set_file_content or b"")
            in_process = argument.replace("{file}", str(path))
            if case.set_file_pipe:
                argument = argument.replace("{file}", f"/dev/fd/{{fd{len(pipes)}}}")
                pipes.append(case.set_file_content or b"")
            else:
                argument = in_process
        args += [flag, argument]
        sets_in_process.append((flag, in_process))
    return Prepared(args, stdin, pipes, sets_in_process)


@pytest.mark.parametrize("major", HELM_MAJORS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_tfchart_validate_gives_helms_verdict_and_names_the_key(case: Case, major: str, tmp_path: Path) -> None:
    prepared = prepare(case, tmp_path / "inputs")
    helm = measured([str(helm_path(major)), "template", "x", str(CHART), *prepared.args], prepared.stdin,
                    prepared.pipes, env=helm_env())  # fmt: skip
    argv = [sys.executable, "-m", "tfchart", "--helm", str(helm_path(major)), "validate", "x", "-o", "json",
            *prepared.args]  # fmt: skip
    # a hang is 5 times the limit, helm's own time counted as the limit does: helm 3 spends 1.3 s on 10,000
    # --set list items, tfchart runs it twice, and on a loaded machine both take longer alike
    hang = 5 * max(TIME_LIMIT_S, 2 * helm.seconds + TIME_LIMIT_S / 2)
    validate = quietest(lambda: measured(argv, prepared.stdin, prepared.pipes, env=helm_env(), kill_after=hang))
    within_limits(validate, f"tfchart validate ({case.name}, helm {major})", helm)
    said = (f"helm rc={helm.returncode}: {helm.stderr.decode(errors='replace')[-600:]}\n"
            f"tfchart rc={validate.returncode}: {(validate.stdout + validate.stderr).decode(errors='replace')[-1500:]}")
    assert (validate.returncode == 0) == (helm.returncode == 0), f"verdicts differ:\n{said}"
    if validate.returncode == 0:
        return
    if validate.returncode == 2 or not validate.stdout:  # not about values (an unreadable input): one line
        errors = [line for line in validate.stderr.decode().splitlines() if line.startswith("error:")]
        assert len(errors) == 1, said
        return
    report = json.loads(validate.stdout)
    assert not report["valid"] and report["problems"], said
    key = case.chart_key or case.key
    unreadable = b"failed to parse " in helm.stderr  # helm refused a values file as YAML: it names no key
    if key:  # in the problem's key path, in the --set argument helm's parser refused, or the unreadable file
        assert any(p["path"] == key or p["path"].startswith(key + ".")
                   or (p["path"] == "(root)" and key in (p["file"] or ""))
                   or (unreadable and p["path"] == "(root)" and p["file"]) for p in report["problems"]), said
    from_files = [item for item in case.files if item.kind in ("file", "named", "stdin", "pipe")]
    if from_files and not case.sets and key and not unreadable:
        named = next(p for p in report["problems"] if p["path"] == key or p["path"].startswith(key + "."))
        assert named["file"] and named["line"], f"no file:line for {key}:\n{said}"


def test_the_corpus_covers_what_the_issue_lists() -> None:
    names = {case.name for case in CASES}
    for wanted in ("alias-bomb", "deep-flow-10001", "stdin-twice", "process-substitution", "set-index-over-limit",
                   "set-json-object", "set-file-pipe", "helm4-drops-last-line", "utf16-with-bom"):  # fmt: skip
        assert wanted in names


def test_the_peak_memory_measured_is_the_commands_own() -> None:
    # the kernel would hand a child its parent's high-water mark: this test process holds 300 MB
    held = bytearray(300 * 2**20)
    held[:: 4096] = b"\1" * len(held[:: 4096])
    small = measured([sys.executable, "-c", "pass"])
    large = measured([sys.executable, "-c", "x = bytearray(150 * 2**20); x[::4096] = b'1' * len(x[::4096])"])
    assert small.returncode == large.returncode == 0
    assert small.max_rss_mb < 50, small.max_rss_mb
    assert 150 <= large.max_rss_mb < 250, large.max_rss_mb
    del held
