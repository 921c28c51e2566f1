"""The bring-your-own image contract (docs/images.md, "Bring your own image: what it must provide").

Every TensorFlow container runs as uid 10001 on a read-only root; it may write its working
directory (an emptyDir), /tmp and the claim at storage.mountPath. HOME is the image's own unless a
role's `home` sets it. When the trainer image is already in podman's store, a bring-your-own
command from the rendered spec is also run in it and writes a relative path.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any

from tests.chartlib import REPO, env_of, pod_spec, render, workloads
from tests.containerlib import engine_works, image_exists, run_in_image
from tfchart.images.build import DEFAULT_REGISTRY, DEFAULT_REPOSITORY, image_reference, project_version

TF_ROLES = ("ps", "worker", "chief", "evaluator")
EVERYTHING = ["evaluator.enabled=true"]


def component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"].get("labels", {}).get("app.kubernetes.io/component", ""))


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
    image = image_reference(DEFAULT_REGISTRY, DEFAULT_REPOSITORY, version)
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
