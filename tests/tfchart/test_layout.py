"""The shape of tfchart: folders by concern, imports only in the allowed directions, no import circle,
a thin CLI, nothing of the trainer, and a size a newcomer can read.

    cli/  ->  local/  cluster/ (preflight/)  values/  images/
                 \\         |    (-> images/)  |
                  +----> helm/  manifests/  <-+      errors.py, console.py  (imported by all)
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
    # preflight's image check asks registries through images/ (registry.py, credentials.py)
    "cluster": {"helm", "values", "manifests", "images"},
    "values": {"helm", "manifests"},
    "images": set(),
    "helm": set(),
    "manifests": set(),
}
# 7,496 lines when issue 21 left helm the one source of truth for values (limit 7,500, the pattern meanings
# since moved into the chart's schema); issue 22's safeguards (paged pod lists, bounded credential plugins,
# mounts and writes kept inside the run directory, policy checks of every way a value reaches a pod) add ~110,
# and the private network of local runs (netns.py: namespace, forwarding, the CONNECT tunnel out) ~190;
# issue 23's image check (registry API with the token dance, podman/docker credentials, preflight wiring) ~335,
# and its laptop run (the TensorFlow check before anything starts, --host-network, the chart's values files) ~35.
# issue 24's helm and kubectl vocabulary (NAME [CHART], durations, -o json|yaml with preflight's report, upgrade
# --install/--reuse-values, global options after the command, unwrapped output off a terminal) ~260, its new
# commands ~400: list (releases.py, paged), wait (wait.py), logs' chief default, --previous, --since, --timestamps
# and --all-roles (merged streams), completion (shell.py), and its fixes that keep what the user meant
# (values/fixes.py: a value typed as meant, the nearest choice or bound, the edit of the values file's line) ~320;
# its local run ~150: closing commands that work as printed, a board that fits the terminal and names each pod's
# wait (terminal.py), the dataset cache and --clean (local/rundirs.py).
# issue 25's JobSet workload: manifests/workloads.py reads a JobSet's replicatedJobs as pod templates ~16.
# issue 25's topology check ~280: preflight/topology.py (LocalQueue -> ClusterQueue -> flavors -> Topology levels,
# Volcano HyperNode tiers) and kube.py's paged list of a cluster-scoped custom resource.
# issue 25's suspend and resume ~678: cluster/suspend.py (native, gang-aware, restartable), local/runstate.py
# (the local run's record, --local by signal), the two commands, Suspended in status/list/wait.
# issue 25's progress record on the chief's Job in `tfchart status` (ETA, last checkpoint; the record when the
# chief's log is gone) and a run the supervisor ended (stall) shown Failed before its Job is ~25.
# issue 25's JobSet-aware cluster commands ~565: runs.py (the run's object of either kind), JobSet/Kueue suspend and
# stop, preflight's JobSet check and Kueue jobset integration, the upgrade guard's JobSet rules, kube.py's custom calls.
# issue 25's local JobSet run ~838: local/jobset.py (its pods walked as JobSet and the Job controller make them),
# local/jobsetrun.py (both controllers: dependsOn on readiness probes, podFailurePolicy, backoffLimit, deadlines,
# the failure policy's rules, maxRestarts, the success policy), probes on both engines, the board's JobSet line.
# issue 25's supervisor under a JobSet: runs.py gives a JobSet run the progress record of its chief's Job ~9, and
# wait's last look once --timeout has passed ~2; reading helm's schema errors with regexes compiled once (a
# --set list of 60,000 nulls costs half the CPU) ~8.
# issue 26's event-driven endings: upgrade --recreate marks a Job or JobSet before deleting it, so the run
# supervisor waits only for that one to come back and ends a run whose Job is deleted by hand at once ~11.
# issue 26's slim CPU image: `tfchart build --gpu-base-image`, since the CPU and GPU images now have different
# official bases (python:3.11-slim-bookworm, tensorflow/tensorflow:2.21.0-gpu) ~5.
MAX_LINES = 11812


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


def test_nothing_imports_the_trainer() -> None:
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(name.split(".")[0] == "trainer" for name in names), f"{path} imports trainer"
