"""`tfchart local --engine podman`: the rendered release as real containers.

The first tests check the `podman run` commands built from a real helm render (no container
starts). The slow ones run `tfchart local --engine podman` as a subprocess on the CPU image built
by `tfchart build` (tests.containerlib), train on the offline digits set, look inside the running
containers (DNS, TF_CONFIG, TensorBoard), kill a worker, and check that nothing is left behind
after success, after a failing chief and after Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import CHART, REPO, helm_path, render
from tests.containerlib import ENGINE, built_images, require_engine
from tfchart.errors import UsageError
from tfchart.helm.chart import Chart, read
from tfchart.helm.chart import merged_values as helm_values
from tfchart.helm.runner import Helm
from tfchart.local.containers import plan_from_manifests
from tfchart.local.jobset import jobs_of
from tfchart.local.pods import ContainerPod, pull_policy
from tfchart.local.processes import LocalPlan

E2E_VALUES = REPO / "tests" / "fixtures" / "e2e-values.yaml"
VALUES_FILES = (REPO / "values" / "cpu.yaml", E2E_VALUES)
NAMESPACE = "ml-training"
RELEASE = "mnist"
PREFIX = f"{RELEASE}-tf-distributed"


def render_docs(sets: list[str]) -> list[Any]:
    return render("4", VALUES_FILES, sets, RELEASE, NAMESPACE)


def merged_values(sets: list[str]) -> dict[str, Any]:
    """The values helm renders the chart with for these inputs, as `tfchart local` reads them."""
    given = read([str(file) for file in VALUES_FILES], [("--set", item) for item in sets])
    values: dict[str, Any] = helm_values(Helm(str(helm_path("4"))), Chart(CHART, str(CHART)), given)
    return values


def container_plan(tmp_path: Path, sets: Sequence[str] = (), docs: list[Any] | None = None,
                   engine: str = "podman") -> LocalPlan:  # fmt: skip
    """The plan `tfchart local --engine podman` makes, without asking podman anything."""
    docs = docs or render_docs(list(sets))
    values = merged_values(list(sets))
    return plan_from_manifests(docs, values, tmp_path / "run", NAMESPACE, engine, "0:0", "tfd-test01")


def chief_spec(docs: list[Any]) -> dict[str, Any]:
    """The chief Job's pod template spec, to change a render as another chart could render it."""
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == f"{PREFIX}-chief")
    return job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def with_settings(docs: list[Any], path: str) -> None:
    """ConfigMap settings (keys a, b), its key a mounted in the chief at /etc/settings/<path>."""
    spec = chief_spec(docs)
    items = [{"key": "a", "path": path}]
    spec["volumes"].append({"name": "settings", "configMap": {"name": "settings", "items": items}})
    spec["containers"][0]["volumeMounts"].append({"name": "settings", "mountPath": "/etc/settings"})
    docs.append({"kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "alpha", "b": "beta"}})


def pod(plan: LocalPlan, name: str) -> ContainerPod:
    return next(p for p in plan.pods if p.name == name and isinstance(p, ContainerPod))


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


# ---------------------------------------------------------------------------------------------
# the run commands, from a real render (fast: no container starts)


def test_security_context_becomes_user_groups_read_only_and_capabilities(tmp_path: Path) -> None:
    plan = container_plan(tmp_path, ["ps.replicas=1"])
    assert {p.role for p in plan.pods} == {"ps", "worker", "chief", "tensorboard"}
    for each in plan.pods:
        argv = each.run
        assert flag_values(argv, "--user") == ["10001:10001"], each.name
        assert flag_values(argv, "--group-add") == ["10001"], each.name  # fsGroup
        assert "--read-only" in argv and "--read-only-tmpfs=false" in argv, each.name
        assert flag_values(argv, "--cap-drop") == ["ALL"] and flag_values(argv, "--cap-add") == []
        assert flag_values(argv, "--security-opt") == ["no-new-privileges"]
        assert "--privileged" not in argv and "--no-healthcheck" in argv
    docker = container_plan(tmp_path, ["ps.replicas=1"], engine="docker").pods[0].run
    assert "--read-only" in docker and "--read-only-tmpfs=false" not in docker  # a podman-only flag


def test_container_security_context_overrides_the_pods(tmp_path: Path) -> None:
    sets = [
        "chief.containerSecurityContext.runAsUser=2000",
        "chief.containerSecurityContext.readOnlyRootFilesystem=false",
        "chief.containerSecurityContext.allowPrivilegeEscalation=true",
        "chief.podSecurityContext.fsGroup=3000",
        "chief.containerSecurityContext.capabilities.drop={NET_RAW}",
    ]
    argv = pod(container_plan(tmp_path, sets), f"{PREFIX}-chief").run
    assert flag_values(argv, "--user") == ["2000:10001"]
    assert flag_values(argv, "--group-add") == ["3000"]
    assert "--read-only" not in argv and "no-new-privileges" not in argv
    assert flag_values(argv, "--cap-drop") == ["NET_RAW"]


def test_run_as_non_root_with_uid_0_is_refused(tmp_path: Path) -> None:
    sets = ["chief.containerSecurityContext.runAsUser=0", "chief.podSecurityContext.runAsUser=0"]
    with pytest.raises(UsageError, match=rf"{PREFIX}-chief: runAsNonRoot is set but runAsUser is 0"):
        container_plan(tmp_path, sets)


@pytest.mark.parametrize("sets, said", [
    (["chief.containerSecurityContext.privileged=true", "chief.containerSecurityContext.allowPrivilegeEscalation=true",
      "chief.containerSecurityContext.capabilities.drop=null"], "chief.containerSecurityContext.privileged is true"),
    (["chief.containerSecurityContext.runAsUser=0", "chief.podSecurityContext.runAsUser=0",
      "chief.podSecurityContext.runAsNonRoot=false", "chief.containerSecurityContext.runAsNonRoot=false"],
     "its securityContext.runAsUser is 0"),
])  # fmt: skip
def test_privileged_or_uid_0_runs_only_when_allowed(tmp_path: Path, sets: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=rf"{PREFIX}-chief: {re.escape(said)}: in a container on this machine") as no:
        container_plan(tmp_path, sets)
    assert "--allow-privileged" in (no.value.hint or "")
    docs, values = render_docs(sets), merged_values(sets)
    allowed = plan_from_manifests(docs, values, tmp_path / "run", NAMESPACE, "podman", "0:0", "tfd-test01",
                                  allow_privileged=True)  # fmt: skip
    argv = pod(allowed, f"{PREFIX}-chief").run
    assert ("--privileged" in argv) == ("privileged" in said)


def test_run_as_non_root_without_a_user_is_refused(tmp_path: Path) -> None:
    docs = render_docs([])  # the chart's schema requires runAsUser: a manifest without one, as another chart has it
    spec = chief_spec(docs)
    spec["securityContext"].pop("runAsUser")
    spec["containers"][0]["securityContext"].pop("runAsUser")
    with pytest.raises(UsageError, match=rf"{PREFIX}-chief: runAsNonRoot is set but runAsUser is not set"):
        container_plan(tmp_path, docs=docs)


def test_env_resolves_the_downward_api_and_command_args_are_as_rendered(tmp_path: Path) -> None:
    docs = render_docs(["ps.replicas=1"])
    plan = container_plan(tmp_path, docs=docs)
    worker = pod(plan, f"{PREFIX}-worker-1")
    assert worker.env["POD_NAME"] == f"{PREFIX}-worker-1"
    assert worker.env["POD_NAMESPACE"] == NAMESPACE
    assert worker.env["TFD_TASK_INDEX"] == "1"  # metadata.labels['apps.kubernetes.io/pod-index']
    rendered = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == f"{PREFIX}-worker")
    container = rendered["spec"]["template"]["spec"]["containers"][0]
    cluster_env = next(e["value"] for e in container["env"] if e["name"] == "TFD_CLUSTER")
    assert worker.env["TFD_CLUSTER"] == cluster_env  # the cluster map is not rewritten
    argv = worker.run
    image_at = argv.index(worker.container["image"])
    assert argv[image_at - 2 : image_at] == ["--entrypoint", container["command"][0]]
    assert argv[image_at + 1 :] == [*container["command"][1:], *container["args"]]
    assert f"TFD_CLUSTER={cluster_env}" in flag_values(argv, "--env")
    tensorboard = pod(plan, f"{PREFIX}-tensorboard-0").run
    assert tensorboard[tensorboard.index("--entrypoint") + 1] == "tensorboard"


def test_volumes_become_one_shared_bind_mount_tmpfs_and_config_map_files(tmp_path: Path) -> None:
    docs = render_docs(["ps.replicas=1", "storage.mountPath=/shared", "storage.subPath=team/a"])
    with_settings(docs, "x/a.txt")
    plan = plan_from_manifests(
        docs, merged_values(["storage.mountPath=/shared", "storage.subPath=team/a"]), tmp_path / "run", NAMESPACE,
        "podman", "0:0", "tfd-test01",
    )  # fmt: skip
    volume = tmp_path / "run" / "team" / "a"
    chief = pod(plan, f"{PREFIX}-chief").run
    mounts = flag_values(chief, "--mount")
    assert f"type=bind,source={volume},target=/shared" in mounts
    cluster = plan.cluster(print)
    assert f"type=bind,source={cluster.config_root}/settings,target=/etc/settings,readonly=true" in mounts
    assert cluster.config_files == {cluster.config_root / "settings/x/a.txt": (b"alpha", 0o644)}
    # /tmp and the working directory (chief.workingDir) are the chart's emptyDirs
    assert flag_values(chief, "--tmpfs") == [
        f"/tmp:rw,exec,mode=0777,size={2 * 2**30}",
        f"/workspace:rw,exec,mode=0777,size={2 * 2**30}",
    ]
    assert flag_values(chief, "--workdir") == ["/workspace"]
    tensorboard = flag_values(pod(plan, f"{PREFIX}-tensorboard-0").run, "--mount")
    assert tensorboard == [f"type=bind,source={volume},target=/shared,readonly=true"]  # the claim is readOnly there
    assert plan.workdir == volume and plan.host_path("/shared/export/mnist/1") == str(volume / "export/mnist/1")
    assert cluster.grant.startswith("chgrp -R 10001 ")  # fsGroup: the volume made writable for the pods' group


def test_the_chiefs_api_token_is_not_mounted_and_secrets_are_refused(tmp_path: Path) -> None:
    docs = render_docs([])
    spec = chief_spec(docs)
    spec["volumes"].append({"name": "kube-api-access",
                            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}})
    spec["containers"][0]["volumeMounts"].append({"name": "kube-api-access",
                                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    chief = pod(container_plan(tmp_path, docs=docs), f"{PREFIX}-chief").run
    assert not any("serviceaccount" in mount for mount in flag_values(chief, "--mount"))
    spec["volumes"].append({"name": "creds", "secret": {"secretName": "creds"}})
    spec["containers"][0]["volumeMounts"].append({"name": "creds", "mountPath": "/creds"})
    with pytest.raises(UsageError, match="volume 'creds' \\(secret\\) cannot be emulated"):
        container_plan(tmp_path, docs=docs)


@pytest.mark.parametrize("sub_path", ["/", "/etc", "../..", "a/../../b", "escape", "escape/inner"])
def test_the_engine_mounts_nothing_outside_the_run_directory(tmp_path: Path, sub_path: str) -> None:
    """A render the schema did not check (another chart, --chart): an absolute or climbing subPath, or a
    symbolic link a pod left in the run directory, would bind-mount a host path; refused in one line."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "escape").symlink_to("/")  # made by a pod of an earlier run
    docs = render_docs([])
    data = next(m for m in chief_spec(docs)["containers"][0]["volumeMounts"] if m["mountPath"] == "/data")
    data["subPath"] = sub_path
    with pytest.raises(UsageError, match=f"{PREFIX}-chief: the subPath of volumeMount '{data['name']}'") as refused:
        container_plan(tmp_path, docs=docs)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("path", ["../outside", "/etc/cron.d/x", "a/../../b"])
def test_the_engine_writes_no_config_map_file_outside_its_folder(tmp_path: Path, path: str) -> None:
    docs = render_docs([])
    with_settings(docs, path)
    with pytest.raises(UsageError, match="the path of item 'a' of configMap volume 'settings'"):
        container_plan(tmp_path, docs=docs)
    assert not (tmp_path / "outside").exists()


def test_every_cluster_map_address_is_the_dns_alias_of_exactly_one_pod(tmp_path: Path) -> None:
    sets = ["ps.replicas=2", "worker.replicas=2", "clusterDomain=tfd.test"]
    plan = container_plan(tmp_path, sets)
    cluster = json.loads(pod(plan, f"{PREFIX}-chief").env["TFD_CLUSTER"])
    hosts = [address.rsplit(":", 1)[0] for addresses in cluster.values() for address in addresses]
    assert len(hosts) == 5 and all(host.endswith(f".{NAMESPACE}.svc.tfd.test") for host in hosts)
    for host in hosts:
        owners = [p.name for p in plan.pods if host in p.aliases]
        assert owners == [host.split(".")[0]], host
    worker = pod(plan, f"{PREFIX}-worker-1")
    sandbox = worker.sandbox
    assert flag_values(sandbox, "--network-alias") == [
        f"{PREFIX}-worker-1.{PREFIX}-worker.{NAMESPACE}.svc.tfd.test",  # <sts>-<k>.<serviceName>
        f"{PREFIX}-worker.{NAMESPACE}.svc.tfd.test",  # the headless Service's own name
    ]
    assert flag_values(sandbox, "--hostname") == [worker.name] and flag_values(sandbox, "--network") == ["tfd-test01"]
    assert flag_values(sandbox, "--dns-search")[0] == f"{NAMESPACE}.svc.tfd.test"
    assert "--detach" in sandbox and flag_values(sandbox, "--user") == ["10001:10001"]
    # The pod's container joins its sandbox: a restart keeps the pod's address and DNS record.
    argv = worker.run
    assert flag_values(argv, "--network") == [f"container:{worker.container_name}-sandbox"]
    assert flag_values(argv, "--uts") == [f"container:{worker.container_name}-sandbox"]
    assert f"HOSTNAME={worker.name}" in flag_values(argv, "--env")
    assert not {"--hostname", "--network-alias", "--dns-search", "--publish"} & set(argv)
    docker = pod(container_plan(tmp_path, sets, engine="docker"), worker.name).run
    assert "--uts" not in docker  # docker gives it the sandbox's hostname itself
    tensorboard = pod(plan, f"{PREFIX}-tensorboard-0")
    assert tensorboard.aliases == [f"{PREFIX}-tensorboard.{NAMESPACE}.svc.tfd.test"]  # a Deployment: its Service
    assert all("tfchart.run=tfd-test01" in flag_values(p.run, "--label") for p in plan.pods)


def test_pull_policy_maps_to_pull(tmp_path: Path) -> None:
    for policy, flag in (("Never", "never"), ("IfNotPresent", "missing"), ("Always", "always")):
        plan = container_plan(tmp_path, [f"image.pullPolicy={policy}"])
        assert {flag_values(p.run, "--pull")[0] for p in plan.pods} == {flag}, policy
    assert pull_policy({"image": "registry:5000/trainer"}) == "always"  # no tag: latest
    assert pull_policy({"image": "registry:5000/trainer:1.0"}) == "missing"
    assert pull_policy({"image": "trainer:latest"}) == "always"


def test_the_pods_run_under_their_controllers(tmp_path: Path) -> None:
    """Every TensorFlow pod belongs to its Job or StatefulSet as rendered (jobsetrun.py starts them again); the
    chief's Job is the run's, with its backoffLimit and podFailurePolicy; TensorBoard starts once, outside."""
    plan = container_plan(tmp_path, ["chief.backoffLimit=2", "evaluator.enabled=true"])
    jobs = {job.name: job for job in jobs_of(plan.workload)}
    assert plan.workload["kind"] == "List"  # no JobSet: the Jobs and StatefulSets as rendered
    assert plan.workload["spec"]["successPolicy"]["targetReplicatedJobs"] == [f"{PREFIX}-chief"]
    assert {name: job.doc["kind"] for name, job in jobs.items()} == {
        f"{PREFIX}-ps": "StatefulSet", f"{PREFIX}-worker": "StatefulSet", f"{PREFIX}-chief": "Job",
        f"{PREFIX}-evaluator": "Job"}  # fmt: skip
    chief = jobs[f"{PREFIX}-chief"]
    pods = {name: [pod.name for pod in job.pods] for name, job in jobs.items()}
    assert pods[f"{PREFIX}-chief"] == [f"{PREFIX}-chief"] and chief.doc["spec"]["backoffLimit"] == 2
    assert chief.first_rule(2)
    assert pods[f"{PREFIX}-worker"] == [f"{PREFIX}-worker-0", f"{PREFIX}-worker-1"]
    assert all(f"{PREFIX}-tensorboard-0" not in names for names in pods.values())


def test_tensorboard_is_published_on_localhost(tmp_path: Path) -> None:
    plan = container_plan(tmp_path)
    tensorboard = pod(plan, f"{PREFIX}-tensorboard-0")
    (published,) = flag_values(tensorboard.sandbox, "--publish")
    assert published.endswith(":6006") and plan.tensorboard_url == f"http://{published.removesuffix(':6006')}/"
    assert published.startswith("127.0.0.1:")
    assert all("--publish" not in p.sandbox for p in plan.pods if p.role != "tensorboard")


def test_an_empty_dirs_size_limit_is_its_tmpfs_size_in_whole_bytes(tmp_path: Path) -> None:
    docs = render_docs([])
    empty_dirs = [volume["emptyDir"] for volume in chief_spec(docs)["volumes"] if "emptyDir" in volume]
    for limit, size in (("64Mi", 64 * 2**20), ("500M", 500 * 10**6), ("1024", 1024), ("1.5Ki", 1536), ("0.1", 1)):
        for empty_dir in empty_dirs:
            empty_dir["sizeLimit"] = limit
        tmpfs = flag_values(pod(container_plan(tmp_path, docs=docs), f"{PREFIX}-chief").run, "--tmpfs")
        assert tmpfs and all(flag.endswith(f",size={size}") for flag in tmpfs), limit
    empty_dirs[0]["sizeLimit"] = "lots"
    with pytest.raises(UsageError, match=f"{PREFIX}-chief: cannot read the sizeLimit 'lots' of volume"):
        container_plan(tmp_path, docs=docs)


# ---------------------------------------------------------------------------------------------
# the CLI's one-line errors (no container starts)


def tfchart(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "tfchart"), "local", "-f", "values/cpu.yaml", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "500", **env},
    )  # fmt: skip


def test_a_missing_image_fails_in_one_line_naming_it_and_the_fix(tmp_path: Path) -> None:
    require_engine()
    result = tfchart("--engine", "podman", "--set", "image.tag=no-such-tag", "--set", "image.pullPolicy=Never",
                     "--workdir", str(tmp_path / "run"))  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "ghcr.io/tf-distributed/trainer:no-such-tag" in lines[0] and "tfchart build" in lines[0]
    assert "tfchart local" not in result.stdout  # nothing started


def test_an_engine_that_does_not_answer_fails_in_one_line(tmp_path: Path) -> None:
    result = tfchart("--engine", "docker", "--workdir", str(tmp_path / "run"), DOCKER_HOST="unix:///nonexistent.sock")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert "docker" in lines[0] and "--engine process" in lines[0]


# ---------------------------------------------------------------------------------------------
# real containers


class LocalRun:
    """`tfchart local --engine podman` as a subprocess, its output collected line by line."""

    def __init__(self, workdir: Path, sets: list[str], *options: str) -> None:
        built_images()
        self.workdir = workdir
        argv = [
            str(REPO / ".venv" / "bin" / "tfchart"), "local", RELEASE, "--engine", ENGINE, "-n", NAMESPACE,
            "-f", "values/cpu.yaml", "-f", str(E2E_VALUES), "--workdir", str(workdir), "--follow-logs", *options,
        ]  # fmt: skip
        for item in sets:
            argv += ["--set", item]
        self.proc = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "COLUMNS": "500"},
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.run_id = self.wait_for(r"label tfchart\.run=(tfd-[0-9a-f]+)", timeout=120).group(1)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 240, start: int = 0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines[start:]:
                match = re.search(pattern, line)
                if match:
                    return match
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines[-60:]))

    def pod_lines(self, name: str) -> list[str]:
        return [line.split("| ", 1)[1] for line in self.lines if re.match(rf"^{re.escape(name)}\s+\| ", line)]

    def container(self, pod: str) -> str:
        return f"{self.run_id}-{pod}"

    def finish(self, timeout: float = 600) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.finish(timeout=120)

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads((self.workdir / "status.json").read_text())
        return result


@pytest.fixture
def local_runs() -> Iterator[list[LocalRun]]:
    """Every run started by a test is ended, even when the test fails half-way."""
    runs: list[LocalRun] = []
    yield runs
    for run in runs:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGINT)
            try:
                run.finish(timeout=120)
            except subprocess.TimeoutExpired:
                run.proc.kill()


def engine_lines(*args: str) -> list[str]:
    result = subprocess.run([ENGINE, *args], capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.split()


def left_behind(run: LocalRun) -> dict[str, list[str]]:
    label = f"label=tfchart.run={run.run_id}"
    found = {
        "containers": engine_lines("ps", "-a", "-q", "--filter", label),
        "networks": engine_lines("network", "ls", "-q", "--filter", label),
        "volumes": engine_lines("volume", "ls", "-q", "--filter", label),
        "named": [n for n in engine_lines("ps", "-a", "--format", "{{.Names}}") if n.startswith(run.run_id)],
    }
    found["named"] += [n for n in engine_lines("network", "ls", "--format", "{{.Name}}") if n == run.run_id]
    return {kind: names for kind, names in found.items() if names}


def running_containers(run: LocalRun) -> list[str]:
    """The pods' containers of the run that are running (their sandboxes left out)."""
    names = engine_lines("ps", "--filter", f"label=tfchart.run={run.run_id}", "--format", "{{.Names}}")
    return sorted(name for name in names if not name.endswith("-sandbox"))


def wait_until(condition: Callable[[], bool], timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def not_owned_by_me(directory: Path) -> list[str]:
    me = (os.getuid(), os.getgid())
    paths = [directory, *directory.rglob("*")]
    return [f"{p} {p.lstat().st_uid}:{p.lstat().st_gid}" for p in paths if (p.lstat().st_uid, p.lstat().st_gid) != me]


def assert_nothing_left(run: LocalRun) -> None:
    assert left_behind(run) == {}
    assert not_owned_by_me(run.workdir) == []


def exec_python(container: str, code: str) -> Any:
    result = subprocess.run(
        [ENGINE, "exec", container, "python", "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


RESOLVE_TF_CONFIG = """
import json, socket
environ = dict(item.split("=", 1) for item in open("/proc/1/environ").read().split("\\0") if "=" in item)
config = json.loads(environ["TF_CONFIG"])
hosts = [address.rsplit(":", 1)[0] for addresses in config["cluster"].values() for address in addresses]
print(json.dumps({"task": config["task"], "resolved": {host: socket.gethostbyname(host) for host in hosts}}))
"""

# TensorBoard reads the event files in the background: polled until the loss series reaches the final
# step (argv[2]), as an earlier answer can be a partial one
TENSORBOARD_LOSS = """
import json, sys, time, urllib.error, urllib.parse, urllib.request
base, final = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 180
runs, points = [], []
while not (points and points[-1][1] == final) and time.time() < deadline:
    try:
        tags = json.load(urllib.request.urlopen(base + "/data/plugin/scalars/tags", timeout=10))
        runs = [run for run, run_tags in tags.items() if "loss" in run_tags]
        query = "/data/plugin/scalars/scalars?tag=loss&run=" + urllib.parse.quote(runs[0]) if runs else None
        points = json.load(urllib.request.urlopen(base + query, timeout=10)) if query else []
    except (OSError, urllib.error.HTTPError):
        pass
    time.sleep(0.5)
runs_listed = json.load(urllib.request.urlopen(base + "/data/runs", timeout=10))
print(json.dumps({"runs": runs_listed, "loss_runs": runs, "points": points}))
"""


def container_address(container: str) -> str:
    inspect = subprocess.run(
        [ENGINE, "inspect", container, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return inspect.stdout.strip()


@pytest.mark.slow
def test_parameter_server_in_containers_survives_a_killed_worker(tmp_path: Path, local_runs: list[LocalRun]) -> None:
    sets = ["ps.replicas=1", "worker.replicas=2", "training.trainSteps=600", "training.checkpointEverySteps=500"]
    run = LocalRun(tmp_path / "run", sets, "--keep-tensorboard")
    local_runs.append(run)
    chief, worker = f"{PREFIX}-chief", f"{PREFIX}-worker-1"
    run.wait_for(rf"^{chief}\s+\| step (\d+), loss", timeout=240)

    # Every TF_CONFIG address is the chart's DNS name and resolves, inside the pods, to its pod.
    seen = exec_python(run.container(chief), RESOLVE_TF_CONFIG)
    assert seen["task"] == {"type": "chief", "index": 0}
    assert all(host.endswith(f".{NAMESPACE}.svc.cluster.local") for host in seen["resolved"])
    for host, address in seen["resolved"].items():
        assert address == container_address(run.container(host.split(".")[0]) + "-sandbox"), host
    assert exec_python(run.container(worker), RESOLVE_TF_CONFIG)["resolved"] == seen["resolved"]

    # A worker killed mid-run comes back under the same name. The chief is frozen meanwhile (SIGSTOP to
    # its container), so that training cannot end before the worker is back, however fast this machine is.
    assert run.pod_lines(worker) and not any("[tfchart]" in line for line in run.pod_lines(worker))
    killed_at = len(run.lines)
    engine_lines("kill", "--signal", "STOP", run.container(chief))
    try:
        engine_lines("kill", run.container(worker))
        run.wait_for(rf"^{worker}\s+\| \[tfchart\] exited with 137: a new pod in", timeout=120, start=killed_at)
        run.wait_for(rf"^{worker}\s+\| .*server listening on {worker}\.", timeout=240, start=killed_at)
    finally:
        engine_lines("kill", "--signal", "CONT", run.container(chief))
    run.wait_for(r"✓ training Succeeded", timeout=600)
    status = run.status()
    assert status["state"] == "Succeeded" and status["step"] >= 600 and status["accuracy"] >= 0.95, status
    export = re.search(r"export: (\S+)", run.output)
    assert export and Path(export.group(1)) == run.workdir / "export" / "mnist" / "1"
    assert (run.workdir / "export" / "mnist" / "1" / "saved_model.pb").is_file()

    # --keep-tensorboard: the training pods are stopped, TensorBoard (and the sandboxes) keep running.
    tensorboard = run.container(f"{PREFIX}-tensorboard-0")
    assert wait_until(lambda: running_containers(run) == [tensorboard]), running_containers(run)

    # TensorBoard serves the loss scalar: from inside its container (by its Service's DNS name) and on localhost.
    final = max(int(n) for n in re.findall(r"^step (\d+), loss", "\n".join(run.pod_lines(chief)), re.MULTILINE))
    inside = subprocess.run(
        [ENGINE, "exec", tensorboard, "python", "-c", TENSORBOARD_LOSS,
         f"http://{PREFIX}-tensorboard.{NAMESPACE}.svc.cluster.local:6006", str(final)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert inside.returncode == 0, inside.stderr[-2000:]
    served = json.loads(inside.stdout)
    assert served["loss_runs"] and set(served["loss_runs"]) <= set(served["runs"]), served
    steps = [step for _, step, _ in served["points"]]
    assert len(steps) >= 10 and steps == sorted(steps) and steps[-1] == final, steps
    url = re.search(r"TensorBoard: (http://127\.0\.0\.1:\d+/)", run.output)
    assert url, run.output[-2000:]
    host = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-c", TENSORBOARD_LOSS, url.group(1).rstrip("/"), str(final)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert host.returncode == 0, host.stderr[-2000:]
    assert json.loads(host.stdout)["points"] == served["points"]

    assert run.interrupt() == 0, run.output[-3000:]  # --keep-tensorboard: Ctrl-C is how it ends
    assert_nothing_left(run)


@pytest.mark.slow
def test_sync_all_reduce_in_containers_with_another_cluster_domain(tmp_path: Path, local_runs: list[LocalRun]) -> None:
    sets = ["training.strategy=multi_worker_mirrored", "worker.replicas=1", "training.trainSteps=300",
            "tensorboard.enabled=false", "clusterDomain=tfd.test", "storage.subPath=team/a"]  # fmt: skip
    run = LocalRun(tmp_path / "run", sets)
    local_runs.append(run)
    assert run.finish() == 0, run.output[-4000:]
    assert f"{PREFIX}-worker-0.{PREFIX}-worker.{NAMESPACE}.svc.tfd.test" in run.output
    storage_root = run.workdir / "team" / "a"  # storage.subPath of the one shared volume
    status = json.loads((storage_root / "status.json").read_text())
    assert status["state"] == "Succeeded" and status["accuracy"] >= 0.95, status
    assert re.search(rf"export: {re.escape(str(storage_root))}/export/mnist/\d+$", run.output, re.MULTILINE)
    assert_nothing_left(run)


@pytest.mark.slow
def test_a_failing_chief_is_retried_backoff_limit_times_then_the_run_fails(
    tmp_path: Path, local_runs: list[LocalRun]
) -> None:
    sets = ["training.strategy=multi_worker_mirrored", "worker.replicas=0", "tensorboard.enabled=false",
            "chief.command={/bin/sh,-c,echo chief attempt as $(id -u); exit 3}", "chief.backoffLimit=1"]  # fmt: skip
    run = LocalRun(tmp_path / "run", sets)
    local_runs.append(run)
    assert run.finish() == 1, run.output[-3000:]
    chief = run.pod_lines(f"{PREFIX}-chief")
    assert [line for line in chief if line.startswith("chief attempt")] == ["chief attempt as 10001"] * 2, chief
    assert "[tfchart] exited with 3: a new pod in 1 s (failure 1 of backoffLimit 1)" in chief
    assert "[tfchart] BackoffLimitExceeded: Job has reached the specified backoff limit" in chief
    assert re.search(r"✗ training failed after \d+ s: \S+-chief exited with 3", run.output)
    assert_nothing_left(run)


@pytest.mark.slow
def test_ctrl_c_while_training_removes_every_container(tmp_path: Path, local_runs: list[LocalRun]) -> None:
    sets = ["training.strategy=multi_worker_mirrored", "worker.replicas=1", "training.trainSteps=20000",
            "tensorboard.enabled=false"]  # fmt: skip
    run = LocalRun(tmp_path / "run", sets)
    local_runs.append(run)
    run.wait_for(rf"^{PREFIX}-chief\s+\| step \d+, loss", timeout=240)
    assert running_containers(run) == [run.container(f"{PREFIX}-chief"), run.container(f"{PREFIX}-worker-0")]
    assert any(p.lstat().st_uid == 10001 for p in run.workdir.rglob("*"))  # the pods wrote as their own user
    assert run.interrupt() == 130, run.output[-3000:]
    assert_nothing_left(run)
