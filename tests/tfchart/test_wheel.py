"""tfchart outside a checkout: the built wheel, installed into a fresh virtual environment, run in an empty
directory. It carries the chart (tfchart/chart) with its ready values files, so `-f values/gpu.yaml` names
the chart's file where the directory has none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.chartlib import REPO, copy_tracked, helm_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(tfchart of the installed wheel, an empty working directory, its environment)."""
    top = tmp_path_factory.mktemp("wheel")
    source = copy_tracked(top / "source")  # pip builds in the tree it is given: not in this checkout
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(top / "dist"), str(source)],
                   check=True, capture_output=True)  # fmt: skip
    (wheel,) = (top / "dist").glob("tf_distributed-*.whl")
    venv.create(top / "venv")  # this pip installs into it (--python): no ensurepip, no .pyc of every dependency
    subprocess.run([sys.executable, "-m", "pip", "--python", str(top / "venv" / "bin" / "python"), "install", "-q",
                    "--no-compile", str(wheel)], check=True, capture_output=True)  # fmt: skip
    empty = top / "work"
    empty.mkdir()
    env = {**os.environ, "PATH": f"{helm_path('4').parent}:/usr/bin:/bin"}
    env.pop("PYTHONPATH", None)
    env.pop("TFCHART_CHART", None)
    yield top / "venv" / "bin" / "tfchart", empty, env


def tfchart(installed: tuple[Path, Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    binary, empty, env = installed
    return subprocess.run([str(binary), *args], cwd=empty, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_is_a_copy_not_the_checkout(installed: tuple[Path, Path, dict[str, str]]) -> None:
    binary, _, _ = installed
    python = binary.parent / "python"
    found = subprocess.run([str(python), "-c", "import tfchart.helm.chart as c; print(c.BUNDLED_CHART)"],
                           cwd=binary.parent, capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert "site-packages" in found and not found.startswith(str(REPO))
    shipped = sorted(path.name for path in (Path(found) / "values").glob("*.yaml"))
    assert shipped == sorted(path.name for path in (REPO / "values").glob("*.yaml"))


def test_validate_template_and_images_with_a_shipped_values_file(installed: tuple[Path, Path, dict[str, str]]) -> None:
    assert not list(installed[1].iterdir()), "the working directory must stay empty"
    checked = tfchart(installed, "validate", "-f", "values/gpu.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "✓ valid: values/gpu.yaml" in checked.stdout

    rendered = tfchart(installed, "template", "mnist", "-f", "values/gpu.yaml", "-n", "team-a")
    assert rendered.returncode == 0, rendered.stderr
    objects = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    workers = [doc for doc in objects if doc["kind"] == "StatefulSet" and doc["metadata"]["name"].endswith("-worker")]
    assert workers and workers[0]["metadata"]["namespace"] == "team-a"
    gpu = workers[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" in gpu  # gpu.yaml's, not the chart's CPU default

    listed = tfchart(installed, "images", "-f", "values/gpu.yaml", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert any("gpu" in image["image"] for image in json.loads(listed.stdout))


def test_a_missing_values_file_is_still_an_error(installed: tuple[Path, Path, dict[str, str]]) -> None:
    missing = tfchart(installed, "validate", "-f", "values/tpu.yaml")
    assert missing.returncode == 1
    assert "values/tpu.yaml" in missing.stderr and "Traceback" not in missing.stderr


def test_local_without_tensorflow_says_so_before_anything_starts(installed: tuple[Path, Path, dict[str, str]]) -> None:
    # the wheel's environment has tfchart only (TensorFlow is the `trainer` extra)
    ran = tfchart(installed, "local", "-f", "values/cpu.yaml")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "tensorflow and TensorBoard not installed for" in ran.stderr
    assert "pip install 'tf-distributed[trainer]'" in ran.stderr and "--engine podman" in ran.stderr
    assert "Traceback" not in ran.stderr and not list(installed[1].iterdir()), "nothing written before the check"
