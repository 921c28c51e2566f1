"""Running helm: finding the binary, checking its version, one call for every command, its failures read, the
options of install/upgrade and the release's history as helm keeps it.

helm runs as a plain subprocess: `tfchart validate` must take about the time `helm template` takes,
and pyhelm3 (pydantic models, asyncio) costs more to import than helm takes to render this chart.
A failed command becomes one HelmError in helm's own words.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfchart.errors import ClusterUnavailable, HelmError, TfchartError, UsageError

REPO_HELM = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "helm"
OLDEST = (3, 17)  # the oldest helm the chart is tested with (helm 4 too)
INSTALL_HINT = "install helm 3.17+ or 4.x (https://helm.sh/docs/intro/install/), or pass --helm PATH"


def find_helm(explicit: str | None = None, debug: bool = False) -> Helm:
    """helm from --helm, $TFCHART_HELM, PATH, or the repository's .tools/bin/helm, in that order (one older than 3.17
    is refused)."""
    found = explicit or os.environ.get("TFCHART_HELM")
    if found and shutil.which(found) is None:
        raise UsageError(f"helm binary not found: {found}", INSTALL_HINT)
    found = found or shutil.which("helm") or (str(REPO_HELM) if REPO_HELM.exists() else None)
    if found is None:
        raise HelmError("helm is not installed", INSTALL_HINT)
    version(found)
    return Helm(found, debug=debug)


@functools.cache
def version(executable: str) -> tuple[int, int]:
    """(major, minor) of a helm binary; older than 3.17 is refused. Asked once per binary (the answer is
    cached by the binary's path, size and modification time: `helm version` costs a third of a render)."""
    cache, key = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfchart" / "helm-versions", ""
    with contextlib.suppress(OSError):
        info = os.stat(path := os.path.realpath(shutil.which(executable) or executable))
        key = f"{path}:{info.st_size}:{info.st_mtime_ns}"
    try:
        output = dict(line.rsplit(" ", 1) for line in cache.read_text().splitlines() if " " in line).get(key, "")
    except (OSError, UnicodeError):
        output = ""
    if not output:
        try:
            output = subprocess.run([executable, "version", "--template", "{{.Version}}"], capture_output=True,
                                    text=True, timeout=60).stdout.strip()  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as error:
            raise HelmError(f"cannot run {executable} version: {error}", INSTALL_HINT) from None
        if key and re.fullmatch(r"v\d+\.\d+\S*", output):
            with contextlib.suppress(OSError):  # an unwritable cache only costs `helm version` next time
                cache.parent.mkdir(parents=True, exist_ok=True)
                with open(cache, "a") as out:
                    out.write(f"{key} {output}\n")
    return parsed(output, executable)


def parsed(output: str, executable: str) -> tuple[int, int]:
    """(major, minor) of what `helm version` printed; older than 3.17, or not helm, is refused."""
    if not (match := re.match(r"v?(\d+)\.(\d+)", output)):
        raise HelmError(f"{executable} is not helm: `version` printed {output[:80]!r}", INSTALL_HINT)
    if (found := (int(match.group(1)), int(match.group(2)))) < OLDEST:
        raise HelmError(f"helm {output} is too old for tfchart", INSTALL_HINT)
    return found


Runner = Callable[[Sequence[str]], bytes]  # what tfchart needs from helm: a command's stdout (tests record calls)


@dataclass(frozen=True)
class Helm:
    """One helm binary, and the cluster its commands reach (--kubeconfig, --kube-context)."""

    executable: str
    kubeconfig: Path | None = None
    kube_context: str | None = None
    debug: bool = False  # print each command on stderr

    def __call__(self, args: Sequence[str]) -> bytes:
        return finish(self.start(args))

    def start(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """The command, started: the caller may prepare what reads its output while helm works."""
        argv = [self.executable, *args, *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []),
                *(["--kube-context", self.kube_context] if self.kube_context else [])]  # fmt: skip
        if self.debug:
            print("helm:", shlex.join(argv), file=sys.stderr)
        try:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as error:
            raise HelmError(f"cannot run {self.executable}: {error.strerror}", INSTALL_HINT) from None


def finish(process: subprocess.Popen[bytes], failed: Callable[[str], Exception] = lambda text: failure(text)) -> bytes:
    """A started command's stdout; its failure as `failed` makes it of helm's stderr (an error in helm's words)."""
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise failed(stderr.decode(errors="replace"))
    return stdout


def major_version(runner: Runner) -> int:
    """The major version of the helm behind `runner` (its flags differ: --atomic / --rollback-on-failure)."""
    if isinstance(runner, Helm):
        return version(runner.executable)[0]
    return parsed(runner(["version", "--template", "{{.Version}}"]).decode().strip(), "helm")[0]


LOG_LINE = re.compile(r"(\S+\.go:\d+: |level=)")


def error_text(stderr: str) -> str:
    """helm's error, without its log lines (helm 3's coalesce warnings, helm 4's level=...)."""
    lines = [line for line in stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]
    return re.sub(r"^Error: ", "", "\n".join(lines)).strip()


def failure(stderr: str) -> TfchartError:
    """A failed helm command as one error in helm's words, with what to try (ClusterUnavailable where helm could not
    reach the cluster)."""
    text = error_text(stderr) or "helm failed without a message"
    lowered = text.lower()
    if "cluster unreachable" in lowered or "connection refused" in lowered or "no configuration has been" in lowered:
        return ClusterUnavailable(f"helm could not reach the cluster: {text}", "check --kubeconfig and --kube-context")
    if "release: not found" in lowered:
        return HelmError(text, "check the release name and --namespace (`helm list -A` lists releases)")
    if "no such file or directory" in lowered:  # a -f or --set-file path: --debug would not help
        return HelmError(text, "check the paths given to -f and --set-file")
    if "context deadline exceeded" in lowered or "timed out" in lowered:
        return HelmError(text, "the operation timed out: raise --timeout")
    return HelmError(text, "run with --debug to see the helm command")


@dataclass(frozen=True)
class Options:
    namespace: str | None = None
    wait: bool = False
    timeout: float | None = None  # seconds, written for helm as a Go duration
    atomic: bool = False
    dry_run: str | None = None  # None, "client" or "server"
    create_namespace: bool = False
    install: bool = False  # upgrade --install: install a release helm does not hold
    reuse_values: str | None = None  # "reuse" or "reset-then-reuse": helm's --reuse-values, --reset-then-reuse-values


def go_duration(seconds: float) -> str:
    """Seconds as a Go duration (1m30s, 250ms), which helm's --timeout takes, written by durationpy (the kubernetes
    client's own parser and writer of them)."""
    import datetime

    import durationpy

    return str(durationpy.to_str(datetime.timedelta(seconds=seconds)))


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
