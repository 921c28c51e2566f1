"""Static checks of the Dockerfiles (tests/images builds and runs the images themselves)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.trainer.conftest import REPO

# default base, the requirements file it installs, and the TensorFlow distribution that file pins
DOCKERFILES = {"Dockerfile.cpu": ("python:3.11-slim-bookworm", "requirements-cpu.txt", "tensorflow-cpu"),
               "Dockerfile.gpu": ("tensorflow/tensorflow:2.21.0-gpu", "requirements.txt", "tensorflow")}


def _pyproject_tf_pin() -> str:
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'"tensorflow-cpu==([\d.]+)', text)
    assert m, "pyproject.toml must pin tensorflow-cpu"
    return m.group(1)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_contract(name: str) -> None:
    text = (REPO / name).read_text()
    assert re.findall(r"^FROM\s+(\S+)", text, re.M) == ["${BASE_IMAGE}"]
    base, requirements, tensorflow = DOCKERFILES[name]
    defaults = re.findall(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert defaults and set(defaults) == {base}  # the official image, also after FROM
    if base.startswith("tensorflow/"):
        assert defaults[0].split(":")[1].startswith(_pyproject_tf_pin())  # base matches the pin
    else:  # the Python the trainer venv is made for (tensorflow-cpu's wheel is cp311 in requirements-cpu.txt)
        assert defaults[0].split(":")[1].startswith("3.11-")
    pins = _pins(requirements)
    assert pins[tensorflow] == _pyproject_tf_pin() and not {"tensorflow", "tensorflow-cpu"} - {tensorflow} & set(pins)
    installs = " ".join(re.findall(r"pip install[^&]*", text))
    assert "--no-deps" in installs and "-r /opt/tf-distributed/requirements.txt" in installs
    assert "pip check" in text and f"COPY images/{requirements} /opt/tf-distributed/requirements.txt" in text
    users = re.findall(r"^USER\s+(\d+)", text, re.M)
    assert users and int(users[-1]) >= 10000
    assert re.search(r"^ENV[\s\S]*PYTHONUNBUFFERED=1", text, re.M)
    assert re.search(r"^HEALTHCHECK ", text, re.M)
    assert "org.opencontainers.image.source" in text
    assert re.search(r'^ENTRYPOINT \["python", "-m", "trainer"\]$', text, re.M)
    assert re.search(r"^RUN python -m trainer.selfcheck", text, re.M)
    assert not re.search(r"^(ADD|EXPOSE 22)\b", text, re.M)


def _pins(requirements: str) -> dict[str, str]:
    lines = [line.strip() for line in (REPO / "images" / requirements).read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_image_requirements_are_one_pinned_closure_matching_the_project_pins() -> None:
    gpu, cpu = _pins("requirements.txt"), _pins("requirements-cpu.txt")
    for pins in (gpu, cpu):
        assert all(re.fullmatch(r"\d[\w.]*", version) for version in pins.values()), pins
    assert gpu["tensorflow"] == cpu["tensorflow-cpu"] == _pyproject_tf_pin()
    # the same closure: tensorflow and tensorflow-cpu declare the same dependencies
    gpu.pop("tensorflow")
    cpu.pop("tensorflow-cpu")
    assert gpu == cpu
    project = (REPO / "pyproject.toml").read_text()
    for name in ("tensorboard", "prometheus_client"):
        assert f'"{name}=={cpu[name]}"' in project, f"{name}: image and pyproject.toml pins differ"
    assert "scikit-learn" not in cpu  # the trainer carries its digits set (trainer/datasets)


def _checkov() -> str | None:
    bundled = REPO / ".tools" / "checkov" / "bin" / "checkov"
    return os.environ.get("CHECKOV") or shutil.which("checkov") or (str(bundled) if bundled.exists() else None)


def test_checkov_dockerfiles_have_no_failed_checks() -> None:
    """Both Dockerfiles in one checkov run (its start-up is most of its time); no guideline download (no network)."""
    checkov = _checkov()
    if not checkov:
        pytest.fail("checkov not found ($CHECKOV, PATH, .tools/checkov): run `make setup`")
    files = [arg for name in sorted(DOCKERFILES) for arg in ("-f", str(REPO / name))]
    proc = subprocess.run([checkov, *files, "--framework", "dockerfile", "--quiet", "-o", "json", "--skip-download"],
                          capture_output=True, text=True, timeout=300)
    doc = json.loads(proc.stdout)
    report = doc[0] if isinstance(doc, list) else doc
    summary = report["summary"]
    failed = [(c["file_path"], c["check_id"]) for c in report.get("results", {}).get("failed_checks", [])]
    assert summary["failed"] == 0, failed
    assert summary["passed"] > 0 and summary["parsing_errors"] == 0
    assert summary["resource_count"] == len(DOCKERFILES)  # each file was read
