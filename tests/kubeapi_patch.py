"""PATCH as kube-apiserver applies it, for tests/kubeapi.py: the three patch types and the 415 for any other.

- `application/merge-patch+json`: RFC 7386 (a null removes the key, a list replaces the list);
- `application/json-patch+json`: RFC 6902 (add, remove, replace, test; a failed `test`, or a path that is not
  there, is 422 Invalid with the API server's generic message and empty details). Gap: no client here sends
  `move` or `copy`, which are answered as a failed operation;
- `application/strategic-merge-patch+json`, built-in kinds only: as a merge patch, except that a list of objects
  with a `name` (containers, env, ports, volumes) is merged item by item by name. Gap: the real patchMergeKey of
  each field (some merge by another key: `containerPort`, `mountPath`, `ip`) and the `$patch`, `$retainKeys` and
  `$setElementOrder` directives are not applied (directives are dropped);
- a custom resource refuses strategic merge with the apiextensions server's 415; a built-in refuses any other
  type (`application/json`) with "415: Unsupported Media Type". Server-side apply (`application/apply-patch+yaml`)
  is not implemented: 415.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kubeapi_wire import failure

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
CUSTOM_415 = ("the body of the request was in an unknown format - accepted media types include: "
              "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")  # fmt: skip
REJECTED = "the server rejected our request due to an error in our request"


class PatchFailed(Exception):
    """A JSON patch that cannot be applied (422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any) -> Any:
    """A strategic merge patch, merging lists of named objects by name (see the module docstring for its gaps)."""
    if isinstance(patch, list) and isinstance(target, list) and all(
            isinstance(item, dict) and "name" in item for item in [*target, *patch]):  # fmt: skip
        merged = [copy.deepcopy(item) for item in target]
        for item in patch:
            index = next((i for i, old in enumerate(merged) if old["name"] == item["name"]), None)
            if index is None:
                merged.append(strategic_merge({}, item))
            else:
                merged[index] = strategic_merge(merged[index], item)
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge(result.get(key), value)
    return result


def pointer(path: str) -> list[str]:
    """An RFC 6901 JSON pointer's tokens (`~1` is `/`, `~0` is `~`)."""
    if not path.startswith("/"):
        raise PatchFailed(path)
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def resolve(document: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(document, dict) and token in document:
            document = document[token]
        elif isinstance(document, list) and token.isdigit() and int(token) < len(document):
            document = document[int(token)]
        else:
            raise PatchFailed("/".join(tokens))
    return document


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 JSON patch; PatchFailed when an operation does not apply."""
    result = copy.deepcopy(target)
    for operation in operations:
        op, tokens = operation.get("op"), pointer(str(operation.get("path", "")))
        if op == "test":
            if resolve(result, tokens) != operation.get("value"):
                raise PatchFailed(operation["path"])
            continue
        parent, last = resolve(result, tokens[:-1]), tokens[-1]
        if op == "remove" or op == "replace":
            resolve(parent, [last])  # must be there
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
            if not 0 <= index <= len(parent):
                raise PatchFailed(operation["path"])
            if op == "add":
                parent.insert(index, copy.deepcopy(operation.get("value")))
            elif op == "replace":
                parent[index] = copy.deepcopy(operation.get("value"))
            elif op == "remove":
                del parent[index]
            else:
                raise PatchFailed(str(op))
        elif isinstance(parent, dict):
            if op in ("add", "replace"):
                parent[last] = copy.deepcopy(operation.get("value"))
            elif op == "remove":
                del parent[last]
            else:
                raise PatchFailed(str(op))
        else:
            raise PatchFailed(operation["path"])
    return result


def patched_document(before: dict[str, Any], body: Any, content_type: str, built_in: bool,
                     ) -> dict[str, Any] | tuple[int, dict[str, Any]]:  # fmt: skip
    """The object after a PATCH of `content_type`, or the API server's (status, Status) refusing it."""
    if (content_type == STRATEGIC and not built_in) or content_type not in (MERGE_PATCH, JSON_PATCH, STRATEGIC):
        if built_in:
            return 415, failure(415, "415: Unsupported Media Type", details={})
        return 415, failure(415, CUSTOM_415)
    if content_type == JSON_PATCH:
        if not isinstance(body, list):
            return 400, failure(400, "error decoding patch: a JSON patch is a list of operations")
        try:
            result = json_patch(before, body)
        except (PatchFailed, ValueError, TypeError, IndexError, KeyError):
            return 422, failure(422, REJECTED, details={})
        return result if isinstance(result, dict) else (422, failure(422, REJECTED, details={}))
    if not isinstance(body, dict):
        return 400, failure(400, "error decoding patch: a merge patch is a JSON object")
    return (merge_patch if content_type == MERGE_PATCH else strategic_merge)(before, body)  # type: ignore[no-any-return]
