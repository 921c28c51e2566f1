"""serving.modelVersionPolicy: TensorFlow Serving's model config file, parsed as the model server parses
it (the ModelServerConfig proto of tensorflow-serving-api 2.21, text format), mounted where the
rendered --model_config_file points, and changed by an upgrade without restarting Serving."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from tests.chartlib import named, pod_spec, render, template
from tfchart.cluster.status import read_policy
from tfdcontract import MODEL_VERSION_POLICY_ANNOTATION

PREFIX = "mnist-tf-distributed"


def model_config(sets: list[str]) -> tuple[Any, list[dict[str, Any]]]:
    docs = render(sets=sets)
    text = named(docs, "ConfigMap", f"{PREFIX}-serving")["data"]["models.config"]
    return text_format.Parse(text, model_server_config_pb2.ModelServerConfig()), docs


@pytest.mark.parametrize(("sets", "policy"), [
    ([], "latest { num_versions: 1 }"),
    (["serving.modelVersionPolicy.latest=3"], "latest { num_versions: 3 }"),
    (["serving.modelVersionPolicy.type=specific", "serving.modelVersionPolicy.versions={1}"],
     "specific { versions: 1 }"),
    (["serving.modelVersionPolicy.type=specific", "serving.modelVersionPolicy.versions={2,7}"],
     "specific { versions: 2 versions: 7 }"),
    (["serving.modelVersionPolicy.type=all"], "all { }"),
])  # fmt: skip
def test_the_policy_renders_a_model_config_tf_serving_accepts(sets: list[str], policy: str) -> None:
    config, docs = model_config(sets)
    [model] = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == ("mnist", "/data/export/mnist", "tensorflow")
    expected = text_format.Parse(policy, type(model.model_version_policy)())
    assert model.model_version_policy == expected
    container = pod_spec(named(docs, "Deployment", f"{PREFIX}-serving"))["containers"][0]
    flag = next(a for a in container["args"] if a.startswith("--model_config_file="))
    mount = next(m for m in container["volumeMounts"] if m["name"] == "model-config")
    assert flag == f"--model_config_file={mount['mountPath']}/models.config" and mount["readOnly"] is True
    assert "--model_config_file_poll_wait_seconds=30" in container["args"]
    assert not [a for a in container["args"] if a.startswith(("--model_name", "--model_base_path"))]
    # the same policy from the values, recorded for `tfchart status`, reads as TF Serving reads the model config
    config_map = named(docs, "ConfigMap", f"{PREFIX}-serving")
    recorded = read_policy(config_map["metadata"]["annotations"][MODEL_VERSION_POLICY_ANNOTATION])
    which = model.model_version_policy.WhichOneof("policy_choice")
    latest = model.model_version_policy.latest.num_versions if which == "latest" else 1
    versions = tuple(model.model_version_policy.specific.versions)
    assert recorded == {"model": model.name, "type": which, "latest": latest, "versions": list(versions)}


def test_pinning_and_rolling_back_changes_only_the_config() -> None:
    """An upgrade from version 2 to 1 is a new ConfigMap and the same Serving pod template: the model
    server re-reads the file, nothing restarts."""
    pinned = ["serving.modelVersionPolicy.type=specific"]
    new, new_docs = model_config([*pinned, "serving.modelVersionPolicy.versions={2}"])
    old, old_docs = model_config([*pinned, "serving.modelVersionPolicy.versions={1}"])
    assert list(new.model_config_list.config[0].model_version_policy.specific.versions) == [2]
    assert list(old.model_config_list.config[0].model_version_policy.specific.versions) == [1]
    deployment = f"{PREFIX}-serving"
    assert named(new_docs, "Deployment", deployment) == named(old_docs, "Deployment", deployment)


def test_specific_without_versions_is_refused_with_the_fix() -> None:
    result = template(sets=["serving.modelVersionPolicy.type=specific"])
    assert result.returncode != 0
    assert "serving.modelVersionPolicy.versions: type specific serves exactly the versions listed" in result.stderr
    assert "--set serving.modelVersionPolicy.versions={1}" in result.stderr
