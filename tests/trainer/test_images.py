"""Static checks of the trainer images (no Docker engine here, so nothing is built)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.trainer.conftest import REPO

DOCKERFILES = {"Dockerfile.cpu": "tensorflow/tensorflow:2.21.0",
               "Dockerfile.gpu": "tensorflow/tensorflow:2.21.0-gpu"}


def _pyproject_tf_pin() -> str:
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'"tensorflow-cpu==([\d.]+)', text)
    assert m, "pyproject.toml must pin tensorflow-cpu"
    return m.group(1)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_contract(name: str) -> None:
    text = (REPO / name).read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms == [DOCKERFILES[name]]
    assert froms[0].split(":")[1].startswith(_pyproject_tf_pin())  # base matches the pin
    installs = " ".join(re.findall(r"pip install[^&]*", text))
    assert "--no-deps" in installs and not re.search(r"\btensorflow\b|tf-keras", installs)
    assert all(re.search(r"==\d", pkg) for pkg in re.findall(
        r"\b[a-z][a-z0-9_-]+==\S+", installs)), installs
    users = re.findall(r"^USER\s+(\d+)", text, re.M)
    assert users and int(users[-1]) >= 10000
    assert re.search(r"^ENV[\s\S]*PYTHONUNBUFFERED=1", text, re.M)
    assert re.search(r"^HEALTHCHECK ", text, re.M)
    assert "org.opencontainers.image.source" in text
    assert re.search(r'^ENTRYPOINT \["python", "-m", "trainer"\]$', text, re.M)
    assert not re.search(r"^(ADD|EXPOSE 22)\b", text, re.M)


def _checkov() -> str | None:
    bundled = REPO / ".tools" / "checkov" / "bin" / "checkov"
    return os.environ.get("CHECKOV") or shutil.which("checkov") or (str(bundled) if bundled.exists() else None)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_checkov_dockerfile_has_no_failed_checks(name: str) -> None:
    checkov = _checkov()
    if not checkov:
        pytest.fail("checkov not found ($CHECKOV, PATH, .tools/checkov): run `make setup`")
    proc = subprocess.run([checkov, "-f", str(REPO / name), "--framework", "dockerfile",
                           "--quiet", "-o", "json"], capture_output=True, text=True,
                          timeout=300)
    doc = json.loads(proc.stdout)
    report = doc[0] if isinstance(doc, list) else doc
    summary = report["summary"]
    failed = [c["check_id"] for c in report.get("results", {}).get("failed_checks", [])]
    assert summary["failed"] == 0, failed
    assert summary["passed"] > 0 and summary["parsing_errors"] == 0
