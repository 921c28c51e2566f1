"""Policy-checked values: a platform team's rules (`--policy FILE` of validate, install and upgrade). The policy
file has its own schema (policy.schema.json, every map closed): a typo, a wrong type or a bad quantity is an
error at its line. The rules are checked on the effective values and their render (which pods exist, how many,
their GPUs, images, placement and claims); every violation names the values key a user edits, where it was set
(file:line, the --set argument, or the chart default), the rule, what is wrong and the fix.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

import yaml

from tfchart.errors import Problem, TfchartError, UsageError, ValidationFailed
from tfchart.manifests.images import parse_reference
from tfchart.manifests.quantity import parse_or_none
from tfchart.manifests.workloads import ACCELERATORS, Workload, is_gpu_resource, running, workloads
from tfchart.values.origins import Loader, Origins, compose, walk
from tfdcontract import COMPONENT_LABEL, HELM_TEST, SUPERVISOR

Path_ = tuple[str, ...]

API_VERSION = "tf-distributed.io/policy/v1"
SCHEMA_PATH = Path(__file__).with_name("policy.schema.json")
PROJECT_IMAGE_ROLES = {SUPERVISOR: SUPERVISOR, HELM_TEST: SUPERVISOR}  # whose image block a pod runs
VOLCANO_DEFAULT_QUEUE = "default"  # where Volcano puts a PodGroup that names no queue


@dataclass(frozen=True)
class Violation(Problem):
    """A values key that breaks a rule of the policy (`rule` is its name, e.g. maxGpus.perPod)."""

    rule: str = ""


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


@dataclass
class PolicyFileInvalid(ValidationFailed):
    """The policy file itself is unreadable or breaks the policy schema; every problem is listed."""

    policy_file: str = ""

    def __post_init__(self) -> None:
        TfchartError.__init__(self, f"{plural(len(self.problems), 'problem')} in policy file {self.policy_file}")


@dataclass
class PolicyViolations(ValidationFailed):
    """Values that break the policy; every violation is listed."""

    policy_file: str = ""

    def __post_init__(self) -> None:
        TfchartError.__init__(self, f"{plural(len(self.problems), 'policy violation')} (policy {self.policy_file})")


# -- the policy file ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """A policy file that passed its schema."""

    file: str
    rules: dict[str, Any]

    @property
    def names(self) -> list[str]:
        """The rules it sets, e.g. maxGpus.perPod (not the settings they share, e.g. maxGpus.resources)."""
        groups = policy_schema()["properties"]["rules"]["properties"]
        return [f"{group}.{name}" for group, body in self.rules.items() for name in body
                if not groups[group]["properties"][name].get("x-setting")]  # fmt: skip


@cache
def policy_schema() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(SCHEMA_PATH.read_text()))


def load(path: Path) -> Policy:
    """The policy file at `path`, checked against the policy schema (PolicyFileInvalid lists every problem)."""
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
        problem = Problem("(root)", why, None, "fix the YAML", name, mark.line + 1 if mark else None)
        raise PolicyFileInvalid([problem], policy_file=name) from None
    if not isinstance(document, dict):
        why = "the policy file is empty" if document is None else "a policy file must be a map of keys"
        problem = Problem("(root)", why, None, f"start it with apiVersion: {API_VERSION}", name, 1)
        raise PolicyFileInvalid([problem], policy_file=name)
    if problems := schema_problems(document, compose(data), name):
        raise PolicyFileInvalid(problems, policy_file=name)
    return Policy(name, document.get("rules") or {})


def schema_problems(document: dict[str, Any], roots: list[yaml.Node], name: str) -> list[Problem]:
    """Every way `document` breaks the policy schema, with its line in the policy file."""
    from jsonschema import Draft202012Validator

    errors = Draft202012Validator(policy_schema()).iter_errors(document)
    found = [problem for error in sorted(errors, key=lambda e: list(map(str, e.path)))
             for problem in _explain(error, tuple(map(str, error.path)), name, roots)]  # fmt: skip
    storage = document.get("rules", {}).get("storage") if isinstance(document.get("rules"), dict) else None
    size = storage.get("maxClaimSize") if isinstance(storage, dict) else None
    if isinstance(size, (str, int)) and not isinstance(size, bool) and parse_or_none(size) is None:
        where = ("rules", "storage", "maxClaimSize")
        found.append(Problem(_dotted(where), f"{size!r} is not a Kubernetes quantity", size,
                             "write a size such as 500Gi, 2Ti or 100G", name, _line(roots, where)))  # fmt: skip
    return found


def _explain(error: Any, where: Path_, name: str, roots: list[yaml.Node]) -> list[Problem]:
    schema, instance, expected = error.schema, error.instance, error.validator_value
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = sorted(schema.get("properties", {}))
        found = []
        for key in (key for key in instance if key not in known):
            close = difflib.get_close_matches(key, known, n=1)
            message = f"unknown {schema.get('x-key-kind', 'key')} {key!r} (valid: {', '.join(known)})"
            fix = f"did you mean {close[0]}?" if close else f"use one of: {', '.join(known)}"
            found.append(Problem(_dotted((*where, key)), message, None, fix, name, _line(roots, (*where, key))))
        return found
    value, fix = instance, ""
    if error.validator == "required":
        missing = [key for key in expected if key not in instance]
        examples = {"apiVersion": f"apiVersion: {API_VERSION}", "rules": "rules: {maxGpus: {perPod: 1}}"}
        message, value = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required", None
        fix = "; ".join(f"add {examples.get(key, key)}" for key in missing)
    elif error.validator == "const":
        message, fix = f"must be {expected!r}, not {instance!r}", f"apiVersion: {API_VERSION}"
    elif error.validator == "type":
        wanted = expected if isinstance(expected, str) else " or ".join(expected)
        message = f"must be {wanted}, not {_type_name(instance)} {instance!r}"
    else:
        message = error.message
    return [Problem(_dotted(where), message, value, fix, name, _line(roots, where))]


def _type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _line(roots: list[yaml.Node], where: Path_) -> int | None:
    for root in reversed(roots):
        node, key, rest, _ = walk(root, ".".join(where))
        if not rest:
            return (key or node).start_mark.line + 1
    return None


def _dotted(keys: Path_) -> str:
    """A key path as helm's --set writes it (dots inside a key escaped); (root) for none."""
    return ".".join(key.replace(".", "\\.") for key in keys) if keys else "(root)"


# -- what the release runs --------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuLimit:
    """One GPU limit of a rendered container: the resource, the amount as rendered, and the amount in
    whole GPUs (None when it is not a whole number, e.g. 500m, which Kubernetes refuses)."""

    resource: str
    amount: Any
    gpus: int | None


def gpu_limits(w: Workload, accelerators: Sequence[str]) -> list[GpuLimit]:
    """The GPU (accelerator) limits of the pod's containers, quantities parsed (1k = 1000 GPUs)."""
    found = []
    for container in w.spec.get("containers") or []:  # what the pod holds while it runs
        for resource, amount in ((container.get("resources") or {}).get("limits") or {}).items():
            if is_gpu_resource(str(resource), accelerators):
                parsed = parse_or_none(amount)
                whole = int(parsed) if parsed is not None and parsed == parsed.to_integral_value() else None
                found.append(GpuLimit(str(resource), amount, whole))
    return found


def gpus_per_pod(w: Workload, accelerators: Sequence[str]) -> int:
    """Whole GPUs per pod (a limit that is not a whole number counts 0: maxGpus reports it)."""
    return sum(limit.gpus or 0 for limit in gpu_limits(w, accelerators))


# -- the checks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a check reads: the rule's settings, the effective values, where each was set, the render."""

    rule: dict[str, Any]
    values: dict[str, Any]
    origins: Origins | None
    docs: list[dict[str, Any]]

    @property
    def accelerators(self) -> tuple[str, ...]:
        """The extended resources maxGpus counts: the rule's `resources`, else the well-known vendors'."""
        return tuple(self.rule.get("resources") or ACCELERATORS)

    def get(self, *keys: str) -> Any:
        node: Any = self.values
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def violation(self, rule: str, keys: Path_, message: str, value: Any, fix: str) -> Violation:
        origin = self.origins.nearest(".".join(keys)) if self.origins is not None else None
        file, line = (origin.source, origin.line) if origin else ("", None)  # an unset key: its block's line
        return Violation(_dotted(keys), message, value, fix, file, line, rule)


def _set(keys: Path_, value: Any) -> str:
    return f"--set {_dotted(keys)}={value}"


def gpu_key(c: Context, w: Workload, resource: str) -> Path_:
    """The values key a GPU limit came from: <role>.gpu.count when the chart set it from there (a
    count above 0 on gpu.resourceName), else <role>.resources.limits.<resource> (see _podspec.tpl)."""
    count = c.get(w.component, "gpu", "count")
    if resource == c.get(w.component, "gpu", "resourceName") and isinstance(count, int) and count > 0:
        return (w.component, "gpu", "count")
    return (w.component, "resources", "limits", resource)


def gpu_sources(c: Context, w: Workload) -> dict[Path_, int]:
    """Whole GPUs per pod by the values key that asked for them, most first."""
    sources: dict[Path_, int] = {}
    for limit in gpu_limits(w, c.accelerators):
        if limit.gpus:
            keys = gpu_key(c, w, limit.resource)
            sources[keys] = sources.get(keys, 0) + limit.gpus
    return dict(sorted(sources.items(), key=lambda item: -item[1]))


def _lowered(c: Context, w: Workload, per_pod: int) -> tuple[Path_, str, str]:
    """The key giving a pod most GPUs, how the message shows it, and the --set that brings the pod to per_pod."""
    keys, gpus = next(iter(gpu_sources(c, w).items()))
    shown = "" if keys[-2:] == ("gpu", "count") else f" ({keys[-1]}: {c.get(*keys)})"
    return keys, shown, _set(keys, max(gpus - (gpus_per_pod(w, c.accelerators) - per_pod), 0))


def max_gpus(c: Context) -> Iterator[Violation]:
    per_pod = c.rule.get("perPod")
    first = next((f"maxGpus.{name}" for name in ("perPod", "perRole", "perRelease") if name in c.rule), None)
    pods: dict[str, tuple[Workload, int]] = {}  # by name: the workload and its GPUs per pod
    unclear: set[Path_] = set()
    for w in running(c.docs):
        for gpu in gpu_limits(w, c.accelerators):
            keys = gpu_key(c, w, gpu.resource)
            if gpu.gpus is None and first is not None and keys not in unclear:
                unclear.add(keys)
                parsed = parse_or_none(gpu.amount)
                whole = max(math.ceil(parsed), 1) if parsed is not None else 1
                whole = min(whole, per_pod) if per_pod is not None else whole
                what = "not a whole number of GPUs" if parsed is not None else "not a Kubernetes quantity"
                message = (f"{gpu.resource}: {gpu.amount} per {w.component} pod is {what}: Kubernetes accepts GPUs "
                           "(extended resources) only as integers, so they cannot be counted")  # fmt: skip
                yield c.violation(first, keys, message, gpu.amount, _set(keys, whole))
        if each := gpus_per_pod(w, c.accelerators):
            pods[w.name] = (w, each)
    roles: dict[str, int] = {}
    for w, each in pods.values():
        roles[w.component] = roles.get(w.component, 0) + w.replicas * each
        if per_pod is not None and each > per_pod:
            keys, shown, fix = _lowered(c, w, per_pod)
            message = f"{plural(each, 'GPU')} per {w.component} pod{shown}, more than the {per_pod} allowed"
            yield c.violation("maxGpus.perPod", keys, message, each, fix)
    for role, limit in (c.rule.get("perRole") or {}).items():
        asked = roles.get(role, 0)
        if asked > limit:
            w, each = next((w, each) for w, each in pods.values() if w.component == role)
            keys, shown, fewer = _lowered(c, w, max(limit // w.replicas, 0))
            fix = f"{_set((role, 'replicas'), max(limit // each, 0))} or {fewer}"
            message = (f"{role}: {w.replicas} pods x {each} GPUs{shown} = {asked} GPUs, more than the "
                       f"{limit} allowed for the role")  # fmt: skip
            yield c.violation("maxGpus.perRole", keys, message, asked, fix)
    limit = c.rule.get("perRelease")
    total = sum(roles.values())
    if limit is not None and total > limit:
        biggest = max(roles, key=lambda role: roles[role])
        keys = next(iter(gpu_sources(c, next(w for w, _ in pods.values() if w.component == biggest))))
        shares = ", ".join(f"{role} {count}" for role, count in roles.items())
        yield c.violation("maxGpus.perRelease", keys,
                          f"the release requests {total} GPUs ({shares}), more than the {limit} allowed per release",
                          total, f"lower replicas or GPUs per pod by {total - limit} GPUs in all, e.g. "
                          f"{_dotted((biggest, 'replicas'))} or {_dotted(keys)}")  # fmt: skip


def image_key(c: Context, component: str, field: str, volume: str | None = None) -> Path_:
    """The values key that decides the registry, repository or digest of a component's image (see
    _images.tpl): global.imageRegistry first for a registry; else the role's own image block where it
    sets the field (or, for a digest, its own repository); else image.<field>, which it inherits. An
    image volume's is its reference in <role>.extraVolumes."""
    if volume is not None:
        extra = c.get(component, "extraVolumes")
        names = [v.get("name") for v in extra if isinstance(v, dict)] if isinstance(extra, list) else []
        return (component, "extraVolumes", str(names.index(volume)), "image", "reference") if volume in names \
            else (component, "extraVolumes")
    if field == "registry" and c.get("global", "imageRegistry"):
        return ("global", "imageRegistry")
    block = PROJECT_IMAGE_ROLES.get(component, component)
    own = c.get(block, "image", field) or (field == "digest" and c.get(block, "image", "repository"))
    return (block, "image", field) if own else ("image", field)


def registry_fix(keys: Path_, registry: str) -> str:
    """The --set that moves the images to an allowed registry host; for an entry with a path (ghcr.io/team), words:
    the registry values take a host only, and where a copy lives under the path is no repository to guess."""
    host, _, prefix = registry.rstrip("/").partition("/")
    if prefix:
        return (f"mirror it (tfchart images lists them) under {host}/{prefix}/, then set {_dotted(keys)} to {host} "
                "and the image's repository to the copy's path there")  # fmt: skip
    return f"mirror it (tfchart images lists them) and {_set(keys, host)}"


def allowed_image(image: str, registries: list[str]) -> bool:
    """Under one of the registry prefixes; an image that names no registry is docker.io's."""
    reference = parse_reference(image)
    name = f"{reference.registry or 'docker.io'}/{reference.repository}"
    return any(name.startswith(registry.rstrip("/") + "/") for registry in registries)


def images(c: Context) -> Iterator[Violation]:
    by_key: dict[tuple[str, Path_], dict[str, list[str]]] = {}
    registries, digest = c.rule.get("allowedRegistries"), c.rule.get("requireDigest")
    for w in workloads(c.docs):
        for image, volume in w.images:
            broken = []
            if registries is not None and not allowed_image(image, registries):
                broken.append(("images.allowedRegistries", image_key(c, w.component, "registry", volume)))
            if digest and not parse_reference(image).digest:
                broken.append(("images.requireDigest", image_key(c, w.component, "digest", volume)))
            for rule, keys in broken:
                users = by_key.setdefault((rule, keys), {}).setdefault(image, [])
                if w.component not in users:
                    users.append(w.component)
    for (rule, keys), pulled in by_key.items():
        shown = "; ".join(f"{image} ({', '.join(users)})" for image, users in pulled.items())
        if rule == "images.allowedRegistries":
            message = f"pulls {shown}, not from an allowed registry ({', '.join(registries or [])})"
            fix = registry_fix(keys, (registries or [""])[0]) if "extraVolumes" not in keys else \
                f"mirror it (tfchart images lists them) and set {_dotted(keys)} to its reference there"
        else:
            message = f"pulls {shown} by tag: the policy requires a digest"
            fix = f"{_set(keys, 'sha256:<digest>')} (crane digest {next(iter(pulled))})" if "extraVolumes" not in keys \
                else f"set {_dotted(keys)} to {next(iter(pulled))}@sha256:<digest> (crane digest {next(iter(pulled))})"
        yield c.violation(rule, keys, message, c.get(*keys), fix)


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


def queue(c: Context) -> Iterator[Violation]:
    """queue.required: the values name a queue (a Kueue LocalQueue, or a Volcano Queue under
    scheduling.gang.provider=volcano); Volcano's implicit default queue is not one the values name.
    queue.allowed: every queue the pods go through is listed, Volcano's `default` included when
    the provider is volcano and scheduling.gang.volcanoQueue is empty."""
    allowed = c.rule.get("allowed")
    kueue, volcano = ("scheduling", "kueue", "queueName"), ("scheduling", "gang", "volcanoQueue")
    queues = [(kueue, str(c.get(*kueue) or ""), "")]
    if c.get("scheduling", "gang", "provider") == "volcano":
        named = str(c.get(*volcano) or "")
        queues.append((volcano, named or VOLCANO_DEFAULT_QUEUE, "" if named else " (Volcano's default queue: "
                       f"{_dotted(volcano)} is empty)"))  # fmt: skip
    suggestion = allowed[0] if allowed else "<queue>"
    if c.rule.get("required") and not any(c.get(*keys) for keys, _, _ in queues):
        keys = queues[-1][0]
        yield c.violation("queue.required", keys, "the training goes through no queue the values name (Kueue "
                          "LocalQueue or Volcano Queue)", "", _set(keys, suggestion))  # fmt: skip
    for keys, name, why in queues:
        if name and allowed is not None and name not in allowed:
            yield c.violation("queue.allowed", keys, f"queue {name!r}{why} is not allowed (allowed: "
                              f"{', '.join(allowed)})", c.get(*keys), _set(keys, suggestion))  # fmt: skip


def network_policy(c: Context) -> Iterator[Violation]:
    keys = ("networkPolicy", "enabled")
    if c.rule.get("required") and c.get(*keys) is not True:
        yield c.violation("networkPolicy.required", keys, "the release's NetworkPolicies are off: TensorFlow's gRPC "
                          "ports would be open to every pod", c.get(*keys), _set(keys, "true"))  # fmt: skip


def downloads(c: Context) -> Iterator[Violation]:
    """training.download, or the trainer's --download flag given another way (training.extraArgs, <role>.args)."""
    keys = ("training", "download")
    if c.rule.get("allowed") is not False:
        return
    if c.get(*keys) is True:
        yield c.violation("downloads.allowed", keys, "the chief would download the dataset from the internet",
                          True, f"{_set(keys, 'false')} (and put the dataset in training.dataDir)")  # fmt: skip
        return
    seen: set[Path_] = set()
    for w in running(c.docs):
        for container in w.containers:
            argv = [str(arg) for arg in [*(container.get("command") or []), *(container.get("args") or [])]]
            flag = next((arg for arg in argv if arg == "--download" or arg.startswith("--download=")), None)
            given = next((keys for keys in (("training", "extraArgs"), (w.component, "args"), (w.component, "command"))
                          if flag in [str(arg) for arg in c.get(*keys) or []]), (w.component,))  # fmt: skip
            if flag is not None and given not in seen:
                seen.add(given)
                who = "every TensorFlow pod is" if given == ("training", "extraArgs") else f"the {w.component} pods are"
                yield c.violation("downloads.allowed", given, f"{who} given {flag}: the trainer would download the "
                                  "dataset from the internet", flag,
                                  f"remove {flag} from {_dotted(given)} (and put the dataset in training.dataDir)")


@dataclass(frozen=True)
class Claim:
    """A PersistentVolumeClaim the release makes: its spec, what it is, the values key that writes it,
    and where its StorageClass and size are written (values keys as --set writes them, list indexes
    in brackets, when `settable`; else the rendered field, in words)."""

    spec: dict[str, Any]
    what: str
    keys: Path_
    class_key: str
    size_key: str
    settable: bool = True

    def fix(self, key: str, value: str) -> str:
        return f"--set {key}={value}" if self.settable else f"set {key} to {value}"


def claims(c: Context) -> list[Claim]:
    """The claims the release makes: its PersistentVolumeClaims (storage.*), the ephemeral volumes of its
    pods (one claim per pod, from <role>.extraVolumes) and the volumeClaimTemplates of its StatefulSets."""
    found = [Claim(doc.get("spec") or {}, "the claim", ("storage",), "storage.storageClassName", "storage.size")
             for doc in c.docs if doc.get("kind") == "PersistentVolumeClaim"]  # fmt: skip
    seen: set[tuple[str, str]] = set()
    for w in running(c.docs):
        extra = c.get(w.component, "extraVolumes")
        written = [v.get("name") if isinstance(v, dict) else None for v in extra] if isinstance(extra, list) else []
        for volume in w.spec.get("volumes") or []:
            template = (volume.get("ephemeral") or {}).get("volumeClaimTemplate")
            name = str(volume.get("name", ""))
            if not isinstance(template, dict) or (w.component, name) in seen:
                continue
            seen.add((w.component, name))
            if name in written:
                keys: Path_ = (w.component, "extraVolumes", str(written.index(name)))
                base = f"{w.component}.extraVolumes[{written.index(name)}].ephemeral.volumeClaimTemplate.spec"
            else:
                keys, base = (w.component,), f"the {name} volume's ephemeral.volumeClaimTemplate.spec"
            what = f"the ephemeral volume {name!r} of the {w.component} pods (one claim per pod)"
            found.append(Claim(template.get("spec") or {}, what, keys, f"{base}.storageClassName",
                               f"{base}.resources.requests.storage", name in written))  # fmt: skip
    for doc in c.docs:
        if doc.get("kind") == "StatefulSet":
            component = str(((doc.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, "StatefulSet"))
            for index, template in enumerate((doc.get("spec") or {}).get("volumeClaimTemplates") or []):
                name = str((template.get("metadata") or {}).get("name", index))
                base = f"the {component} StatefulSet's volumeClaimTemplates[{index}].spec"
                found.append(Claim(template.get("spec") or {}, f"the claim template {name!r} of the {component} "
                                   "pods (one claim per pod)", (component,), f"{base}.storageClassName",
                                   f"{base}.resources.requests.storage", False))  # fmt: skip
    return found


def storage(c: Context) -> Iterator[Violation]:
    allowed, limit = c.rule.get("allowedStorageClasses"), c.rule.get("maxClaimSize")
    for claim in claims(c):
        pvc = claim.keys == ("storage",)
        if allowed is not None:
            keys = ("storage", "storageClassName") if pvc else claim.keys
            name, fix = claim.spec.get("storageClassName"), claim.fix(claim.class_key, allowed[0])
            if name is None:
                message = f"{claim.what} takes the cluster's default StorageClass (allowed: {', '.join(allowed)})"
                yield c.violation("storage.allowedStorageClasses", keys, message, None, fix)
            elif name not in allowed:
                yield c.violation("storage.allowedStorageClasses", keys, f"StorageClass {name!r} of {claim.what} "
                                  f"is not allowed (allowed: {', '.join(allowed)})", name, fix)  # fmt: skip
        size = ((claim.spec.get("resources") or {}).get("requests") or {}).get("storage")
        if limit is not None and size is not None and (parse_or_none(size) or 0) > (parse_or_none(limit) or 0):
            keys = ("storage", "size") if pvc else claim.keys
            yield c.violation("storage.maxClaimSize", keys, f"{claim.what} is {size}, more than the {limit} allowed",
                              size, claim.fix(claim.size_key, str(limit)))  # fmt: skip


def tolerated(toleration: dict[str, Any], pattern: dict[str, Any]) -> bool:
    defaults = {"operator": "Equal"}  # Kubernetes' default
    return all(toleration.get(field, defaults.get(field)) == want for field, want in pattern.items())


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
            yield from affinity_selectors(c, w, selectors)
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


def node_affinity(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every node selector requirement of a pod's nodeAffinity: (required|preferred, matchExpressions|
    matchFields, the requirement)."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    preferred = [weighted.get("preference") or {} for weighted in
                 affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []]  # fmt: skip
    for kind, terms in (("required", required), ("preferred", preferred)):
        for term in terms:
            for field in ("matchExpressions", "matchFields"):
                for requirement in term.get(field) or []:
                    yield kind, field, requirement


def affinity_selectors(c: Context, w: Workload, selectors: dict[str, list[str]]) -> Iterator[Violation]:
    """<role>.affinity may select nodes only as nodeSelector may: a requirement (required or preferred)
    on a listed label must be `In` with listed values only (NotIn, Exists, DoesNotExist, Gt and Lt do not
    pin the pods to allowed values); a requirement on a label (or node field) not listed is refused."""
    keys = (w.component, "affinity")
    for kind, field, requirement in node_affinity(w.spec):
        label, operator = str(requirement.get("key", "")), str(requirement.get("operator", ""))
        values = [str(value) for value in requirement.get("values") or []]
        written = f"{label} {operator}{' [' + ', '.join(values) + ']' if values else ''}"
        allowed = selectors.get(label) if field == "matchExpressions" else None
        refused = [value for value in values if value not in (allowed or [])]
        if allowed is None:
            what = "node label" if field == "matchExpressions" else "node field"
            message = (f"{kind} nodeAffinity {written}: {what} {label!r} may not be selected (allowed labels: "
                       f"{', '.join(selectors) or 'none'})")  # fmt: skip
            fix = f"remove that {field} requirement from {_dotted(keys)}"
        elif operator != "In":
            message = (f"{kind} nodeAffinity {written} does not pin the pods to an allowed {label} (allowed: "
                       f"{', '.join(allowed)}): only In with allowed values may select on it")  # fmt: skip
            fix = f"make it {label} In [{', '.join(allowed)}] in {_dotted(keys)}, or remove it"
        elif refused or not values:
            message = (f"{kind} nodeAffinity {written}: {', '.join(refused) or 'no value'} not allowed (allowed: "
                       f"{', '.join(allowed)})")  # fmt: skip
            fix = f"keep only allowed values ({', '.join(allowed)}) in that requirement of {_dotted(keys)}"
        else:
            continue
        yield c.violation("placement.allowedNodeSelectors", keys, message, requirement, fix)


def tolerations(c: Context, w: Workload, patterns: list[dict[str, Any]]) -> Iterator[Violation]:
    for index, toleration in enumerate(w.spec.get("tolerations") or []):
        if not any(tolerated(toleration, pattern) for pattern in patterns):
            keys = (w.component, "tolerations", str(index))
            shown = json.dumps(patterns, separators=(",", ":"))
            message = f"toleration {json.dumps(toleration)} matches no allowed toleration"
            where = _dotted(keys[:2])
            fix = (f"remove it from {where}, or write only allowed ones there: {shown}" if patterns
                   else f"remove it from {where}: the policy allows no toleration")
            yield c.violation("placement.allowedTolerations", keys, message, toleration, fix)


# each rule group of the policy schema, and its check
CHECKS: dict[str, Callable[[Context], Iterator[Violation]]] = {
    "maxGpus": max_gpus, "images": images, "priorityClass": priority_class, "queue": queue,
    "networkPolicy": network_policy, "downloads": downloads, "storage": storage, "placement": placement,
}  # fmt: skip


def check_values(policy: Policy, values: dict[str, Any], origins: Origins | None,
                 docs: list[dict[str, Any]]) -> list[Violation]:  # fmt: skip
    """Every violation of `policy` by the values (and their render `docs`), in the policy's rule order."""
    found: list[Violation] = []
    for group, rule in policy.rules.items():
        found += CHECKS[group](Context(rule, values, origins, docs))
    return found
