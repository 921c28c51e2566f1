"""Removes the column padding readme-generator-for-helm puts into the chart README's tables.

The generator aligns every cell of a table to its longest one, so one long description made every row
of its section 500 characters wide: unreadable in `helm show readme` and in a terminal. A row keeps
its cells, one space on either side of each `|`. `make docs` runs this after the generator, and
tests/chart/test_schema_and_docs.py does the same before comparing.

    python scripts/compact_tables.py charts/tf-distributed/README.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def compact(text: str) -> str:
    def row(line: str) -> str:
        if not line.startswith("|"):
            return line
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        cells = ["---" if re.fullmatch(r":?-+:?", cell) else cell for cell in cells]
        return "| " + " | ".join(cells) + " |"

    return "".join(row(line.rstrip("\r\n")) + line[len(line.rstrip("\r\n")) :] for line in text.splitlines(True))


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(compact(path.read_text()))
