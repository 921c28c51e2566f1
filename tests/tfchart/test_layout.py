"""The shape of tfchart: folders by concern, imports only in the allowed directions, no import circle,
a thin CLI, nothing of the trainer, and a size a newcomer can read.

    cli/  ->  local/  cluster/ (preflight/)  values/  images/
                 \\         |    (-> images/)  |
                  +----> helm/  manifests/  <-+      errors.py  (imported by all)
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.chartlib import REPO

PACKAGE = REPO / "tfchart"
# folder -> the folders its modules may import (besides itself and tfchart.errors)
ALLOWED = {
    "cli": {"helm", "values", "manifests", "cluster", "local", "images"},
    "local": {"helm", "values", "manifests", "images"},
    # preflight's image check asks registries through images/ (registry.py)
    "cluster": {"helm", "values", "manifests", "images"},
    "values": {"helm", "manifests"},
    "images": set(),
    "helm": set(),
    "manifests": set(),
}
# A limit, not a log: lowered as tfchart/ shrinks, never raised (issue 35's goal is 9,000).
MAX_LINES = 8959
MAX_MODULE_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def tfchart_imports(path: Path) -> set[str]:
    """The tfchart modules a module imports, at any depth of the file (function-level imports count)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("tfchart"):
            for alias in node.names:  # `from tfchart.x import y`: y is a module when tfchart/x/y.py exists
                candidate = f"{node.module}.{alias.name}"
                is_module = (REPO / candidate.replace(".", "/")).with_suffix(".py").is_file()
                found.add(candidate if is_module or (REPO / candidate.replace(".", "/")).is_dir() else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("tfchart")}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import of {package}")
    return found


def modules() -> dict[str, set[str]]:
    return {module_name(path): tfchart_imports(path) for path in PACKAGE.rglob("*.py")}


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir() else parts[-1]


def test_every_folder_imports_only_in_the_allowed_directions() -> None:
    crossings = []
    for module, imported in modules().items():
        here = folder(module)
        for target in imported:
            there = folder(target)
            if there in ("errors", "console", here, "tfchart") or here in ("__main__", "errors", "console", "tfchart"):
                continue
            if there not in ALLOWED.get(here, set()):
                crossings.append(f"{module} ({here}/) imports {target} ({there}/)")
    assert not crossings, "\n".join(sorted(crossings))
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert set(ALLOWED) == folders - {"chart"}  # tfchart/chart: the chart it ships (package data, no Python)


def test_no_import_circle() -> None:
    graph = modules()
    for start in graph:  # a depth-first search from every module, looking for a way back to it
        pending, seen = list(graph[start]), set()
        while pending:
            current = pending.pop()
            assert current != start, f"{start} imports itself through {sorted(seen)}"
            if current not in seen and current in graph:
                seen.add(current)
                pending.extend(graph[current])


def test_the_cli_is_thin_and_the_package_small() -> None:
    for path in (PACKAGE / "cli").glob("*.py"):
        lines = path.read_text().count("\n")
        assert lines < 250, f"{path.relative_to(REPO)} has {lines} lines: move work into the modules"
    total = sum(path.read_text().count("\n") for path in PACKAGE.rglob("*.py"))
    assert total <= MAX_LINES, f"tfchart/ has {total} lines of Python (at most {MAX_LINES})"


def test_no_module_is_over_400_lines() -> None:
    """Small modules with one job each, in tfchart/, the trainer and the shared contract package."""
    paths = [path for top in ("tfchart", "trainer", "tfdcontract") for path in sorted((REPO / top).rglob("*.py"))]
    long = [f"{p.relative_to(REPO)}: {n}" for p in paths if (n := p.read_text().count("\n")) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): " + ", ".join(long)


def test_nothing_imports_the_trainer() -> None:
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(name.split(".")[0] == "trainer" for name in names), f"{path} imports trainer"
