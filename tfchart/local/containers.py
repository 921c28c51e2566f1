"""`tfchart local --engine podman|docker`: the rendered release as real containers, one per pod (the design:
docs/architecture.md, section 8; the pods as containers: pods.py), the engine's checks, and
`ContainerCluster`, which runs them under the run's controllers (jobsetrun.py) as LocalCluster runs processes.

The run supervisor Deployment is not run (it needs an API server; its plan is carried out by session.py): the
run ends, and every container is removed, when the chief's Job ends. Every container and network carries the
label tfchart.run=<run id> (the network is named after it); only a SIGKILL to tfchart leaves them behind, then
`podman rm -f $(podman ps -aq --filter label=tfchart.run=<id>) && podman network rm <id>`. The images must have
/bin/sh, sleep, chown and find (the trainer image has). TensorFlow Serving is not run (its image is not available
offline): tfchart prints how the export is served instead, as the process engine does.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from tfchart.errors import EngineNotFound, TfchartError
from tfchart.images.build import answer, check_engine_reachable, detect_engine
from tfchart.local.jobset import headless_service
from tfchart.local.pods import (
    RUN_LABEL,
    SANDBOX_SUFFIX,
    VOLUME_TARGET,
    ContainerPod,
    LocalPod,
    bind,
    config_map_files,
    container_pod,
    pull_policy,
    rendered_pods,
    within,
    workload_of,
)
from tfchart.local.processes import LocalCluster, LocalPlan, Process, listening

ENGINE_TIMEOUT_S = 60.0


def plan_from_manifests(docs: Sequence[dict[str, Any]], values: dict[str, Any], volume_dir: Path, namespace: str,
                        engine: str, host_owner: str, run_id: str | None = None,
                        allow_privileged: bool = False) -> LocalPlan:  # fmt: skip
    """The rendered release as containers (pure: no engine is asked anything)."""
    run_id = run_id or f"tfd-{secrets.token_hex(3)}"
    rendered = rendered_pods(docs, namespace)
    services = [doc for doc in docs if doc.get("kind") == "Service"]
    services += [service for doc in docs if doc.get("kind") == "JobSet"
                 if (service := headless_service(doc, namespace)) is not None]  # fmt: skip
    domain = str(values.get("clusterDomain") or "cluster.local")
    claim = next((str(volume["persistentVolumeClaim"].get("claimName")) for pod in rendered
                  for volume in pod.spec.get("volumes") or [] if "persistentVolumeClaim" in volume), None)  # fmt: skip
    config_root = Path(tempfile.gettempdir()) / f"tfchart-{run_id}"  # one directory per configMap volume
    pods = [container_pod(pod, engine, run_id, namespace, domain, services, (volume_dir, config_root, claim),
                          allow_privileged) for pod in rendered]  # fmt: skip
    storage_values = values.get("storage") or {}
    published = next((p.sandbox[p.sandbox.index("--publish") + 1] for p in pods if "--publish" in p.sandbox), None)
    return LocalPlan(
        workdir=within(volume_dir, str(storage_values.get("subPath") or ""), "storage.subPath"), pods=pods,
        addresses={pod.aliases[0]: pod.container_name for pod in pods if pod.aliases},
        tensorboard_url=f"http://{published.rsplit(':', 1)[0]}/" if published else None,  # TensorBoard's
        values=values, workload=workload_of(docs, namespace, rendered), engine=engine,
        headline=f"{len(pods)} containers ({engine}, network {run_id}, label {RUN_LABEL}={run_id}), run directory "
                 f"{volume_dir}",
        cluster=partial(ContainerCluster, engine=engine, run_id=run_id, volume_dir=volume_dir, host_owner=host_owner,
                        config_root=config_root, config_files=config_map_files(docs, rendered, config_root), pods=pods),
        mount_path=str(storage_values.get("mountPath") or "/data").rstrip("/") or "/",
    )  # fmt: skip


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def plan(render: Callable[[list[tuple[str, str]]], list[dict[str, Any]]], values: dict[str, Any], volume_dir: Path,
         namespace: str, engine: str, allow_privileged: bool = False) -> LocalPlan:  # fmt: skip
    """Checks the engine (a one-line EngineNotFound unless its CLI is installed and it answers), renders the
    release with the user's values only, and checks every image (`engine`: podman or docker, as --engine allows):
    it exists locally or is pulled now, as its pull policy says; else one line with the fix."""
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
    local = plan_from_manifests(render([]), values, volume_dir, namespace, engine, host_owner,
                                allow_privileged=allow_privileged)
    for image, pull in dict.fromkeys((str(p.container["image"]), pull_policy(p.container)) for p in local.pods):
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
    return local


class ContainerCluster(LocalCluster):
    """Starts the pods as containers on one network, streams their logs (each pod's `<engine> run` client is its
    process), and always removes everything."""

    def __init__(self, on_line: Callable[[LocalPod, str], None], engine: str, run_id: str, volume_dir: Path,
                 host_owner: str, config_root: Path, config_files: dict[Path, tuple[bytes, int]],
                 pods: Sequence[ContainerPod]) -> None:  # fmt: skip
        """`run_id` labels everything of the run and names its network; `volume_dir` is the claim, `config_root` where
        the configMaps' files are written; `host_owner` is the invoking user as the engine's containers see it."""
        super().__init__(on_line)
        self.engine, self.run_id, self.volume_dir, self.host_owner = engine, run_id, volume_dir, host_owner
        self.config_root, self.config_files, self._prepared = config_root, config_files, False
        self.sources = [source for pod in pods for source in pod.sources]
        # The first pod that writes the shared volume: its image runs the ownership containers, and the volume is
        # made writable for it (`grant`: "" where no pod writes it, or it runs as root).
        writer = next((pod for pod in pods if pod.writes is not None), None)
        self.volume_image: str | None = str(writer.container["image"]) if writer else None
        self.grant = writer.writes or "" if writer else ""

    def _engine(self, *args: str, timeout: float = ENGINE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return answer([self.engine, *args], timeout)

    def _labelled(self, listing: str) -> list[str]:
        """IDs of what `<engine> <listing>` lists with the run's label."""
        listed = self._engine(*listing.split(), "-q", "--filter", f"label={RUN_LABEL}={self.run_id}")
        return listed.stdout.split() if listed.returncode == 0 else []

    def command(self, pod: LocalPod) -> tuple[list[str], dict[str, str] | None]:
        assert isinstance(pod, ContainerPod)
        return pod.run, None  # the engine's client runs in this environment

    def start(self, pods: Sequence[LocalPod]) -> None:
        """Creates the network and the volumes once, then starts every pod at once (TensorFlow tasks wait for peers);
        a pod's sandbox once (every new one at once: each must run before its container joins it), its container
        again in it (the last one removed first)."""
        if not self._prepared:
            self._prepared = True
            self._create_network()
            self._prepare_volumes()
        container_pods = [pod for pod in pods if isinstance(pod, ContainerPod)]
        new = [pod for pod in container_pods if pod.name not in self.processes]
        with ThreadPoolExecutor(max(1, len(new))) as pool:
            started = list(pool.map(lambda pod: answer(pod.sandbox, ENGINE_TIMEOUT_S), new))
        for pod, done in zip(new, started, strict=True):
            if done.returncode != 0:
                why = f"could not start the sandbox of {pod.name}: {last_line(done.stderr) or done.returncode}"
                raise TfchartError(why, "the image must have /bin/sh and sleep")
        if again := [pod.container_name for pod in container_pods if pod.name in self.processes]:
            self._engine("rm", "-f", "-v", *again)
        super().start(container_pods)

    def _create_network(self) -> None:
        engine, network = self.engine, self.run_id  # the network is named after the run
        args = ["network", "create", "--label", f"{RUN_LABEL}={network}", network]
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

    def _prepare_volumes(self) -> None:
        """The configMaps' files written; the claim's directory (and subPaths) made, writable for the pods."""
        for path, (content, mode) in self.config_files.items():  # paths checked: pods.within
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
        self.volume_dir.mkdir(parents=True, exist_ok=True)
        for source in self.sources:  # subPath directories, and the mount point of a configMap volume with no files,
            if not source.exists():  # exist before anything mounts them, as the kubelet makes them
                source.mkdir(parents=True)
        root = self.config_root
        for directory in [root, *(p for p in root.rglob("*") if p.is_dir())] if root.exists() else []:
            directory.chmod(0o755)
        if not self.grant:
            return
        if (granted := self._ownership("volume-permissions", self.grant)).returncode != 0:
            raise TfchartError(f"could not make {self.volume_dir} writable for the pods: "
                               f"{last_line(granted.stderr) or granted.returncode}",
                               "the image must have /bin/sh, chown and find")  # fmt: skip

    def _ownership(self, name: str, script: str) -> subprocess.CompletedProcess[str]:
        """A short root container over the shared volume (the kubelet's fsGroup work, or giving it back)."""
        image = self.volume_image
        assert image is not None
        return self._engine(
            "run", "--rm", "--name", f"{self.run_id}-{name}", "--label", f"{RUN_LABEL}={self.run_id}",
            "--network", "none", "--user", "0:0", "--pull", "never", "--no-healthcheck",
            *bind(self.volume_dir, VOLUME_TARGET), "--entrypoint", "/bin/sh", image, "-c", script,
            timeout=600,
        )  # fmt: skip

    def send(self, process: Process, sig: int) -> None:
        if isinstance(pod := process.pod, ContainerPod):
            self._engine("kill", "--signal", signal.Signals(sig).name.removeprefix("SIG"), pod.container_name)

    def listens(self, process: Process, port: int) -> bool:
        """Its sandbox's /proc/net/tcp and tcp6, read with the shell's builtins, list `port` listening."""
        assert isinstance(process.pod, ContainerPod)
        read = ('for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] || continue; '
                'while IFS= read -r l; do echo "$l"; done < "$f"; done')
        tables = self._engine("exec", process.pod.container_name + SANDBOX_SUFFIX, "/bin/sh", "-c", read)
        return tables.returncode == 0 and listening(tables.stdout, port)

    def stop(self, grace: float = 10.0) -> None:
        """Stops every container (SIGTERM, then SIGKILL after `grace`), gives the volume back, removes all labelled
        (a container whose client is gone too); processes.running ignores Ctrl-C meanwhile."""
        self.end(list(self.processes.values()), signal.SIGTERM, grace)
        if self._prepared and self.volume_image is not None:  # the volume given back to the invoking user
            given = self._ownership("volume-owner", f"chown -R {self.host_owner} {VOLUME_TARGET}")
            if given.returncode != 0:
                print(f"warning: could not give {self.volume_dir} back to you ({last_line(given.stderr)}): "
                      f"sudo chown -R {os.getuid()}:{os.getgid()} {self.volume_dir}", file=sys.stderr)
        engine, label = self.engine, f"label={RUN_LABEL}={self.run_id}"  # containers, then networks, then volumes
        for listing, removal in (("ps -a", "rm -f -v"), ("network ls", "network rm"), ("volume ls", "volume rm -f")):
            if found := self._labelled(listing):
                self._engine(*removal.split(), *found)
            if self._labelled(listing):
                print(f"warning: {engine} could not remove everything of run {self.run_id}: "
                      f"{engine} {removal} $({engine} {listing} -q --filter {label})", file=sys.stderr)  # fmt: skip
        shutil.rmtree(self.config_root, ignore_errors=True)
