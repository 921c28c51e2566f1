"""Running helm through pyhelm3: finding the binary, its version, and one call for every command.

`run` returns helm's raw stdout, so `tfchart template` is byte-identical to `helm template`.
pyhelm3's error classes are translated into HelmError with a hint at this boundary, and pyhelm3's
own log lines ("command failed: ...") are silenced: the error is reported once, by tfchart
(--debug shows the commands).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tfchart.errors import HelmError, UsageError

REPO_HELM = Path(__file__).resolve().parent.parent / ".tools" / "bin" / "helm"


def find_helm(explicit: str | None = None) -> str:
    """helm from --helm, $TFCHART_HELM, PATH, or the repository's .tools/bin/helm, in that order."""
    for candidate in (explicit, os.environ.get("TFCHART_HELM")):
        if candidate:
            if shutil.which(candidate) is None:
                raise UsageError(
                    f"helm binary not found: {candidate}",
                    "pass --helm PATH or set TFCHART_HELM to a helm 3.17+ or 4.x binary",
                )
            return candidate
    found = shutil.which("helm")
    if found:
        return found
    if REPO_HELM.exists():
        return str(REPO_HELM)
    raise HelmError(
        "helm is not installed",
        "install helm 3.17+ or 4.x (or run `make setup` in the repository), or pass --helm PATH",
    )


class Runner(Protocol):
    """What tfchart needs from helm: run a command, get stdout. Tests record calls through it."""

    def __call__(self, args: Sequence[str], stdin: bytes | None = None) -> bytes: ...


class PyHelm3Runner:
    """Runs helm commands through pyhelm3's Command (its subprocess handling and error classes)."""

    def __init__(self, executable: str, kubeconfig: Path | None = None, kube_context: str | None = None) -> None:
        from pyhelm3 import Command

        # pyhelm3 logs a warning for every failed command; with no logging configured Python prints
        # it to stderr before tfchart's own one-line error. Its records still reach a configured
        # root logger (--debug).
        logging.getLogger("pyhelm3").addHandler(logging.NullHandler())

        self.command = Command(executable=executable, kubeconfig=kubeconfig, kubecontext=kube_context)

    def __call__(self, args: Sequence[str], stdin: bytes | None = None) -> bytes:
        from pyhelm3 import errors

        try:
            output: bytes = asyncio.run(self.command.run(list(args), stdin))
            return output
        except errors.Error as error:
            raise translate(error) from None


def translate(error: Exception) -> HelmError:
    stderr = getattr(error, "stderr", b"")
    text = stderr.decode(errors="replace").strip() if isinstance(stderr, bytes) else str(stderr or error)
    text = re.sub(r"^Error: ", "", text)
    name = type(error).__name__
    hints = {
        "ReleaseNotFoundError": "check the release name and --namespace (tfchart lists releases with `helm list -A`)",
        "ConnectionError": "is KUBECONFIG pointing at a reachable cluster? try `kubectl cluster-info`",
        "ResourceAlreadyExistsError": "another release or object owns that name: pick another name or delete it",
        "InvalidResourceError": "the API server rejected a manifest: see the field it names",
        "FailedToRenderChartError": "the chart failed to render: run `tfchart validate` with the same -f/--set",
        "ChartNotFoundError": "pass --chart PATH to the tf-distributed chart directory",
        "CommandCancelledError": "the operation timed out or was cancelled: raise --timeout",
    }
    if "cluster unreachable" in text.lower() or "connection refused" in text.lower():
        return HelmError(f"helm could not reach the cluster: {text}", hints["ConnectionError"])
    return HelmError(f"helm failed: {text}", hints.get(name, "run with --debug to see the helm command"))


@functools.cache
def binary_major_version(executable: str) -> int:
    """The major version of a helm binary, asked once (without pyhelm3: `tfchart validate` stays light)."""
    try:
        output = subprocess.run(
            [executable, "version", "--template", "{{.Version}}"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HelmError(
            f"cannot run {executable} version: {error}", "pass --helm PATH to a helm 3.17+ or 4.x binary"
        ) from None
    match = re.match(r"v?(\d+)\.", output)
    if not match:
        raise HelmError(f"cannot read the helm version from {output!r}", "use helm 3.17+ or 4.x")
    return int(match.group(1))


def major_version(runner: Runner) -> int:
    output = runner(["version", "--template", "{{.Version}}"]).decode().strip()
    match = re.match(r"v?(\d+)\.", output)
    if not match:
        raise HelmError(f"cannot read the helm version from {output!r}", "use helm 3.17+ or 4.x")
    return int(match.group(1))
