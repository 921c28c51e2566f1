"""Policy-checked values (--policy): the corpus through the real CLI, one failing and one passing values
file per rule of the policy schema, bad policy files, and install/upgrade refused before helm runs.

tests/fixtures/policy/rules/<rule>/ holds policy.yaml, fail.yaml and pass.yaml for every rule the policy
schema defines (a rule without fixtures fails test_every_rule_has_a_fixture_pair); bad-policies/*.yaml
start with `# expect LINE: MESSAGE`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.chartlib import REPO, helm_path
from tfchart import policy

CORPUS = REPO / "tests" / "fixtures" / "policy"
RULES = sorted(path for path in (CORPUS / "rules").iterdir() if path.is_dir())
BAD = sorted((CORPUS / "bad-policies").glob("*.yaml"))
EXAMPLE = REPO / "docs" / "examples" / "policy.yaml"
SHIPPED = sorted((REPO / "values").glob("*.yaml"))


def tfchart(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400", "TFCHART_HELM": str(helm_path("4"))}
    return subprocess.run(
        [sys.executable, "-m", "tfchart", *args], cwd=REPO, capture_output=True, text=True, timeout=120, env=env
    )


def report(*args: str) -> tuple[int, dict[str, Any]]:
    result = tfchart("validate", *args, "--output", "json")
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_every_rule_has_a_fixture_pair() -> None:
    assert {path.name for path in RULES} == set(policy.rule_names())
    for rule in RULES:
        assert {p.name for p in rule.iterdir()} >= {"policy.yaml", "fail.yaml", "pass.yaml"}, rule


@pytest.mark.parametrize("rule", RULES, ids=lambda path: path.name)
def test_failing_fixture_is_rejected_with_rule_key_and_file_line(rule: Path) -> None:
    fail = rel(rule / "fail.yaml")
    code, out = report("-f", fail, "--policy", rel(rule / "policy.yaml"))
    assert code == 1 and not out["valid"] and out["problems"] == []
    assert out["policy"]["checked"] is True
    violations = out["policy"]["violations"]
    assert violations and {v["rule"] for v in violations} == {rule.name}
    lines = (rule / "fail.yaml").read_text().splitlines()
    for violation in violations:
        assert violation["file"] == fail and isinstance(violation["line"], int), violation
        assert violation["fix"] and violation["message"]
        written = lines[violation["line"] - 1]
        named = [part for part in re.split(r"(?<!\\)\.", violation["path"]) if not part.isdigit()][-1]
        assert named.replace("\\.", ".") in written or written.lstrip().startswith("-"), (violation, written)
    text = tfchart("validate", "-f", fail, "--policy", rel(rule / "policy.yaml"))
    assert text.returncode == 1
    assert f"{fail}:{violations[0]['line']}" in text.stderr and f"(rule {rule.name})" in text.stderr
    assert f"fix: {violations[0]['fix']}" in text.stderr


@pytest.mark.parametrize("rule", RULES, ids=lambda path: path.name)
def test_passing_fixture_is_accepted(rule: Path) -> None:
    result = tfchart("validate", "-f", rel(rule / "pass.yaml"), "--policy", rel(rule / "policy.yaml"))
    assert result.returncode == 0, result.stderr
    assert "1 rule passed" in result.stdout


@pytest.mark.parametrize("bad", BAD, ids=lambda path: path.stem)
def test_a_bad_policy_file_is_an_error_with_its_line(bad: Path) -> None:
    expect = re.fullmatch(r"# expect (\d+): (.*)", bad.read_text().splitlines()[0])
    assert expect, f"{bad} must start with # expect LINE: MESSAGE"
    result = tfchart("validate", "--policy", rel(bad))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"problem in policy file {rel(bad)}" in result.stderr or "problems in policy file" in result.stderr
    assert f"{rel(bad)}:{expect.group(1)}  " in result.stderr, result.stderr
    assert expect.group(2) in result.stderr, result.stderr
    code, document = report("--policy", rel(bad))  # --output json lists the same problems, as JSON
    assert code == 1 and document["valid"] is False and document["policy"]["checked"] is False
    assert next((p["file"], p["line"]) for p in document["policy"]["problems"]) == (rel(bad), int(expect.group(1)))
    assert any(expect.group(2) in p["message"] + " " + p["fix"] for p in document["policy"]["problems"])


def test_a_typo_names_the_valid_rules_and_the_closest() -> None:
    result = tfchart("validate", "--policy", rel(CORPUS / "bad-policies" / "typo-rule-name.yaml"))
    assert "valid: perPod, perRelease, perRole" in result.stderr and "did you mean perPod?" in result.stderr


def test_a_missing_policy_file_is_a_usage_error() -> None:
    result = tfchart("validate", "--policy", "no/such/policy.yaml")
    assert result.returncode == 2 and "policy file not found: no/such/policy.yaml" in result.stderr


def test_every_violation_at_once() -> None:
    values, rules = rel(CORPUS / "multi" / "values.yaml"), rel(CORPUS / "multi" / "policy.yaml")
    code, out = report("-f", values, "--policy", rules)
    assert code == 1
    broken = {v["rule"] for v in out["policy"]["violations"]}
    assert broken == {
        "maxGpus.perPod", "maxGpus.perRole", "images.allowedRegistries", "images.requireDigest",
        "priorityClass.required", "queue.required", "downloads.allowed", "storage.allowedStorageClasses",
        "storage.maxClaimSize", "placement.allowedNodeSelectors", "placement.allowedTolerations",
    }  # fmt: skip
    located = {v["path"]: (v["file"], v["line"]) for v in out["policy"]["violations"]}
    assert located["worker.gpu.count"] == (values, 4) and located["storage.size"] == (values, 13)
    assert located["serving.image.registry"] == (None, None)  # a chart default: no file to point at
    text = tfchart("validate", "-f", values, "--policy", rules)
    assert f"✗ {len(out['policy']['violations'])} policy violations (policy {rules})" in text.stderr
    assert "chart default  serving.image.registry" in text.stderr


def test_a_set_argument_is_named_as_the_origin() -> None:
    rule = CORPUS / "rules" / "maxGpus.perPod"
    code, out = report("--set", "worker.gpu.count=3", "--policy", rel(rule / "policy.yaml"))
    assert code == 1
    assert [(v["file"], v["line"]) for v in out["policy"]["violations"]] == [("--set worker.gpu.count=3", None)]


def test_invalid_values_are_reported_first_and_the_policy_is_not_checked() -> None:
    rule = CORPUS / "rules" / "maxGpus.perPod"
    code, out = report("--set", "worker.replicas=-1", "--policy", rel(rule / "policy.yaml"))
    assert code == 1 and out["problems"] and out["policy"]["checked"] is False
    assert any("not checked" in warning for warning in out["warnings"])


def test_json_without_policy_has_no_policy_section() -> None:
    code, out = report()
    assert code == 0 and "policy" not in out


def test_the_example_policy_is_valid() -> None:
    loaded = policy.load(EXAMPLE)
    assert set(loaded.names) <= set(policy.rule_names()) and len(loaded.names) >= 10


@pytest.mark.parametrize("values", SHIPPED, ids=lambda path: path.stem)
def test_shipped_values_against_the_example_policy_and_their_fixes(values: Path) -> None:
    """Each shipped values file breaks the example policy where a platform team would expect (priority
    classes, downloads, StorageClass); applying the --set each violation's fix names makes it pass."""
    code, out = report("-f", rel(values), "--policy", rel(EXAMPLE))
    assert code == 1
    violations = out["policy"]["violations"]
    assert {v["rule"] for v in violations} == {
        "priorityClass.required", "downloads.allowed", "storage.allowedStorageClasses"
    }  # fmt: skip
    fixes = [re.match(r"--set (\S+)", v["fix"]) for v in violations]
    sets = [arg for match in fixes if match for arg in ("--set", match.group(1))]
    code, out = report("-f", rel(values), *sets, "--policy", rel(EXAMPLE))
    assert code == 0, out


@pytest.fixture
def recording_helm(tmp_path: Path) -> tuple[Path, Path]:
    """A helm that logs every call, then runs the real helm (template works; a cluster call would fail)."""
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "helm"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {helm_path("4")} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


@pytest.mark.parametrize("command", ["install", "upgrade"])
def test_install_and_upgrade_refuse_before_helm(command: str, recording_helm: tuple[Path, Path],
                                                tmp_path: Path) -> None:  # fmt: skip
    wrapper, log = recording_helm
    rule = CORPUS / "rules" / "networkPolicy.required"
    result = tfchart(
        "--helm", str(wrapper), command, "mnist", "-f", rel(rule / "fail.yaml"), "--policy", rel(rule / "policy.yaml"),
        "--kubeconfig", str(tmp_path / "no-kubeconfig"), "-n", "ml",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "1 policy violation" in result.stderr and "(rule networkPolicy.required)" in result.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    assert not [call for call in calls if call.split()[:1] in (["install"], ["upgrade"])], calls


def test_install_with_a_broken_policy_file_refuses_before_helm(recording_helm: tuple[Path, Path]) -> None:
    wrapper, log = recording_helm
    bad = CORPUS / "bad-policies" / "typo-rule-group.yaml"
    result = tfchart("--helm", str(wrapper), "install", "mnist", "--policy", rel(bad), "--dry-run")
    assert result.returncode == 1 and "unknown rule group 'maxGpu'" in result.stderr
    assert not log.exists() or "install" not in log.read_text()
