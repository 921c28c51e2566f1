"""Values inputs read exactly once, as helm reads them: -f files, pipes, process substitution, `-`.

helm parses every -f/--set-file argument as a URL first and reads `-` (standard input) with
io.ReadAll, so a second `-` reads nothing; a pipe can only be read once, so helm gets a private
copy of what tfchart read. Line lookups for error messages use the same bytes.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tfchart.errors import UsageError

MAX_INPUT_BYTES = 64 * 1024 * 1024  # a pipe or device that never ends (/dev/zero) is refused past this


@dataclass(frozen=True)
class Source:
    """One values input read once: a file, a pipe (process substitution), or standard input."""

    name: str  # as given on the command line, for messages
    data: bytes
    helm_path: str  # what helm is given: the path itself, or a private copy of what was read


class Inputs:
    """Reads every -f file and --set-file path exactly once, in helm's order.

    helm reads `-` (standard input) with io.ReadAll, so a second `-` reads nothing; pipes and
    /dev/fd/N (process substitution) can only be read once, so helm gets a private copy of what was
    read (a 0600 file removed at exit). Regular files are passed to helm by their own path.
    """

    def __init__(self, stdin: BinaryIO | None = None) -> None:
        self._stdin = stdin
        self._stdin_read = False
        self._copies: Path | None = None
        self.set_files: list[Source] = []  # --set-file paths, in the order read

    def read(self, name: str, what: str = "values file", flag: str = "-f/--values") -> Source:
        """Reads `name` now, as helm would at this point (a pipe read twice is empty the second time)."""
        if name.strip() == "-":
            return self._read_stdin(name)
        return self._read_path(name, what, flag)

    def _read_stdin(self, name: str) -> Source:
        if self._stdin_read:
            data = b""  # helm's io.ReadAll(os.Stdin) a second time: nothing left
        else:
            self._stdin_read = True
            stream = self._stdin if self._stdin is not None else sys.stdin.buffer
            data = _read_capped(stream, "standard input")
        return Source(name, data, self._private_copy("stdin", data))

    def _read_path(self, name: str, what: str, flag: str) -> Source:
        _check_helm_path(name, what, flag)
        try:
            info = os.stat(name)
        except FileNotFoundError:
            raise UsageError(f"{what} not found: {name}", f"check the path given to {flag}") from None
        except OSError as error:
            raise UsageError(
                f"cannot read {what} {name}: {error.strerror}", f"check the path given to {flag}"
            ) from None
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(
                f"{what} {name} is a directory", f"pass a file to {flag}, e.g. {name.rstrip('/')}/values.yaml"
            )
        try:
            with open(name, "rb") as stream:
                data = _read_capped(stream, name)
        except OSError as error:
            raise UsageError(
                f"cannot read {what} {name}: {error.strerror}", f"check the path given to {flag}"
            ) from None
        if stat.S_ISREG(info.st_mode):
            return Source(name, data, name)
        kind = "pipe" if stat.S_ISFIFO(info.st_mode) else "input"
        return Source(name, data, self._private_copy(f"{kind}-{Path(name).name}", data))

    def _private_copy(self, label: str, data: bytes) -> str:
        if self._copies is None:
            self._copies = Path(tempfile.mkdtemp(prefix="tfchart-values-"))
            atexit.register(shutil.rmtree, self._copies, True)
        path = self._copies / f"{len(list(self._copies.iterdir())) + 1}-{re.sub(r'[^A-Za-z0-9_.-]', '_', label)}.yaml"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return str(path)


def _read_capped(stream: BinaryIO, name: str) -> bytes:
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(
            f"{name} is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB: not a values file",
            "pass a values file (a YAML map of keys)",
        )
    return data


_URL_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def _check_helm_path(name: str, what: str, flag: str) -> None:
    """Paths helm cannot open: it parses every -f/--set-file argument as a URL first (net/url)."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in name):
        raise UsageError(
            f"{what} {name!r} has a control character: helm refuses it (net/url: invalid control character in URL)",
            "rename the file",
        )
    if _URL_ESCAPE.search(name.split("#", 1)[0].split("?", 1)[0]):
        raise UsageError(
            f"{what} {name}: helm reads it as a URL and refuses the % that is not followed by two hex digits",
            "rename the file without %, or write % as %25",
        )
    scheme = _URL_SCHEME.match(name)
    if scheme and scheme.group(1).lower() in ("http", "https", "oci"):
        raise UsageError(
            f"{what} {name} is a URL: tfchart validates local files only", f"download it and pass the file to {flag}"
        )
    if not scheme and ":" in name.split("/", 1)[0]:
        raise UsageError(
            f"{what} {name}: helm reads it as a URL and refuses a colon in the first path segment",
            f"pass it as ./{name}",
        )


