"""The shape of tfchart: a thin CLI over modules that do one job each; no command module reaches into
another command's module (shared pieces live in modules of their own), and nothing imports trainer."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.chartlib import REPO

PACKAGE = REPO / "tfchart"
# The modules behind each command; a command may span several (local runs as processes or containers).
COMMANDS = {
    "validate": {"validate"},
    "install/upgrade/uninstall": {"release"},
    "build": {"images"},
    "images": {"imagelist"},
    "local": {"local", "containers"},
    "status": {"status", "status_view"},
    "logs": {"logs"},
    "preflight": {"preflight"},
    "stop": {"stop"},
}


def imports_of(path: Path) -> set[str]:
    """tfchart modules (and top-level packages) a module imports, at any depth of the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "tfchart":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("tfchart."):
                found.add(node.module.split(".")[1])
            else:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] if alias.name.startswith("tfchart.") else alias.name.split(".")[0]
                      for alias in node.names}
    return found


def test_the_cli_is_thin() -> None:
    lines = (PACKAGE / "cli.py").read_text().count("\n")
    assert lines < 350, f"tfchart/cli.py has {lines} lines: move work into the modules"


def test_no_command_module_imports_another_commands_module() -> None:
    owner = {module: command for command, modules in COMMANDS.items() for module in modules}
    crossings = []
    for module, command in owner.items():
        for imported in imports_of(PACKAGE / f"{module}.py"):
            if imported in owner and owner[imported] != command:
                crossings.append(f"tfchart/{module}.py ({command}) imports tfchart.{imported} ({owner[imported]})")
    assert not crossings, "\n".join(crossings)


def test_every_module_is_placed_and_none_imports_the_trainer() -> None:
    for path in PACKAGE.glob("*.py"):
        assert "trainer" not in imports_of(path), f"{path.name} imports trainer: share it through tfdcontract"
    assert all((PACKAGE / f"{module}.py").is_file() for modules in COMMANDS.values() for module in modules)
