"""tfchart.servingconfig reads TF Serving's model config as the model server does: every text here is
also parsed with the ModelServerConfig proto of tensorflow-serving-api 2.21 and the two must agree on
each model's name, base path and version policy."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from tests.chartlib import named, render
from tfchart.cluster.servingconfig import (
    ConfigSyntaxError,
    ServedModel,
    VersionPolicy,
    parse_text_proto,
    served_models,
    serving_versions,
)


def from_proto(text: str) -> list[ServedModel]:
    config = text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    models = []
    for model in config.model_config_list.config:
        which = model.model_version_policy.WhichOneof("policy_choice")
        if which == "specific":
            policy = VersionPolicy("specific", versions=tuple(model.model_version_policy.specific.versions))
        elif which == "all":
            policy = VersionPolicy("all")
        elif which == "latest":
            policy = VersionPolicy("latest", latest=model.model_version_policy.latest.num_versions)
        else:  # no policy: the server's default, the newest version
            policy = VersionPolicy("latest", latest=1)
        models.append(ServedModel(model.name, model.base_path, policy))
    return models


RENDERED = [
    [],
    ["serving.modelVersionPolicy.latest=3"],
    ["serving.modelVersionPolicy.type=specific", "serving.modelVersionPolicy.versions={1}"],
    ["serving.modelVersionPolicy.type=specific", "serving.modelVersionPolicy.versions={2,7,9007199254740991}"],
    ["serving.modelVersionPolicy.type=all"],
    ["training.modelName=digits", "storage.mountPath=/mnt/team a"],
]


@pytest.mark.parametrize("sets", RENDERED)
def test_the_charts_model_config_reads_as_tf_serving_reads_it(sets: list[str]) -> None:
    text = named(render(sets=sets), "ConfigMap", "mnist-tf-distributed-serving")["data"]["models.config"]
    assert served_models(text) == from_proto(text)


HAND_EDITED = [
    # comments, other field order, angle brackets, separators, a list, several models, no policy
    """# pinned by the platform team
model_config_list {
  config { model_platform: "tensorflow"  base_path: '/data/export/mnist'  name: "mnist"
    model_version_policy < specific < versions: [3, 4] > > }
  config { name: "other", base_path: "/data/export/other"; }
}""",
    'model_config_list: { config: { name: "a" base_path: "/x" model_version_policy: { latest: { } } } }',
    'model_config_list { config { name: "a" base_path: "/x" model_version_policy { all { } } } }  # trailing',
    'model_config_list { config [ { name: "m" base_path: "/m" }, { name: "n" model_version_policy { all {} } } ] }',
    'model_config_list { config { name: "a\\"b" base_path: "/x" model_version_policy { specific { versions: 5 '
    "versions: 1 } } } }",
]


@pytest.mark.parametrize("text", HAND_EDITED)
def test_hand_edited_configs_read_as_tf_serving_reads_them(text: str) -> None:
    assert served_models(text) == from_proto(text)


@pytest.mark.parametrize(
    "text",
    [
        "model_config_list { config { name: \"a\" }",  # unclosed
        "model_config_list { config { name: } }",  # a field with no value
        "model_config_list { config { name: \"a } }",  # unterminated string
        "{ }",  # no field name
        "model_config_list { config { model_version_policy { latest { num_versions: two } } } }",
        "model_config_list { config [ { name: \"m\" } }",  # an unclosed list
        "model_config_list " + "{ config " * 200 + "}" * 200,  # deeper than any config: no RecursionError
    ],
)
def test_text_tf_serving_refuses_is_refused(text: str) -> None:
    with pytest.raises(text_format.ParseError):
        text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    with pytest.raises(ConfigSyntaxError):
        served_models(text)


@pytest.mark.parametrize(
    ("policy", "exported", "loaded"),
    [
        (VersionPolicy("latest", latest=1), [1, 2, 3], [3]),
        (VersionPolicy("latest", latest=5), [3, 1, 2], [1, 2, 3]),
        (VersionPolicy("latest", latest=2), [], []),
        (VersionPolicy("latest", latest=0), [1, 2], [2]),  # `latest { }`: the server serves one
        (VersionPolicy("specific", versions=(1, 9)), [1, 2, 3], [1]),
        (VersionPolicy("all"), [2, 1], [1, 2]),
    ],
)
def test_the_policy_selects_as_tf_serving_does(policy: VersionPolicy, exported: list[int], loaded: list[int]) -> None:
    assert policy.selects(exported) == loaded


def test_versions_of_an_unreadable_or_empty_config_say_why() -> None:
    broken = serving_versions("cm", "model_config_list {", "mnist", [1])
    assert broken.loaded is None and "is not protobuf text format" in broken.note
    empty = serving_versions("cm", "", "mnist", [1])
    assert empty.loaded is None and "configures no model" in empty.note
    absent = serving_versions("cm", None, "mnist", [1])
    assert absent.loaded is None and "has no models.config" in absent.note
    other: Any = serving_versions("cm", 'model_config_list { config { name: "x" } }', "mnist", [1, 2])
    assert (other.model, other.loaded) == ("x", [2])  # one model under another name: that one
    assert parse_text_proto("a: 1 b { c: 'd' }") == [("a", "1"), ("b", [("c", "d")])]
