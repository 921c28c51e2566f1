"""Policy-checked values (--policy): the corpus through the real CLI, one failing and one passing values
file per rule of the policy schema, bad policy files, and install/upgrade refused before helm runs.

tests/fixtures/policy/rules/<rule>/ holds policy.yaml, fail.yaml and pass.yaml for every rule the policy
schema defines (a rule without fixtures fails test_every_rule_has_a_fixture_pair), and any number of
further fail-<case>.yaml and pass-<case>.yaml (other values keys that reach the same rule), each checked
like fail.yaml and pass.yaml; bad-policies/*.yaml start with `# expect LINE: MESSAGE`.
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
from tfchart.values import policy

CORPUS = REPO / "tests" / "fixtures" / "policy"
RULES = sorted(path for path in (CORPUS / "rules").iterdir() if path.is_dir())
FAILING, PASSING = ([pytest.param(rule, case, id=f"{rule.name}/{case.stem}") for rule in RULES
                     for case in sorted(rule.glob(f"{kind}*.yaml"))] for kind in ("fail", "pass"))  # fmt: skip
BAD = sorted((CORPUS / "bad-policies").glob("*.yaml"))
EXAMPLE = REPO / "docs" / "examples" / "policy.yaml"
SHIPPED = sorted((REPO / "values").glob("*.yaml"))


def tfchart(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400", "TFCHART_HELM": str(helm_path("4"))}
    return subprocess.run([sys.executable, "-m", "tfchart", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=env)


def report(*args: str) -> tuple[int, dict[str, Any]]:
    result = tfchart("validate", *args, "--output", "json")
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def rule_names() -> list[str]:
    """Every rule the policy schema knows, e.g. maxGpus.perPod."""
    groups = policy.policy_schema()["properties"]["rules"]["properties"]
    return [f"{group}.{name}" for group, body in groups.items() for name, rule in body["properties"].items()
            if not rule.get("x-setting")]  # maxGpus.resources: what the maxGpus rules count


def test_every_rule_has_a_fixture_pair() -> None:
    assert {path.name for path in RULES} == set(rule_names())
    for rule in RULES:
        assert {p.name for p in rule.iterdir()} >= {"policy.yaml", "fail.yaml", "pass.yaml"}, rule


@pytest.mark.parametrize(("rule", "case"), FAILING)
def test_failing_fixture_is_rejected_with_rule_key_file_line_and_a_fix(rule: Path, case: Path) -> None:
    """Each violation is located and named; where every fix is a --set with a real value, applying them all gives
    a valid release, and the others are exactly WORDED_FIXES, each fix naming the key to change."""
    fail = rel(case)
    code, out = report("-f", fail, "--policy", rel(rule / "policy.yaml"))
    assert code == 1 and not out["valid"] and out["problems"] == []
    assert out["policy"]["checked"] is True
    violations = out["policy"]["violations"]
    assert violations and {v["rule"] for v in violations} == {rule.name}
    lines = case.read_text().splitlines()
    for violation in violations:
        assert violation["file"] == fail and isinstance(violation["line"], int), violation
        assert violation["fix"] and violation["message"]
        written = lines[violation["line"] - 1]
        named = [part for part in re.split(r"(?<!\\)\.", violation["path"]) if not part.isdigit()][-1]
        assert named.replace("\\.", ".") in written or written.lstrip().startswith("-"), (violation, written)
    text = tfchart("validate", "-f", fail, "--policy", rel(rule / "policy.yaml"))
    assert text.returncode == 1
    assert f"{fail}:{violations[0]['line']}" in text.stdout and f"(rule {rule.name})" in text.stdout
    assert f"fix: {violations[0]['fix']}" in text.stdout
    fixes = [v["fix"] for v in violations]
    if not all(set_arguments(fix) and "<" not in fix for fix in fixes):
        assert f"{rule.name}/{case.stem}" in WORDED_FIXES, fixes
        assert all(v["fix"] and v["path"].split(".")[0] in v["fix"] for v in violations), violations
        return
    assert f"{rule.name}/{case.stem}" not in WORDED_FIXES, "its fixes are --set now: take it off WORDED_FIXES"
    sets = [arg for fix in fixes for arg in set_arguments(fix)]
    code, out = report("-f", fail, *sets, "--policy", rel(rule / "policy.yaml"))
    assert code == 0, (sets, out)


@pytest.mark.parametrize(("rule", "case"), PASSING)
def test_passing_fixture_is_accepted(rule: Path, case: Path) -> None:
    result = tfchart("validate", "-f", rel(case), "--policy", rel(rule / "policy.yaml"))
    assert result.returncode == 0, result.stderr
    assert "1 rule passed" in result.stdout


@pytest.mark.parametrize("bad", BAD, ids=lambda path: path.stem)
def test_a_bad_policy_file_is_an_error_with_its_line(bad: Path) -> None:
    expect = re.fullmatch(r"# expect (\d+): (.*)", bad.read_text().splitlines()[0])
    assert expect, f"{bad} must start with # expect LINE: MESSAGE"
    result = tfchart("validate", "--policy", rel(bad))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"problem in policy file {rel(bad)}" in result.stdout or "problems in policy file" in result.stdout
    assert f"{rel(bad)}:{expect.group(1)}  " in result.stdout, result.stdout
    assert expect.group(2) in result.stdout, result.stdout
    code, document = report("--policy", rel(bad))  # --output json lists the same problems, as JSON
    assert code == 1 and document["valid"] is False and document["policy"]["checked"] is False
    assert next((p["file"], p["line"]) for p in document["policy"]["problems"]) == (rel(bad), int(expect.group(1)))
    assert {p["kind"] for p in document["policy"]["problems"]} == {"policy-file"}
    assert any(expect.group(2) in p["message"] + " " + p["fix"] for p in document["policy"]["problems"])


def test_a_typo_names_the_valid_rules_and_the_closest() -> None:
    result = tfchart("validate", "--policy", rel(CORPUS / "bad-policies" / "typo-rule-name.yaml"))
    assert "valid: perPod, perRelease, perRole" in result.stdout and "did you mean perPod?" in result.stdout


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
    assert f"✗ {len(out['policy']['violations'])} policy violations (policy {rules})" in text.stdout
    assert "chart default  serving.image.registry" in text.stdout


def test_a_set_argument_is_named_as_the_origin() -> None:
    rule = CORPUS / "rules" / "maxGpus.perPod"
    code, out = report("--set", "worker.gpu.count=3", "--policy", rel(rule / "policy.yaml"))
    assert code == 1
    assert [(v["file"], v["line"]) for v in out["policy"]["violations"]] == [("--set worker.gpu.count=3", None)]


def set_arguments(fix: str) -> list[str]:
    """The --set arguments a fix names (each alternative of "A or B" included)."""
    return [arg for value in re.findall(r"--set (\S+)", fix) for arg in ("--set", value)]


#: Failing fixtures whose fixes are (also) written in words or with a <placeholder>: a whole list to
#: write (tolerations, affinity), a choice between keys (maxGpus.perRelease), a name only the
#: platform knows (a priority class or queue when the policy lists none), a digest.
WORDED_FIXES = {
    "images.requireDigest/fail", "maxGpus.perRelease/fail", "maxGpus.perRelease/fail-resource-limit",
    "placement.allowedNodeSelectors/fail-affinity-in", "placement.allowedNodeSelectors/fail-affinity-operators",
    "placement.allowedNodeSelectors/fail-affinity-preferred", "placement.allowedTolerations/fail",
    "priorityClass.required/fail", "queue.required/fail", "queue.required/fail-volcano-default",
    "downloads.allowed/fail-extra-args", "images.allowedRegistries/fail-image-volume",
    "images.requireDigest/fail-image-volume",
}


def write_policy(tmp_path: Path, rules: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(f"apiVersion: tf-distributed.io/policy/v1\nrules: {rules}\n")
    return str(path)


@pytest.mark.parametrize(("amount", "gpus", "fix"), [("1k", 1000, "0"), ("3", 3, "0")])
def test_a_gpu_limit_in_resources_is_counted_and_named_at_its_set(tmp_path: Path, amount: str, gpus: int,
                                                                   fix: str) -> None:  # fmt: skip
    """A GPU given as <role>.resources.limits.<resource> (a quantity: 1k = 1000) is named there, with a fix
    that lowers it, not <role>.gpu.count (which is 0)."""
    rules = write_policy(tmp_path, "{maxGpus: {perPod: 0}}")
    argument = f"worker.resources.limits.amd\\.com/gpu={amount}"
    code, out = report("--set", argument, "--policy", rules)
    assert code == 1
    [violation] = out["policy"]["violations"]
    assert violation["path"] == "worker.resources.limits.amd\\.com/gpu" and violation["rule"] == "maxGpus.perPod"
    assert (violation["file"], violation["line"]) == (f"--set {argument}", None)
    assert violation["value"] == gpus and f"{gpus} GPUs per worker pod" in violation["message"]
    assert violation["fix"] == f"--set worker.resources.limits.amd\\.com/gpu={fix}"


def test_a_fractional_gpu_limit_is_a_violation_not_a_traceback(tmp_path: Path) -> None:
    rules = write_policy(tmp_path, "{maxGpus: {perRelease: 8}}")
    code, out = report("--set", "chief.resources.limits.nvidia\\.com/mig-1g\\.10gb=500m", "--policy", rules)
    assert code == 1
    [violation] = out["policy"]["violations"]
    assert (
        violation["path"] == "chief.resources.limits.nvidia\\.com/mig-1g\\.10gb"
        and violation["rule"] == "maxGpus.perRelease"
    )
    assert "500m" in violation["message"] and "not a whole number of GPUs" in violation["message"]
    assert violation["fix"] == "--set chief.resources.limits.nvidia\\.com/mig-1g\\.10gb=1"


def test_gpu_count_and_a_resource_limit_together_name_the_larger(tmp_path: Path) -> None:
    rules = write_policy(tmp_path, "{maxGpus: {perPod: 2}}")
    sets = ["--set", "worker.gpu.count=1", "--set", "worker.resources.limits.gpu\\.intel\\.com/i915=4"]
    code, out = report(*sets, "--policy", rules)
    [violation] = out["policy"]["violations"]
    assert code == 1 and violation["path"] == "worker.resources.limits.gpu\\.intel\\.com/i915"
    assert violation["value"] == 5 and violation["fix"] == "--set worker.resources.limits.gpu\\.intel\\.com/i915=1"
    code, out = report(*sets, *set_arguments(violation["fix"]), "--policy", rules)
    assert code == 0, out


def test_an_allowed_registry_with_a_path_is_said_in_words_never_a_guessed_repository(tmp_path: Path) -> None:
    """registry.corp/ml: the registry values take a host only (the chart's schema), and where under ml/ a mirrored
    copy lives is the mirror's choice: the fix says so in words, with no --set of an invented repository (issue 37:
    image.repository=tf-distributed/ml/tf-trainer); a host alone is a --set that passes the rule."""
    rules = write_policy(tmp_path, "{images: {allowedRegistries: [registry.corp/ml]}}")
    for values in ([], ["--set", "global.imageRegistry=ghcr.io"]):
        code, out = report(*values, "--policy", rules)
        fixes = [v["fix"] for v in out["policy"]["violations"]]
        assert code == 1 and fixes and not any(set_arguments(fix) for fix in fixes), fixes
        assert all("under registry.corp/ml/, then set " in fix and " to registry.corp and " in fix for fix in fixes)
    code, out = report("--policy", write_policy(tmp_path, "{images: {allowedRegistries: [registry.corp]}}"))
    sets = [arg for v in out["policy"]["violations"] for arg in set_arguments(v["fix"])]
    assert code == 1 and sorted(sets) == ["--set", "--set", "image.registry=registry.corp",
                                          "serving.image.registry=registry.corp"]  # fmt: skip
    code, out = report(*sets, "--policy", write_policy(tmp_path, "{images: {allowedRegistries: [registry.corp]}}"))
    assert code == 0 and out["problems"] == [], (sets, out)


def test_an_empty_volcano_queue_is_volcanos_default_queue(tmp_path: Path) -> None:
    volcano = ["--set", "scheduling.gang.provider=volcano"]
    code, out = report(*volcano, "--policy", write_policy(tmp_path, "{queue: {allowed: [team-a]}}"))
    [violation] = out["policy"]["violations"]
    assert code == 1 and violation["path"] == "scheduling.gang.volcanoQueue" and "'default'" in violation["message"]
    code, out = report(*volcano, "--policy", write_policy(tmp_path, "{queue: {allowed: [team-a, default]}}"))
    assert code == 0, out
    code, out = report("--policy", write_policy(tmp_path, "{queue: {allowed: [team-a]}}"))
    assert code == 0, out  # no provider, no Kueue queue: no queue at all, which queue.allowed does not refuse


def test_invalid_values_and_the_policy_are_checked_in_one_run() -> None:
    """Values the schema and the chart's rules refuse are checked against the policy all the same (issue 37);
    values helm cannot read at all are not."""
    rule = CORPUS / "rules" / "maxGpus.perPod"
    policy_file = rel(rule / "policy.yaml")
    invalid = ["--set", "worker.replica=3", "--set", "ps.replicas=0"]  # a typo (the schema), 0 ps (a rule)
    code, out = report("-f", rel(rule / "fail.yaml"), *invalid, "--policy", policy_file)
    assert code == 1 and out["policy"]["checked"] is True and out["policy"]["violations"]
    assert [problem["kind"] for problem in out["problems"]] == ["schema", "rule"]
    code, out = report("--set", "worker.replicas={", "--policy", policy_file)
    assert code == 1 and out["policy"]["checked"] is False
    assert any("not checked" in warning for warning in out["warnings"])


def test_json_without_policy_has_no_policy_section() -> None:
    code, out = report()
    assert code == 0 and "policy" not in out


def test_the_example_policy_is_valid() -> None:
    loaded = policy.names(policy.load(EXAMPLE))
    assert set(loaded) <= set(rule_names()) and len(loaded) >= 10


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
