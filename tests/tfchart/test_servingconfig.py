"""tfchart.servingconfig: the version policy the chart records from the release's values on Serving's
ConfigMap, read back and applied to the exported versions as TF Serving does. The recorded policy is
held equal to the rendered model config as TF Serving's own protos parse it in
tests/chart/test_serving_versions.py."""

from __future__ import annotations

import json

import pytest

from tfchart.cluster.servingconfig import VersionPolicy, read_policy, serving_versions


@pytest.mark.parametrize(
    ("policy", "exported", "loaded"),
    [
        (VersionPolicy("latest", latest=1), [1, 2, 3], [3]),
        (VersionPolicy("latest", latest=5), [3, 1, 2], [1, 2, 3]),
        (VersionPolicy("latest", latest=2), [], []),
        (VersionPolicy("latest", latest=0), [1, 2], [2]),  # num_versions 0: the server serves one
        (VersionPolicy("specific", versions=(1, 9)), [1, 2, 3], [1]),
        (VersionPolicy("all"), [2, 1], [1, 2]),
    ],
)
def test_the_policy_selects_as_tf_serving_does(policy: VersionPolicy, exported: list[int], loaded: list[int]) -> None:
    assert policy.selects(exported) == loaded


def test_versions_of_a_missing_or_unreadable_record_say_why() -> None:
    absent = serving_versions("cm", None, [1])
    assert absent["loaded"] is None and "has no tf-distributed.io/model-version-policy annotation" in absent["note"]
    for text in ("{", '{"type": "newest"}', '{"type": "specific", "versions": ["1"]}', "[]"):
        broken = serving_versions("cm", text, [1])
        assert broken["loaded"] is None and "annotation cannot be read" in broken["note"], text
    pinned = serving_versions("cm", json.dumps({"model": "m", "type": "specific", "versions": [2, 7]}), [1, 2])
    assert [pinned[key] for key in ("model", "loaded", "missing", "policy")] == ["m", [2], [7], "specific: 2, 7"]
    unknown = serving_versions("cm", json.dumps({"model": "m", "type": "all"}), None)
    assert unknown["loaded"] is None and "exported versions are unknown" in unknown["note"]
    assert read_policy('{"type": "latest", "latest": 3, "versions": []}') == ("", VersionPolicy("latest", 3))
