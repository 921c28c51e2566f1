"""Named formats of the chart's values.schema.json: the regular expressions and what they mean.

scripts/gen_schema.py writes these patterns into the schema; tfchart turns a pattern failure back
into the human description, so messages say "a DNS label" instead of printing a regex.
"""

from __future__ import annotations

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Service names (and so the name prefix every object starts with) must also start with a letter.
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$"
LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
EXTENDED_RESOURCE = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
REGISTRY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?)?$"
REPOSITORY = r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$"
TAG = r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"
DIGEST = r"^(sha256:[a-f0-9]{64})?$"
# Paths are single lines: no control character (newline, tab, NUL...) anywhere.
_PATH_CHAR = r"[^\x00-\x1f\x7f]"
_NAME_CHAR = r"[^/\x00-\x1f\x7f]"
_NAME_START = r"[^/.\x00-\x1f\x7f]"
ABSOLUTE_PATH = rf"^/{_PATH_CHAR}*$"
# A relative path without ".." segments (RE2: helm's validator has no look-ahead).
_SEGMENT = rf"({_NAME_START}{_NAME_CHAR}*|\.{_NAME_START}{_NAME_CHAR}*|\.\.{_NAME_CHAR}+|\.)"
SUB_PATH = rf"^$|^{_SEGMENT}(/{_SEGMENT})*$"
# A canonical absolute path: no trailing, doubled or "."/".." segments, so that comparing it with
# the paths the chart mounts (/tmp, /dev/shm, ...) is comparing strings.
_CANONICAL_SEGMENT = rf"({_NAME_START}{_NAME_CHAR}*|\.{_NAME_START}{_NAME_CHAR}*|\.\.{_NAME_CHAR}+)"
STORAGE_MOUNT_PATH = rf"^(/{_CANONICAL_SEGMENT})+$"
MODEL_NAME = r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$"
INGRESS_HOST = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DECIMAL = r"^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
CAPABILITY = r"^[A-Z_]+$"
URL_PATH = r"^/[!-~]*$"
CIDR = (
    r"^(([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])"
    r"|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*/([0-9]|[1-9][0-9]|1[01][0-9]|12[0-8]))$"
)
# A Prometheus duration as the Prometheus Operator's CRDs spell it (30s, 1m30s, 2h); empty = not set.
DURATION = r"^(|0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
PROMETHEUS_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
# A resource name of requests/limits: cpu, memory, or <domain>/<name> such as nvidia.com/gpu.
RESOURCE_NAME = r"^([a-z0-9.-]+/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"


def either_empty(pattern: str) -> str:
    """Pattern that also accepts the empty string (the chart's 'unset')."""
    return f"^$|{pattern}"


DESCRIPTIONS: dict[str, str] = {
    DNS_LABEL: "a DNS label: lower-case letters, digits and '-', starting and ending alphanumeric, e.g. my-release",
    DNS_1035_LABEL: "a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, e.g. my-release",
    DNS_SUBDOMAIN: "a DNS name: DNS labels joined by dots, e.g. cluster.local",
    QUANTITY: "a Kubernetes quantity, e.g. 500m, 2 or 4Gi",
    LABEL_KEY: "a label or annotation key: [prefix/]name, e.g. app.kubernetes.io/name",
    LABEL_VALUE: "a label value: at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends",
    ENV_NAME: "an environment variable name, e.g. MY_VAR",
    EXTENDED_RESOURCE: "an extended resource name <vendor-domain>/<resource>, e.g. nvidia.com/gpu",
    REGISTRY: "a registry host[:port], e.g. ghcr.io or registry.example.com:5000",
    REPOSITORY: "an image repository, e.g. tf-distributed/trainer",
    TAG: "an image tag: letters, digits, '_', '.', '-' (not starting with '.' or '-')",
    DIGEST: "an image digest sha256:<64 hex digits>",
    ABSOLUTE_PATH: "an absolute path starting with /, on one line",
    SUB_PATH: "a relative path without '..' segments, on one line, e.g. runs/mnist",
    STORAGE_MOUNT_PATH: "an absolute path on one line without '.', '..', empty or trailing segments, e.g. /data",
    MODEL_NAME: "a model name: letters, digits, '_' and '-', at most 63 characters",
    INGRESS_HOST: "a host name such as tensorboard.example.com (a leading *. is allowed)",
    DECIMAL: "a positive decimal number such as 0.01 or 1e-3",
    CAPABILITY: "a Linux capability name in capitals, e.g. NET_BIND_SERVICE",
    URL_PATH: "a URL path starting with /: printable ASCII without spaces",
    CIDR: "an IPv4 or IPv6 CIDR block, e.g. 10.0.0.0/8 or ::/0",
    DURATION: "a Prometheus duration such as 30s, 1m30s or 2h (empty: the Prometheus's own)",
    PROMETHEUS_LABEL_NAME: "a Prometheus label name: letters, digits and '_', not starting with a digit",
    RESOURCE_NAME: "a resource name such as cpu, memory or nvidia.com/gpu",
}


def describe(pattern: str) -> str:
    """What a schema pattern means, for messages."""
    if pattern in DESCRIPTIONS:
        return DESCRIPTIONS[pattern]
    if pattern.startswith("^$|") and pattern[3:] in DESCRIPTIONS:
        return DESCRIPTIONS[pattern[3:]] + " (or empty)"
    return f"text matching {pattern}"
