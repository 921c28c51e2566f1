"""The rendered release's pods as their controllers would create them (`LocalPod`: a StatefulSet's by ordinal,
a Job's, TensorBoard's Deployment's, a JobSet's as JobSet and the Job controller make them, jobset.py), and the
controllers they run under on this machine (`workload_of`, run by jobsetrun.py): what both engines start.

For `--engine podman|docker` (containers.py runs them), the same pods as containers (`ContainerPod`): pure
functions of the manifests, no engine is asked anything. The chart is rendered with exactly the user's inputs:
the pods keep the chart's mount path, ports and cluster map. Every TensorFlow pod and TensorBoard runs its
rendered image with command, args, env, securityContext (`security_of`) and volumes (`volume_mounts`: the claim is
the run directory, made writable as fsGroup would make it and given back to the invoking user at the end) as
the kubelet would run it; per pod, a sandbox holds the network identity (`container_pod`, `dns_names`).
Not emulated: resource requests and limits (nothing is enforced), startup and liveness probes,
terminationGracePeriodSeconds of an interrupted run (stopping gives every container 10 s, as the process
engine does), image HEALTHCHECKs (off, as Kubernetes ignores them), NetworkPolicies (every pod of the network
reaches every other), Services' virtual IPs (a Service name resolves to its pods' addresses), Secrets and the
Kubernetes API.
"""

from __future__ import annotations

import base64
import math
import socket
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, cast

from tfchart.errors import UsageError
from tfchart.local import jobset
from tfchart.manifests.quantity import parse_or_none
from tfdcontract import CHIEF, COMPONENT_LABEL, TENSORBOARD, TF_ROLES, WORKER
from tfdcontract.env import CLUSTER_ENV

RUN_LABEL = "tfchart.run"
SANDBOX_SUFFIX = "-sandbox"
PAUSE = "trap 'exit 0' TERM INT; sleep infinity & wait"  # the sandbox's process: nothing, until told to stop
PULL_FLAGS = {"Never": "never", "IfNotPresent": "missing", "Always": "always"}
VOLUME_TARGET = "/volume"  # where the ownership containers see the shared volume
SWITCHES = {  # a securityContext field with this value: the engine's flags
    "readOnlyRootFilesystem": (True, ["--read-only"]),
    "allowPrivilegeEscalation": (False, ["--security-opt", "no-new-privileges"]),
    "privileged": (True, ["--privileged"]),
    "seccompProfile": ({"type": "Unconfined"}, ["--security-opt", "seccomp=unconfined"]),
}


def free_port(wanted: int = 0) -> int:
    """`wanted` where a server can listen on it on every interface (where the trainer serves metrics), else a port
    where one can."""
    for port in dict.fromkeys((wanted, 0)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, suppress(OSError):
            sock.bind(("", port))
            return int(sock.getsockname()[1])
    raise OSError("no free port")


@dataclass
class LocalPod:
    """One pod as its controller (StatefulSet, Job, Deployment) would create it from the rendered template: its
    command and args, its env (the downward API resolved, `pod_of`), where its readiness probe connects (in the
    pod's network; None: no probe); each engine rewrites what it must before starting it."""

    name: str
    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    probe_port: int | None = None
    controller: dict[str, Any] = field(default_factory=dict)  # the workload document
    labels: dict[str, str] = field(default_factory=dict)  # apps.kubernetes.io/pod-index included for StatefulSet pods
    annotations: Mapping[str, str] = field(default_factory=dict)  # those the controller adds (completion index)

    @property
    def spec(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.controller["spec"]["template"]["spec"])  # the pod template's

    @property
    def container(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.spec["containers"][0])

    @property
    def is_chief(self) -> bool:
        """The chief task, or worker 0 where the cluster map has no chief (TensorFlow's convention)."""
        no_chief = '"chief"' not in self.env.get(CLUSTER_ENV, '"chief"')
        return self.role == CHIEF or (self.role == WORKER and self.index == 0 and no_chief)


def pod_of(name: str, role: str, index: int, controller: dict[str, Any], labels: dict[str, str], namespace: str,
           annotations: Mapping[str, str] = MappingProxyType({})) -> LocalPod:  # fmt: skip
    """The pod, its env's downward API metadata fields resolved as the kubelet does (with the `annotations` its
    controller adds: the completion index); secretKeyRef and configMapKeyRef cannot be resolved without a
    cluster: left unset. Its readiness probe's port: tcpSocket, grpc, httpGet, a named port looked up."""
    container = controller["spec"]["template"]["spec"]["containers"][0]
    fields = {"metadata.name": name, "metadata.namespace": namespace}
    env: dict[str, str] = {}
    for item in container.get("env", []):
        field_path = (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath", "")
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif field_path in fields:
            env[item["name"]] = fields[field_path]
        elif field_path.startswith(("metadata.labels[", "metadata.annotations[")):  # metadata.labels['<key>']
            keyed = labels if field_path.startswith("metadata.labels[") else annotations
            env[item["name"]] = keyed.get(field_path[field_path.index("[") + 2 : -2], "")
    probe = container.get("readinessProbe") or {}
    port = next((probe[kind].get("port") for kind in ("tcpSocket", "grpc", "httpGet") if kind in probe), None)
    if isinstance(port, str) and not port.isdigit():
        port = next((p.get("containerPort") for p in container.get("ports") or [] if p.get("name") == port), None)
    argv = [*container.get("command", []), *container.get("args", [])]
    return LocalPod(name, role, index, argv, env, None if port is None else int(port), controller, labels, annotations)


def rendered_pods(docs: Sequence[dict[str, Any]], namespace: str = "default") -> list[LocalPod]:
    """The TensorFlow pods (ps, workers, chief, evaluator) and TensorBoard of a rendered release, each as its
    controller creates it (hostname, index, labels and annotations); a JobSet's as JobSet and the Job controller
    create them (jobset.py)."""
    found = [pod for doc in docs if doc.get("kind") in ("JobSet", "StatefulSet", "Job", "Deployment")
             and "helm.sh/hook" not in (doc["metadata"].get("annotations") or {})
             for pod in jobset.pods_of(doc, namespace)]  # fmt: skip
    return [pod_of(hostname, role, index, controller, labels, namespace, annotations)
            for hostname, index, controller, labels, annotations in found
            if (role := labels.get(COMPONENT_LABEL, "")) in (*TF_ROLES, TENSORBOARD)]  # fmt: skip


def workload_of(docs: Sequence[dict[str, Any]], namespace: str, pods: Sequence[LocalPod]) -> dict[str, Any]:
    """The controllers the pods run under: the render's JobSet (workload.kind=jobset), read as its controller
    reads it, else its Jobs and StatefulSets (TensorBoard's Deployment aside: started once), the chief's Job (or
    the workers' without a chief) the run's; one line where there is no chief."""
    found = [doc for doc in docs if doc.get("kind") == "JobSet"]
    if len(found) > 1:
        raise UsageError(f"the release renders {len(found)} JobSets: tfchart local runs one")
    workloads = {pod.controller["metadata"]["name"]: pod.controller for pod in pods if pod.role != TENSORBOARD}
    jobs = {pod.role: pod.controller["metadata"]["name"] for pod in reversed(pods) if pod.controller["kind"] == "Job"}
    if (run_job := jobs.get(CHIEF) or jobs.get(WORKER)) is None:
        raise UsageError("the rendered release has no chief",
                         "every topology renders a chief Job, or workers whose worker 0 is the chief: check --chart")
    return jobset.read(found[0], namespace) if found else jobset.native(list(workloads.values()), run_job, namespace)


def repeated(flag: str, values: Iterable[object]) -> list[str]:
    """`flag` before every value: repeated("--env", ["A=1", "B=2"]) is ["--env", "A=1", "--env", "B=2"]."""
    return [part for value in values for part in (flag, str(value))]


def bind(source: Path, target: str, read_only: bool = False) -> list[str]:
    """A host directory or file bind-mounted into a container."""
    for path in (str(source), target):
        if "," in path:
            raise UsageError(f"cannot bind-mount {path}: a container mount path may not contain a comma")
    return ["--mount", f"type=bind,source={source},target={target}" + (",readonly=true" if read_only else "")]


@dataclass
class ContainerPod(LocalPod):
    """One pod of the rendered release as a container: the `<engine> run` commands of its sandbox and container."""

    container_name: str = ""
    aliases: list[str] = field(default_factory=list)  # the pod's own DNS name first
    sandbox: list[str] = field(default_factory=list)  # the sandbox's, detached
    run: list[str] = field(default_factory=list)  # the container's, attached: its output is the pod's log
    sources: list[Path] = field(default_factory=list)  # the host paths it bind-mounts: made before it starts
    #: how it writes the shared volume: None, it does not; "" as root; else the script that makes it writable for it
    writes: str | None = None


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


def security_of(pod: LocalPod, allow_privileged: bool = False) -> tuple[list[str], str | None]:
    """The container's effective securityContext (container fields over the pod's) as the engine's flags (--user,
    --group-add for fsGroup and supplementalGroups, SWITCHES, capabilities), and what makes the shared volume
    writable for it as the kubelet does for fsGroup (group fsGroup, group rwX, setgid directories), or without
    one what makes its user the owner (None: it runs as root). Refuses runAsNonRoot with uid 0 or none, as the
    kubelet does, and (unless `allow_privileged`) a privileged container or uid 0: on this machine they are its
    root, or your user's."""
    pod_context: dict[str, Any] = pod.spec.get("securityContext") or {}
    context: dict[str, Any] = {**pod_context, **(pod.container.get("securityContext") or {})}
    user, group, fs_group = context.get("runAsUser"), context.get("runAsGroup"), pod_context.get("fsGroup")
    if context.get("runAsNonRoot") and not user:
        why = "runAsUser is 0" if user == 0 else "runAsUser is not set (tfchart does not read the image's USER)"
        raise UsageError(f"{pod.name}: runAsNonRoot is set but {why}; the kubelet would refuse to start it",
                         "set securityContext.runAsUser to a non-zero uid")
    privileged = context.get("privileged") is True
    if (privileged or user == 0) and not allow_privileged:
        key = (f"{pod.role}.containerSecurityContext.privileged is true" if privileged
               else "its securityContext.runAsUser is 0")  # fmt: skip
        raise UsageError(f"{pod.name}: {key}: in a container on this machine that is root here (or your user, "
                         "rootless), with the run directory and, privileged, the host's devices",
                         "run it unprivileged with a non-zero runAsUser, or pass --allow-privileged if you mean it")
    owner = None if user is None else f"{int(user)}" + ("" if group is None else f":{int(group)}")
    groups = ([] if fs_group is None else [fs_group]) + list(pod_context.get("supplementalGroups") or ())
    caps = context.get("capabilities") or {}
    flags = [*([] if owner is None else ["--user", owner]), *repeated("--group-add", dict.fromkeys(map(int, groups)))]
    flags += [*repeated("--cap-drop", caps.get("drop") or ()), *repeated("--cap-add", caps.get("add") or ())]
    flags += [flag for key, (value, switch) in SWITCHES.items() if context.get(key) == value for flag in switch]
    if fs_group is not None:
        return flags, (f"chgrp -R {int(fs_group)} {VOLUME_TARGET} && chmod -R g+rwX {VOLUME_TARGET}"
                       f" && find {VOLUME_TARGET} -type d -exec chmod g+s {{}} +")  # fmt: skip
    return flags, f"chown -R {owner} {VOLUME_TARGET} && chmod -R u+rwX {VOLUME_TARGET}" if user else None


def dns_names(pod: LocalPod, services: Sequence[dict[str, Any]], namespace: str, domain: str) -> list[str]:
    """The names cluster DNS gives the pod: its own first, `<hostname>.<subdomain>.<namespace>.svc.<clusterDomain>`
    where a headless Service named after the subdomain selects it (StatefulSet pods: `<sts>-<k>.<serviceName>`),
    then `<service>.<namespace>.svc.<clusterDomain>` for every Service selecting it."""
    zone = f"{namespace}.svc.{domain}"
    if pod.controller["kind"] == "StatefulSet":
        hostname, subdomain = pod.name, pod.controller["spec"].get("serviceName")
    else:
        hostname, subdomain = pod.spec.get("hostname") or pod.name, pod.spec.get("subdomain")
    selecting = [s for s in services if (selector := s.get("spec", {}).get("selector"))
                 and all(pod.labels.get(key) == value for key, value in selector.items())]  # fmt: skip
    own = [f"{hostname}.{subdomain}.{zone}" for s in selecting
           if subdomain and s["metadata"]["name"] == subdomain and s["spec"].get("clusterIP") == "None"]  # fmt: skip
    return [*own[:1], *sorted(f"{s['metadata']['name']}.{zone}" for s in selecting)]


def within(root: Path, relative: str, what: str) -> Path:
    """`root/relative`, or one line naming `what` when it would leave `root`: it is absolute or has a '..' segment
    (the API server's rule), or a symbolic link already there points out (a pod of an earlier run may have made it
    in the run directory). Nothing is ever mounted or written outside the run's directories."""
    if PurePosixPath(relative).is_absolute() or ".." in PurePosixPath(relative).parts:
        raise UsageError(f"{what} {relative!r} leaves its volume (an absolute path or a '..' segment)",
                         "give a path inside the volume, relative and without '..' (the API server refuses it too)")
    path = root / relative
    if not path.resolve().is_relative_to(root.resolve()):
        raise UsageError(f"{what} {relative!r} leads out of {root}: a symbolic link there points to {path.resolve()}",
                         f"remove the link (rm {path}) or choose another path")
    return path


def volume_mounts(pod: LocalPod, volume_dir: Path, config_root: Path, claim_name: str | None,
                  ) -> tuple[list[str], list[Path], bool]:  # fmt: skip
    """The container's volumeMounts as the engine's flags: the claim's (`claim_name`, the first one a pod mounts) in
    `volume_dir` (subPath and readOnly honoured), an emptyDir as a tmpfs of its sizeLimit (world-writable, as the
    kubelet makes emptyDirs), a configMap's files (under `config_root`) read-only; other kinds (secret, hostPath,
    another claim) are refused. With the host paths it binds, and whether it writes the claim."""
    volumes = {volume["name"]: volume for volume in pod.spec.get("volumes") or []}
    flags: list[str] = []
    sources: list[Path] = []
    writes = False
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
            if claim.get("claimName") != claim_name:
                raise UsageError(f"{pod.name} mounts a second PersistentVolumeClaim {claim.get('claimName')!r}",
                                 f"tfchart local emulates one shared volume ({claim_name})")
            read_only = read_only or bool(claim.get("readOnly"))
            writes = writes or not read_only
            sources.append(within(volume_dir, sub_path, what))
            flags += bind(sources[-1], target, read_only)
        elif "emptyDir" in volume:
            limit = (volume["emptyDir"] or {}).get("sizeLimit")
            if (size := parse_or_none(limit) if limit else 0) is None or size < 0:
                raise UsageError(f"{pod.name}: cannot read the sizeLimit {limit!r} of volume {mount['name']!r}",
                                 "use a Kubernetes quantity such as 2Gi or 512Mi")
            # in whole bytes, rounded up as the kubelet does
            flags += ["--tmpfs", f"{target}:rw,exec,mode=0777" + (f",size={math.ceil(size)}" if size else "")]
        elif "configMap" in volume:
            sources.append(within(config_root / mount["name"], sub_path, what))
            flags += bind(sources[-1], target, True)
        elif any("serviceAccountToken" in source for source in (volume.get("projected") or {}).get("sources") or []):
            continue  # the service account's API token: there is no API server to talk to
        else:
            kind = next((key for key in volume if key != "name"), "unknown")
            raise UsageError(f"{pod.name}: volume {mount['name']!r} ({kind}) cannot be emulated by tfchart local",
                             "only the release's PersistentVolumeClaim, emptyDir and configMap volumes are supported")
    return flags, sources, writes


def config_map_files(docs: Sequence[dict[str, Any]], pods: Sequence[LocalPod], root: Path,
                     ) -> dict[Path, tuple[bytes, int]]:  # fmt: skip
    """Every file of the configMap volumes, `root/<volume>/<path>` -> (content, mode)."""
    config_maps = {doc["metadata"]["name"]: doc for doc in docs if doc.get("kind") == "ConfigMap"}
    files: dict[Path, tuple[bytes, int]] = {}
    for pod in pods:
        for volume in [volume for volume in pod.spec.get("volumes") or [] if "configMap" in volume]:
            source = volume["configMap"]
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
                files[within(root / volume["name"], str(item["path"]), what)] = (data[item["key"]], mode)
    return files


def container_pod(pod: LocalPod, engine: str, network: str, namespace: str, domain: str,
                  services: Sequence[dict[str, Any]], volumes: tuple[Path, Path, str | None],
                  allow_privileged: bool = False) -> ContainerPod:  # fmt: skip
    """The pod's sandbox, as Kubernetes' pause container: it holds the pod's network identity (hostname, DNS
    aliases, search domains, published ports). The pod's container joins its network (`--network container:`,
    with podman its hostname too), so a restarted container keeps the pod's address, MAC and DNS record, as
    in Kubernetes. The sandbox runs `sleep` in the pod's own image, detached, under the pod's user. `volumes`: where
    they live here (volume_mounts)."""
    name, sandbox_name = f"{network}-{pod.name}", f"{network}-{pod.name}{SANDBOX_SUFFIX}"  # the network: the run id
    command = [str(item) for item in pod.container.get("command") or []]
    args = [str(item) for item in pod.container.get("args") or []]
    # Kubernetes' command replaces the image's ENTRYPOINT, args its CMD
    after_image = [*(["--entrypoint", command[0]] if command else []), image := str(pod.container["image"]),
                   *command[1:], *args]  # fmt: skip
    mounts, sources, writes = volume_mounts(pod, *volumes)
    (security, grant), pull = security_of(pod, allow_privileged), pull_policy(pod.container)
    aliases = dns_names(pod, services, namespace, domain)
    published = [p["containerPort"] for p in pod.container.get("ports") or []] if pod.role == TENSORBOARD else []
    # podman mounts tmpfs on /tmp, /run and /var/tmp of read-only containers; Kubernetes does not.
    no_tmpfs = ["--read-only-tmpfs=false"] if engine == "podman" and "--read-only" in security else []
    secured = ["--no-healthcheck", *security, *no_tmpfs]
    sandbox = [
        engine, "run", "--detach", "--rm", "--name", sandbox_name,
        *repeated("--label", [f"{RUN_LABEL}={network}", f"tfchart.sandbox={pod.name}"]),
        "--network", network, "--hostname", pod.name, *repeated("--network-alias", aliases),
        *repeated("--dns-search", [f"{namespace}.svc.{domain}", f"svc.{domain}", domain]),  # as in a pod's resolv.conf
        *repeated("--publish", (f"127.0.0.1:{free_port()}:{port}" for port in published)),
        "--pull", "never", *secured, "--entrypoint", "/bin/sh", image, "-c", PAUSE,
    ]  # fmt: skip
    labels = [f"{RUN_LABEL}={network}", f"tfchart.pod={pod.name}", f"tfchart.role={pod.role}"]
    run = [engine, "run", "--rm", "--name", name, *repeated("--label", labels)]
    run += ["--network", f"container:{sandbox_name}"]
    # docker gives a container on another's network that container's hostname; podman shares it on request.
    run += ["--uts", f"container:{sandbox_name}"] if engine == "podman" else []
    run += ["--pull", pull, *secured, *mounts]
    run += repeated("--env", (f"{key}={value}" for key, value in {**pod.env, "HOSTNAME": pod.name}.items()))
    run += ["--workdir", workdir] if (workdir := pod.container.get("workingDir")) else []
    return ContainerPod(**vars(pod), container_name=name, aliases=aliases, sandbox=sandbox,
                        run=[*run, *after_image], sources=sources, writes=(grant or "") if writes else None)
