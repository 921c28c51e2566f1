"""The hostile-input corpus (tests/tfchart/hostile.py) through `tfchart validate` with helm 3.17 and 4.1.

helm is the one source of truth for values, so for every case and both helm majors `tfchart validate`
on the tf-distributed chart must give `helm template`'s verdict on the same inputs, and when it rejects:

- name the key the case is about (hostile.Case.chart_key, else .key), in the problem's key path;
- locate a problem of a values file at that file (and its line where the key is in it);
- print no traceback, exit 1 (or 2 for a usage error);
- finish within 2 s (or helm's own time on the input plus 1 s, for the inputs helm itself spends a
  second on) and 500 MB of peak memory, helm's processes included (wait4 of the process tree).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chartlib import CHART, HELM_MAJORS, REPO, helm_path
from tests.tfchart.hostile import Case, Measured, corpus

CASES = corpus()
TIME_LIMIT_S = 2.0
MEMORY_LIMIT = 500 * 1024 * 1024


# -- running processes under measurement -------------------------------------------------------------


def measured(
    argv: list[str],
    stdin: bytes = b"",
    pipes: list[bytes] | None = None,
    env: dict[str, str] | None = None,
) -> Measured:
    """Runs argv with `pipes` as /dev/fd/N (already in argv as {fdN}), measuring time and peak RSS."""
    read_ends: list[int] = []
    writers: list[threading.Thread] = []
    for content in pipes or []:
        read_end, write_end = os.pipe()
        read_ends.append(read_end)

        def write(fd: int = write_end, data: bytes = content) -> None:
            try:
                _write_all(fd, data)
            except BrokenPipeError:
                pass
            finally:
                os.close(fd)

        writers.append(threading.Thread(target=write, daemon=True))
    for number, fd in enumerate(read_ends):
        argv = [arg.replace(f"{{fd{number}}}", str(fd)) for arg in argv]

    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=tuple(read_ends),
        cwd=REPO,
        env=env,
    )
    for fd in read_ends:
        os.close(fd)
    for writer in writers:
        writer.start()
    out: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=lambda name=name, stream=stream: out.__setitem__(name, stream.read()), daemon=True)
        for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))
    ]
    for reader in readers:
        reader.start()
    assert process.stdin is not None
    try:
        process.stdin.write(stdin)
        process.stdin.close()
    except BrokenPipeError:
        pass
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        process.kill()

    timer = threading.Timer(TIME_LIMIT_S * 5, kill)
    timer.start()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.monotonic() - started
    timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    return Measured(
        process.returncode,
        out.get("stdout", b""),
        out.get("stderr", b""),
        elapsed,
        usage.ru_maxrss / 1024,
        timed_out.is_set(),
        cpu_seconds=usage.ru_utime + usage.ru_stime,
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


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


def helm_env() -> dict[str, str]:
    tools = REPO / ".tools"
    return {**os.environ, "HELM_CACHE_HOME": str(tools / "helm-cache"), "HELM_CONFIG_HOME": str(tools / "helm-config")}


def quietest(measure: Callable[[], Measured], wall_limit: float = TIME_LIMIT_S) -> Measured:
    """One run, or two when the first is over a time limit: CPU seconds inflate by half and more
    when other jobs share the 2 cores (helm 3 alone spends ~1 s on the deepest documents), so a time
    limit counts the quieter of two readings. Memory and correctness count on every run."""
    first = measure()
    if first.timed_out or (first.cpu_seconds <= TIME_LIMIT_S and first.seconds <= wall_limit):
        return first
    second = measure()
    assert second.returncode == first.returncode and second.stdout == first.stdout, "a rerun answered differently"
    return min(first, second, key=lambda run: run.cpu_seconds)


def within_limits(run: Measured, what: str, wall_limit: float = TIME_LIMIT_S, helm_cpu: float = 0.0) -> None:
    """`helm_cpu`: what helm itself spent on the same input in this run; `tfchart template` runs
    helm, so its CPU limit is helm's own plus TIME_LIMIT_S / 2 where that is more than TIME_LIMIT_S
    (helm 3 alone spends 1-1.6 s on the deepest documents, depending on the machine)."""
    assert not run.timed_out, f"{what} did not finish"
    cpu_limit = max(TIME_LIMIT_S, helm_cpu + TIME_LIMIT_S / 2)
    assert run.cpu_seconds <= cpu_limit, f"{what} used {run.cpu_seconds:.2f} s of CPU (limit {cpu_limit:.2f} s)"
    assert run.seconds <= wall_limit, f"{what} took {run.seconds:.2f} s"
    assert run.max_rss_mb <= MEMORY_LIMIT / 2**20, f"{what} used {run.max_rss_mb:.0f} MB"
    stderr = run.stderr.decode(errors="replace")
    assert "Traceback" not in stderr and "MemoryError" not in stderr, f"{what}:\n{stderr}"
    assert run.returncode in (0, 1, 2), f"{what} exited {run.returncode}:\n{stderr}"


@pytest.mark.parametrize("major", HELM_MAJORS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_tfchart_validate_gives_helms_verdict_and_names_the_key(case: Case, major: str, tmp_path: Path) -> None:
    prepared = prepare(case, tmp_path / "inputs")
    helm = measured([str(helm_path(major)), "template", "x", str(CHART), *prepared.args], prepared.stdin,
                    prepared.pipes, env=helm_env())  # fmt: skip
    argv = [sys.executable, "-m", "tfchart", "--helm", str(helm_path(major)), "validate", "x", "-o", "json",
            *prepared.args]  # fmt: skip
    validate = quietest(lambda: measured(argv, prepared.stdin, prepared.pipes, env=helm_env()))
    within_limits(validate, f"tfchart validate ({case.name}, helm {major})", helm_cpu=helm.cpu_seconds)
    said = f"helm rc={helm.returncode}: {helm.stderr.decode(errors='replace')[-600:]}\ntfchart rc={validate.returncode}: "
    said += (validate.stdout + validate.stderr).decode(errors="replace")[-1500:]
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
    if key:
        assert any(p["path"] == key or p["path"].startswith(key + ".") for p in report["problems"]), said
    from_files = [item for item in case.files if item.kind in ("file", "named", "stdin", "pipe")]
    if from_files and not case.sets and key:
        named = next(p for p in report["problems"] if p["path"] == key or p["path"].startswith(key + "."))
        assert named["file"] and named["line"], f"no file:line for {key}:\n{said}"


def test_the_corpus_covers_what_the_issue_lists() -> None:
    names = {case.name for case in CASES}
    for wanted in ("alias-bomb", "deep-flow-10001", "stdin-twice", "process-substitution", "set-index-over-limit",
                   "set-json-object", "set-file-pipe", "helm4-drops-last-line", "utf16-with-bom"):  # fmt: skip
        assert wanted in names
