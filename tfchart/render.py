"""`tfchart template`: the chart rendered by helm (through pyhelm3) with exactly the user's inputs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tfchart.helm import PyHelm3Runner, Runner


def values_args(files: Sequence[Path | str], sets: Sequence[tuple[str, str]]) -> list[str]:
    """helm's -f/--set-family arguments in the user's order (helm applies files, then --set-json, --set,
    --set-string and --set-file, each group in command-line order)."""
    args: list[str] = []
    for file in files:
        args += ["--values", str(file)]
    for flag, argument in sets:
        args += [flag, argument]
    return args


def template_args(
    chart: Path, release: str, files: Sequence[Path | str], sets: Sequence[tuple[str, str]], namespace: str | None
) -> list[str]:
    args = ["template", release, str(chart)]
    if namespace:
        args += ["--namespace", namespace]
    return args + values_args(files, sets)


def template(
    helm: str | Runner,
    chart: Path,
    release: str,
    files: Sequence[Path | str] = (),
    sets: Sequence[tuple[str, str]] = (),
    namespace: str | None = None,
) -> str:
    runner = PyHelm3Runner(helm) if isinstance(helm, str) else helm
    return runner(template_args(chart, release, files, sets, namespace)).decode()


def manifests(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]
