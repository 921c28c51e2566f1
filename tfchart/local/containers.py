"""`tfchart local --engine podman|docker`: the rendered release as real containers, one per pod (the design:
docs/architecture.md, section 8). Below: the pods as containers (pure functions of the manifests: no engine
is asked anything), the engine's checks, then `ContainerCluster`, which runs them.

The chart is rendered with exactly the user's inputs: the pods keep the chart's mount path, ports and
cluster map. Every TensorFlow pod and TensorBoard runs its rendered image with command, args, env,
securityContext (`Security`), volumes (`volume_mounts`: the claim is the run directory, made writable as
fsGroup would make it and given back to the invoking user at the end) and restarts (`Restart`) as the
kubelet would run it; per pod, a sandbox holds the network identity (`sandbox_argv`, `dns_names`). The run
supervisor Deployment is not run (it needs an API server): the run ends, and every container is removed,
when the chief's Job ends. Every container and network carries the label tfchart.run=<run id> (the network
is named after it); only a SIGKILL to tfchart leaves them behind, then
`podman rm -f $(podman ps -aq --filter label=tfchart.run=<id>) && podman network rm <id>`.
The images must have /bin/sh, sleep, chown and find (the trainer image has).

Not emulated: resource requests and limits (nothing is enforced), probes (startup, readiness, liveness),
terminationGracePeriodSeconds (stopping gives every container 10 s, as the process engine does), image
HEALTHCHECKs (off, as Kubernetes ignores them), NetworkPolicies (every pod of the network reaches every
other), Services' virtual IPs (a Service name resolves to its pods' addresses), Secrets and the Kubernetes
API. TensorFlow Serving is not run (its image is not available offline): tfchart prints how the export is
served instead, as the process engine does.
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tfchart.errors import EngineNotFound, TfchartError, UsageError
from tfchart.images.engines import answer, check_engine_reachable, detect_engine
from tfchart.local.jobset import headless_service
from tfchart.local.processes import (
    LocalCluster,
    LocalPlan,
    LocalPod,
    Process,
    RenderedPod,
    free_port,
    listening,
    rendered_pods,
    workload_of,
)
from tfchart.manifests.quantity import parse_or_none
from tfdcontract import TENSORBOARD

CONTAINER_ENGINES = ("podman", "docker")
RUN_LABEL = "tfchart.run"
POD_LABEL = "tfchart.pod"
SANDBOX_LABEL = "tfchart.sandbox"
SANDBOX_SUFFIX = "-sandbox"
PAUSE = "trap 'exit 0' TERM INT; sleep infinity & wait"  # the sandbox's process: nothing, until told to stop
PULL_FLAGS = {"Never": "never", "IfNotPresent": "missing", "Always": "always"}
VOLUME_TARGET = "/volume"  # where the ownership containers see the shared volume
ENGINE_TIMEOUT_S = 60.0


def repeated(flag: str, values: Iterable[object]) -> list[str]:
    """`flag` before every value: repeated("--env", ["A=1", "B=2"]) is ["--env", "A=1", "--env", "B=2"]."""
    return [part for value in values for part in (flag, str(value))]


def as_pairs(mapping: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in mapping.items()]


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
class Security:
    """A container's effective securityContext (container fields over the pod's): its user, and the rest as the
    engine's flags (--group-add for fsGroup and supplementalGroups, --read-only, capabilities, privileges)."""

    user: int | None = None
    group: int | None = None
    fs_group: int | None = None
    flags: tuple[str, ...] = ()

    @property
    def owner(self) -> str:
        return f"{self.user}:{self.group}" if self.group is not None else str(self.user)  # as --user and chown take it

    def args(self, engine: str) -> list[str]:
        user = [] if self.user is None else ["--user", self.owner]
        # podman mounts tmpfs on /tmp, /run and /var/tmp of read-only containers; Kubernetes does not.
        no_tmpfs = ["--read-only-tmpfs=false"] if engine == "podman" and "--read-only" in self.flags else []
        return [*user, *self.flags, *no_tmpfs]


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
    tmpfs: list[str] = field(default_factory=list)  # the emptyDirs, as `--tmpfs` takes them
    aliases: list[str] = field(default_factory=list)  # the pod's own DNS name first
    dns_search: list[str] = field(default_factory=list)
    ports: list[tuple[int, int]] = field(default_factory=list)  # (127.0.0.1 port, container port)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def sandbox_name(self) -> str:
        return self.container_name + SANDBOX_SUFFIX


def quantity_bytes(quantity: object) -> int:
    """A Kubernetes quantity (2Gi, 64Mi, 500M, 1024) in whole bytes, rounded up as the kubelet does."""
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


def security_of(pod: RenderedPod, allow_privileged: bool = False) -> Security:
    """The container's effective securityContext; refuses runAsNonRoot with uid 0 or none, as the kubelet does, and
    (unless `allow_privileged`) a privileged container or uid 0: on this machine they are its root, or your user's."""
    pod_context: dict[str, Any] = pod.spec.get("securityContext") or {}
    context: dict[str, Any] = pod.container.get("securityContext") or {}

    def effective(key: str) -> Any:
        return context.get(key, pod_context.get(key))

    user, group, fs_group = effective("runAsUser"), effective("runAsGroup"), pod_context.get("fsGroup")
    if effective("runAsNonRoot") and not user:
        why = "runAsUser is 0" if user == 0 else "runAsUser is not set (tfchart does not read the image's USER)"
        raise UsageError(f"{pod.name}: runAsNonRoot is set but {why}; the kubelet would refuse to start it",
                         "set securityContext.runAsUser to a non-zero uid")
    privileged = bool(context.get("privileged"))
    if (privileged or user == 0) and not allow_privileged:
        key = (f"{pod.role}.containerSecurityContext.privileged is true" if privileged
               else "its securityContext.runAsUser is 0")  # fmt: skip
        raise UsageError(f"{pod.name}: {key}: in a container on this machine that is root here (or your user, "
                         "rootless), with the run directory and, privileged, the host's devices",
                         "run it unprivileged with a non-zero runAsUser, or pass --allow-privileged if you mean it")
    groups = ([] if fs_group is None else [fs_group]) + list(pod_context.get("supplementalGroups") or ())
    capabilities = context.get("capabilities") or {}
    flags = repeated("--group-add", dict.fromkeys(int(g) for g in groups))
    flags += ["--read-only"] if context.get("readOnlyRootFilesystem") else []
    for flag, key in (("--cap-drop", "drop"), ("--cap-add", "add")):
        flags += repeated(flag, capabilities.get(key) or ())
    flags += ["--security-opt", "no-new-privileges"] if context.get("allowPrivilegeEscalation") is False else []
    flags += ["--privileged"] if privileged else []
    unconfined = (effective("seccompProfile") or {}).get("type") == "Unconfined"
    flags += ["--security-opt", "seccomp=unconfined"] if unconfined else []
    user, group, fs_group = (None if value is None else int(value) for value in (user, group, fs_group))
    return Security(user, group, fs_group, tuple(flags))


def dns_names(pod: RenderedPod, services: Sequence[dict[str, Any]], namespace: str, domain: str) -> list[str]:
    """The names cluster DNS gives the pod: its own first, `<hostname>.<subdomain>.<namespace>.svc.<clusterDomain>`
    where a headless Service named after the subdomain selects it (StatefulSet pods: `<sts>-<k>.<serviceName>`),
    then `<service>.<namespace>.svc.<clusterDomain>` for every Service selecting it."""
    zone = f"{namespace}.svc.{domain}"
    if pod.kind == "StatefulSet":
        hostname, subdomain = pod.name, pod.controller["spec"].get("serviceName")
    else:
        hostname, subdomain = pod.spec.get("hostname") or pod.name, pod.spec.get("subdomain")
    selecting = [s for s in services if (selector := s.get("spec", {}).get("selector"))
                 and all(pod.labels.get(key) == value for key, value in selector.items())]  # fmt: skip
    own = [f"{hostname}.{subdomain}.{zone}" for s in selecting
           if subdomain and s["metadata"]["name"] == subdomain and s["spec"].get("clusterIP") == "None"]  # fmt: skip
    return [*own[:1], *sorted(f"{s['metadata']['name']}.{zone}" for s in selecting)]


@dataclass(frozen=True)
class Storage:
    """Where the release's volumes live on this machine."""

    volume_dir: Path  # the PersistentVolumeClaim
    config_root: Path  # one directory per configMap volume, written when the run starts
    claim: str | None = None  # the claim the volume stands for (the first one a pod mounts)


def relative_inside(relative: str, what: str) -> str:
    """`relative`, or one line naming `what` when it is absolute or has a '..' segment (the API server's rule)."""
    if PurePosixPath(relative).is_absolute() or ".." in PurePosixPath(relative).parts:
        raise UsageError(f"{what} {relative!r} leaves its volume (an absolute path or a '..' segment)",
                         "give a path inside the volume, relative and without '..' (the API server refuses it too)")
    return relative


def within(root: Path, relative: str, what: str) -> Path:
    """`root/relative`, or one line naming `what` when it would leave `root`: see relative_inside, or a symbolic
    link already there that points out (a pod of an earlier run may have made it in the run directory). Nothing
    is ever mounted or written outside the run's directories."""
    path = root / relative_inside(relative, what)
    if not path.resolve().is_relative_to(root.resolve()):
        raise UsageError(f"{what} {relative!r} leads out of {root}: a symbolic link there points to {path.resolve()}",
                         f"remove the link (rm {path}) or choose another path")
    return path


def volume_mounts(pod: RenderedPod, storage: Storage) -> tuple[list[Bind], list[str]]:
    """The container's volumeMounts: the claim's in the run directory (subPath and readOnly honoured), an emptyDir
    as a tmpfs of its sizeLimit (world-writable, as the kubelet makes emptyDirs), a configMap's files read-only;
    other kinds (secret, hostPath, another claim) are refused."""
    volumes = {volume["name"]: volume for volume in pod.spec.get("volumes") or []}
    binds: list[Bind] = []
    tmpfs: list[str] = []
    for mount in pod.container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise UsageError(f"{pod.name}: volumeMount {mount['name']!r} names no volume of the pod")
        target, sub_path = str(mount["mountPath"]), str(mount.get("subPath") or "")
        what = f"{pod.name}: the subPath of volumeMount {mount['name']!r}"
        if mount.get("subPathExpr"):
            raise UsageError(f"{pod.name}: volumeMount {mount['name']!r} uses subPathExpr, which tfchart local does "
                             "not expand", "use subPath")
        read_only = bool(mount.get("readOnly"))
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            if storage.claim is not None and claim.get("claimName") != storage.claim:
                raise UsageError(f"{pod.name} mounts a second PersistentVolumeClaim {claim.get('claimName')!r}",
                                 f"tfchart local emulates one shared volume ({storage.claim})")
            read_only = read_only or bool(claim.get("readOnly"))
            binds.append(Bind(within(storage.volume_dir, sub_path, what), target, read_only, claim=True))
        elif "emptyDir" in volume:
            limit = (volume["emptyDir"] or {}).get("sizeLimit")
            size = quantity_bytes(limit) if limit else None
            tmpfs.append(f"{target}:rw,exec,mode=0777" + (f",size={size}" if size else ""))
        elif "configMap" in volume:
            binds.append(Bind(within(storage.config_root / mount["name"], sub_path, what), target, True))
        elif any("serviceAccountToken" in source for source in (volume.get("projected") or {}).get("sources") or []):
            continue  # the service account's API token: there is no API server to talk to
        else:
            kind = next((key for key in volume if key != "name"), "unknown")
            raise UsageError(f"{pod.name}: volume {mount['name']!r} ({kind}) cannot be emulated by tfchart local",
                             "only the release's PersistentVolumeClaim, emptyDir and configMap volumes are supported")
    return binds, tmpfs


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
                raise UsageError(f"{pod.name}: ConfigMap {source.get('name')!r} is not part of the rendered release",
                                 "tfchart local can only mount ConfigMaps the chart renders")
            data = {key: str(value).encode() for key, value in (config_map.get("data") or {}).items()}
            data |= {key: base64.b64decode(value) for key, value in (config_map.get("binaryData") or {}).items()}
            for item in source.get("items") or [{"key": key, "path": key} for key in data]:
                if item["key"] not in data:
                    raise UsageError(f"ConfigMap {config_map['metadata']['name']!r} has no key {item['key']!r}")
                mode = int(item.get("mode", source.get("defaultMode", 0o644)))
                what = f"{pod.name}: the path of item {item['key']!r} of configMap volume {volume['name']!r}"
                files[f"{volume['name']}/{relative_inside(str(item['path']), what)}"] = (data[item["key"]], mode)
    return files


def container_pod(pod: RenderedPod, run_id: str, namespace: str, domain: str, services: Sequence[dict[str, Any]],
                  storage: Storage, allow_privileged: bool = False) -> ContainerPod:  # fmt: skip
    command = [str(item) for item in pod.container.get("command") or []]
    args = [str(item) for item in pod.container.get("args") or []]
    # Kubernetes' command replaces the image's ENTRYPOINT, args its CMD
    entrypoint, after_image = (command[0], [*command[1:], *args]) if command else (None, args)
    binds, tmpfs = volume_mounts(pod, storage)
    published = [int(p["containerPort"]) for p in pod.container.get("ports") or []] if pod.role == TENSORBOARD else []
    return ContainerPod(
        pod.name, pod.role, pod.index, pod.argv, pod.env(namespace), container_name=f"{run_id}-{pod.name}",
        kind=pod.kind, image=str(pod.container["image"]), pull=pull_policy(pod.container),
        security=security_of(pod, allow_privileged),
        entrypoint=entrypoint, command=after_image, workdir=pod.container.get("workingDir"), binds=binds, tmpfs=tmpfs,
        aliases=dns_names(pod, services, namespace, domain),
        dns_search=[f"{namespace}.svc.{domain}", f"svc.{domain}", domain],  # as in a pod's resolv.conf
        ports=[(free_port(), port) for port in published],
        labels={RUN_LABEL: run_id, POD_LABEL: pod.name, "tfchart.role": pod.role}, probe_port=pod.readiness_port,
    )  # fmt: skip


def sandbox_argv(engine: str, network: str, pod: ContainerPod) -> list[str]:
    """The pod's sandbox, as Kubernetes' pause container: it holds the pod's network identity (hostname, DNS
    aliases, search domains, published ports). The pod's container joins its network (`--network container:`,
    with podman its hostname too), so a restarted container keeps the pod's address, MAC and DNS record, as
    in Kubernetes. It runs `sleep` in the pod's own image, detached, under the pod's user."""
    labels = [f"{RUN_LABEL}={pod.labels[RUN_LABEL]}", f"{SANDBOX_LABEL}={pod.name}"]
    published = [f"127.0.0.1:{host_port}:{container_port}" for host_port, container_port in pod.ports]
    return [
        engine, "run", "--detach", "--rm", "--name", pod.sandbox_name, *repeated("--label", labels),
        "--network", network, "--hostname", pod.name, *repeated("--network-alias", pod.aliases),
        *repeated("--dns-search", pod.dns_search), *repeated("--publish", published),
        "--pull", "never", "--no-healthcheck", *pod.security.args(engine),
        "--entrypoint", "/bin/sh", pod.image, "-c", PAUSE,
    ]  # fmt: skip


def run_argv(engine: str, pod: ContainerPod) -> list[str]:
    """The `<engine> run` command of the pod's container (attached: its output is the pod's log)."""
    argv = [engine, "run", "--rm", "--name", pod.container_name, *repeated("--label", as_pairs(pod.labels))]
    argv += ["--network", f"container:{pod.sandbox_name}"]
    # docker gives a container on another's network that container's hostname; podman shares it on request.
    argv += ["--uts", f"container:{pod.sandbox_name}"] if engine == "podman" else []
    argv += ["--pull", pod.pull, "--no-healthcheck", *pod.security.args(engine)]
    argv += repeated("--env", as_pairs({**pod.env, "HOSTNAME": pod.name}))
    argv += [arg for bind in pod.binds for arg in bind.args()] + repeated("--tmpfs", pod.tmpfs)
    argv += ["--workdir", pod.workdir] if pod.workdir else []
    argv += ["--entrypoint", pod.entrypoint] if pod.entrypoint is not None else []
    return [*argv, pod.image, *pod.command]


def grant_script(access: Security) -> str:
    """What the kubelet does for fsGroup (group fsGroup, group rwX, setgid directories), or without one what makes
    the pod's user the owner."""
    if access.fs_group is not None:
        return (f"chgrp -R {access.fs_group} {VOLUME_TARGET} && chmod -R g+rwX {VOLUME_TARGET}"
                f" && find {VOLUME_TARGET} -type d -exec chmod g+s {{}} +")  # fmt: skip
    return f"chown -R {access.owner} {VOLUME_TARGET} && chmod -R u+rwX {VOLUME_TARGET}"


@dataclass
class ContainerPlan(LocalPlan):
    """The release as containers: what `ContainerCluster` starts, and how the summary reads it."""

    pods: list[ContainerPod]  # type: ignore[assignment]
    engine: str = "podman"
    run_id: str = ""
    storage: Storage = field(default_factory=lambda: Storage(Path(), Path()))
    mount_path: str = "/data"
    config_files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    host_owner: str = "0:0"  # the invoking user as the engine's containers see it

    @property
    def network(self) -> str:
        return self.run_id

    @property
    def headline(self) -> str:
        return (f"{len(self.pods)} containers ({self.engine}, network {self.network}, label {RUN_LABEL}={self.run_id}),"
                f" run directory {self.storage.volume_dir}")

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

    @property
    def access(self) -> Security | None:
        """The securityContext the shared volume must be writable for: the first pod's that mounts it read-write
        (None where no pod does, or root, who writes anywhere)."""
        writer = next((p.security for p in self.pods if any(b.claim and not b.read_only for b in p.binds)), None)
        return None if writer is None or (writer.fs_group is None and not writer.user) else writer


def plan_from_manifests(docs: Sequence[dict[str, Any]], values: dict[str, Any], volume_dir: Path, namespace: str,
                        engine: str, host_owner: str, run_id: str | None = None,
                        allow_privileged: bool = False) -> ContainerPlan:  # fmt: skip
    """The rendered release as containers (pure: no engine is asked anything)."""
    run_id = run_id or f"tfd-{secrets.token_hex(3)}"
    rendered = rendered_pods(docs, namespace)
    services = [doc for doc in docs if doc.get("kind") == "Service"]
    services += [service for doc in docs if doc.get("kind") == "JobSet"
                 if (service := headless_service(doc, namespace)) is not None]  # fmt: skip
    domain = str(values.get("clusterDomain") or "cluster.local")
    claims = [str(volume["persistentVolumeClaim"].get("claimName")) for pod in rendered
              for volume in pod.spec.get("volumes") or [] if "persistentVolumeClaim" in volume]  # fmt: skip
    storage = Storage(volume_dir, Path(tempfile.gettempdir()) / f"tfchart-{run_id}", next(iter(claims), None))
    workload = workload_of(docs, namespace, rendered)
    pods = [container_pod(pod, run_id, namespace, domain, services, storage, allow_privileged) for pod in rendered]
    storage_values = values.get("storage") or {}
    tensorboard = next((pod for pod in pods if pod.role == TENSORBOARD and pod.ports), None)
    return ContainerPlan(
        workdir=within(volume_dir, str(storage_values.get("subPath") or ""), "storage.subPath"), pods=pods,
        addresses={pod.aliases[0]: pod.container_name for pod in pods if pod.aliases},
        tensorboard_url=f"http://127.0.0.1:{tensorboard.ports[0][0]}/" if tensorboard else None,
        values=values, engine=engine, run_id=run_id, storage=storage,
        mount_path=str(storage_values.get("mountPath") or "/data").rstrip("/") or "/",
        config_files=config_map_files(docs, rendered), host_owner=host_owner, workload=workload,
    )  # fmt: skip


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def plan(render: Callable[[list[tuple[str, str]]], list[dict[str, Any]]], values: dict[str, Any], volume_dir: Path,
         namespace: str, engine: str, allow_privileged: bool = False) -> ContainerPlan:  # fmt: skip
    """Checks the engine (a one-line EngineNotFound unless its CLI is installed and it answers), renders the
    release with the user's values only, and checks every image."""
    if engine not in CONTAINER_ENGINES:
        raise UsageError(f"unknown container engine: {engine}", f"use one of: {', '.join(CONTAINER_ENGINES)}")
    try:
        check_engine_reachable(detect_engine(engine))
    except EngineNotFound as error:
        fix = ("install and start Docker (or use --engine podman)" if engine == "docker"
               else "install Podman, check `podman info` (or use --engine docker)")  # fmt: skip
        raise EngineNotFound(f"{error.message}: {fix}, or run the pods as processes with --engine process") from None
    # the invoking user as the engine's containers see it (rootless podman or docker: root of the user namespace)
    template = "{{.Host.Security.Rootless}}" if engine == "podman" else "{{.SecurityOptions}}"
    security = answer([engine, "info", "--format", template], ENGINE_TIMEOUT_S).stdout
    rootless = security == "true\n" if engine == "podman" else "rootless" in security
    host_owner = "0:0" if rootless else f"{os.getuid()}:{os.getgid()}"
    container_plan = plan_from_manifests(render([]), values, volume_dir, namespace, engine, host_owner,
                                         allow_privileged=allow_privileged)
    check_images(engine, container_plan.pods)
    return container_plan


def check_images(engine: str, pods: Sequence[ContainerPod]) -> None:
    """Every image exists locally or is pulled now, as its pull policy says; else one line with the fix."""
    for image, pull in dict.fromkeys((pod.image, pod.pull) for pod in pods):
        if pull != "always" and answer([engine, "image", "inspect", image], ENGINE_TIMEOUT_S).returncode == 0:
            continue
        reason = "imagePullPolicy Never"
        if pull != "never":
            pulled = answer([engine, "pull", image], timeout=1800)
            if pulled.returncode == 0:
                continue
            reason = f"pull failed: {last_line(pulled.stderr) or pulled.returncode}"
        raise TfchartError(f"image {image} is not in {engine}'s local store ({reason}): build it with `tfchart build "
                           f"--engine {engine}`, or --set image.registry=...,image.repository=...,image.tag=... to an "
                           "image you have")


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM are ignored while containers are being removed (a second Ctrl-C must not leak them)."""
    handled = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class ContainerCluster(LocalCluster):
    """Starts the pods as containers on one network, streams their logs (each pod's `<engine> run` client is its
    process), and always removes everything."""

    def __init__(self, plan: ContainerPlan, on_line: Callable[[LocalPod, str], None]) -> None:
        super().__init__(on_line)
        self.plan, self.warnings, self._prepared = plan, list[str](), False

    def _engine(self, *args: str, timeout: float = ENGINE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return answer([self.plan.engine, *args], timeout)

    def _labelled(self, listing: str, template: str | None = None) -> list[str]:
        """IDs (or `template` of each) of what `<engine> <listing>` lists with the run's label."""
        shown = ["--format", template] if template else ["-q"]
        listed = self._engine(*listing.split(), *shown, "--filter", f"label={RUN_LABEL}={self.plan.run_id}")
        return listed.stdout.split() if listed.returncode == 0 else []

    def command(self, pod: LocalPod) -> tuple[list[str], dict[str, str] | None]:
        assert isinstance(pod, ContainerPod)
        return run_argv(self.plan.engine, pod), None  # the engine's client runs in this environment

    def start(self, pods: Sequence[LocalPod]) -> None:
        """Creates the network and the volumes once, then starts every pod at once (TensorFlow tasks wait for peers);
        a pod's sandbox once, its container again in it (the last one removed first)."""
        if not self._prepared:
            self._prepared = True
            self._create_network()
            self._prepare_volumes()
        container_pods = [pod for pod in pods if isinstance(pod, ContainerPod)]
        self._start_sandboxes([pod for pod in container_pods if pod.name not in self.processes])
        if again := [pod.container_name for pod in container_pods if pod.name in self.processes]:
            self._engine("rm", "-f", "-v", *again)
        super().start(container_pods)

    def _create_network(self) -> None:
        engine, network = self.plan.engine, self.plan.network
        args = ["network", "create", "--label", f"{RUN_LABEL}={self.plan.run_id}", network]
        if (created := self._engine(*args)).returncode != 0:
            raise TfchartError(f"creating the network failed: {last_line(created.stderr) or created.returncode}",
                               f"the command was: {engine} {' '.join(args)}")  # fmt: skip
        if engine != "podman":
            return  # docker's user-defined networks always resolve container names and aliases
        if self._engine("network", "inspect", network, "--format", "{{.DNSEnabled}}").stdout.strip() != "true":
            raise TfchartError(
                f"podman network {network} has no DNS, so the pods cannot find each other by name",
                "install aardvark-dns (podman's netavark DNS server), e.g. `apt-get install aardvark-dns`",
            )

    def _start_sandboxes(self, pods: Sequence[ContainerPod]) -> None:
        """Every pod's sandbox at once; each must be running before its container joins it."""
        engine, network = self.plan.engine, self.plan.network
        starting = [(pod, subprocess.Popen(sandbox_argv(engine, network, pod), stdin=subprocess.DEVNULL, text=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)) for pod in pods]
        for pod, popen in starting:
            try:
                _, stderr = popen.communicate(timeout=ENGINE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                stderr = f"{engine} did not start it within {ENGINE_TIMEOUT_S:.0f} s"
            if popen.returncode != 0:
                why = f"could not start the sandbox of {pod.name}: {last_line(stderr) or popen.returncode}"
                raise TfchartError(why, "the image must have /bin/sh and sleep")

    def _prepare_volumes(self) -> None:
        """The configMaps' files written; the claim's directory (and subPaths) made, writable for the pods."""
        root, files = self.plan.storage.config_root, self.plan.config_files
        for relative, (content, mode) in files.items():
            path = within(root, relative, "a configMap file")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
        for directory in [root, *(p for p in root.rglob("*") if p.is_dir())] if files else []:
            directory.chmod(0o755)
        self.plan.storage.volume_dir.mkdir(parents=True, exist_ok=True)
        for bind in (bind for pod in self.plan.pods for bind in pod.binds):
            if bind.claim:  # subPath directories exist before anything mounts them, as the kubelet makes them
                bind.source.mkdir(parents=True, exist_ok=True)
            elif files and not bind.source.exists():  # a configMap volume with no files still needs its mount point
                bind.source.mkdir(parents=True, mode=0o755)
        if self.plan.access is None:
            return
        if (granted := self._ownership("volume-permissions", grant_script(self.plan.access))).returncode != 0:
            raise TfchartError(f"could not make {self.plan.storage.volume_dir} writable for the pods: "
                               f"{last_line(granted.stderr) or granted.returncode}",
                               "the image must have /bin/sh, chown and find")  # fmt: skip

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

    def kill(self, name: str, sig: int = signal.SIGKILL, grace: float | None = None) -> None:
        """Signals the pod's container and waits for it; SIGKILL after `grace` seconds (default 10)."""
        process = self.processes[name]
        started, grace, pod = time.monotonic(), 10.0 if grace is None else grace, process.pod
        while process.running and isinstance(pod, ContainerPod):
            signal_name = "KILL" if time.monotonic() - started > grace else signal.Signals(sig).name.removeprefix("SIG")
            self._engine("kill", "--signal", signal_name, pod.container_name)
            with suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=1)
        process.reader.join(timeout=5)

    def listens(self, process: Process, port: int) -> bool:
        """Its sandbox's /proc/net/tcp and tcp6, read with the shell's builtins, list `port` listening."""
        assert isinstance(process.pod, ContainerPod)
        read = ('for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] || continue; '
                'while IFS= read -r l; do echo "$l"; done < "$f"; done')
        tables = self._engine("exec", process.pod.sandbox_name, "/bin/sh", "-c", read)
        return tables.returncode == 0 and listening(tables.stdout, port)

    def stop(self, grace: float = 10.0) -> None:
        """Stops every container (SIGTERM, then SIGKILL after `grace`), gives the volume back, removes all labelled."""
        with interrupts_deferred():
            listed = self._labelled("container ls", "{{.Names}}")
            containers = [name for name in listed if not name.endswith(SANDBOX_SUFFIX)]
            if containers:  # the pods' containers first (their grace period), then the sandboxes they use
                self._engine("stop", "-t", str(int(grace)), *containers, timeout=grace + ENGINE_TIMEOUT_S)
            self._join_clients()
            self._give_volume_back()
            self._remove_labelled()
            shutil.rmtree(self.plan.storage.config_root, ignore_errors=True)
        for warning in self.warnings:
            print(f"warning: {warning}", file=sys.stderr)

    def _join_clients(self) -> None:
        """Waits for every `<engine> run` client; one whose container appeared late is removed by label."""
        for _ in range(3):
            for process in self.processes.values():
                with suppress(subprocess.TimeoutExpired):
                    process.popen.wait(timeout=5)
            if not any(process.running for process in self.processes.values()):
                break
            if leftovers := self._labelled("container ls -a"):
                self._engine("rm", "-f", "-v", *leftovers)
        for process in self.processes.values():
            if process.running:
                process.popen.kill()
            process.reader.join(timeout=5)

    def _give_volume_back(self) -> None:
        if not self._prepared or self.plan.volume_image is None:
            return
        given = self._ownership("volume-owner", f"chown -R {self.plan.host_owner} {VOLUME_TARGET}")
        if given.returncode != 0:
            volume = self.plan.storage.volume_dir
            self.warnings.append(f"could not give {volume} back to you ({last_line(given.stderr)}): "
                                 f"sudo chown -R {os.getuid()}:{os.getgid()} {volume}")  # fmt: skip

    def _remove_labelled(self) -> None:
        """Containers, then networks, then volumes carrying the run's label; warns about any that stays."""
        engine, label = self.plan.engine, f"label={RUN_LABEL}={self.plan.run_id}"
        for listing, removal in (("ps -a", "rm -f -v"), ("network ls", "network rm"), ("volume ls", "volume rm -f")):
            if found := self._labelled(listing):
                self._engine(*removal.split(), *found)
            if self._labelled(listing):
                self.warnings.append(f"{engine} could not remove everything of run {self.plan.run_id}: "
                                     f"{engine} {removal} $({engine} {listing} -q --filter {label})")  # fmt: skip
