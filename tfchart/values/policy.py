"""Policy-checked values: a platform team's rules (`--policy FILE` of validate, install and upgrade). The policy
file has its own schema (policy.schema.json, every map closed; a size is a Kubernetes quantity as the kubernetes
client parses it): a typo, a wrong type or a bad quantity is an error at its line. The rules (policy_rules.py) are
checked on the effective values and their render (validate.py's check_policy).
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path
from typing import Any, cast

import yaml

from tfchart.errors import Problem, UsageError, ValidationFailed
from tfchart.manifests.quantity import parse_or_none
from tfchart.values.origins import Loader, compose, walk
from tfchart.values.policy_rules import Path_, dotted

API_VERSION = "tf-distributed.io/policy/v1"
SCHEMA_PATH = Path(__file__).with_name("policy.schema.json")


def names(rules: dict[str, Any]) -> list[str]:
    """The rules a policy sets, e.g. maxGpus.perPod (not the settings they share, e.g. maxGpus.resources)."""
    groups = policy_schema()["properties"]["rules"]["properties"]
    return [f"{group}.{name}" for group, body in rules.items() for name in body
            if not groups[group]["properties"][name].get("x-setting")]  # fmt: skip


@cache
def policy_schema() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(SCHEMA_PATH.read_text()))


def load(path: Path) -> dict[str, Any]:
    """The rules of the policy file at `path`, checked against the policy schema (ValidationFailed lists every
    problem)."""
    name, hint = str(path), "check the path given to --policy"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"policy file not found: {name}", hint) from None
    except OSError as error:
        raise UsageError(f"cannot read policy file {name}: {error.strerror}", hint) from None
    try:
        document = yaml.load(data, Loader=Loader)
    except (yaml.YAMLError, ValueError) as error:
        mark = getattr(error, "problem_mark", None)
        why = f"YAML syntax error: {getattr(error, 'problem', None) or error}"
        problems = [Problem("(root)", why, None, "fix the YAML", name, mark.line + 1 if mark else None)]
    else:
        problems = schema_problems(document, compose(data), name)
    if problems:
        raise ValidationFailed(problems, where=f"in policy file {name}")
    return cast(dict[str, Any], document["rules"])


def schema_problems(document: Any, roots: list[yaml.Node], name: str) -> list[Problem]:
    """Every way `document` breaks the policy schema, with its line in the policy file."""
    from jsonschema import Draft202012Validator, FormatChecker

    if not isinstance(document, dict):
        why = "the policy file is empty" if document is None else "a policy file must be a map of keys"
        return [Problem("(root)", why, None, f"start it with apiVersion: {API_VERSION}", name, 1)]
    quantity = FormatChecker(formats=())
    quantity.checks("quantity")(lambda value: not isinstance(value, (str, int)) or parse_or_none(value) is not None)
    errors = Draft202012Validator(policy_schema(), format_checker=quantity).iter_errors(document)
    return [problem for error in sorted(errors, key=lambda e: list(map(str, e.path)))
            for problem in _explain(error, tuple(map(str, error.path)), name, roots)]  # fmt: skip


def _explain(error: Any, where: Path_, name: str, roots: list[yaml.Node]) -> list[Problem]:
    schema, instance, expected = error.schema, error.instance, error.validator_value
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = sorted(schema.get("properties", {}))
        found = []
        for key in (key for key in instance if key not in known):
            close = difflib.get_close_matches(key, known, n=1)
            message = f"unknown {schema.get('x-key-kind', 'key')} {key!r} (valid: {', '.join(known)})"
            fix = f"did you mean {close[0]}?" if close else f"use one of: {', '.join(known)}"
            found.append(Problem(dotted((*where, key)), message, None, fix, name, _line(roots, (*where, key))))
        return found
    value, fix, message = instance, "", error.message
    if error.validator == "required":
        missing = [key for key in expected if key not in instance]
        examples = {"apiVersion": f"apiVersion: {API_VERSION}", "rules": "rules: {maxGpus: {perPod: 1}}"}
        message, value = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required", None
        fix = "; ".join(f"add {examples.get(key, key)}" for key in missing)
    elif error.validator == "const":
        message, fix = f"must be {expected!r}, not {instance!r}", f"apiVersion: {API_VERSION}"
    elif error.validator == "type":
        kinds = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
                 type(None): "null"}  # fmt: skip
        wanted = expected if isinstance(expected, str) else " or ".join(expected)
        message = f"must be {wanted}, not {kinds.get(type(instance), type(instance).__name__)} {instance!r}"
    elif error.validator == "format":
        message, fix = f"{instance!r} is not a Kubernetes quantity", "write a size such as 500Gi, 2Ti or 100G"
    return [Problem(dotted(where), message, value, fix, name, _line(roots, where))]


def _line(roots: list[yaml.Node], where: Path_) -> int | None:
    for root in reversed(roots):
        node, key, rest, _ = walk(root, ".".join(where))
        if not rest:
            return (key or node).start_mark.line + 1
    return None
