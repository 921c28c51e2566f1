"""`tfchart images`: every image a release pulls, equal to the images of `helm template` for every ready
values file and CI scenario, with digests where set, as a list or JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, file_id, render, values_files
from tfchart.manifests.images import parse_reference

TFCHART = str(REPO / ".venv" / "bin" / "tfchart")
DIGEST = "sha256:" + "ab" * 32


def images_of(docs: list[dict[str, Any]]) -> set[str]:
    """Every container image anywhere in the manifests (hooks included), walked without knowing the kinds."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("containers", "initContainers", "ephemeralContainers"):
                found.update(str(c["image"]) for c in node.get(key) or [] if isinstance(c, dict))
            found.update(str(v["image"]["reference"]) for v in node.get("volumes") or []
                         if isinstance(v, dict) and isinstance(v.get("image"), dict))  # image volumes pull too
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(docs)
    return found


def tfchart_images(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TFCHART, "images", *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip


@pytest.mark.parametrize("values_file", values_files(), ids=file_id)
def test_the_list_is_the_image_set_of_helm_template(values_file: Path) -> None:
    listed = tfchart_images("mnist", "-f", str(values_file), "-n", "ml-training")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines == sorted(set(lines)) and set(lines) == images_of(render(values=[values_file]))


def test_json_names_registry_repository_tag_digest_and_who_pulls_it() -> None:
    listed = tfchart_images("-f", "values/gpu.yaml", "--set", f"image.digest={DIGEST}", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    entries = {entry["image"]: entry for entry in json.loads(listed.stdout)}
    assert set(entries) == images_of(render(values=[REPO / "values/gpu.yaml"], sets=[f"image.digest={DIGEST}"]))
    pinned = entries[f"ghcr.io/tf-distributed/trainer@{DIGEST}"]
    assert (pinned["registry"], pinned["repository"], pinned["tag"], pinned["digest"]) == (
        "ghcr.io", "tf-distributed/trainer", "", DIGEST)
    assert {"ps", "worker", "chief", "tensorboard"} <= set(pinned["components"])
    serving = entries["docker.io/tensorflow/serving:2.21.0"]
    assert serving["components"] == ["serving"] and serving["tag"] == "2.21.0"


def test_image_volumes_are_listed_with_the_pods_that_pull_them() -> None:
    reference = "registry.example.com/ml/weights:v3"
    sets = ["chief.extraVolumes[0].name=weights", f"chief.extraVolumes[0].image.reference={reference}"]
    listed = tfchart_images("-f", "values/cpu.yaml", *[arg for s in sets for arg in ("--set", s)], "-o", "json")
    assert listed.returncode == 0, listed.stderr
    entries = {entry["image"]: entry for entry in json.loads(listed.stdout)}
    assert entries[reference]["components"] == ["chief"]
    assert set(entries) == images_of(render(values=[REPO / "values/cpu.yaml"], sets=sets))


def test_invalid_values_are_refused_like_validate() -> None:
    listed = tfchart_images("--set", "worker.replicas=-1")
    assert listed.returncode == 1 and "worker.replicas" in listed.stderr and "Traceback" not in listed.stderr


@pytest.mark.parametrize(("image", "parts"), [
    ("docker.io/tensorflow/serving:2.21.0", ("docker.io", "tensorflow/serving", "2.21.0", "")),
    ("registry.local:5000/team/trainer@" + DIGEST, ("registry.local:5000", "team/trainer", "", DIGEST)),
    ("tensorflow/serving", ("", "tensorflow/serving", "", "")),
    ("localhost/tf-distributed/trainer:0.1.0-gpu", ("localhost", "tf-distributed/trainer", "0.1.0-gpu", "")),
])  # fmt: skip
def test_references_are_split_as_registries_read_them(image: str, parts: tuple[str, str, str, str]) -> None:
    parsed = parse_reference(image)
    assert (parsed["registry"], parsed["repository"], parsed["tag"], parsed["digest"]) == parts
