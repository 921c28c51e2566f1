"""The rules of a policy (policy.py reads the file), checked on the effective values and their render: which pods
exist, how many, their GPUs, images, placement and claims. Every violation names the values key a user edits,
where it was set (file:line, the --set argument, or the chart default), the rule, what is wrong and the fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tfchart.errors import Problem, plural
from tfchart.manifests.images import parse_reference
from tfchart.manifests.quantity import parse_or_none
from tfchart.manifests.workloads import ACCELERATORS, Workload, is_gpu_resource, workloads
from tfchart.values.origins import Origins
from tfdcontract import HELM_TEST, SUPERVISOR

Path_ = tuple[str, ...]


def dotted(keys: Path_) -> str:
    """A key path as helm's --set writes it (dots inside a key escaped); (root) for none."""
    return ".".join(key.replace(".", "\\.") for key in keys) if keys else "(root)"


def _set(keys: Path_, value: Any) -> str:
    return f"--set {dotted(keys)}={value}"


@dataclass(frozen=True)
class Context:
    """What a check reads: the rule's settings, the effective values, where each was set, the render and the
    pods it runs (each pod template walked once; one per component, as the chart renders them)."""

    rule: dict[str, Any]
    values: dict[str, Any]
    origins: Origins
    docs: list[dict[str, Any]]
    pods: list[Workload]

    def get(self, *keys: str) -> Any:
        node: Any = self.values
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def violation(self, rule: str, keys: Path_, message: str, value: Any, fix: str) -> Problem:
        origin = self.origins.nearest(".".join(keys))
        file, line = (origin.source, origin.line) if origin else ("", None)  # an unset key: its block's line
        return Problem(dotted(keys), message, value, fix, file, line, kind="policy", rule=rule)


def gpus(c: Context, w: Workload) -> tuple[dict[Path_, int], list[tuple[Path_, str, Any]]]:
    """Whole GPUs per pod of the pod's containers by the values key that asked for them, most first, quantities
    parsed (1k = 1000 GPUs); and the GPU limits that are no whole number (500m, which Kubernetes refuses). A key
    is <role>.gpu.count when the chart set the limit from there (a count on gpu.resourceName, see _podspec.tpl),
    else <role>.resources.limits.<resource>."""
    count, whole, broken = c.get(w.component, "gpu", "count"), dict[Path_, int](), []
    for container in w.spec.get("containers") or []:  # what the pod holds while it runs
        for resource, amount in ((container.get("resources") or {}).get("limits") or {}).items():
            if not is_gpu_resource(str(resource), tuple(c.rule.get("resources") or ACCELERATORS)):  # else vendors'
                continue
            from_count = resource == c.get(w.component, "gpu", "resourceName") and isinstance(count, int) and count > 0
            keys: Path_ = (w.component, "gpu", "count") if from_count else \
                (w.component, "resources", "limits", resource)
            if (parsed := parse_or_none(amount)) is not None and parsed == parsed.to_integral_value():
                whole[keys] = whole.get(keys, 0) + int(parsed)
            else:
                broken.append((keys, str(resource), amount))
    return {keys: n for keys, n in sorted(whole.items(), key=lambda item: -item[1]) if n}, broken


def max_gpus(c: Context) -> Iterator[Problem]:
    per_pod, limits = c.rule.get("perPod"), c.rule.get("perRole") or {}
    first = next((f"maxGpus.{name}" for name in ("perPod", "perRole", "perRelease") if name in c.rule), None)
    asked: list[tuple[Workload, dict[Path_, int], int]] = []
    unclear: set[Path_] = set()

    def lowered(sources: dict[Path_, int], each: int, to: int) -> tuple[Path_, str, str]:
        """The key giving a pod most GPUs, how the message shows it, and the --set that brings the pod to `to`."""
        keys, most = next(iter(sources.items()))
        shown = "" if keys[-2:] == ("gpu", "count") else f" ({keys[-1]}: {c.get(*keys)})"
        return keys, shown, _set(keys, max(most - (each - to), 0))

    for w in c.pods:
        sources, broken = gpus(c, w)
        for keys, resource, amount in broken:
            if first is not None and keys not in unclear:
                unclear.add(keys)
                parsed = parse_or_none(amount)
                whole = max(math.ceil(parsed), 1) if parsed is not None else 1
                what = "not a whole number of GPUs" if parsed is not None else "not a Kubernetes quantity"
                message = (f"{resource}: {amount} per {w.component} pod is {what}: Kubernetes accepts GPUs "
                           "(extended resources) only as integers, so they cannot be counted")  # fmt: skip
                fix = _set(keys, whole if per_pod is None else min(whole, per_pod))
                yield c.violation(first, keys, message, amount, fix)
        if each := sum(sources.values()):
            asked.append((w, sources, each))
    roles: dict[str, int] = {}
    for w, sources, each in asked:
        roles[w.component] = roles.get(w.component, 0) + w.replicas * each
        if per_pod is not None and each > per_pod:
            keys, shown, fix = lowered(sources, each, per_pod)
            message = f"{plural(each, 'GPU')} per {w.component} pod{shown}, more than the {per_pod} allowed"
            yield c.violation("maxGpus.perPod", keys, message, each, fix)
    for role, limit in limits.items():
        if (total := roles.get(role, 0)) > limit:
            w, sources, each = next(found for found in asked if found[0].component == role)
            keys, shown, fewer = lowered(sources, each, max(limit // w.replicas, 0))
            message = f"{role}: {w.replicas} pods x {each} GPUs{shown} = {total} GPUs, more than the {limit} allowed " \
                "for the role"
            yield c.violation("maxGpus.perRole", keys, message, total,
                              f"{_set((role, 'replicas'), max(limit // each, 0))} or {fewer}")  # fmt: skip
    if (limit := c.rule.get("perRelease")) is not None and (total := sum(roles.values())) > limit:
        biggest = max(roles, key=lambda role: roles[role])
        keys = next(iter(next(sources for w, sources, _ in asked if w.component == biggest)))
        shares = ", ".join(f"{role} {count}" for role, count in roles.items())
        yield c.violation("maxGpus.perRelease", keys,
                          f"the release requests {total} GPUs ({shares}), more than the {limit} allowed per release",
                          total, f"lower replicas or GPUs per pod by {total - limit} GPUs in all, e.g. "
                          f"{dotted((biggest, 'replicas'))} or {dotted(keys)}")  # fmt: skip


def image_key(c: Context, component: str, field: str, volume: str | None = None) -> Path_:
    """The values key that decides the registry, repository or digest of a component's image (see
    _images.tpl): global.imageRegistry first for a registry; else the role's own image block where it
    sets the field (or, for a digest, its own repository); else image.<field>, which it inherits. An
    image volume's is its reference in <role>.extraVolumes."""
    if volume is not None:  # the chart renders image volumes from <role>.extraVolumes only
        names = [v.get("name") if isinstance(v, dict) else None for v in c.get(component, "extraVolumes") or []]
        return (component, "extraVolumes", str(names.index(volume)), "image", "reference")
    if field == "registry" and c.get("global", "imageRegistry"):
        return ("global", "imageRegistry")
    block = SUPERVISOR if component in (SUPERVISOR, HELM_TEST) else component  # the helm test pod runs its image
    own = c.get(block, "image", field) or (field == "digest" and c.get(block, "image", "repository"))
    return (block, "image", field) if own else ("image", field)


def images(c: Context) -> Iterator[Problem]:
    """Every image (the helm test pod's included) under an allowed registry prefix (docker.io for one that names
    none) and pinned by digest, as the rule says; each broken values key once, with every image it decides."""
    by_key: dict[tuple[str, Path_], dict[str, list[str]]] = {}
    registries, digest = c.rule.get("allowedRegistries"), c.rule.get("requireDigest")
    for w in workloads(c.docs):
        for image, volume in w.images:
            reference = parse_reference(image)
            name = f"{reference['registry'] or 'docker.io'}/{reference['repository']}"
            for rule, field, broken in (
                ("images.allowedRegistries", "registry", registries is not None
                 and not any(name.startswith(r.rstrip("/") + "/") for r in registries)),
                ("images.requireDigest", "digest", digest and not reference["digest"]),
            ):  # fmt: skip
                if broken:
                    keys = image_key(c, w.component, field, volume)
                    by_key.setdefault((rule, keys), {}).setdefault(image, []).append(w.component)
    for (rule, keys), pulled in by_key.items():
        shown = "; ".join(f"{image} ({', '.join(dict.fromkeys(users))})" for image, users in pulled.items())
        image, of_volume = next(iter(pulled)), "extraVolumes" in keys
        if rule == "images.allowedRegistries":
            host, _, prefix = (registries or [""])[0].rstrip("/").partition("/")
            message, fix = f"pulls {shown}, not from an allowed registry ({', '.join(registries or [])})", (
                f"mirror it (tfchart images lists them) and set {dotted(keys)} to its reference there" if of_volume
                else f"mirror it (tfchart images lists them) under {host}/{prefix}/, then set {dotted(keys)} to "
                f"{host} and the image's repository to the copy's path there" if prefix  # a host only: never a guess
                else f"mirror it (tfchart images lists them) and {_set(keys, host)}")  # fmt: skip
        else:
            message = f"pulls {shown} by tag: the policy requires a digest"
            fix = f"set {dotted(keys)} to {image}@sha256:<digest>" if of_volume else _set(keys, "sha256:<digest>")
            fix += f" (crane digest {image})"
        yield c.violation(rule, keys, message, c.get(*keys), fix)


def priority_class(c: Context) -> Iterator[Problem]:
    allowed = c.rule.get("allowed")
    for w in c.pods:
        keys, name = (w.component, "priorityClassName"), str(w.spec.get("priorityClassName") or "")
        fix = _set(keys, allowed[0] if allowed else "<priority class>")
        if not name and c.rule.get("required"):
            message = f"the {w.component} pods name no PriorityClass"
            yield c.violation("priorityClass.required", keys, message, name, fix)
        elif name and allowed is not None and name not in allowed:
            message = f"PriorityClass {name!r} is not allowed (allowed: {', '.join(allowed)})"
            yield c.violation("priorityClass.allowed", keys, message, name, fix)


def queue(c: Context) -> Iterator[Problem]:
    """queue.required: the values name a queue (a Kueue LocalQueue, or a Volcano Queue under
    scheduling.gang.provider=volcano); Volcano's implicit default queue is not one the values name.
    queue.allowed: every queue the pods go through is listed, Volcano's `default` included when
    the provider is volcano and scheduling.gang.volcanoQueue is empty."""
    allowed = c.rule.get("allowed")
    kueue, volcano = ("scheduling", "kueue", "queueName"), ("scheduling", "gang", "volcanoQueue")
    queues = [(kueue, str(c.get(*kueue) or ""), "")]
    if c.get("scheduling", "gang", "provider") == "volcano":
        named = str(c.get(*volcano) or "")
        queues.append((volcano, named or "default", "" if named else " (Volcano's default queue: "
                       f"{dotted(volcano)} is empty)"))  # fmt: skip
    suggestion = allowed[0] if allowed else "<queue>"
    if c.rule.get("required") and not any(c.get(*keys) for keys, _, _ in queues):
        keys = queues[-1][0]
        yield c.violation("queue.required", keys, "the training goes through no queue the values name (Kueue "
                          "LocalQueue or Volcano Queue)", "", _set(keys, suggestion))  # fmt: skip
    for keys, name, why in queues:
        if name and allowed is not None and name not in allowed:
            yield c.violation("queue.allowed", keys, f"queue {name!r}{why} is not allowed (allowed: "
                              f"{', '.join(allowed)})", c.get(*keys), _set(keys, suggestion))  # fmt: skip


def network_policy(c: Context) -> Iterator[Problem]:
    keys = ("networkPolicy", "enabled")
    if c.rule.get("required") and c.get(*keys) is not True:
        yield c.violation("networkPolicy.required", keys, "the release's NetworkPolicies are off: TensorFlow's gRPC "
                          "ports would be open to every pod", c.get(*keys), _set(keys, "true"))  # fmt: skip


def downloads(c: Context) -> Iterator[Problem]:
    """training.download, or the trainer's --download flag given another way (training.extraArgs, <role>.args)."""
    keys = ("training", "download")
    if c.rule.get("allowed") is not False:
        return
    if c.get(*keys) is True:
        yield c.violation("downloads.allowed", keys, "the chief would download the dataset from the internet",
                          True, f"{_set(keys, 'false')} (and put the dataset in training.dataDir)")  # fmt: skip
        return
    seen: set[Path_] = set()
    for w in c.pods:
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
                                  f"remove {flag} from {dotted(given)} (and put the dataset in training.dataDir)")


def claims(c: Context) -> Iterator[tuple[dict[str, Any], str, tuple[Path_, Path_], tuple[str, str]]]:
    """The claims the release makes, each as (spec, what it is, the values keys named for its StorageClass and its
    size, the --set keys of those fields): its PersistentVolumeClaims (storage.*) and the ephemeral volumes of its
    pods (one claim per pod, from <role>.extraVolumes, where the chart renders them from; no volumeClaimTemplates)."""
    for doc in c.docs:
        if doc.get("kind") == "PersistentVolumeClaim":
            yield doc.get("spec") or {}, "the claim", (("storage", "storageClassName"), ("storage", "size")), \
                ("storage.storageClassName", "storage.size")  # fmt: skip
    seen: set[tuple[str, str]] = set()
    for w in c.pods:
        extra = c.get(w.component, "extraVolumes")
        written = [v.get("name") if isinstance(v, dict) else None for v in extra] if isinstance(extra, list) else []
        for volume in w.spec.get("volumes") or []:
            template, name = (volume.get("ephemeral") or {}).get("volumeClaimTemplate"), volume.get("name")
            if isinstance(template, dict) and name in written and (w.component, name) not in seen:
                seen.add((w.component, name))
                at = written.index(name)
                keys = (w.component, "extraVolumes", str(at))
                base = f"{w.component}.extraVolumes[{at}].ephemeral.volumeClaimTemplate.spec"
                what = f"the ephemeral volume {name!r} of the {w.component} pods (one claim per pod)"
                yield template.get("spec") or {}, what, (keys, keys), (f"{base}.storageClassName",
                      f"{base}.resources.requests.storage")  # fmt: skip


def storage(c: Context) -> Iterator[Problem]:
    allowed, limit = c.rule.get("allowedStorageClasses"), c.rule.get("maxClaimSize")
    for spec, what, keys, fields in claims(c):
        name, fix = spec.get("storageClassName"), f"--set {fields[0]}={(allowed or [''])[0]}"
        if allowed is not None and name is None:
            message = f"{what} takes the cluster's default StorageClass (allowed: {', '.join(allowed)})"
            yield c.violation("storage.allowedStorageClasses", keys[0], message, None, fix)
        elif allowed is not None and name not in allowed:
            yield c.violation("storage.allowedStorageClasses", keys[0], f"StorageClass {name!r} of {what} is not "
                              f"allowed (allowed: {', '.join(allowed)})", name, fix)  # fmt: skip
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if limit is not None and size is not None and (parse_or_none(size) or 0) > (parse_or_none(limit) or 0):
            yield c.violation("storage.maxClaimSize", keys[1], f"{what} is {size}, more than the {limit} allowed",
                              size, f"--set {fields[1]}={limit}")  # fmt: skip


def placement(c: Context) -> Iterator[Problem]:
    """Node selectors, node affinity and tolerations of every role, as the policy allows them."""
    selectors: dict[str, list[str]] = c.rule.get("allowedNodeSelectors") or {}
    patterns: list[dict[str, Any]] = c.rule.get("allowedTolerations") or []
    for w in c.pods:
        if "allowedNodeSelectors" in c.rule:
            yield from node_selectors(c, w, selectors)
        for index, toleration in enumerate(w.spec.get("tolerations") or [] if "allowedTolerations" in c.rule else []):
            defaults = {"operator": "Equal"}  # Kubernetes' default; a field a pattern leaves out matches anything
            if not any(all(toleration.get(field, defaults.get(field)) == want for field, want in pattern.items())
                       for pattern in patterns):  # fmt: skip
                keys = (w.component, "tolerations", str(index))
                message, where = f"toleration {json.dumps(toleration)} matches no allowed toleration", dotted(keys[:2])
                fix = (f"remove it from {where}, or write only allowed ones there: "
                       f"{json.dumps(patterns, separators=(',', ':'))}" if patterns
                       else f"remove it from {where}: the policy allows no toleration")  # fmt: skip
                yield c.violation("placement.allowedTolerations", keys, message, toleration, fix)


def node_selectors(c: Context, w: Workload, selectors: dict[str, list[str]]) -> Iterator[Problem]:
    """<role>.nodeSelector, and <role>.affinity, which may select nodes only as nodeSelector may: a requirement
    (required or preferred) on a listed label must be `In` with listed values only (NotIn, Exists, DoesNotExist,
    Gt and Lt do not pin the pods to allowed values); a requirement on a label (or node field) not listed is
    refused."""
    rule, listed = "placement.allowedNodeSelectors", ", ".join(selectors) or "none"
    for label, value in (w.spec.get("nodeSelector") or {}).items():
        label_keys, values = (w.component, "nodeSelector", label), selectors.get(label)
        if values is None:
            message = f"node label {label!r} may not be selected (allowed labels: {listed})"
            yield c.violation(rule, label_keys, message, value, _set(label_keys, "null"))
        elif str(value) not in values:
            yield c.violation(rule, label_keys, f"{label}={value} is not allowed (allowed: {', '.join(values)})",
                              value, _set(label_keys, values[0]))  # fmt: skip
    keys: Path_ = (w.component, "affinity")
    affinity = (w.spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    preferred = [weighted.get("preference") or {} for weighted in
                 affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []]  # fmt: skip
    matched = [(kind, field, requirement) for kind, terms in (("required", required), ("preferred", preferred))
               for term in terms for field in ("matchExpressions", "matchFields")
               for requirement in term.get(field) or []]  # fmt: skip
    for kind, field, requirement in matched:
        label, operator = str(requirement.get("key", "")), str(requirement.get("operator", ""))
        values = [str(value) for value in requirement.get("values") or []]
        written = f"{kind} nodeAffinity {label} {operator}{' [' + ', '.join(values) + ']' if values else ''}"
        allowed = selectors.get(label) if field == "matchExpressions" else None
        refused = [value for value in values if value not in (allowed or [])]
        if allowed is None:
            what = "node label" if field == "matchExpressions" else "node field"
            message = f"{written}: {what} {label!r} may not be selected (allowed labels: {listed})"
            fix = f"remove that {field} requirement from {dotted(keys)}"
        elif operator != "In":
            message = (f"{written} does not pin the pods to an allowed {label} (allowed: {', '.join(allowed)}): only "
                       "In with allowed values may select on it")  # fmt: skip
            fix = f"make it {label} In [{', '.join(allowed)}] in {dotted(keys)}, or remove it"
        elif refused or not values:
            message = f"{written}: {', '.join(refused) or 'no value'} not allowed (allowed: {', '.join(allowed)})"
            fix = f"keep only allowed values ({', '.join(allowed)}) in that requirement of {dotted(keys)}"
        else:
            continue
        yield c.violation(rule, keys, message, requirement, fix)


# each rule group of the policy schema, and its check
CHECKS: dict[str, Callable[[Context], Iterator[Problem]]] = {
    "maxGpus": max_gpus, "images": images, "priorityClass": priority_class, "queue": queue,
    "networkPolicy": network_policy, "downloads": downloads, "storage": storage, "placement": placement,
}  # fmt: skip
