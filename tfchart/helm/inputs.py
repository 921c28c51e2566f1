"""The user's values inputs as helm gets them: -f files and the --set family, in command-line order.

helm reads every input itself. Only what can be read once (standard input `-`, a pipe such as bash's
process substitution) is read here first and handed to helm as a private copy, so that every helm
call of a command (render, values, origins) and the file:line lookups see the same bytes.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tfchart.errors import UsageError
from tfchart.helm.chart import private_folder

MAX_INPUT_BYTES = 64 * 1024 * 1024  # a pipe that never ends (/dev/zero) is refused past this
SET_FLAGS = ("--set-json", "--set", "--set-string", "--set-file")  # the order helm applies them in


@dataclass(frozen=True)
class ValuesFile:
    """One -f argument: `name` as given, `path` what helm reads (the file itself, or the private copy)."""

    name: str
    path: str


@dataclass
class Inputs:
    """-f files and --set-family arguments as helm gets them, once-only inputs copied."""

    files: list[ValuesFile] = field(default_factory=list)
    sets: list[tuple[str, str]] = field(default_factory=list)  # (flag, argument) in command-line order

    def args(self) -> list[str]:
        """helm's arguments for these inputs; helm applies the files, then each --set flag in SET_FLAGS order."""
        return [*(arg for file in self.files for arg in ("--values", file.path)),
                *(arg for flag, argument in self.sets for arg in (flag, argument))]  # fmt: skip

    def with_sets(self, extra: list[tuple[str, str]]) -> Inputs:
        """These inputs and `extra` --set-family arguments after them."""
        return Inputs(self.files, [*self.sets, *extra])

    def applied(self) -> list[tuple[str, str]]:
        """The --set family in the order helm applies it (later ones win)."""
        return sorted(self.sets, key=lambda item: SET_FLAGS.index(item[0]))  # stable: command-line order per flag


def read(files: list[str], sets: list[tuple[str, str]], stdin: BinaryIO | None = None,
         chart_dir: Path | None = None) -> Inputs:  # fmt: skip
    """The inputs, with standard input and pipes read now (once, in command-line order). A relative -f path that
    names nothing here but a file of the chart (`values/gpu.yaml`, the ready files it ships) reads the chart's."""
    copier = _Copier(stdin)
    inputs = Inputs([ValuesFile(name, copier.path_for(_shipped(name, chart_dir))) for name in files])
    for flag, argument in sets:
        key, _, path = argument.partition("=")
        if flag == "--set-file" and path and _once_only(path):
            argument = f"{key}={copier.path_for(path)}"
        inputs.sets.append((flag, argument))
    return inputs


def _shipped(name: str, chart_dir: Path | None) -> str:
    if chart_dir is None or name.strip() == "-" or os.path.isabs(name) or os.path.lexists(name):
        return name
    return str(chart_dir / name) if (chart_dir / name).is_file() else name


def _once_only(name: str) -> bool:
    if name.strip() == "-":
        return True
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return False  # missing or unreadable: helm says so in its words
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


class _Copier:
    def __init__(self, stdin: BinaryIO | None) -> None:
        self.stdin, self.stdin_read = stdin, False
        self.folder: Path | None = None

    def path_for(self, name: str) -> str:
        if not _once_only(name):
            return name
        if name.strip() == "-":
            data = b"" if self.stdin_read else _read_capped(self.stdin or sys.stdin.buffer, "standard input")
            self.stdin_read = True  # helm reads `-` with io.ReadAll: a second `-` reads nothing
        else:
            try:
                with open(name, "rb") as stream:
                    data = _read_capped(stream, name)
            except OSError as error:
                raise UsageError(f"cannot read {name}: {error.strerror}", "check the path of -f/--set-file") from None
        self.folder = self.folder or private_folder("tfchart-values-")
        copy = self.folder / f"{len(list(self.folder.iterdir())) + 1}.yaml"
        with os.fdopen(os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            out.write(data)
        return str(copy)


def _read_capped(stream: BinaryIO, name: str) -> bytes:
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{name} is larger than {MAX_INPUT_BYTES >> 20} MiB: not a values file", "pass a values file")
    return data
