"""One error hierarchy for tfchart, translated into messages and exit codes at one boundary (cli.main).

Exit codes (docs/cli.md, "Exit codes"): 0 success, 1 the answer is no (invalid values, a check or the run failed,
a refusal), 2 a usage error, 69 the cluster could not be asked (ClusterUnavailable); `tfchart wait` adds 3 (no run),
wait/suspend/resume 124 (timed out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class TfchartError(Exception):
    """An error the user can act on. `hint` says what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(TfchartError):
    """Bad command-line usage (unreadable --set, unknown option value...)."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One thing wrong with values (as helm stated it, values/helm_errors.py: helm 4 may name only a bad map `key`),
    a policy file, or a policy's violation of `rule` (e.g. maxGpus.perPod); where it was set, and its fix in words
    and as edits a tool can apply (values/fixes.py's Edit)."""

    path: str  # dotted key path, "(root)" for the document itself
    message: str
    value: object = None
    fix: str = ""
    file: str = ""  # where the offending value came from: a file, "--set", or "" (chart defaults)
    line: int | None = None
    edits: tuple[Any, ...] = ()  # values.fixes.Edit
    kind: str = "schema"  # schema | required | rule | file | set (the refusal helm said it in) | policy | policy-file
    key: str = ""  # the unknown key (additionalProperties) or the bad map key (propertyNames)
    choices: tuple[str, ...] = ()  # an enum's, as helm named them
    rule: str = ""


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


@dataclass
class ValidationFailed(TfchartError):
    """The values (or a policy file, or the values under a policy) are invalid; every problem is listed."""

    problems: list[Problem] = field(default_factory=list)
    note: str = ""  # said after the list (e.g. that helm stopped at schema errors)
    what: str = "problem"
    where: str = "in values"

    def __post_init__(self) -> None:
        super().__init__(f"{plural(len(self.problems), self.what)} {self.where}", "")


class HelmError(TfchartError):
    """helm failed or could not be run."""


class KubernetesError(TfchartError):
    """The Kubernetes API answered no (a 404, a refused change) or could not be asked (ClusterUnavailable)."""


class ClusterUnavailable(KubernetesError):
    """The cluster could not be asked (no kubeconfig, the API server unreachable or failing, 401/403): never exit 1."""

    exit_code = 69  # sysexits' EX_UNAVAILABLE


class ImmutableFieldChange(TfchartError):
    """An upgrade would change a StatefulSet field Kubernetes forbids changing."""


class EngineNotFound(TfchartError):
    """No container engine (docker, buildx, podman) is reachable for image builds."""
