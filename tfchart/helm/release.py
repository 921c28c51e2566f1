"""install / upgrade / uninstall as helm commands: helm 3 and helm 4 spellings of the same flags, and
uninstall keeping the shared PersistentVolumeClaim (checkpoints, models) unless asked to delete it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from tfchart.errors import HelmError
from tfchart.helm.chart import Chart
from tfchart.helm.inputs import Inputs
from tfchart.helm.render import manifests
from tfchart.helm.runner import Runner, major_version


@dataclass(frozen=True)
class Options:
    namespace: str | None = None
    wait: bool = False
    timeout: str | None = None
    atomic: bool = False
    dry_run: str | None = None  # None, "client" or "server"
    create_namespace: bool = False
    install: bool = False  # upgrade --install: install a release helm does not hold
    reuse_values: str | None = None  # "reuse" or "reset-then-reuse": helm's --reuse-values, --reset-then-reuse-values


class Deleter(Protocol):
    """Deletes the claim on `uninstall --delete-data`."""

    def delete_pvc(self, name: str, namespace: str) -> None: ...


def release_args(verb: str, major: int, release: str, chart: Chart, inputs: Inputs, options: Options) -> list[str]:
    """`helm install|upgrade RELEASE CHART` with the options and the user's values, in order."""
    args = [verb, release, str(chart.path)]
    args += ["--namespace", options.namespace] if options.namespace else []
    args += ["--create-namespace"] if options.create_namespace else []
    args += ["--wait=watcher" if major >= 4 else "--wait"] if options.wait else []
    args += ["--timeout", options.timeout] if options.timeout else []
    args += ["--rollback-on-failure" if major >= 4 else "--atomic"] if options.atomic else []
    args += [f"--dry-run={options.dry_run}"] if options.dry_run else []
    args += ["--install"] if options.install else []
    args += [f"--{options.reuse_values}-values"] if options.reuse_values else []
    return [*args, *inputs.args()]


def format_duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def deployed(runner: Runner, release: str, namespace: str) -> bool:
    """Whether helm holds the release to upgrade: `upgrade --install` installs where it has no history, or only an
    uninstalled one kept by `uninstall --keep-history` (as helm decides)."""
    try:
        history = json.loads(runner(["history", release, "--namespace", namespace, "--max", "1", "--output", "json"]))
    except HelmError as error:
        if "release: not found" in error.message.lower():
            return False
        raise
    return bool(history) and history[-1].get("status") != "uninstalled"


def base_revision(runner: Runner, release: str, where: list[str]) -> list[str]:
    """`--revision N` of the revision an upgrade starts from, as helm's upgrade picks it: the newest deployed one. A
    failed upgrade's revision holds the new manifest, not what the cluster runs (helm applied it half-way at most)."""
    history = json.loads(runner(["history", release, *where, "--output", "json"]))
    deployed = [entry for entry in history if entry.get("status") == "deployed"] or history
    return ["--revision", str(deployed[-1]["revision"])] if deployed else []


def deployed_values(runner: Runner, release: str, namespace: str, reuse: str) -> bytes:
    """The values helm starts from with --reuse-values (the last release's, its chart defaults included) or
    --reset-then-reuse-values (the ones the user gave it), as YAML."""
    every = ["--all"] if reuse == "reuse" else []
    return runner(["get", "values", release, "--namespace", namespace, *every, "--output", "yaml"])


def install(runner: Runner, release: str, chart: Chart, inputs: Inputs, options: Options, verb: str = "install") -> str:
    """`helm install`, or `helm upgrade --install` of a release helm does not hold yet (verb "upgrade")."""
    return runner(release_args(verb, major_version(runner), release, chart, inputs, options)).decode()


def uninstall(runner: Runner, release: str, namespace: str, wait: bool = False, timeout: str | None = None,
              delete_data: bool = False, deleter: Deleter | None = None,
              keep_history: bool = False) -> list[str]:  # fmt: skip
    """Uninstalls the release from `namespace` (helm's --namespace, and where the claims are deleted too).
    Returns the claims kept (or deleted with delete_data)."""
    shown = manifests(runner(["get", "manifest", release, "--namespace", namespace]).decode())
    claims = [doc["metadata"]["name"] for doc in shown if doc.get("kind") == "PersistentVolumeClaim"]
    runner(["uninstall", release, "--namespace", namespace, *(["--wait"] if wait else []),
            *(["--timeout", timeout] if timeout else []), *(["--keep-history"] if keep_history else [])])  # fmt: skip
    if delete_data:
        assert deleter is not None, "deleting the claim needs the Kubernetes API"
        for claim in claims:
            deleter.delete_pvc(claim, namespace)
    return claims
