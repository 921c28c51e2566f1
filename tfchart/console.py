"""The one way tfchart makes a rich Console: output that is not a terminal (a pipe, a file, a CI log) is never
wrapped, whatever COLUMNS says, so a problem stays one line and a printed command can be pasted whole."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

UNWRAPPED_WIDTH = 10_000  # off a terminal: wide enough that no table cell folds and no line wraps


def console(stderr: bool = False) -> Console:
    """A Console on stdout (or stderr) that soft-wraps (the terminal folds long lines, copying keeps them whole);
    off a terminal it is as wide as any line, so tables keep each row on one line too."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    terminal = stream.isatty()
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=None if terminal else UNWRAPPED_WIDTH)
