"""Policy-checked values: a platform team's rules (`--policy FILE` of validate, install and upgrade).

A policy file has its own schema (tfchart/policy.schema.json, every map closed): a rule name with a
typo, a wrong type or a bad quantity is an error with the policy file's line, never a silent pass.

The rules are checked on the effective values and on a render of the chart with them (helm
template): the render says which pods exist, how many, their GPUs, images, placement and the claim;
every violation names the values key a user edits, where it was set (file:line, the --set argument,
or the chart default), the rule, what is wrong and the fix.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tfchart.errors import Problem, TfchartError, UsageError, ValidationFailed
from tfchart.goyaml import Node, Path_, ValuesFileError, line_in, load_bytes
from tfchart.kubeobjects import is_gpu_resource
from tfchart.rules import quantity_nanos, shown_quantity
from tfchart.values import Values
from tfdcontract import COMPONENT_LABEL, HELM_TEST, SUPERVISOR

API_VERSION = "tf-distributed.io/policy/v1"
SCHEMA_PATH = Path(__file__).with_name("policy.schema.json")
HOOK = "helm.sh/hook"
PROJECT_IMAGE_ROLES = {SUPERVISOR: SUPERVISOR, HELM_TEST: SUPERVISOR}  # whose image block a pod runs


@dataclass(frozen=True)
class Violation(Problem):
    """A values key that breaks a rule of the policy (`rule` is its name, e.g. maxGpus.perPod)."""

    rule: str = ""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


@dataclass
class PolicyFileInvalid(ValidationFailed):
    """The policy file itself is unreadable or breaks the policy schema; every problem is listed."""

    policy_file: str = ""

    def __post_init__(self) -> None:
        TfchartError.__init__(self, f"{_plural(len(self.problems), 'problem')} in policy file {self.policy_file}")


@dataclass
class PolicyViolations(ValidationFailed):
    """Valid values that break the policy; every violation is listed."""

    policy_file: str = ""

    def __post_init__(self) -> None:
        count = len(self.problems)
        TfchartError.__init__(self, f"{_plural(count, 'policy violation')} (policy {self.policy_file})")


# -- the policy file ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """A policy file that passed its schema."""

    file: str
    rules: dict[str, Any]

    @property
    def names(self) -> list[str]:
        """The rules it sets, e.g. maxGpus.perPod."""
        return [f"{group}.{name}" for group, body in self.rules.items() for name in body]


@cache
def policy_schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded


def rule_names() -> list[str]:
    """Every rule the schema knows, e.g. maxGpus.perPod (the corpus has one fixture pair per rule)."""
    groups = policy_schema()["properties"]["rules"]["properties"]
    return [f"{group}.{name}" for group, body in groups.items() for name in body["properties"]]


def load(path: Path) -> Policy:
    """The policy file at `path`, checked against the policy schema (PolicyFileInvalid lists every problem)."""
    name = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"policy file not found: {name}", "check the path given to --policy") from None
    except OSError as error:
        raise UsageError(
            f"cannot read policy file {name}: {error.strerror}", "check the path given to --policy"
        ) from None
    try:
        loaded = load_bytes(data, name, lambda: 3)
    except ValuesFileError as error:
        problem = error.problem
        message = problem.message.replace("a values file must be", "a policy file must be")
        located = Problem(problem.path, message, problem.value, problem.fix, name, problem.line)
        raise PolicyFileInvalid([located], name) from None
    if loaded.data is None:
        empty = Problem("(root)", "the policy file is empty", None, f"start it with apiVersion: {API_VERSION}", name, 1)
        raise PolicyFileInvalid([empty], name)
    problems = schema_problems(loaded.data, loaded.documents, name)
    if problems:
        raise PolicyFileInvalid(problems, name)
    return Policy(name, loaded.data.get("rules") or {})


def schema_problems(document: dict[str, Any], roots: list[Node], name: str) -> list[Problem]:
    """Every way `document` breaks the policy schema, with its line in the policy file."""
    from jsonschema import Draft202012Validator

    found: list[Problem] = []
    errors = Draft202012Validator(policy_schema()).iter_errors(document)
    for error in sorted(errors, key=lambda e: list(map(str, e.path))):
        where = tuple(str(part) for part in error.path)
        found += _explain(error, where, name, roots)
    storage = document.get("rules", {}).get("storage") if isinstance(document.get("rules"), dict) else None
    size = storage.get("maxClaimSize") if isinstance(storage, dict) else None
    if isinstance(size, (str, int)) and not isinstance(size, bool) and quantity_nanos(size) is None:
        where = ("rules", "storage", "maxClaimSize")
        found.append(Problem(_dotted(where), f"{size!r} is not a Kubernetes quantity", size,
                             "write a size such as 500Gi, 2Ti or 100G", name, _line(roots, where)))  # fmt: skip
    return found


def _explain(error: Any, where: Path_, name: str, roots: list[Node]) -> list[Problem]:
    schema, instance = error.schema, error.instance
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = sorted(schema.get("properties", {}))
        kind = schema.get("x-key-kind", "key")
        out = []
        for key in (key for key in instance if key not in known):
            close = difflib.get_close_matches(key, known, n=1)
            fix = f"did you mean {close[0]}?" if close else f"use one of: {', '.join(known)}"
            out.append(Problem(_dotted((*where, key)), f"unknown {kind} {key!r} (valid: {', '.join(known)})", None,
                               fix, name, _line(roots, (*where, key))))  # fmt: skip
        return out
    if error.validator == "required":
        missing = [key for key in error.validator_value if key not in instance]
        examples = {"apiVersion": f"apiVersion: {API_VERSION}", "rules": "rules: {maxGpus: {perPod: 1}}"}
        fix = "; ".join(f"add {examples.get(key, key)}" for key in missing)
        return [Problem(_dotted(where), f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required",
                        None, fix, name, _line(roots, where))]  # fmt: skip
    if error.validator == "const":
        fix = f"apiVersion: {API_VERSION}"
        return [Problem(_dotted(where), f"must be {error.validator_value!r}, not {instance!r}", instance, fix, name,
                        _line(roots, where))]  # fmt: skip
    if error.validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, str) else " or ".join(error.validator_value)
        message = f"must be {wanted}, not {_type_name(instance)} {instance!r}"
        return [Problem(_dotted(where), message, instance, "", name, _line(roots, where))]
    return [Problem(_dotted(where), error.message, instance, "", name, _line(roots, where))]


def _type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _line(roots: list[Node], where: Path_) -> int | None:
    for root in reversed(roots):
        line = line_in(root, where)
        if line is not None:
            return line
    return None


def _dotted(keys: Path_) -> str:
    """A key path as helm's --set writes it (dots inside a key escaped); (root) for none."""
    return ".".join(key.replace(".", "\\.") for key in keys) if keys else "(root)"


# -- what the release runs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One rendered pod template (or bare pod): its component, pods, spec and whether it is a helm hook."""

    component: str
    replicas: int
    spec: dict[str, Any]
    hook: bool

    @property
    def containers(self) -> list[dict[str, Any]]:
        return [*(self.spec.get("initContainers") or []), *(self.spec.get("containers") or [])]

    @property
    def gpus_per_pod(self) -> int:
        total = 0
        for container in self.spec.get("containers") or []:
            for resource, amount in ((container.get("resources") or {}).get("limits") or {}).items():
                if is_gpu_resource(resource):
                    total += int(str(amount))
        return total


def workloads(docs: list[dict[str, Any]]) -> list[Workload]:
    found = []
    for doc in docs:
        kind, spec, meta = doc.get("kind"), doc.get("spec") or {}, doc.get("metadata") or {}
        pod = spec if kind == "Pod" else (spec.get("template") or {}).get("spec")
        if not isinstance(pod, dict):
            continue
        replicas = 1 if kind == "Pod" else int(spec.get("parallelism", 1) if kind == "Job" else spec.get("replicas", 1))
        component = str((meta.get("labels") or {}).get(COMPONENT_LABEL, kind))
        found.append(Workload(component, replicas, pod, HOOK in (meta.get("annotations") or {})))
    return found


def running(docs: list[dict[str, Any]]) -> list[Workload]:
    """The release's own pods (not the helm test pod, which runs only on `helm test`), with replicas."""
    return [w for w in workloads(docs) if not w.hook and w.replicas > 0]


def claims(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc.get("spec") or {} for doc in docs if doc.get("kind") == "PersistentVolumeClaim"]


# -- the checks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a check reads: the rule's settings, the effective values, where each was set, the render."""

    rule: dict[str, Any]
    values: dict[str, Any]
    located: Values | None
    docs: list[dict[str, Any]]

    def get(self, *keys: str) -> Any:
        node: Any = self.values
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def violation(self, rule: str, keys: Path_, message: str, value: Any, fix: str) -> Violation:
        file, line = "", None
        if self.located is not None:
            origin = self.located.origin(keys)
            if origin is None and len(keys) > 1:  # an unset key: the file line of the block it belongs in
                parent = self.located.origin(keys[:-1])
                origin = parent if parent is not None and parent.line is not None else None
            if origin is not None:
                file, line = origin.source, origin.line
        return Violation(_dotted(keys), message, value, fix, file, line, rule)


Check = Callable[[Context], Iterator[Violation]]
CHECKS: dict[str, Check] = {}


def check(group: str) -> Callable[[Check], Check]:
    def register(function: Check) -> Check:
        CHECKS[group] = function
        return function

    return register


def _set(keys: Path_, value: Any) -> str:
    return f"--set {_dotted(keys)}={value}"


@check("maxGpus")
def max_gpus(c: Context) -> Iterator[Violation]:
    pods = [w for w in running(c.docs) if w.gpus_per_pod]
    per_pod = c.rule.get("perPod")
    roles: dict[str, int] = {}
    for w in pods:
        roles[w.component] = roles.get(w.component, 0) + w.replicas * w.gpus_per_pod
        if per_pod is not None and w.gpus_per_pod > per_pod:
            message = f"{_plural(w.gpus_per_pod, 'GPU')} per {w.component} pod, more than the {per_pod} allowed"
            keys = (w.component, "gpu", "count")
            yield c.violation("maxGpus.perPod", keys, message, w.gpus_per_pod, _set(keys, per_pod))
    for role, limit in (c.rule.get("perRole") or {}).items():
        asked = roles.get(role, 0)
        if asked > limit:
            w = next(w for w in pods if w.component == role)
            fits = max(limit // w.gpus_per_pod, 0)
            fix = f"{_set((role, 'replicas'), fits)} or {_set((role, 'gpu', 'count'), max(limit // w.replicas, 0))}"
            message = (f"{role}: {w.replicas} pods x {w.gpus_per_pod} GPUs = {asked} GPUs, more than the {limit} "
                       "allowed for the role")  # fmt: skip
            yield c.violation("maxGpus.perRole", (role, "gpu", "count"), message, asked, fix)
    limit = c.rule.get("perRelease")
    total = sum(roles.values())
    if limit is not None and total > limit:
        biggest = max(roles, key=lambda role: roles[role])
        shares = ", ".join(f"{role} {count}" for role, count in roles.items())
        yield c.violation("maxGpus.perRelease", (biggest, "gpu", "count"),
                          f"the release requests {total} GPUs ({shares}), more than the {limit} allowed per release",
                          total, f"lower replicas or gpu.count by {total - limit} GPUs, e.g. on {biggest}")  # fmt: skip


def image_block(component: str) -> str:
    return PROJECT_IMAGE_ROLES.get(component, component)


def registry_key(c: Context, component: str) -> Path_:
    """The values key that decides the registry of a component's image (see _images.tpl)."""
    if c.get("global", "imageRegistry"):
        return ("global", "imageRegistry")
    block = image_block(component)
    return (block, "image", "registry") if c.get(block, "image", "registry") else ("image", "registry")


def digest_key(c: Context, component: str) -> Path_:
    """The values key of a component's digest: its own, or image.digest it inherits with image.repository."""
    block = image_block(component)
    if c.get(block, "image", "digest") or c.get(block, "image", "repository"):
        return (block, "image", "digest")
    return ("image", "digest")


def full_name(image: str) -> str:
    """The image with its registry: docker.io when it names none (a first part without . or : or localhost)."""
    first = image.split("/", 1)[0]
    has_registry = "/" in image and ("." in first or ":" in first or first == "localhost")
    return image if has_registry else f"docker.io/{image}"


def allowed_image(image: str, registries: list[str]) -> bool:
    name = full_name(image)
    return any(name.startswith(registry.rstrip("/") + "/") for registry in registries)


@check("images")
def images(c: Context) -> Iterator[Violation]:
    by_key: dict[tuple[str, Path_], dict[str, list[str]]] = {}
    registries, digest = c.rule.get("allowedRegistries"), c.rule.get("requireDigest")
    for w in workloads(c.docs):
        for container in w.containers:
            image = str(container.get("image", ""))
            broken = []
            if registries is not None and not allowed_image(image, registries):
                broken.append(("images.allowedRegistries", registry_key(c, w.component)))
            if digest and "@" not in image:
                broken.append(("images.requireDigest", digest_key(c, w.component)))
            for rule, keys in broken:
                users = by_key.setdefault((rule, keys), {}).setdefault(image, [])
                if w.component not in users:
                    users.append(w.component)
    for (rule, keys), pulled in by_key.items():
        shown = "; ".join(f"{image} ({', '.join(users)})" for image, users in pulled.items())
        if rule == "images.allowedRegistries":
            allowed = ", ".join(registries or [])
            message = f"pulls {shown}, not from an allowed registry ({allowed})"
            fix = f"mirror it (tfchart images lists them) and {_set(keys, (registries or [''])[0].rstrip('/'))}"
        else:
            message = f"pulls {shown} by tag: the policy requires a digest"
            fix = f"{_set(keys, 'sha256:<digest>')} (crane digest {next(iter(pulled))})"
        yield c.violation(rule, keys, message, c.get(*keys), fix)


@check("priorityClass")
def priority_class(c: Context) -> Iterator[Violation]:
    allowed = c.rule.get("allowed")
    seen: set[str] = set()
    for w in running(c.docs):
        if w.component in seen:
            continue
        seen.add(w.component)
        keys, name = (w.component, "priorityClassName"), str(w.spec.get("priorityClassName") or "")
        suggestion = allowed[0] if allowed else "<priority class>"
        if not name and c.rule.get("required"):
            yield c.violation("priorityClass.required", keys, f"the {w.component} pods name no PriorityClass",
                              name, _set(keys, suggestion))  # fmt: skip
        elif name and allowed is not None and name not in allowed:
            yield c.violation("priorityClass.allowed", keys, f"PriorityClass {name!r} is not allowed "
                              f"(allowed: {', '.join(allowed)})", name, _set(keys, suggestion))  # fmt: skip


@check("queue")
def queue(c: Context) -> Iterator[Violation]:
    allowed = c.rule.get("allowed")
    kueue = ("scheduling", "kueue", "queueName")
    queues = [(kueue, str(c.get(*kueue) or ""))]
    if c.get("scheduling", "gang", "provider") == "volcano":
        queues.append((("scheduling", "gang", "volcanoQueue"), str(c.get("scheduling", "gang", "volcanoQueue") or "")))
    suggestion = allowed[0] if allowed else "<queue>"
    if c.rule.get("required") and not any(name for _, name in queues):
        yield c.violation("queue.required", kueue, "the training goes through no queue (Kueue LocalQueue or "
                          "Volcano Queue)", "", _set(kueue, suggestion))  # fmt: skip
    for keys, name in queues:
        if name and allowed is not None and name not in allowed:
            yield c.violation("queue.allowed", keys, f"queue {name!r} is not allowed (allowed: {', '.join(allowed)})",
                              name, _set(keys, suggestion))  # fmt: skip


@check("networkPolicy")
def network_policy(c: Context) -> Iterator[Violation]:
    keys = ("networkPolicy", "enabled")
    if c.rule.get("required") and c.get(*keys) is not True:
        yield c.violation("networkPolicy.required", keys, "the release's NetworkPolicies are off: TensorFlow's gRPC "
                          "ports would be open to every pod", c.get(*keys), _set(keys, "true"))  # fmt: skip


@check("downloads")
def downloads(c: Context) -> Iterator[Violation]:
    keys = ("training", "download")
    if c.rule.get("allowed") is False and c.get(*keys) is True:
        yield c.violation("downloads.allowed", keys, "the chief would download the dataset from the internet",
                          True, f"{_set(keys, 'false')} (and put the dataset in training.dataDir)")  # fmt: skip


@check("storage")
def storage(c: Context) -> Iterator[Violation]:
    allowed, limit = c.rule.get("allowedStorageClasses"), c.rule.get("maxClaimSize")
    for claim in claims(c.docs):
        if allowed is not None:
            keys, name = ("storage", "storageClassName"), claim.get("storageClassName")
            if name is None:
                message = f"the claim takes the cluster's default StorageClass (allowed: {', '.join(allowed)})"
                yield c.violation("storage.allowedStorageClasses", keys, message, None, _set(keys, allowed[0]))
            elif name not in allowed:
                yield c.violation("storage.allowedStorageClasses", keys, f"StorageClass {name!r} is not allowed "
                                  f"(allowed: {', '.join(allowed)})", name, _set(keys, allowed[0]))  # fmt: skip
        size = ((claim.get("resources") or {}).get("requests") or {}).get("storage")
        if limit is not None and size is not None and (quantity_nanos(size) or 0) > (quantity_nanos(limit) or 0):
            yield c.violation("storage.maxClaimSize", ("storage", "size"), f"a claim of {shown_quantity(size)}, "
                              f"more than the {shown_quantity(limit)} allowed", size,
                              _set(("storage", "size"), shown_quantity(limit)))  # fmt: skip


def tolerated(toleration: dict[str, Any], pattern: dict[str, Any]) -> bool:
    defaults = {"operator": "Equal"}
    return all(toleration.get(field, defaults.get(field)) == want for field, want in pattern.items())


@check("placement")
def placement(c: Context) -> Iterator[Violation]:
    selectors: dict[str, list[str]] = c.rule.get("allowedNodeSelectors") or {}
    patterns: list[dict[str, Any]] = c.rule.get("allowedTolerations") or []
    seen: set[str] = set()
    for w in running(c.docs):
        if w.component in seen:
            continue
        seen.add(w.component)
        if "allowedNodeSelectors" in c.rule:
            yield from node_selectors(c, w, selectors)
        if "allowedTolerations" in c.rule:
            yield from tolerations(c, w, patterns)


def node_selectors(c: Context, w: Workload, selectors: dict[str, list[str]]) -> Iterator[Violation]:
    for label, value in (w.spec.get("nodeSelector") or {}).items():
        keys, values = (w.component, "nodeSelector", label), selectors.get(label)
        if values is None:
            message = f"node label {label!r} may not be selected (allowed labels: {', '.join(selectors) or 'none'})"
            yield c.violation("placement.allowedNodeSelectors", keys, message, value, _set(keys, "null"))
        elif str(value) not in values:
            message = f"{label}={value} is not allowed (allowed: {', '.join(values)})"
            yield c.violation("placement.allowedNodeSelectors", keys, message, value, _set(keys, values[0]))


def tolerations(c: Context, w: Workload, patterns: list[dict[str, Any]]) -> Iterator[Violation]:
    for index, toleration in enumerate(w.spec.get("tolerations") or []):
        if not any(tolerated(toleration, pattern) for pattern in patterns):
            keys = (w.component, "tolerations", str(index))
            shown = json.dumps(patterns, separators=(",", ":")) if patterns else "none: remove it"
            message = f"toleration {json.dumps(toleration)} matches no allowed toleration"
            yield c.violation("placement.allowedTolerations", keys, message, toleration, f"allowed: {shown}")


def check_values(
    policy: Policy, values: dict[str, Any], located: Values | None, docs: list[dict[str, Any]]
) -> list[Violation]:
    """Every violation of `policy` by the values (and their render `docs`), in the policy's rule order."""
    found: list[Violation] = []
    for group, rule in policy.rules.items():
        found += CHECKS[group](Context(rule, values, located, docs))
    return found
