"""`tfchart local --engine podman|docker`: the rendered release as real containers, one per pod.

The chart is rendered with exactly the user's inputs (no value is added: the pods keep the chart's
mount path, ports and cluster map), and every TensorFlow pod (ps, workers, chief, evaluator) and
TensorBoard runs its rendered image with:

* command and args exactly as rendered (`command[0]` becomes `--entrypoint`, the rest follows the
  image), so the chart's /bin/sh prelude writes TF_CONFIG from the real cluster map;
* env with the downward API resolved as `tfchart local` does for processes (metadata.name,
  metadata.namespace, metadata.labels[...] including apps.kubernetes.io/pod-index);
* the pod and container securityContext: runAsUser/runAsGroup -> `--user`, fsGroup and
  supplementalGroups -> `--group-add`, readOnlyRootFilesystem -> `--read-only` (podman's extra
  tmpfs mounts off, so only what the chart mounts is writable), capabilities -> `--cap-drop` /
  `--cap-add`, allowPrivilegeEscalation false -> no-new-privileges, privileged, seccomp
  Unconfined; runAsNonRoot with runAsUser 0 or unset is refused as the kubelet refuses it (tfchart
  does not read the image's USER);
* volumes: the release's PersistentVolumeClaim is ONE host directory, the run directory, bind-mounted
  at the rendered mountPath (subPath and readOnly honoured) in every pod that mounts it. Before the
  first pod starts, a short root container makes it writable the way the kubelet's fsGroup does
  (group fsGroup, group rwX, setgid directories; without fsGroup: owned by the pod's user); when the
  run ends, the same kind of container gives everything in it back to the invoking user. emptyDir
  -> a tmpfs of its sizeLimit; configMap -> the rendered ConfigMap's data written to files and
  bind-mounted read-only. The run supervisor Deployment is not run (it needs an API server;
  here the run ends, and every container is removed, when the chief's Job ends); other volume
  kinds (secret, hostPath, another claim) are refused with a one-line error;
* one network per run and, per pod, a sandbox container that holds the pod's network identity
  as Kubernetes' pause container does: `--hostname <pod>`, `--network-alias` for the names
  cluster DNS would give the pod (`<hostname>.<subdomain>.<namespace>.svc.<clusterDomain>` when a
  headless Service named after the subdomain selects it: StatefulSet pods
  `<sts>-<k>.<serviceName>`, the chief Job its hostname and subdomain; and
  `<service>.<namespace>.svc.<clusterDomain>` for every Service selecting it), search domains as
  in a pod's resolv.conf, and the published ports. The pod's container joins the sandbox's
  network (`--network container:`), so a restarted container keeps the pod's address, MAC and DNS
  record, as it does in Kubernetes. The sandbox runs `sleep` in the pod's own image;
* the restart semantics of its controller: StatefulSet and Deployment pods are restarted whenever
  their container exits (a killed worker comes back under the same name and alias); a Job's pod is
  retried after a failure at most backoffLimit times (restartPolicy OnFailure or Never), then the
  Job has failed. Restarts back off 1, 2, 4, 8, then 10 s (the kubelet's back-off is longer);
* TensorBoard's container port published on 127.0.0.1:<free port>.

Every container and network carries the label tfchart.run=<run id> (the network is named after
it); `ContainerCluster.stop()` (called by `processes.running` on success, failure, timeout, Ctrl-C and
SIGTERM) stops the pods' containers (SIGTERM, SIGKILL after the grace period), gives the volume
back, then removes every container, network and volume with the label (`--rm`, `rm -f -v`,
`network rm`, `volume rm`). Only a SIGKILL to tfchart itself leaves them; then
`podman rm -f $(podman ps -aq --filter label=tfchart.run=<id>) && podman network rm <id>`.

The images must have /bin/sh, sleep, chown and find (the trainer image has): the sandboxes and the
volume's ownership containers run them.

Not emulated: resource requests and limits (nothing is enforced), probes (readiness, liveness),
terminationGracePeriodSeconds (stopping gives every container 10 s, as the process engine does),
image HEALTHCHECKs (off, as Kubernetes ignores them), NetworkPolicies (every pod of the network
reaches every other), Services' virtual IPs (a Service name resolves to its pods' addresses),
Secrets and the Kubernetes API. TensorFlow Serving is not run (its image is not available
offline): tfchart prints how the export is served instead, as the process engine does.
"""

from __future__ import annotations

import base64
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfchart.errors import EngineNotFound, TfchartError, UsageError
from tfchart.local.processes import LocalPlan, LocalPod, RenderedPod, free_port, serving_notes
from tfdcontract import CHIEF, PS, TENSORBOARD, StepLine, parse_step_line

CONTAINER_ENGINES = ("podman", "docker")
RUN_LABEL = "tfchart.run"
POD_LABEL = "tfchart.pod"
SANDBOX_LABEL = "tfchart.sandbox"
SANDBOX_SUFFIX = "-sandbox"
PAUSE = "trap 'exit 0' TERM INT; sleep infinity & wait"  # the sandbox's process: nothing, until told to stop
PULL_FLAGS = {"Never": "never", "IfNotPresent": "missing", "Always": "always"}
VOLUME_TARGET = "/volume"  # where the ownership containers see the shared volume
MAX_BACKOFF_S = 10.0
ENGINE_TIMEOUT_S = 60.0


# ---------------------------------------------------------------------------------------------
# the pods as containers: pure functions of the rendered manifests (no engine needed)


@dataclass(frozen=True)
class Bind:
    """A host directory or file bind-mounted into a container."""

    source: Path
    target: str
    read_only: bool = False
    claim: bool = False  # the release's PersistentVolumeClaim (the run directory)

    def args(self) -> list[str]:
        for path in (str(self.source), self.target):
            if "," in path:
                raise UsageError(f"cannot bind-mount {path}: a container mount path may not contain a comma")
        readonly = ",readonly=true" if self.read_only else ""
        return ["--mount", f"type=bind,source={self.source},target={self.target}{readonly}"]


@dataclass(frozen=True)
class Tmpfs:
    """An emptyDir: a tmpfs of its sizeLimit, world-writable as the kubelet makes emptyDirs."""

    target: str
    size_bytes: int | None = None

    def args(self) -> list[str]:
        size = f",size={self.size_bytes}" if self.size_bytes else ""
        return ["--tmpfs", f"{self.target}:rw,exec,mode=0777{size}"]


@dataclass(frozen=True)
class Security:
    """A container's effective securityContext (container fields over the pod's)."""

    user: int | None = None
    group: int | None = None
    fs_group: int | None = None
    supplemental_groups: tuple[int, ...] = ()
    read_only: bool = False
    cap_drop: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    no_new_privileges: bool = False
    privileged: bool = False
    seccomp_unconfined: bool = False

    def args(self, engine: str) -> list[str]:
        args: list[str] = []
        if self.user is not None:
            args += ["--user", f"{self.user}:{self.group}" if self.group is not None else str(self.user)]
        for group in dict.fromkeys(
            [*([self.fs_group] if self.fs_group is not None else []), *self.supplemental_groups]
        ):
            args += ["--group-add", str(group)]
        if self.read_only:
            # podman mounts tmpfs on /tmp, /run and /var/tmp of read-only containers; Kubernetes does not.
            args += ["--read-only", *(["--read-only-tmpfs=false"] if engine == "podman" else [])]
        for capability in self.cap_drop:
            args += ["--cap-drop", capability]
        for capability in self.cap_add:
            args += ["--cap-add", capability]
        if self.no_new_privileges:
            args += ["--security-opt", "no-new-privileges"]
        if self.privileged:
            args += ["--privileged"]
        if self.seccomp_unconfined:
            args += ["--security-opt", "seccomp=unconfined"]
        return args


@dataclass(frozen=True)
class Restart:
    """When a pod's controller starts its container again."""

    policy: str  # Always (StatefulSet, Deployment), OnFailure or Never (Job)
    backoff_limit: int = 0  # Jobs: failures retried before the Job has failed

    def again(self, code: int, failures: int) -> bool:
        """Start the container again after it exited with `code`, `failures` failures so far?"""
        if self.policy == "Always":
            return True
        return code != 0 and failures <= self.backoff_limit

    def describe(self, failures: int) -> str:
        if self.policy == "Always":
            return "restartPolicy Always"
        return f"retry {failures} of backoffLimit {self.backoff_limit}"


@dataclass
class ContainerPod(LocalPod):
    """One pod of the rendered release as a container: everything `<engine> run` needs."""

    container_name: str = ""
    kind: str = ""
    image: str = ""
    pull: str = "missing"
    security: Security = field(default_factory=Security)
    entrypoint: str | None = None
    command: list[str] = field(default_factory=list)  # after the image: command[1:] + args, or args
    workdir: str | None = None
    binds: list[Bind] = field(default_factory=list)
    tmpfs: list[Tmpfs] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)  # the pod's own DNS name first
    dns_search: list[str] = field(default_factory=list)
    ports: list[tuple[int, int]] = field(default_factory=list)  # (127.0.0.1 port, container port)
    restart: Restart = field(default_factory=lambda: Restart("Always"))
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def sandbox_name(self) -> str:
        return self.container_name + SANDBOX_SUFFIX


def quantity_bytes(quantity: object) -> int:
    """A Kubernetes quantity (2Gi, 64Mi, 500M, 1024) in whole bytes, rounded up as the kubelet does."""
    from tfchart.manifests.quantity import parse_or_none

    size = parse_or_none(quantity)
    if size is None or size < 0:
        raise UsageError(f"cannot read the size {quantity!r}", "use a Kubernetes quantity such as 2Gi or 512Mi")
    return math.ceil(size)


def pull_policy(container: dict[str, Any]) -> str:
    """The kubelet's pull policy as `--pull`: the rendered one, else Always for :latest or no tag."""
    policy = container.get("imagePullPolicy")
    if policy is None:
        image = str(container["image"])
        tag = image.rsplit("/", 1)[-1].partition(":")[2] if "@" not in image else "digest"
        policy = "Always" if tag in ("", "latest") else "IfNotPresent"
    if policy not in PULL_FLAGS:
        raise UsageError(f"unknown imagePullPolicy {policy!r}", "use Always, IfNotPresent or Never")
    return PULL_FLAGS[policy]


def security_of(pod: RenderedPod) -> Security:
    """The container's effective securityContext; refuses runAsNonRoot with uid 0 or none, as the kubelet does."""
    pod_context: dict[str, Any] = pod.spec.get("securityContext") or {}
    context: dict[str, Any] = pod.container.get("securityContext") or {}

    def effective(key: str) -> Any:
        return context.get(key, pod_context.get(key))

    user, group = effective("runAsUser"), effective("runAsGroup")
    if effective("runAsNonRoot") and not user:
        why = "runAsUser is 0" if user == 0 else "runAsUser is not set (tfchart does not read the image's USER)"
        raise UsageError(
            f"{pod.name}: runAsNonRoot is set but {why}; the kubelet would refuse to start it",
            "set securityContext.runAsUser to a non-zero uid",
        )
    fs_group = pod_context.get("fsGroup")
    capabilities = context.get("capabilities") or {}
    seccomp = (effective("seccompProfile") or {}).get("type")
    return Security(
        user=None if user is None else int(user),
        group=None if group is None else int(group),
        fs_group=None if fs_group is None else int(fs_group),
        supplemental_groups=tuple(int(g) for g in pod_context.get("supplementalGroups") or ()),
        read_only=bool(context.get("readOnlyRootFilesystem")),
        cap_drop=tuple(capabilities.get("drop") or ()),
        cap_add=tuple(capabilities.get("add") or ()),
        no_new_privileges=context.get("allowPrivilegeEscalation") is False,
        privileged=bool(context.get("privileged")),
        seccomp_unconfined=seccomp == "Unconfined",
    )


def entrypoint_and_command(container: dict[str, Any]) -> tuple[str | None, list[str]]:
    """Kubernetes' command replaces the image's ENTRYPOINT, args its CMD."""
    command = [str(item) for item in container.get("command") or []]
    args = [str(item) for item in container.get("args") or []]
    if command:
        return command[0], [*command[1:], *args]
    return None, args


def selects(service: dict[str, Any], labels: dict[str, str]) -> bool:
    selector: dict[str, str] = service.get("spec", {}).get("selector") or {}
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def is_headless(service: dict[str, Any]) -> bool:
    return bool(service.get("spec", {}).get("clusterIP") == "None")


def dns_names(pod: RenderedPod, services: Sequence[dict[str, Any]], namespace: str, domain: str) -> list[str]:
    """The names cluster DNS gives the pod: its own (hostname.subdomain) first, then its Services'."""
    zone = f"{namespace}.svc.{domain}"
    if pod.kind == "StatefulSet":
        hostname, subdomain = pod.name, pod.controller["spec"].get("serviceName")
    else:
        hostname, subdomain = pod.spec.get("hostname") or pod.name, pod.spec.get("subdomain")
    selecting = [s for s in services if selects(s, pod.labels)]
    own = [
        f"{hostname}.{subdomain}.{zone}"
        for s in selecting
        if subdomain and s["metadata"]["name"] == subdomain and is_headless(s)
    ]
    return [*own[:1], *sorted(f"{s['metadata']['name']}.{zone}" for s in selecting)]


@dataclass(frozen=True)
class Storage:
    """Where the release's volumes live on this machine."""

    volume_dir: Path  # the PersistentVolumeClaim
    config_root: Path  # one directory per configMap volume, written when the run starts
    claim: str | None = None  # the claim the volume stands for (the first one a pod mounts)


def volume_mounts(pod: RenderedPod, storage: Storage) -> tuple[list[Bind], list[Tmpfs]]:
    """The container's volumeMounts as bind mounts and tmpfs mounts."""
    volumes = {volume["name"]: volume for volume in pod.spec.get("volumes") or []}
    binds: list[Bind] = []
    tmpfs: list[Tmpfs] = []
    for mount in pod.container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise UsageError(f"{pod.name}: volumeMount {mount['name']!r} names no volume of the pod")
        target, sub_path = str(mount["mountPath"]), str(mount.get("subPath") or "")
        read_only = bool(mount.get("readOnly"))
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            if storage.claim is not None and claim.get("claimName") != storage.claim:
                raise UsageError(
                    f"{pod.name} mounts a second PersistentVolumeClaim {claim.get('claimName')!r}",
                    f"tfchart local emulates one shared volume ({storage.claim})",
                )
            read_only = read_only or bool(claim.get("readOnly"))
            binds.append(Bind(storage.volume_dir / sub_path, target, read_only, claim=True))
        elif "emptyDir" in volume:
            limit = (volume["emptyDir"] or {}).get("sizeLimit")
            tmpfs.append(Tmpfs(target, quantity_bytes(limit) if limit else None))
        elif "configMap" in volume:
            binds.append(Bind(storage.config_root / mount["name"] / sub_path, target, True))
        elif "projected" in volume and service_account_token(volume):
            continue  # no API server to talk to: the token is not mounted
        else:
            kind = next((key for key in volume if key != "name"), "unknown")
            raise UsageError(
                f"{pod.name}: volume {mount['name']!r} ({kind}) cannot be emulated by tfchart local",
                "only the release's PersistentVolumeClaim, emptyDir and configMap volumes are supported",
            )
    return binds, tmpfs


def service_account_token(volume: dict[str, Any]) -> bool:
    return any("serviceAccountToken" in source for source in volume["projected"].get("sources") or [])


def first_claim(pods: Sequence[RenderedPod]) -> str | None:
    for pod in pods:
        for volume in pod.spec.get("volumes") or []:
            if "persistentVolumeClaim" in volume:
                return str(volume["persistentVolumeClaim"].get("claimName"))
    return None


def config_map_files(docs: Sequence[dict[str, Any]], pods: Sequence[RenderedPod]) -> dict[str, tuple[bytes, int]]:
    """Every file of the configMap volumes, as `<volume>/<path>` -> (content, mode)."""
    config_maps = {doc["metadata"]["name"]: doc for doc in docs if doc.get("kind") == "ConfigMap"}
    files: dict[str, tuple[bytes, int]] = {}
    for pod in pods:
        for volume in pod.spec.get("volumes") or []:
            source = volume.get("configMap")
            if source is None:
                continue
            config_map = config_maps.get(source.get("name"))
            if config_map is None:
                if source.get("optional"):
                    continue
                raise UsageError(
                    f"{pod.name}: ConfigMap {source.get('name')!r} is not part of the rendered release",
                    "tfchart local can only mount ConfigMaps the chart renders",
                )
            for path, (content, mode) in config_map_items(config_map, source).items():
                files[f"{volume['name']}/{path}"] = (content, mode)
    return files


def config_map_items(config_map: dict[str, Any], source: dict[str, Any]) -> dict[str, tuple[bytes, int]]:
    data = {key: str(value).encode() for key, value in (config_map.get("data") or {}).items()}
    data |= {key: base64.b64decode(value) for key, value in (config_map.get("binaryData") or {}).items()}
    default_mode = int(source.get("defaultMode", 0o644))
    items = source.get("items") or [{"key": key, "path": key} for key in data]
    files: dict[str, tuple[bytes, int]] = {}
    for item in items:
        if item["key"] not in data:
            raise UsageError(f"ConfigMap {config_map['metadata']['name']!r} has no key {item['key']!r}")
        files[item["path"]] = (data[item["key"]], int(item.get("mode", default_mode)))
    return files


def restart_of(pod: RenderedPod) -> Restart:
    if pod.kind == "Job":
        return Restart(str(pod.spec.get("restartPolicy", "Never")), int(pod.controller["spec"].get("backoffLimit", 6)))
    return Restart("Always")


def container_pod(
    pod: RenderedPod,
    run_id: str,
    namespace: str,
    domain: str,
    services: Sequence[dict[str, Any]],
    storage: Storage,
) -> ContainerPod:
    entrypoint, command = entrypoint_and_command(pod.container)
    binds, tmpfs = volume_mounts(pod, storage)
    zone = f"{namespace}.svc.{domain}"
    published = [int(p["containerPort"]) for p in pod.container.get("ports") or []] if pod.role == TENSORBOARD else []
    return ContainerPod(
        pod.name,
        pod.role,
        pod.index,
        pod.argv,
        pod.env(namespace),
        container_name=f"{run_id}-{pod.name}",
        kind=pod.kind,
        image=str(pod.container["image"]),
        pull=pull_policy(pod.container),
        security=security_of(pod),
        entrypoint=entrypoint,
        command=command,
        workdir=pod.container.get("workingDir"),
        binds=binds,
        tmpfs=tmpfs,
        aliases=dns_names(pod, services, namespace, domain),
        dns_search=[zone, f"svc.{domain}", domain],
        ports=[(free_port(), port) for port in published],
        restart=restart_of(pod),
        labels={RUN_LABEL: run_id, POD_LABEL: pod.name, "tfchart.role": pod.role},
    )


def sandbox_argv(engine: str, network: str, pod: ContainerPod) -> list[str]:
    """The pod's sandbox, as Kubernetes' pause container: it holds the pod's network identity.

    Hostname, DNS aliases, search domains and published ports belong to it; the pod's container
    joins its network (and, with podman, its hostname), so a restarted container keeps the pod's
    address and DNS record, as it does in Kubernetes. It runs detached, under the pod's user.
    """
    argv = [engine, "run", "--detach", "--rm", "--name", pod.sandbox_name]
    argv += ["--label", f"{RUN_LABEL}={pod.labels[RUN_LABEL]}", "--label", f"{SANDBOX_LABEL}={pod.name}"]
    argv += ["--network", network, "--hostname", pod.name]
    for alias in pod.aliases:
        argv += ["--network-alias", alias]
    for domain in pod.dns_search:
        argv += ["--dns-search", domain]
    for host_port, container_port in pod.ports:
        argv += ["--publish", f"127.0.0.1:{host_port}:{container_port}"]
    argv += ["--pull", "never", "--no-healthcheck", *pod.security.args(engine)]
    return [*argv, "--entrypoint", "/bin/sh", pod.image, "-c", PAUSE]


def run_argv(engine: str, pod: ContainerPod) -> list[str]:
    """The `<engine> run` command of the pod's container (attached: its output is the pod's log)."""
    argv = [engine, "run", "--rm", "--name", pod.container_name]
    for key, value in pod.labels.items():
        argv += ["--label", f"{key}={value}"]
    argv += ["--network", f"container:{pod.sandbox_name}"]
    # docker gives a container on another's network that container's hostname; podman shares it on request.
    argv += ["--uts", f"container:{pod.sandbox_name}"] if engine == "podman" else []
    argv += ["--pull", pod.pull, "--no-healthcheck", *pod.security.args(engine)]
    for name, value in {**pod.env, "HOSTNAME": pod.name}.items():
        argv += ["--env", f"{name}={value}"]
    for bind in pod.binds:
        argv += bind.args()
    for mount in pod.tmpfs:
        argv += mount.args()
    argv += ["--workdir", pod.workdir] if pod.workdir else []
    argv += ["--entrypoint", pod.entrypoint] if pod.entrypoint is not None else []
    return [*argv, pod.image, *pod.command]


@dataclass(frozen=True)
class VolumeAccess:
    """Who must be able to write the shared volume: the first pod that mounts it read-write."""

    user: int | None
    group: int | None
    fs_group: int | None

    def script(self) -> str:
        """What the kubelet does for fsGroup (or, without one, what makes the pod's user the owner)."""
        if self.fs_group is not None:
            return (
                f"chgrp -R {self.fs_group} {VOLUME_TARGET} && chmod -R g+rwX {VOLUME_TARGET}"
                f" && find {VOLUME_TARGET} -type d -exec chmod g+s {{}} +"
            )
        owner = f"{self.user}:{self.group}" if self.group is not None else str(self.user)
        return f"chown -R {owner} {VOLUME_TARGET} && chmod -R u+rwX {VOLUME_TARGET}"


def volume_access(pods: Sequence[ContainerPod]) -> VolumeAccess | None:
    for pod in pods:
        if any(bind.claim and not bind.read_only for bind in pod.binds):
            security = pod.security
            if security.fs_group is None and not security.user:
                return None  # root writes anywhere
            return VolumeAccess(security.user, security.group, security.fs_group)
    return None


@dataclass
class ContainerPlan(LocalPlan):
    """The release as containers: what `ContainerCluster` starts, and how the summary reads it."""

    pods: list[ContainerPod]  # type: ignore[assignment]
    engine: str = "podman"
    run_id: str = ""
    storage: Storage = field(default_factory=lambda: Storage(Path(), Path()))
    mount_path: str = "/data"
    config_files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    access: VolumeAccess | None = None
    host_owner: str = "0:0"  # the invoking user as the engine's containers see it

    @property
    def network(self) -> str:
        return self.run_id

    @property
    def headline(self) -> str:
        return (
            f"{len(self.pods)} containers ({self.engine}, network {self.network}, label {RUN_LABEL}={self.run_id}), "
            f"run directory {self.storage.volume_dir}"
        )

    def cluster(self, on_line: Callable[[LocalPod, str], None]) -> ContainerCluster:
        return ContainerCluster(self, on_line)

    def host_path(self, path: object) -> object:
        """A path inside the pods' shared volume (status.json's export_path) as a path on this machine."""
        if not isinstance(path, str) or not (path == self.mount_path or path.startswith(self.mount_path + "/")):
            return path
        return str(self.workdir / path[len(self.mount_path) :].lstrip("/"))

    @property
    def volume_image(self) -> str | None:
        """The image the ownership containers run (one that mounts the shared volume)."""
        return next((pod.image for pod in self.pods for bind in pod.binds if bind.claim), None)


def plan_from_manifests(
    docs: Sequence[dict[str, Any]],
    values: dict[str, Any],
    volume_dir: Path,
    namespace: str,
    engine: str,
    host_owner: str,
    run_id: str | None = None,
) -> ContainerPlan:
    """The rendered release as containers (pure: no engine is asked anything)."""
    from tfchart.local.processes import rendered_pods

    run_id = run_id or f"tfd-{secrets.token_hex(3)}"
    rendered = rendered_pods(docs)
    if not any(pod.role == CHIEF for pod in rendered):
        raise UsageError("the rendered release has no chief", "every topology renders a chief Job: check --chart")
    services = [doc for doc in docs if doc.get("kind") == "Service"]
    domain = str(values.get("clusterDomain") or "cluster.local")
    storage = Storage(volume_dir, Path(tempfile.gettempdir()) / f"tfchart-{run_id}", first_claim(rendered))
    pods = [container_pod(pod, run_id, namespace, domain, services, storage) for pod in rendered]
    storage_values = values.get("storage") or {}
    mount_path = str(storage_values.get("mountPath") or "/data").rstrip("/") or "/"
    workdir = volume_dir / str(storage_values.get("subPath") or "")
    tensorboard = next((pod for pod in pods if pod.role == TENSORBOARD and pod.ports), None)
    url = f"http://127.0.0.1:{tensorboard.ports[0][0]}/" if tensorboard else None
    return ContainerPlan(
        workdir=workdir,
        pods=pods,
        addresses={pod.aliases[0]: pod.container_name for pod in pods if pod.aliases},
        tensorboard_url=url,
        serving_notes=serving_notes(values, workdir),
        values=values,
        engine=engine,
        run_id=run_id,
        storage=storage,
        mount_path=mount_path,
        config_files=config_map_files(docs, rendered),
        access=volume_access(pods),
        host_owner=host_owner,
    )


# ---------------------------------------------------------------------------------------------
# the engine: checked before anything starts


def engine_command(engine: str, *args: str, timeout: float = ENGINE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Runs `<engine> args...`; a timeout or an engine that cannot start reads as a failed command."""
    try:
        return subprocess.run(
            [engine, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess([engine, *args], 125, "", str(error))


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def ensure_engine(engine: str) -> None:
    """One-line EngineNotFound unless the engine's CLI is installed and its engine answers."""
    from tfchart.images.engines import check_engine_reachable, detect_engine

    if engine not in CONTAINER_ENGINES:
        raise UsageError(f"unknown container engine: {engine}", f"use one of: {', '.join(CONTAINER_ENGINES)}")
    try:
        check_engine_reachable(detect_engine(engine))
    except EngineNotFound as error:
        fix = (
            "install and start Docker (or use --engine podman)"
            if engine == "docker"
            else "install Podman, check `podman info` (or use --engine docker)"
        )
        raise EngineNotFound(f"{error.message}: {fix}, or run the pods as processes with --engine process") from None


def image_available(engine: str, image: str) -> bool:
    return engine_command(engine, "image", "inspect", image).returncode == 0


def check_images(engine: str, pods: Sequence[ContainerPod]) -> None:
    """Every image exists locally or is pulled now, as its pull policy says; else one line with the fix."""
    for image, pull in dict.fromkeys((pod.image, pod.pull) for pod in pods):
        if pull != "always" and image_available(engine, image):
            continue
        reason = "imagePullPolicy Never"
        if pull != "never":
            answer = engine_command(engine, "pull", image, timeout=1800)
            if answer.returncode == 0:
                continue
            reason = f"pull failed: {last_line(answer.stderr) or answer.returncode}"
        raise TfchartError(
            f"image {image} is not in {engine}'s local store ({reason}): build it with "
            f"`tfchart build --engine {engine}`, or --set image.registry=...,image.repository=...,image.tag=... "
            "to an image you have"
        )


def host_owner(engine: str) -> str:
    """The invoking user as the engine's containers see it (rootless podman or docker: root of the user namespace)."""
    if engine == "podman":
        rootless = engine_command("podman", "info", "--format", "{{.Host.Security.Rootless}}").stdout == "true\n"
    else:
        rootless = "rootless" in engine_command("docker", "info", "--format", "{{.SecurityOptions}}").stdout
    return "0:0" if rootless else f"{os.getuid()}:{os.getgid()}"


def plan(
    render: Callable[[list[tuple[str, str]]], list[dict[str, Any]]],
    values: dict[str, Any],
    volume_dir: Path,
    namespace: str,
    engine: str,
) -> ContainerPlan:
    """Checks the engine, renders the release with the user's values only, and checks every image."""
    ensure_engine(engine)
    container_plan = plan_from_manifests(render([]), values, volume_dir, namespace, engine, host_owner(engine))
    check_images(engine, container_plan.pods)
    return container_plan


# ---------------------------------------------------------------------------------------------
# running them


@dataclass
class PodProcess:
    """A pod's supervisor: it runs the container again as the pod's controller would."""

    pod: ContainerPod
    thread: threading.Thread | None = None
    popen: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    restarts: int = 0
    held: bool = False  # stopped on purpose (kill): not started again until restart()

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM are ignored while containers are being removed (a second Ctrl-C must not leak them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class ContainerCluster:
    """Starts the pods as containers on one network, streams their logs, and always removes everything."""

    def __init__(self, plan: ContainerPlan, on_line: Callable[[LocalPod, str], None]) -> None:
        self.plan = plan
        self.on_line = on_line
        self.processes: dict[str, PodProcess] = {}
        self.progress: StepLine | None = None
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._prepared = False
        self._stopping = False

    # -- engine commands

    def _engine(self, *args: str, timeout: float = ENGINE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return engine_command(self.plan.engine, *args, timeout=timeout)

    def _required(self, what: str, *args: str) -> subprocess.CompletedProcess[str]:
        answer = self._engine(*args)
        if answer.returncode != 0:
            raise TfchartError(
                f"{what} failed: {last_line(answer.stderr) or answer.returncode}",
                f"the command was: {self.plan.engine} {' '.join(args)}",
            )
        return answer

    def _labelled(self, listing: str, template: str | None = None) -> list[str]:
        """IDs (or `template` of each) of what `<engine> <listing>` lists with the run's label."""
        shown = ["--format", template] if template else ["-q"]
        answer = self._engine(*listing.split(), *shown, "--filter", f"label={RUN_LABEL}={self.plan.run_id}")
        return answer.stdout.split() if answer.returncode == 0 else []

    # -- start

    def start(self, pods: Sequence[LocalPod]) -> None:
        """Creates the network and the volumes once, then starts every pod at once (TensorFlow tasks wait for peers)."""
        if not self._prepared:
            self._prepared = True
            self._create_network()
            self._write_config_maps()
            self._grant_volume()
        container_pods = [pod for pod in pods if isinstance(pod, ContainerPod)]
        self._start_sandboxes([pod for pod in container_pods if pod.name not in self.processes])
        for pod in container_pods:
            process = self.processes.setdefault(pod.name, PodProcess(pod))
            self._supervise(process)

    def _create_network(self) -> None:
        network = self.plan.network
        self._required(
            "creating the network", "network", "create", "--label", f"{RUN_LABEL}={self.plan.run_id}", network
        )
        if self.plan.engine != "podman":
            return  # docker's user-defined networks always resolve container names and aliases
        answer = self._engine("network", "inspect", network, "--format", "{{.DNSEnabled}}")
        if answer.stdout.strip() != "true":
            raise TfchartError(
                f"podman network {network} has no DNS, so the pods cannot find each other by name",
                "install aardvark-dns (podman's netavark DNS server), e.g. `apt-get install aardvark-dns`",
            )

    def _start_sandboxes(self, pods: Sequence[ContainerPod]) -> None:
        """Every pod's sandbox at once; each must be running before its container joins it."""
        starting = [
            (pod, subprocess.Popen(sandbox_argv(self.plan.engine, self.plan.network, pod), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            for pod in pods
        ]  # fmt: skip
        for pod, popen in starting:
            try:
                _, stderr = popen.communicate(timeout=ENGINE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                stderr = f"{self.plan.engine} did not start it within {ENGINE_TIMEOUT_S:.0f} s"
            if popen.returncode != 0:
                raise TfchartError(
                    f"could not start the sandbox of {pod.name}: {last_line(stderr) or popen.returncode}",
                    "the image must have /bin/sh and sleep",
                )

    def _write_config_maps(self) -> None:
        root = self.plan.storage.config_root
        if not self.plan.config_files:
            return
        for relative, (content, mode) in self.plan.config_files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
        for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            directory.chmod(0o755)
        for pod in self.plan.pods:  # a volume with no files still needs its mount point
            for bind in pod.binds:
                if not bind.claim and not bind.source.exists():
                    bind.source.mkdir(parents=True, mode=0o755)

    def _ownership(self, name: str, script: str) -> subprocess.CompletedProcess[str]:
        """A short root container over the shared volume (the kubelet's fsGroup work, or giving it back)."""
        image = self.plan.volume_image
        assert image is not None
        return self._engine(
            "run", "--rm", "--name", f"{self.plan.run_id}-{name}", "--label", f"{RUN_LABEL}={self.plan.run_id}",
            "--network", "none", "--user", "0:0", "--pull", "never", "--no-healthcheck",
            *Bind(self.plan.storage.volume_dir, VOLUME_TARGET).args(), "--entrypoint", "/bin/sh", image, "-c", script,
            timeout=600,
        )  # fmt: skip

    def _grant_volume(self) -> None:
        self.plan.storage.volume_dir.mkdir(parents=True, exist_ok=True)
        for pod in self.plan.pods:  # subPath directories exist before anything mounts them, as the kubelet makes them
            for bind in pod.binds:
                if bind.claim:
                    bind.source.mkdir(parents=True, exist_ok=True)
        if self.plan.access is None:
            return
        answer = self._ownership("volume-permissions", self.plan.access.script())
        if answer.returncode != 0:
            raise TfchartError(
                f"could not make {self.plan.storage.volume_dir} writable for the pods: "
                f"{last_line(answer.stderr) or answer.returncode}",
                "the image must have /bin/sh, chown and find",
            )

    # -- supervision

    def _supervise(self, process: PodProcess) -> None:
        process.held = False
        process.thread = threading.Thread(
            target=self._controller, args=(process,), daemon=True, name=f"pod-{process.pod.name}"
        )
        process.thread.start()

    def _controller(self, process: PodProcess) -> None:
        """Runs the container until its controller would stop starting it again."""
        pod, failures = process.pod, 0
        while True:
            popen = self._launch(process)
            if popen is None:
                return
            code = self._stream(pod, popen)
            process.exit_code = code
            failures += code != 0
            if self._stopping or process.held:
                return
            if not pod.restart.again(code, failures):
                if code != 0:
                    limit = pod.restart.backoff_limit
                    self.on_line(pod, f"[tfchart] exited with {code}: backoffLimit {limit} reached, the Job failed")
                return
            delay = min(MAX_BACKOFF_S, float(2**process.restarts))
            why = pod.restart.describe(failures)
            self.on_line(pod, f"[tfchart] exited with {code}; starting it again in {delay:.0f} s ({why})")
            if not self._pause(process, delay):
                return
            process.restarts += 1

    def _pause(self, process: PodProcess, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._stopping or process.held:
                return False
            time.sleep(0.1)
        return True

    def _launch(self, process: PodProcess) -> subprocess.Popen[bytes] | None:
        pod = process.pod
        with self._lock:  # stop() sets _stopping under the same lock: nothing starts after it began
            if self._stopping or process.held:
                return None
            if process.exit_code is not None:  # a restart: the last container may still be being removed
                self._engine("rm", "-f", "-v", pod.container_name)
            try:
                process.popen = subprocess.Popen(
                    run_argv(self.plan.engine, pod),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # Ctrl-C reaches tfchart only: stop() ends the containers
                )
            except OSError as error:
                process.exit_code = 127
                self.on_line(pod, f"[tfchart] cannot run {self.plan.engine}: {error}")
                return None
            return process.popen

    def _stream(self, pod: ContainerPod, popen: subprocess.Popen[bytes]) -> int:
        assert popen.stdout is not None
        for raw in popen.stdout:
            line = raw.decode(errors="replace").rstrip()
            progress = parse_step_line(line) if pod.is_chief else None
            if progress:
                self.progress = progress
            self.on_line(pod, line)
        return popen.wait()

    def wait_for(self, name: str, timeout: float | None = None, poll: Callable[[], None] | None = None) -> int:
        """Waits until the pod's controller is done with it (a Job: succeeded, or failed past backoffLimit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        process = self.processes[name]
        while process.running:
            if deadline is not None and time.monotonic() > deadline:
                raise TfchartError(
                    f"{name} did not finish within {timeout:.0f} s", "raise --timeout, or look at the logs above"
                )
            if poll:
                poll()
            if process.thread is not None:
                process.thread.join(timeout=0.2)
        return process.exit_code if process.exit_code is not None else 1

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signals the pod's container and keeps it stopped (until `restart`), as scaling it down would."""
        process = self.processes[name]
        process.held = True
        started = time.monotonic()
        while process.running:
            escalate = time.monotonic() - started > 10
            signal_name = "KILL" if escalate else signal.Signals(sig).name.removeprefix("SIG")
            self._engine("kill", "--signal", signal_name, process.pod.container_name)
            if process.thread is not None:
                process.thread.join(timeout=1)

    def restart(self, name: str) -> None:
        """Starts a pod's container stopped by `kill` again, in the same sandbox (name, aliases, address)."""
        process = self.processes[name]
        if process.running:
            raise UsageError(f"{name} is running: kill it first")
        self._supervise(process)

    # -- stop

    def stop(self, grace: float = 10.0) -> None:
        """Stops every container (SIGTERM, then SIGKILL after `grace`), gives the volume back, removes all labelled."""
        with self._lock:
            self._stopping = True
        with interrupts_deferred():
            running = self._labelled(PS, "{{.Names}}")
            containers = [name for name in running if not name.endswith(SANDBOX_SUFFIX)]
            if containers:  # the pods' containers first (their grace period), then the sandboxes they use
                self._engine("stop", "-t", str(int(grace)), *containers, timeout=grace + ENGINE_TIMEOUT_S)
            self._join_controllers()
            self._give_volume_back()
            self._remove_labelled()
            shutil.rmtree(self.plan.storage.config_root, ignore_errors=True)
        for warning in self.warnings:
            print(f"warning: {warning}", file=sys.stderr)

    def _join_controllers(self) -> None:
        """Waits for every `<engine> run` client; one whose container appeared late is removed by label."""
        for _ in range(3):
            for process in self.processes.values():
                if process.thread is not None:
                    process.thread.join(timeout=5)
            if not any(process.running for process in self.processes.values()):
                return
            leftovers = self._labelled("ps -a")
            if leftovers:
                self._engine("rm", "-f", "-v", *leftovers)
        for process in self.processes.values():
            if process.running and process.popen is not None:
                process.popen.kill()

    def _give_volume_back(self) -> None:
        if not self._prepared or self.plan.volume_image is None:
            return
        answer = self._ownership("volume-owner", f"chown -R {self.plan.host_owner} {VOLUME_TARGET}")
        if answer.returncode != 0:
            self.warnings.append(
                f"could not give {self.plan.storage.volume_dir} back to you ({last_line(answer.stderr)}): "
                f"sudo chown -R {os.getuid()}:{os.getgid()} {self.plan.storage.volume_dir}"
            )

    def _remove_labelled(self) -> None:
        """Containers, then networks, then volumes carrying the run's label; warns about any that stays."""
        engine, label = self.plan.engine, f"label={RUN_LABEL}={self.plan.run_id}"
        for listing, removal in (("ps -a", "rm -f -v"), ("network ls", "network rm"), ("volume ls", "volume rm -f")):
            found = self._labelled(listing)
            if found:
                self._engine(*removal.split(), *found)
            if self._labelled(listing):
                self.warnings.append(
                    f"{engine} could not remove everything of run {self.plan.run_id}: "
                    f"{engine} {removal} $({engine} {listing} -q --filter {label})"
                )
