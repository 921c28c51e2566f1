"""The bring-your-own image contract (docs/images.md, "Bring your own image: what it must provide").

Every TensorFlow container runs as uid 10001 on a read-only root; it may write its working
directory (an emptyDir), /tmp and the claim at storage.mountPath. HOME is the image's own unless a
role's `home` sets it. When the trainer image is already in podman's store, a bring-your-own
command from the rendered spec is also run in it and writes a relative path. Every TensorFlow
container names the storage paths (tfdcontract.storage_env) that the trainer, TensorBoard and
Serving use, in a cluster and under both `tfchart local` engines.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chartlib import CHART, REPO, component, env_of, helm, pod_spec, render, template, workloads
from tests.containerlib import engine_works, image_exists, run_in_image
from tfchart.images.build import DEFAULT_REGISTRY, DEFAULT_REPOSITORY, project_version
from tfchart.local import processes
from tfchart.local.containers import plan_from_manifests
from tfdcontract import storage_env
from trainer.config import StorageLayout

TF_ROLES = ("ps", "worker", "chief", "evaluator")
EVERYTHING = ["evaluator.enabled=true"]
# A global batch of 64 over a chief and two workers in sync: not divisible by 3 for the trainer.
UNEVEN_SYNC = ["training.strategy=multi_worker_mirrored", "training.batchSize=64", "worker.replicas=2"]
OWN_COMMAND = "{python,/app/train.py}"


def tf_containers(docs: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """role -> (pod spec, TensorFlow container)."""
    found = {}
    for doc in workloads(docs):
        if component(doc) in TF_ROLES:
            spec = pod_spec(doc)
            (container,) = [c for c in spec["containers"] if c["name"] == component(doc)]
            found[component(doc)] = (spec, container)
    return found


def writable_paths(spec: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """mountPath -> volume kind, for the mounts the container may write."""
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    found = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if mount.get("readOnly"):
            continue
        kind = next(key for key in volume if key != "name")
        if kind == "persistentVolumeClaim" and volume[kind].get("readOnly"):
            continue
        found[mount["mountPath"]] = kind
    return found


def test_every_tensorflow_container_writes_its_working_directory_tmp_and_the_claim() -> None:
    containers = tf_containers(render(sets=EVERYTHING))
    assert set(containers) == set(TF_ROLES)
    for role, (spec, container) in containers.items():
        assert container["workingDir"] == "/workspace", role
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["runAsUser"] == 10001
        assert writable_paths(spec, container) == {
            "/workspace": "emptyDir",
            "/tmp": "emptyDir",
            "/data": "persistentVolumeClaim",
        }, role


def test_home_is_the_images_own_unless_a_role_sets_it() -> None:
    containers = tf_containers(render(sets=EVERYTHING))
    for role, (_spec, container) in containers.items():
        assert "HOME" not in env_of(container), role
    sets = [*EVERYTHING, "chief.home=/workspace", "worker.home=/tmp/home"]
    containers = tf_containers(render(sets=sets))
    assert env_of(containers["chief"][1])["HOME"] == "/workspace"
    assert env_of(containers["worker"][1])["HOME"] == "/tmp/home"
    assert "HOME" not in env_of(containers["ps"][1])


def test_a_role_may_move_its_working_directory() -> None:
    containers = tf_containers(render(sets=[*EVERYTHING, "worker.workingDir=/home/app/run"]))
    spec, container = containers["worker"]
    assert container["workingDir"] == "/home/app/run"
    assert writable_paths(spec, container)["/home/app/run"] == "emptyDir"
    assert containers["ps"][1]["workingDir"] == "/workspace"


def test_project_images_set_home_themselves() -> None:
    for name in ("Dockerfile.cpu", "Dockerfile.gpu"):
        text = (REPO / name).read_text()
        assert "HOME=/tmp" in text and "USER 10001:10001" in text, name


def test_tensorboard_and_serving_commands_get_no_cluster_map() -> None:
    docs = render(sets=EVERYTHING)
    seen = set()
    for doc in workloads(docs):
        if component(doc) in ("tensorboard", "serving"):
            seen.add(component(doc))
            for container in pod_spec(doc)["containers"]:
                assert not {"TFD_CLUSTER", "TF_CONFIG"} & set(env_of(container)), doc["metadata"]["name"]
    assert seen == {"tensorboard", "serving"}


def byo_worker() -> tuple[dict[str, Any], dict[str, Any]]:
    script = 'echo written > relative.txt && cat "$PWD/relative.txt" && echo "pwd=$PWD home=$HOME" && echo "$TF_CONFIG"'
    docs = render(sets=[*EVERYTHING, "worker.command={/bin/sh,-c}", f"worker.args={{{script}}}"])
    return tf_containers(docs)["worker"]


def test_a_bring_your_own_command_writes_a_relative_path() -> None:
    spec, container = byo_worker()
    assert container["workingDir"] in writable_paths(spec, container)
    assert container["args"][:2] == ["/bin/sh", "-c"]
    version = project_version(REPO)
    image = f"{DEFAULT_REGISTRY}/{DEFAULT_REPOSITORY}:{version}"
    if engine_works() is not None or not image_exists(image):
        return  # no image built on this machine: the rendered spec above is the contract
    env = {key: value for key, value in env_of(container).items() if isinstance(value, str)}
    env["TFD_TASK_INDEX"] = "1"
    options = [f"--tmpfs={container['workingDir']}:rw,mode=1777", "-w", container["workingDir"]]
    for key, value in env.items():
        options += ["-e", f"{key}={value}"]
    command = container["command"]
    answer = run_in_image(image, *command[1:], *container["args"], options=options, entrypoint=command[0])
    assert answer.returncode == 0, answer.stderr
    lines = answer.stdout.splitlines()
    assert lines[0] == "written"
    assert lines[1] == "pwd=/workspace home=/tmp", lines
    tf_config = json.loads(lines[2])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert len(tf_config["cluster"]["worker"]) == 2


def test_the_byo_command_is_run_unchanged() -> None:
    """The rendered args are exactly the user's command and arguments after the prelude's name."""
    _spec, container = byo_worker()
    assert container["command"][0] == "/bin/sh" and container["command"][-1] == "tf-distributed-prelude"
    assert shlex.join(container["args"][:2]) == "/bin/sh -c"
    assert subprocess.run(["/bin/sh", "-n", "-c", container["args"][2]], check=False).returncode == 0


# -- the storage contract: where a program's checkpoints, logs and exports go -------------------------

STRATEGY_SETS = {
    "parameter_server": ["training.strategy=parameter_server"],
    "multi_worker_mirrored": ["training.strategy=multi_worker_mirrored", "training.batchSize=63"],
    "multi_worker_mirrored, no chief": [
        "training.strategy=multi_worker_mirrored", "chief.replicas=0", "training.batchSize=64",
    ],
    "mirrored": ["training.strategy=mirrored"],
    "single_device": ["training.strategy=single_device"],
}
PLACE = ["storage.mountPath=/mnt/shared", "training.modelName=digits"]


@pytest.mark.parametrize("strategy", STRATEGY_SETS)
def test_every_tensorflow_container_of_every_strategy_names_the_storage_paths(strategy: str) -> None:
    docs = render(sets=[*STRATEGY_SETS[strategy], *PLACE, *EVERYTHING])
    containers = tf_containers(docs)
    assert "evaluator" in containers and ("chief" in containers or "worker" in containers)
    expected = storage_env("/mnt/shared", "digits")
    assert expected == {
        "TFD_STORAGE_ROOT": "/mnt/shared", "TFD_CHECKPOINT_DIR": "/mnt/shared/checkpoints",
        "TFD_LOG_DIR": "/mnt/shared/logs", "TFD_EXPORT_DIR": "/mnt/shared/export/digits", "TFD_MODEL_NAME": "digits",
    }  # fmt: skip
    for role, (_spec, container) in containers.items():
        env = env_of(container)
        assert {key: env.get(key) for key in expected} == expected, role


def test_the_storage_variables_are_where_the_trainer_tensorboard_and_serving_look() -> None:
    """One source: the trainer's flags, TensorBoard's logdir and Serving's base path give the same paths."""
    docs = render(sets=[*PLACE, *EVERYTHING])
    _spec, chief = tf_containers(docs)["chief"]
    env = env_of(chief)
    flags = dict(arg.split("=", 1) for arg in chief["args"] if arg.startswith("--") and "=" in arg)
    layout = StorageLayout(Path(flags["--storage-root"]), flags["--model-name"])
    assert env["TFD_STORAGE_ROOT"] == str(layout.root)
    assert env["TFD_CHECKPOINT_DIR"] == str(layout.checkpoints)
    assert env["TFD_LOG_DIR"] == str(layout.logs)
    assert env["TFD_EXPORT_DIR"] == str(layout.export_base)
    assert env["TFD_MODEL_NAME"] == flags["--model-name"]
    (tensorboard,) = [doc for doc in workloads(docs) if component(doc) == "tensorboard"]
    assert f"--logdir={env['TFD_LOG_DIR']}" in pod_spec(tensorboard)["containers"][0]["args"]
    (serving,) = [doc for doc in workloads(docs) if component(doc) == "serving"]
    (model_dir,) = pod_spec(serving)["initContainers"]  # makes the directory Serving polls
    assert env_of(model_dir)["MODEL_BASE_PATH"] == env["TFD_EXPORT_DIR"]
    (config,) = [doc for doc in docs if doc["kind"] == "ConfigMap" and "models.config" in doc.get("data", {})]
    assert f'base_path: "{env["TFD_EXPORT_DIR"]}"' in config["data"]["models.config"]
    assert f'name: "{env["TFD_MODEL_NAME"]}"' in config["data"]["models.config"]


def test_a_bring_your_own_command_gets_the_storage_variables_too() -> None:
    _spec, container = byo_worker()
    assert env_of(container)["TFD_EXPORT_DIR"] == "/data/export/mnist"


def test_tfchart_local_processes_point_the_storage_variables_at_the_run_directory(tmp_path: Path) -> None:
    """The process engine renders storage.mountPath as the run directory: every path lies inside it."""
    sets = ["training.strategy=multi_worker_mirrored", "training.batchSize=63", *EVERYTHING]

    def render_for_local(extra: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return render(sets=sets, extra=[part for flag, value in extra for part in (flag, value)])

    values = yaml.safe_load((REPO / "charts" / "tf-distributed" / "values.yaml").read_text())
    plan = processes.plan(render_for_local, values, tmp_path / "run", "ml-training")
    tf_pods = [pod for pod in plan.pods if pod.role in TF_ROLES]
    assert {pod.role for pod in tf_pods} == {"worker", "chief", "evaluator"}
    for pod in tf_pods:
        assert {key: pod.env.get(key) for key in storage_env(str(plan.workdir), "mnist")} == storage_env(
            str(plan.workdir), "mnist"), pod.name


def test_tfchart_local_containers_keep_the_mount_path_which_is_the_run_directory(tmp_path: Path) -> None:
    """The container engines keep the rendered mountPath: the claim's bind mount puts the run directory there."""
    sets = ["storage.mountPath=/shared", "storage.subPath=team/a", "training.modelName=digits", *EVERYTHING]
    docs = render(sets=sets)
    plan = plan_from_manifests(docs, {"storage": {"mountPath": "/shared", "subPath": "team/a"}}, tmp_path / "run",
                               "ml-training", "podman", "0:0", "tfd-test01")  # fmt: skip
    tf_pods = [pod for pod in plan.pods if pod.role in TF_ROLES]
    assert {pod.role for pod in tf_pods} == {"ps", "worker", "chief", "evaluator"}
    for pod in tf_pods:
        env = {key: pod.env.get(key) for key in storage_env("/shared", "digits")}
        assert env == storage_env("/shared", "digits"), pod.name
        mounts = [pod.run[i + 1] for i, flag in enumerate(pod.run) if flag == "--mount"]
        claim = [mount.removesuffix(",readonly=true") for mount in mounts if "target=/shared" in mount]
        assert claim == [f"type=bind,source={tmp_path / 'run' / 'team' / 'a'},target=/shared"]
        assert plan.host_path(env["TFD_EXPORT_DIR"]) == str(plan.workdir / "export" / "digits")


def test_training_rules_skip_roles_that_run_their_own_command(helm_major: str) -> None:
    """training.batchSize, learningRate, checkpoint and export settings are the trainer's: a program of
    one's own (command, or args that replace the trainer's) is not held to them."""
    byo = [f"chief.command={OWN_COMMAND}", f"worker.command={OWN_COMMAND}"]
    assert template(helm_major, sets=[*UNEVEN_SYNC, *byo]).returncode == 0
    own_args = ["chief.args={--epochs=3}", "worker.args={--epochs=3}"]  # the trainer, given other flags
    assert template(helm_major, sets=[*UNEVEN_SYNC, *own_args]).returncode == 0
    single = ["training.strategy=single_device", "chief.gpu.count=2", "training.checkpointEverySteps=5000"]
    assert template(helm_major, sets=[*single, f"chief.command={OWN_COMMAND}"]).returncode == 0


def test_training_rules_hold_while_one_role_concerned_runs_the_trainer(helm_major: str) -> None:
    uneven = template(helm_major, sets=[*UNEVEN_SYNC, f"chief.command={OWN_COMMAND}"])
    assert uneven.returncode != 0
    assert "training.batchSize: 64 is the global batch" in uneven.stderr and "not divisible by 3" in uneven.stderr
    single = template(helm_major, sets=["training.strategy=single_device", "chief.gpu.count=2",
                                        "training.checkpointEverySteps=5000", f"ps.command={OWN_COMMAND}"])
    assert "2 problem(s) in values" in single.stderr, single.stderr
    assert "chief.gpu.count: training.strategy=single_device uses one device" in single.stderr
    assert "training.checkpointEverySteps: 5000 is larger than training.trainSteps=2000" in single.stderr


def test_kubernetes_and_tensorflow_rules_hold_for_every_role(helm_major: str) -> None:
    """What Kubernetes or TensorFlow itself refuses stays refused, whatever program a role runs."""
    byo = [f"{role}.command={OWN_COMMAND}" for role in TF_ROLES]
    sets = [*byo, "training.strategy=multi_worker_mirrored", "chief.gpu.count=1", "worker.gpu.count=2",
            "ps.resources.requests.memory=4Gi"]
    refused = template(helm_major, sets=sets)
    assert "chief.gpu.count: training.strategy=multi_worker_mirrored needs the same GPU count" in refused.stderr
    assert "ps.resources.requests.memory: 4Gi is more than the limit 2Gi" in refused.stderr


ALL_OWN = ["image.repository=team/mine", "image.tag=1.0", *(f"{role}.command={OWN_COMMAND}" for role in TF_ROLES[:3])]


def images_by_component(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {component(doc): container["image"] for doc in workloads(docs) for container in pod_spec(doc)["containers"]}


def test_the_projects_pods_keep_the_projects_image_when_every_role_runs_its_own(helm_major: str) -> None:
    """image.* is then the user's: TensorBoard, the supervisor and the helm test pod stay on the project's
    image (tensorboard, trainer.supervisor, trainer.endpoint_probe), with the chart's version."""
    project = f"{DEFAULT_REGISTRY}/{DEFAULT_REPOSITORY}:{project_version(REPO)}"
    images = images_by_component(render(helm_major, sets=ALL_OWN))
    assert {role: images[role] for role in ("ps", "worker", "chief")} == dict.fromkeys(("ps", "worker", "chief"),
                                                                                       "ghcr.io/team/mine:1.0")
    assert images["tensorboard"] == images["supervisor"] == images["test"] == project
    chosen = images_by_component(render(helm_major, sets=[*ALL_OWN, "tensorboard.image.repository=team/board"]))
    assert chosen["tensorboard"] == "ghcr.io/team/board:1.0"  # its own repository; empty fields from image.*


def test_tensorboard_follows_the_image_the_trainer_runs_in(helm_major: str) -> None:
    """While a role runs the trainer from image.*, that image has tensorboard (a relocated project image)."""
    sets = ["image.registry=registry.example.com", "image.repository=ml/trainer", f"chief.command={OWN_COMMAND}"]
    images = images_by_component(render(helm_major, sets=sets))
    assert images["tensorboard"] == images["worker"] == f"registry.example.com/ml/trainer:{project_version(REPO)}"


def test_tensorboard_on_an_image_of_ones_own_is_warned_about(helm_major: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    sets = [*ALL_OWN, "tensorboard.image.repository=team/mine"]
    rendered = template(helm_major, sets=sets)
    warning = next(line for line in rendered.stdout.splitlines() if line.startswith("# WARNING: "))
    assert warning == (
        "# WARNING: tensorboard.image: TensorBoard runs ghcr.io/team/mine:1.0, where ps, worker, chief run a program "
        "of your own; it needs the `tensorboard` command in that image (pip install tensorboard). Fix: --set "
        f"tensorboard.image.repository=tf-distributed/trainer,tensorboard.image.tag={project_version(REPO)} (the "
        "project's image) or --set tensorboard.enabled=false"
    )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-cluster"))  # helm 4 renders NOTES client-side; helm 3 cannot
    installed = helm("4", "install", "mnist", str(CHART), "--dry-run=client", *(f"--set={item}" for item in sets))
    assert installed.returncode == 0, installed.stderr
    assert f"WARNING: {warning.removeprefix('# WARNING: ')}" in installed.stdout.split("NOTES:", 1)[1]
    for quiet in ([], ALL_OWN, [*sets, "tensorboard.command={tensorboard}"], [*sets, "tensorboard.enabled=false"]):
        assert "WARNING: tensorboard.image" not in template(helm_major, sets=quiet).stdout, quiet
