"""The command line's inputs, parsed once into objects the commands hand to the modules.

Each decorator adds a family of options and replaces them, in the command's keyword arguments, by
one object: `values` (-f and helm's --set family), `kube` (--kubeconfig, --kube-context) and `flags`
(helm's release flags). Settings (tfchart.cli.app) holds the options of `tfchart` itself (--debug, --helm);
`values` and `kube` carry it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tfchart.cli.app import F, Settings, timeout_option
from tfchart.helm.runner import Options

if TYPE_CHECKING:
    from tfchart.helm.chart import Chart, Inputs
    from tfchart.helm.runner import Helm
    from tfchart.values.validate import Report


@dataclass
class ValuesInputs:
    """The chart (a directory, a .tgz, oci://...; $TFCHART_CHART, else the chart tfchart ships), the -f files and
    --set family as given, and the --policy file they must satisfy."""

    settings: Settings
    files: tuple[str, ...]
    sets: list[tuple[str, str]]
    policy: Path | None = None
    chart_reference: str | None = None
    chart_version: str | None = None
    plain_http: bool = False

    @cached_property
    def chart(self) -> Chart:
        """The chart, resolved (a remote one pulled) once per command."""
        from tfchart.helm.chart import resolve

        return resolve(self.chart_reference, self.chart_version, self.settings.helm, self.plain_http)

    @cached_property
    def inputs(self) -> Inputs:
        """The inputs as helm gets them (standard input and pipes read once, here)."""
        from tfchart.helm.chart import read

        return read(list(self.files), self.sets, chart_dir=self.chart.path)

    def report(self, release: str, namespace: str | None) -> Report:
        """helm's verdict on these values (and the policy's, with --policy), every problem located."""
        from tfchart.values.validate import check, check_policy

        report = check(self.settings.helm, self.chart, self.inputs, release, namespace)
        if self.policy is not None:
            check_policy(report, self.policy, self.settings.helm, self.chart, self.inputs)
        return report

    def manifests(self, release: str, namespace: str | None) -> list[dict[str, Any]]:
        """The release's objects as helm renders them; refuses invalid values (or a broken policy)."""
        report = self.report(release, namespace)
        if not report.valid:
            raise report.failures()[0]
        return report.manifests

    def over(self, helm: Helm, release: str, namespace: str, reuse: str) -> ValuesInputs:
        """These inputs over the values helm starts from with --reuse-values (the last release's, its chart defaults
        included) or --reset-then-reuse-values (the ones the user gave it): a file before the -f files."""
        from tfchart.helm.chart import private_folder

        every = ["--all"] if reuse == "reuse" else []
        deployed = helm(["get", "values", release, "--namespace", namespace, *every, "--output", "yaml"])
        (path := private_folder("tfchart-") / "deployed-values.yaml").write_bytes(deployed)
        return replace(self, files=(str(path), *self.files))


@dataclass(frozen=True)
class KubeInputs:
    """-n, --kubeconfig and --kube-context: the namespace and cluster every API call and helm command of a command
    reach."""

    settings: Settings
    kubeconfig: Path | None
    context: str | None
    given_namespace: str | None = None

    def api(self) -> Any:
        from tfchart.cluster import kube

        return kube.KubeApi.from_config(self.kubeconfig, self.context)

    def namespace(self) -> str:
        """The one namespace of a command, for helm's --namespace and every API call alike: -n, else the
        kubeconfig context's (the service account's in a pod), else `default`, as helm and kubectl pick."""
        if self.given_namespace:
            return self.given_namespace
        from tfchart.cluster.kubeconfig import configured_namespace

        return configured_namespace(self.kubeconfig, self.context)

    def helm(self) -> Helm:
        from tfchart.cluster.kubeconfig import require_configuration

        require_configuration(self.kubeconfig)  # the one line every command gives, not helm's localhost:8080
        return replace(self.settings.helm, kubeconfig=self.kubeconfig, kube_context=self.context)


def bundle(target: str, build: Callable[..., Any], *options: Callable[[Any], Any]) -> Callable[[F], F]:
    """A family of options: the command gets, as its `target` argument, what `build` makes of their values
    (and of the command's other arguments, which `build` may change, as `kwargs`)."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def command(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names}
            return function(*args, **{target: build(kwargs, click.get_current_context().obj, **given)}, **kwargs)

        for option in reversed(options):  # --help lists them in the order given
            command = option(command)
        names = [param.name for param in command.__click_params__[-len(options):]]  # type: ignore[attr-defined]
        return command  # type: ignore[return-value]

    return decorate


def _values(kwargs: dict[str, Any], settings: Settings, chart_argument: str | None, chart: str | None,
            **given: Any) -> ValuesInputs:
    """The chart of `NAME [CHART]` and --chart, which must not disagree: a lone positional that is a chart is the
    chart where NAME has a default (as `helm template CHART`), a usage error where NAME is required."""
    name = kwargs.get("name")
    for named in (name, chart_argument):
        if named and named.endswith((".yaml", ".yml")):
            raise click.UsageError(f"{named!r} is a values file, not a release name or a chart: pass it with "
                                   f"-f {named}")  # fmt: skip
    if chart_argument is None and name and ("/" in name or name.endswith(".tgz")):  # a release name is a DNS label
        param = next(p for p in click.get_current_context().command.params if p.name == "name")
        if param.required:
            raise click.UsageError(f"NAME {name!r} is a chart, not a release name: give the name first, as helm "
                                   f"does (NAME CHART, e.g. mnist {name})")  # fmt: skip
        kwargs["name"], chart_argument = param.default, name
    if chart_argument and chart and chart_argument != chart:
        raise click.UsageError(f"the CHART argument {chart_argument!r} and --chart {chart!r} name different "
                               "charts: give one of them")  # fmt: skip
    ordered = [(f"--{flag.replace('_', '-')}", item) for flag in ("set_json", "set", "set_string", "set_file")
               for item in given.pop(flag)]  # fmt: skip
    reference = chart_argument or chart or os.environ.get("TFCHART_CHART") or None
    return ValuesInputs(settings, sets=ordered, chart_reference=reference, **given)


# -f/--values, helm's --set family and --policy, passed to the command as `values: ValuesInputs`
values_inputs = bundle(
    "values", _values,
    click.argument("chart_argument", metavar="[CHART]", required=False),
    click.option("-f", "--values", "files", multiple=True, metavar="FILE",
                 help="Values file (repeatable; later files win; - is standard input). values/NAME.yaml "
                      "names the chart's ready file where no such file is here."),
    click.option("--set", "set", multiple=True, metavar="KEY=VAL",
                 help="Set values with helm's --set syntax (a.b=c, a={x,y}, a[0]=x, a\\.b=c)."),
    click.option("--set-string", "set_string", multiple=True, metavar="KEY=VAL",
                 help="Like --set, values stay strings."),
    click.option("--set-json", "set_json", multiple=True, metavar="KEY=JSON",
                 help="Set values to JSON values (helm's --set-json)."),
    click.option("--set-file", "set_file", multiple=True, metavar="KEY=PATH",
                 help="Set values to the content of files (helm's --set-file)."),
    click.option("--policy", "policy", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 metavar="FILE", help="A platform team's policy file: refuse values that break its rules "
                 "(GPUs, images, priority class, queue, NetworkPolicy, downloads, storage, placement)."),
    click.option("--chart", "chart", default=None, metavar="CHART",
                 help="The chart, as the CHART argument after NAME: a directory, a packaged .tgz or oci://REGISTRY/"
                      "CHART (default: $TFCHART_CHART or the chart tfchart ships, charts/tf-distributed)."),
    click.option("--version", "chart_version", default=None, metavar="VERSION",
                 help="Version of a remote --chart (oci://..., repo/name), as helm's --version."),
    click.option("--plain-http", is_flag=True, help="Pull an oci:// --chart over plain HTTP (a registry without TLS)."),
)  # fmt: skip

# -n, --kubeconfig and --kube-context, passed to the command as `kube: KubeInputs`
kube_inputs = bundle(
    "kube", lambda _, settings, **given: KubeInputs(settings, **given),
    click.option("-n", "--namespace", "given_namespace", default=None,
                 help="Namespace (default: the kubeconfig context's)."),
    click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)."),
    click.option("--kube-context", "context", default=None, help="kubeconfig context to use."),
)  # fmt: skip
release_flags = bundle(  # --wait, --timeout, --atomic and --dry-run, as `flags: Options` (the command adds the rest)
    "flags", lambda _, __, **given: Options(**given),
    click.option("--wait", is_flag=True, help="Wait until the pods are ready (not until training ends)."),
    timeout_option("How long helm waits: 90s, 10m, 1h30m or seconds."),
    click.option("--atomic", is_flag=True, help="Roll back if the operation fails (helm 4: --rollback-on-failure)."),
    click.option("--dry-run", "dry_run", type=click.Choice(["client", "server"]), default=None, is_flag=False,
                 flag_value="client", help="Simulate: client (no cluster writes) or server."),
)  # fmt: skip


def _access(_: Any, __: Any, insecure: tuple[str, ...], skip_image_check: bool) -> frozenset[str] | None:
    hosts = frozenset(host.split("://")[-1].rstrip("/") for host in insecure)  # http://host:5000/ names it too
    return None if skip_image_check else hosts


# --insecure-registry and --skip-image-check, passed to the command as `registries`: how to ask the registries
# whether the release's images exist (None: do not ask)
image_check = bundle(
    "registries", _access,
    click.option("--insecure-registry", "insecure", multiple=True, metavar="HOST[:PORT]",
                 help="A registry that serves plain HTTP, not HTTPS (repeatable)."),
    click.option("--skip-image-check", is_flag=True,
                 help="Do not check that every image resolves in its registry (air-gapped set-ups)."),
)  # fmt: skip
