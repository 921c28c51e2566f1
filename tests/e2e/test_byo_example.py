"""examples/byo-keras, the bring-your-own quick start, as a user follows it: its image built from its
Dockerfile (on TFD_TEST_TENSORFLOW_BASE_IMAGE, CI's stand-in for the tensorflow image), its values run through
`tfchart local --engine podman` to a SavedModel on the run's shared volume, with the script's status
line read back by the code `tfchart status` reads the chief's log with. The first tests are static.
"""

from __future__ import annotations

import ast
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chartlib import REPO, env_of, pod_spec, render, workloads
from tests.containerlib import ENGINE, require_engine, stand_in_base
from tfchart.cluster.status import parse_progress
from tfdcontract import SUCCEEDED, parse_status_line, read_status_file, storage_env

EXAMPLE = REPO / "examples" / "byo-keras"
VALUES = EXAMPLE / "values.yaml"
IMAGE = "localhost/tf-distributed/byo-keras"
RELEASE = "byo"
STEPS = 40


def test_the_readme_is_a_quick_start_under_80_lines() -> None:
    lines = (EXAMPLE / "README.md").read_text().splitlines()
    assert len(lines) < 80, len(lines)
    text = "\n".join(lines)
    for needed in ("Dockerfile", "tfchart local --engine podman -f examples/byo-keras/values.yaml", "helm install",
                   "TF_CONFIG", "TFD_EXPORT_DIR", "tfd-status: ", "kubectl cp"):  # fmt: skip
        assert needed in text, needed


def test_the_script_is_a_users_own_program() -> None:
    """No import of this project: the example must run in any image with TensorFlow."""
    tree = ast.parse((EXAMPLE / "train.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {str(node.module).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"argparse", "json", "os", "shutil", "tempfile", "time", "datetime", "keras", "numpy",
                        "tensorflow"}, imported  # fmt: skip
    dockerfile = (EXAMPLE / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=tensorflow/tensorflow:2\.21\.0\nFROM \$\{BASE_IMAGE\}$", dockerfile, re.M)


def test_the_values_run_the_example_image_in_the_tensorflow_roles_only() -> None:
    docs = render(values=[VALUES])
    images = {}
    for doc in workloads(docs):
        for container in pod_spec(doc)["containers"]:
            images[container["name"]] = container["image"]
            if container["name"] in ("chief", "worker"):
                assert container["args"][-3:] == ["/opt/byo-keras/train.py", "--steps=300", "--global-batch=64"]
                env = env_of(container)
                assert {key: env[key] for key in storage_env("/data", "byo-keras")} == storage_env("/data", "byo-keras")
    assert images["chief"] == images["worker"] == f"{IMAGE}:1.0"
    assert all(image != f"{IMAGE}:1.0" for name, image in images.items() if name not in ("chief", "worker")), images


# -- the example, run -------------------------------------------------------------------------------


@pytest.fixture
def example_image() -> Iterator[str]:
    """The example's image, built as its README says (on the test base where CI names one); removed after."""
    require_engine()
    tag = f"test-{secrets.token_hex(3)}"
    base = stand_in_base(tensorflow=True)
    argv = [ENGINE, "build", "-t", f"{IMAGE}:{tag}", *(["--build-arg", f"BASE_IMAGE={base}"] if base else []),
            str(EXAMPLE)]  # fmt: skip
    built = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    try:
        yield tag
    finally:
        subprocess.run([ENGINE, "rmi", "-f", f"{IMAGE}:{tag}"], capture_output=True, timeout=120, check=False)


@pytest.mark.slow
def test_the_example_trains_to_a_saved_model_in_containers(tmp_path: Path, example_image: str) -> None:
    workdir = tmp_path / "run"
    args = f"{{--steps={STEPS},--log-every=10,--checkpoint-every=20}}"
    sets = [f"chief.image.tag={example_image}", f"worker.image.tag={example_image}", f"chief.args={args}",
            f"worker.args={args}", "tensorboard.enabled=false"]  # fmt: skip
    argv = [sys.executable, "-m", "tfchart", "local", RELEASE, "--engine", ENGINE,
            "-f", str(VALUES), "--workdir", str(workdir)]  # fmt: skip
    for item in sets:
        argv += ["--set", item]
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, "COLUMNS": "500"})  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    summary = re.search(rf"training {SUCCEEDED} in \d+ s: step {STEPS}\b.*", output)
    assert summary and "None" not in summary[0], output[-2000:]  # what the program reported, never a None
    # the closing notes speak of this program's export, not of the project trainer's signature
    assert "saved_model_cli show --all --dir" in output and "input `images`" not in output

    # a SavedModel in a numbered version of TFD_EXPORT_DIR, on the run's shared volume
    export = workdir / "export" / "byo-keras"
    versions = sorted(path.name for path in export.iterdir())
    assert versions == ["1"], versions  # nothing half-written or private left beside it
    assert (export / "1" / "saved_model.pb").is_file()
    assert sorted(path.name for path in (workdir / "checkpoints").iterdir()) == [
        "checkpoint", "ckpt-20.data-00000-of-00001", "ckpt-20.index", "ckpt-40.data-00000-of-00001", "ckpt-40.index",
    ]  # fmt: skip
    assert any(path.name.startswith("events.out.tfevents.") for path in (workdir / "logs").iterdir())
    served = subprocess.run(
        [sys.executable, "-c", "import sys, tensorflow as tf; serve = tf.saved_model.load(sys.argv[1])"
         ".signatures['serving_default']; print(serve(features=tf.zeros([2, 8]))['classes'].shape)", str(export / "1")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert served.stdout.strip().splitlines()[-1:] == ["(2,)"], served.stderr[-3000:]

    # the status line: what `tfchart status` reads from the chief's log, and status.json
    chief_log = (workdir / "pod-logs" / f"{RELEASE}-tf-distributed-chief.log").read_text()
    lines = [status for status in map(parse_status_line, chief_log.splitlines()) if status]
    assert [status.state for status in lines][-1] == SUCCEEDED and len(lines) >= 2
    progress = parse_progress(chief_log)
    assert progress is not None and progress["source"] == "tfd-status"
    assert (progress["state"], progress["step"], progress["train_steps"]) == (SUCCEEDED, STEPS, STEPS)
    assert progress["export_path"] == "/data/export/byo-keras/1" and progress["exported_versions"] == [1]
    assert progress["model_name"] == "byo-keras"
    status = read_status_file(workdir)
    assert status is not None and status.state == SUCCEEDED and status.step == STEPS

    # tfchart local removed every container it started
    run_id = re.search(r"tfchart\.run=(tfd-[0-9a-f]+)", output)
    assert run_id, output[:2000]
    left = subprocess.run([ENGINE, "ps", "-a", "-q", "--filter", f"label=tfchart.run={run_id[1]}"],
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert left.stdout.strip() == ""
