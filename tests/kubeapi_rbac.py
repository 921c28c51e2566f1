"""Authentication and RBAC as kube-apiserver applies them, for tests/kubeapi.py (off unless a test turns it on).

`KubeServer.authenticate({token: user})` makes the server read each request's bearer token: an unknown one is
answered 401 Unauthorized; a known one acts as its user (ADMIN, the kubeconfig's own token, may do anything; a
service account `system:serviceaccount:<namespace>:<name>` what the Roles bound to it by RoleBindings stored on the
server allow). Authorization comes before the object is looked up, so a name the Role does not list is 403 even when
no such object exists. A rule limited by resourceNames allows a list or watch only with exactly the field selector
`metadata.name=<one of them>`; create and deletecollection are never allowed by one.

Gaps: no ClusterRoles or ClusterRoleBindings, no groups (system:authenticated's discovery rights are granted to
everyone), no aggregation, no impersonation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tests.kubeapi_wire import failure, object_details, qualified

ADMIN = "kubernetes-admin"  # in the group system:masters
UNAUTHORIZED = failure(401, "Unauthorized")


def service_account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def request_verb(method: str, name: str | None, watching: bool) -> str:
    if method == "GET":
        return "get" if name else "watch" if watching else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def named_by_selector(field_selector: str | None) -> str | None:
    found = re.fullmatch(r"metadata\.name==?([^,]+)", field_selector or "")
    return found.group(1) if found else None


def rules_of(objects: Mapping[tuple[str, str | None, str], dict[str, Any]], user: str, namespace: str | None,
             ) -> list[dict[str, Any]]:  # fmt: skip
    """The rules of every Role in `namespace` that a RoleBinding there binds to `user` (a service account)."""
    found: list[dict[str, Any]] = []
    for (resource, where, _), binding in objects.items():
        if resource != "rolebindings" or where != namespace or binding.get("roleRef", {}).get("kind") != "Role":
            continue
        subjects = binding.get("subjects") or []
        if any(s.get("kind") == "ServiceAccount" and service_account(s.get("namespace", where), s["name"]) == user
               for s in subjects) or any(s.get("kind") == "User" and s["name"] == user for s in subjects):
            role = objects.get(("roles", namespace, binding["roleRef"]["name"]))
            found += (role or {}).get("rules") or []
    return found


def allows(rule: dict[str, Any], verb: str, group: str, resource: str, name: str | None) -> bool:
    def has(key: str, value: str) -> bool:
        return value in rule.get(key, []) or "*" in rule.get(key, [])

    if not (has("verbs", verb) and has("apiGroups", group) and has("resources", resource)):
        return False
    names = rule.get("resourceNames") or []
    return not names or (verb not in ("create", "deletecollection") and name in names)


def forbidden(user: str, verb: str, group: str, resource: str, sub: str | None, namespace: str | None,
              name: str | None) -> dict[str, Any]:  # fmt: skip
    """403, worded as the API server words it."""
    shown = f'{qualified(resource, group)}{f" {chr(34)}{name}{chr(34)}" if name else ""}'
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    full = f"{resource}/{sub}" if sub else resource
    message = (f'{shown} is forbidden: User "{user}" cannot {verb} resource "{full}" in API group "{group}" '
               f"{where}")
    return failure(403, message, details=object_details(resource, group, name))


def authorize(objects: Mapping[tuple[str, str | None, str], dict[str, Any]], user: str, method: str, group: str,
              resource: str, sub: str | None, namespace: str | None, name: str | None, watching: bool,
              field_selector: str | None) -> dict[str, Any] | None:  # fmt: skip
    """None when `user` may make this request, else the 403 Status."""
    if user == ADMIN:
        return None
    verb = request_verb(method, name, watching)
    target = name or (named_by_selector(field_selector) if verb in ("list", "watch") else None)
    full = f"{resource}/{sub}" if sub else resource
    if any(allows(rule, verb, group, full, target) for rule in rules_of(objects, user, namespace)):
        return None
    return forbidden(user, verb, group, resource, sub, namespace, name)
