"""The command line's inputs, parsed once into objects the commands hand to the modules.

Each decorator adds a family of options and replaces them, in the command's keyword arguments, by
one object: `values` (-f and helm's --set family, in helm's order), `kube` (--kubeconfig,
--kube-context) and `flags` (helm's release flags). Settings holds the options of `tfchart` itself.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from tfchart.errors import UsageError

REPO_CHART = Path(__file__).resolve().parent.parent / "charts" / "tf-distributed"
F = TypeVar("F", bound=Callable[..., Any])


class Settings:
    """Options shared by every command (tfchart --debug --chart --helm)."""

    def __init__(self, debug: bool, chart: Path | None, helm: str | None) -> None:
        self.debug = debug
        self._chart = chart
        self._helm = helm

    @property
    def chart(self) -> Path:
        chart = self._chart or Path(os.environ.get("TFCHART_CHART", REPO_CHART))
        if not (chart / "Chart.yaml").is_file():
            raise UsageError(
                f"no chart at {chart}", "pass --chart PATH (or set TFCHART_CHART) to the tf-distributed chart directory"
            )
        return chart

    @property
    def helm(self) -> str:
        from tfchart.helm import find_helm

        return find_helm(self._helm)


def ordered_sets(
    sets: tuple[str, ...] = (),
    set_strings: tuple[str, ...] = (),
    set_jsons: tuple[str, ...] = (),
    set_files: tuple[str, ...] = (),
) -> list[tuple[str, str]]:
    """The --set family in the order helm applies it: --set-json, --set, --set-string, --set-file."""
    return (
        [("--set-json", item) for item in set_jsons]
        + [("--set", item) for item in sets]
        + [("--set-string", item) for item in set_strings]
        + [("--set-file", item) for item in set_files]
    )


@dataclass(frozen=True)
class ValuesInputs:
    """-f files and the --set family as given, and the --policy file they must satisfy."""

    files: tuple[Path, ...]
    sets: list[tuple[str, str]]
    policy: Path | None = None

    def read(self, settings: Settings) -> ValuesRun:
        return ValuesRun(settings, self.files, self.sets, self.policy)

    def validated(self, settings: Settings) -> Validated:
        """Validates the inputs (each read once); refuses invalid values, or values that break the
        policy, with every problem."""
        run = self.read(settings)
        report = run.validate()
        if not report.valid:
            raise report.failure()
        return Validated(run.helm_files(), run.helm_sets(), report.values)


@dataclass(frozen=True)
class Validated:
    """Valid values, and what helm gets for them: its -f files and --set family."""

    files: list[str]
    sets: list[tuple[str, str]]
    values: dict[str, Any]

    def manifests(self, settings: Settings, release: str, namespace: str) -> list[dict[str, Any]]:
        """The chart rendered with these values (helm template): what the release would create."""
        from tfchart import render

        text = render.template(settings.helm, settings.chart, release, self.files, self.sets, namespace)
        return render.manifests(text)


class ValuesRun:
    """The user's values inputs, each read once (helm's order), and the arguments helm gets for them."""

    def __init__(
        self, settings: Settings, files: tuple[Path, ...], ordered: list[tuple[str, str]], policy: Path | None = None
    ) -> None:
        from tfchart.inputs import Inputs

        self.settings = settings
        self.inputs = Inputs()
        self.sources = [self.inputs.read(str(file)) for file in files]
        self.sets = ordered
        self.policy = policy

    def helm_major(self) -> int:
        from tfchart.helm import binary_major_version

        return binary_major_version(self.settings.helm)

    def validate(self) -> Any:
        """The validation report; with --policy, also the policy's violations (on valid values only:
        the rules read a render of the chart, which needs valid values)."""
        from tfchart import policy as policies
        from tfchart.validate import validate as run_validation

        policy, broken = None, None
        if self.policy is not None:
            try:
                policy = policies.load(self.policy)
            except policies.PolicyFileInvalid as error:  # an error whatever the values; -o json lists it too
                broken = error
        report = run_validation(self.settings.chart, self.sources, self.sets, self.helm_major, self.inputs)
        if broken is not None:
            report.policy_file, report.policy_problems = broken.policy_file, list(broken.problems)
            return report
        if policy is None:
            return report
        report.policy_file = policy.file
        if not report.valid:
            report.warnings.append(f"policy {policy.file} not checked: fix the values first")
            return report
        rendered = Validated(self.helm_files(), self.helm_sets(), report.values)
        docs = rendered.manifests(self.settings, "policy", "default")  # the rules read no release name
        report.violations = list(policies.check_values(policy, report.values, report.located, docs))
        report.policy_checked = True
        if not report.violations:
            count = len(policy.names)
            report.notes.append(f"policy {policy.file}: {count} rule{'s' if count != 1 else ''} passed")
        return report

    def helm_files(self) -> list[str]:
        """What helm reads for each -f: the file itself, or tfchart's private copy of a pipe or stdin."""
        return [source.helm_path for source in self.sources]

    def helm_sets(self) -> list[tuple[str, str]]:
        """The --set family for helm; --set-file paths that were pipes point at tfchart's copies."""
        from tfchart import strvals

        copies = iter(self.inputs.set_files)
        out: list[tuple[str, str]] = []
        for flag, argument in self.sets:
            if flag == "--set-file":
                argument = strvals.replace_file_paths(argument, lambda _: next(copies).helm_path)
            out.append((flag, argument))
        return out


@dataclass(frozen=True)
class KubeInputs:
    """--kubeconfig and --kube-context: the cluster every API call and helm command of a command reach."""

    kubeconfig: Path | None
    context: str | None

    def api(self) -> Any:
        from tfchart import kube

        return kube.KubeApi.from_config(self.kubeconfig, self.context)

    def namespace(self, namespace: str | None) -> str:
        """The one namespace of a command, for helm's --namespace and every API call alike: -n, else the
        kubeconfig context's (the service account's in a pod), else `default`, as helm and kubectl pick."""
        if namespace:
            return namespace
        from tfchart import kube

        return kube.configured_namespace(self.kubeconfig, self.context)

    def helm(self, settings: Settings) -> Any:
        from tfchart.helm import PyHelm3Runner

        return PyHelm3Runner(settings.helm, self.kubeconfig, self.context)


def _option(function: Any, *decls: str, **attrs: Any) -> Any:
    return click.option(*decls, **attrs)(function)


def values_inputs(more: bool = True) -> Callable[[F], F]:
    """-f/--values and helm's --set family (with --set-json/--set-file unless `more` is False), passed
    to the command as `values: ValuesInputs`."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def command(*args: Any, files: tuple[Path, ...], sets: tuple[str, ...], set_strings: tuple[str, ...],
                    set_jsons: tuple[str, ...] = (), set_files: tuple[str, ...] = (), policy: Path | None = None,
                    **kwargs: Any) -> Any:
            ordered = ordered_sets(sets, set_strings, set_jsons, set_files)
            return function(*args, values=ValuesInputs(tuple(files), ordered, policy), **kwargs)

        wrapped: Any = command
        if more:
            wrapped = _option(wrapped, "--policy", "policy", type=click.Path(path_type=Path, dir_okay=False),
                              default=None, metavar="FILE",
                              help="A platform team's policy file: refuse values that break its rules (GPUs, "
                                   "images, priority class, queue, NetworkPolicy, downloads, storage, placement).")
            wrapped = _option(wrapped, "--set-file", "set_files", multiple=True, metavar="KEY=PATH",
                              help="Set values to the content of files (helm's --set-file; `-` is standard input).")
            wrapped = _option(wrapped, "--set-json", "set_jsons", multiple=True, metavar="KEY=JSON",
                              help="Set values to JSON values (helm's --set-json: a.b=[1,2]; helm 4 also takes a "
                                   "whole JSON object).")
        wrapped = _option(wrapped, "--set-string", "set_strings", multiple=True, metavar="KEY=VAL",
                          help="Like --set, values stay strings.")
        wrapped = _option(wrapped, "--set", "sets", multiple=True, metavar="KEY=VAL",
                          help="Set values with helm's --set syntax (a.b=c, a={x,y}, a[0]=x, a\\.b=c).")
        wrapped = _option(wrapped, "-f", "--values", "files", multiple=True, type=click.Path(path_type=Path),
                          metavar="FILE", help="Values file (repeatable; later files win).")
        return wrapped  # type: ignore[no-any-return]

    return decorate


def kube_inputs(function: F) -> F:
    """--kubeconfig and --kube-context, passed to the command as `kube: KubeInputs`."""

    @functools.wraps(function)
    def command(*args: Any, kubeconfig: Path | None, kube_context: str | None, **kwargs: Any) -> Any:
        return function(*args, kube=KubeInputs(kubeconfig, kube_context), **kwargs)

    wrapped: Any = _option(command, "--kube-context", default=None, help="kubeconfig context to use.")
    wrapped = _option(wrapped, "--kubeconfig", type=click.Path(path_type=Path, dir_okay=False), default=None,
                      help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
    return wrapped  # type: ignore[no-any-return]


def release_flags(function: F) -> F:
    """-n, --wait, --timeout, --atomic and --dry-run, passed to the command as `flags: release.Options`
    (its create_namespace left False)."""

    @functools.wraps(function)
    def command(*args: Any, namespace: str | None, wait: bool, timeout: str | None, atomic: bool,
                dry_run: str | None, **kwargs: Any) -> Any:
        from tfchart.release import Options

        flags = Options(namespace=namespace, wait=wait, timeout=timeout, atomic=atomic, dry_run=dry_run)
        return function(*args, flags=flags, **kwargs)

    wrapped: Any = _option(command, "--dry-run", "dry_run", type=click.Choice(["client", "server"]), default=None,
                           is_flag=False, flag_value="client", help="Simulate: client (no cluster writes) or server.")
    wrapped = _option(wrapped, "--atomic", is_flag=True,
                      help="Roll back if the operation fails (helm 4: --rollback-on-failure).")
    wrapped = _option(wrapped, "--timeout", default=None, metavar="DURATION", help="How long helm waits, e.g. 10m.")
    wrapped = _option(wrapped, "--wait", is_flag=True, help="Wait until the pods are ready (not until training ends).")
    wrapped = _option(wrapped, "-n", "--namespace", default=None, help="Release namespace.")
    return wrapped  # type: ignore[no-any-return]


def image_options(function: F) -> F:
    """`tfchart build`'s options: the variants, tag, registry, engine, base image, push and context."""
    wrapped: Any = _option(function, "--dry-run", is_flag=True, help="Print the exact commands without running them.")
    wrapped = _option(wrapped, "--context", type=click.Path(path_type=Path, file_okay=False), default=None,
                      help="The repository checkout to build from (default: the one at or above the working "
                           "directory).")
    wrapped = _option(wrapped, "--tls-verify/--no-tls-verify", default=True, show_default=True,
                      help="Push over HTTPS (--no-tls-verify: a plain-HTTP registry; podman and buildah only).")
    wrapped = _option(wrapped, "--base-image", default=None, metavar="IMAGE",
                      help="Build on IMAGE instead of the official tensorflow/tensorflow:2.21.0[-gpu] "
                           "(BASE_IMAGE build argument).")
    wrapped = _option(wrapped, "--engine", type=click.Choice(["docker", "buildx", "podman", "buildah"]), default=None,
                      help="Container engine (default: the first of docker buildx, docker, podman, buildah found).")
    wrapped = _option(wrapped, "--platform", default=None, help="Target platform, e.g. linux/amd64.")
    wrapped = _option(wrapped, "--push", is_flag=True, help="Push the images after building them.")
    wrapped = _option(wrapped, "--repository", default="tf-distributed/trainer", show_default=True)
    wrapped = _option(wrapped, "--registry", default="ghcr.io", show_default=True)
    wrapped = _option(wrapped, "--tag", default=None,
                      help="Image tag (default: the project version; the GPU image gets -gpu).")
    for variant, what in (("all", "both images (the default)"), ("gpu", "the GPU image (Dockerfile.gpu)"),
                          ("cpu", "the CPU image (Dockerfile.cpu)")):
        wrapped = _option(wrapped, f"--{variant}", "variants", flag_value=variant, multiple=True, help=f"Build {what}.")
    return wrapped  # type: ignore[no-any-return]


def local_options(function: F) -> F:
    """`tfchart local`'s options: the release it renders, the run directory, the engine."""
    wrapped: Any = _option(function, "--engine", type=click.Choice(["process", "podman", "docker"]), default="process",
                           show_default=True, help="Run each pod as a local process, or as a container of its "
                                                   "rendered image (podman or docker).")
    wrapped = _option(wrapped, "--follow-logs", is_flag=True,
                      help="Stream every pod's output here, prefixed by its name (always kept in <run>/pod-logs/).")
    wrapped = _option(wrapped, "--keep-tensorboard", is_flag=True,
                      help="Leave TensorBoard running after training, until Ctrl-C.")
    wrapped = _option(wrapped, "--timeout", type=float, default=None, metavar="SECONDS",
                      help="Give up if training takes longer.")
    wrapped = _option(wrapped, "--workdir", type=click.Path(path_type=Path, file_okay=False), default=None,
                      help="Run directory standing in for the shared volume (default: runs/<release>-<time>).")
    wrapped = _option(wrapped, "-n", "--namespace", default="default", show_default=True,
                      help="Namespace the chart is rendered for (DNS names follow it).")
    wrapped = _option(wrapped, "--release", default="local", show_default=True,
                      help="Release name the chart is rendered with (pod names follow it).")
    return wrapped  # type: ignore[no-any-return]


def settings_options(function: F) -> F:
    """tfchart's own options: --debug, --chart, --helm (they make the Settings)."""
    wrapped: Any = _option(function, "--helm", "helm", metavar="PATH",
                           help="helm binary (default: $TFCHART_HELM, helm on PATH, or the repository's "
                                ".tools/bin/helm).")
    wrapped = _option(wrapped, "--chart", type=click.Path(path_type=Path, file_okay=False),
                      help="The tf-distributed chart directory (default: this repository's).")
    wrapped = _option(wrapped, "--debug", is_flag=True, help="Show tracebacks and the commands run.")
    return wrapped  # type: ignore[no-any-return]
