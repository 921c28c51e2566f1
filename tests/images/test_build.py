"""The trainer images as users get them: built from the repository's Dockerfiles, run as the chart runs pods.

Both images are built once per session by `tfchart build --engine podman` (tests/containerlib.py).
In CI, which reaches no container registry, they are built on locally assembled stand-ins (`make
base-image`): the CPU image on one for python:3.11-slim-bookworm (Debian bookworm minbase with
python3 and pip) and the GPU image on one for tensorflow/tensorflow:2.21.0 (the same + `pip install
tensorflow==2.21.0`; the official GPU base adds CUDA). Everything the trainer and TensorBoard import
comes from images/requirements-cpu.txt (CPU, tensorflow-cpu included) and images/requirements.txt
(GPU) either way. The GPU image is checked up to the GPU boundary (no GPU here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, render
from tests.containerlib import ENGINE, built_images, run_in_image
from tfchart.images.build import project_version

pytestmark = pytest.mark.slow

REQUIREMENTS = {"cpu": REPO / "images" / "requirements-cpu.txt", "gpu": REPO / "images" / "requirements.txt"}


def inspect(image: str) -> dict[str, Any]:
    answer = subprocess.run([ENGINE, "image", "inspect", image], capture_output=True, text=True, check=True)
    config: dict[str, Any] = json.loads(answer.stdout)[0]
    return config


def pinned(variant: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in REQUIREMENTS[variant].read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def installed(image: str) -> dict[str, str]:
    # the first distribution of a name on sys.path is the one `import` uses (a base's system copy may follow)
    script = (
        "import importlib.metadata as m, json; seen = {}\n"
        "for d in m.distributions(): seen.setdefault(d.metadata['Name'], d.version)\n"
        "print(json.dumps(seen))"
    )
    answer = run_in_image(image, "-c", script, entrypoint="python")
    assert answer.returncode == 0, answer.stderr[-2000:]
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in json.loads(answer.stdout).items()}


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_image_is_tagged_as_the_chart_references_it_and_runs_as_non_root(variant: str) -> None:
    images = built_images()
    image = images.cpu if variant == "cpu" else images.gpu
    version = project_version(REPO)
    assert image == f"ghcr.io/tf-distributed/trainer:{version}" + ("-gpu" if variant == "gpu" else "")
    config = inspect(image)["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["python", "-m", "trainer"]
    assert config["Labels"]["org.opencontainers.image.version"] == version
    base = images.base if variant == "cpu" else images.gpu_base
    if base:
        assert config["Labels"]["org.opencontainers.image.base.name"] == base


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_every_pinned_requirement_is_installed_at_its_pin(variant: str) -> None:
    images = built_images()
    have = installed(images.cpu if variant == "cpu" else images.gpu)
    wrong = {name: (version, have.get(name)) for name, version in pinned(variant).items() if have.get(name) != version}
    assert not wrong, f"pinned vs installed: {wrong}"
    tensorflow = "tensorflow-cpu" if variant == "cpu" else "tensorflow"
    for needed in ("tensorboard", "tensorboard-data-server", tensorflow, "keras"):
        assert needed in have
    for gone in ("scikit-learn", "scipy"):  # the trainer carries its digits set: neither is in the closure
        assert gone not in have
    if variant == "cpu":  # the slim base carries no TensorFlow: only the CPU build, nothing beside it
        assert "tensorflow" not in have, have


def test_cpu_image_runs_as_uid_10001_with_a_read_only_root() -> None:
    image = built_images().cpu
    script = "id -u; id -g; touch /opt/x 2>&1 || echo read-only; touch /tmp/ok && echo tmp-ok"
    answer = run_in_image(image, "-c", script, entrypoint="/bin/sh")
    assert answer.returncode == 0, answer.stderr
    uid, gid, *_ = answer.stdout.split("\n")
    assert int(uid) >= 10000 and int(gid) >= 10000
    assert "Read-only file system" in answer.stdout and "tmp-ok" in answer.stdout


def test_selfcheck_passes_and_reports_the_gpu_boundary_on_cpu() -> None:
    images = built_images()
    for image in images.all():
        answer = run_in_image(image, "-m", "trainer.selfcheck", entrypoint="python")
        assert answer.returncode == 0, answer.stdout + answer.stderr[-2000:]
        assert "selfcheck: ok   summaries: tf.summary + tensorboard 2.21.0" in answer.stdout
        assert "GPUs visible: 0" in answer.stdout
    required = run_in_image(images.gpu, "-m", "trainer.selfcheck", "--require-gpu", entrypoint="python")
    assert required.returncode == 1
    assert "selfcheck: FAIL gpu: RuntimeError: TensorFlow sees no GPU" in required.stderr


def _shared_volume(tmp_path: Path) -> Path:
    """The claim stand-in: a directory the pod's uid 10001 (fsGroup 10001) may write, as the kubelet arranges."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 10001, 10001)
    return shared


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_cpu_image_trains_writes_summaries_and_exports_then_tensorboard_serves_them(tmp_path: Path) -> None:
    """The two commands the chart runs from this image (the trainer, TensorBoard), as uid 10001, read-only root."""
    image = built_images().cpu
    shared = _shared_volume(tmp_path)
    train = run_in_image(
        image, "--strategy=single_device", "--dataset=digits", "--storage-root=/data", "--train-steps=60",
        "--batch-size=64", "--log-every-steps=20", "--checkpoint-every-steps=30", "--model-name=mnist",
        options=["-v", f"{shared}:/data"], timeout=300,
    )  # fmt: skip
    assert train.returncode == 0, (train.stdout + train.stderr)[-3000:]
    assert "TBNotInstalledError" not in train.stderr
    assert list((shared / "export" / "mnist").glob("*/saved_model.pb")), sorted(p.name for p in shared.rglob("*"))
    assert list((shared / "logs").rglob("events.out.tfevents.*"))
    status = json.loads((shared / "status.json").read_text())
    assert status["state"] == "Succeeded" and status["step"] == 60

    chart_tensorboard = _rendered_tensorboard_container()
    assert chart_tensorboard["command"] == ["tensorboard"]
    port = _free_port()
    name = f"tfd-test-tensorboard-{port}"
    args = chart_tensorboard["args"]
    assert "--logdir=/data/logs" in args
    container_port = next(int(a.split("=", 1)[1]) for a in args if a.startswith("--port="))
    started = subprocess.run(
        [ENGINE, "run", "-d", "--rm", "--no-healthcheck", "--name", name, "--user", "10001:10001", "--read-only",
         "--tmpfs", "/tmp:rw,mode=1777", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
         "-e", "HOME=/tmp", "-v", f"{shared}:/data:ro", "-p", f"127.0.0.1:{port}:{container_port}",
         "--entrypoint", "tensorboard", image, *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        runs = _poll_json(f"http://127.0.0.1:{port}/data/plugin/scalars/tags", timeout=120,
                          ready=lambda tags: any("loss" in run_tags for run_tags in tags.values()))
        run_with_loss = next(run for run, tags in runs.items() if "loss" in tags)
        query = urllib.parse.urlencode({"tag": "loss", "run": run_with_loss})
        # TensorBoard loads the event files in the background: polled until the series reaches step 60
        points = _poll_json(f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}", timeout=120,
                            ready=lambda series: int(series[-1][1]) == 60)
        assert [int(point[1]) for point in points] == sorted(int(point[1]) for point in points)
    finally:
        subprocess.run([ENGINE, "rm", "-f", "-t", "0", name], capture_output=True, check=False)


def _rendered_tensorboard_container() -> dict[str, Any]:
    for doc in render("4", sets=["training.dataset=digits"]):
        if doc.get("kind") == "Deployment" and doc["metadata"]["name"].endswith("tensorboard"):
            container: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
            return container
    raise AssertionError("the chart rendered no TensorBoard Deployment")


def _poll_json(url: str, timeout: float, ready: Callable[[Any], bool]) -> Any:
    """The JSON `url` answers once it is non-empty and `ready`; `timeout` only catches a hang."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.loads(response.read())
            if body and ready(body):
                return body
            last = body
        except (OSError, ValueError) as error:
            last = error
        time.sleep(0.5)
    raise AssertionError(f"{url} was not ready within {timeout} s (last answer: {last})")


def test_a_missing_dependency_fails_the_build_not_the_first_run(tmp_path: Path) -> None:
    """The regression behind this test: joblib imported cloudpickle, which an old --no-deps list left out. A pin
    left out of the closure (here urllib3, which requests requires) fails the build at `pip check`. The list is
    cut to requests' few pins less urllib3 (no TensorFlow wheel to install first): the build fails the same way,
    at the same step, in seconds."""
    context = tmp_path / "context"
    for package in ("trainer", "tfdcontract"):
        shutil.copytree(REPO / package, context / package, ignore=shutil.ignore_patterns("__pycache__"))
    (context / "images").mkdir()
    kept = ("requests==", "certifi==", "charset-normalizer==", "idna==")
    lines = [line for line in REQUIREMENTS["cpu"].read_text().splitlines() if line.startswith(kept)]
    assert len(lines) == len(kept), lines
    (context / "images" / "requirements-cpu.txt").write_text("\n".join(lines) + "\n")
    shutil.copy(REPO / ".dockerignore", context / ".dockerignore")
    base = built_images().base
    build_args = ["--build-arg", f"BASE_IMAGE={base}"] if base else []
    tag = f"localhost/tfd-test/missing-dependency:{os.getpid()}"
    answer = subprocess.run(
        [ENGINE, "build", "-f", str(REPO / "Dockerfile.cpu"), *build_args, "-t", tag, str(context)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    subprocess.run([ENGINE, "rmi", "-f", tag], capture_output=True, check=False)
    assert answer.returncode != 0
    output = answer.stdout + answer.stderr
    assert "requests 2." in output and "requires urllib3, which is not installed" in output, output[-4000:]


def test_helm_renders_the_built_images_by_default() -> None:
    """No image override: the chart's trainer (and GPU) references are the tags `tfchart build` made."""
    images = built_images()
    cpu = render("4", values=[REPO / "values" / "cpu.yaml"])
    gpu = render("4", values=[REPO / "values" / "gpu.yaml"])
    trainers = {c["image"] for doc in cpu for c in _containers(doc) if c["name"] in ("chief", "worker", "ps")}
    assert trainers == {images.cpu}
    assert {c["image"] for doc in gpu for c in _containers(doc) if c["name"] == "worker"} == {images.gpu}


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    containers: list[dict[str, Any]] = spec.get("containers", [])
    return containers


def test_cpu_image_serves_the_chiefs_prometheus_metrics_as_the_chart_configures_them(tmp_path: Path) -> None:
    """metrics.enabled as rendered (container port `metrics`, TFD_METRICS_* env) on the built image, uid
    10001 and a read-only root: /metrics answers from outside the container and ends at the final step."""
    from prometheus_client.parser import text_string_to_metric_families

    chief = _rendered_chief_container(["metrics.enabled=true", "metrics.lingerSeconds=120"])
    [container_port] = [p["containerPort"] for p in chief["ports"] if p["name"] == "metrics"]
    env = {item["name"]: item["value"] for item in chief["env"] if item["name"].startswith("TFD_METRICS_")}
    assert env == {"TFD_METRICS_PORT": str(container_port), "TFD_METRICS_LINGER_SECONDS": "120"}
    image, shared, port = built_images().cpu, _shared_volume(tmp_path), _free_port()
    name = f"tfd-test-metrics-{port}"
    started = subprocess.run(
        [ENGINE, "run", "-d", "--rm", "--no-healthcheck", "--name", name, "--user", "10001:10001", "--read-only",
         "--tmpfs", "/tmp:rw,mode=1777", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
         "-e", "HOME=/tmp", *(f"-e{key}={value}" for key, value in env.items()), "-v", f"{shared}:/data",
         "-p", f"127.0.0.1:{port}:{container_port}", image, "--strategy=single_device", "--dataset=digits",
         "--storage-root=/data", "--train-steps=60", "--batch-size=64", "--log-every-steps=20",
         "--checkpoint-every-steps=30", "--model-name=mnist"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline, samples = time.monotonic() + 240, {}
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    text = response.read().decode()
            except OSError:
                time.sleep(1)
                continue
            samples = {(s.name, s.labels.get("state", "")): s.value
                       for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip
            if samples.get(("tfd_training_state", "Succeeded")) == 1:
                break
            time.sleep(1)
        assert samples.get(("tfd_training_state", "Succeeded")) == 1, samples
        assert samples[("tfd_training_step", "")] == 60 and samples[("tfd_heldout_accuracy", "")] > 0.5
    finally:
        subprocess.run([ENGINE, "rm", "-f", "-t", "0", name], capture_output=True, check=False)


def _rendered_chief_container(sets: list[str]) -> dict[str, Any]:
    for doc in render("4", sets=["training.dataset=digits", *sets]):
        if doc.get("kind") == "Job" and doc["metadata"]["name"].endswith("-chief"):
            container: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
            return container
    raise AssertionError("the chart rendered no chief Job")
