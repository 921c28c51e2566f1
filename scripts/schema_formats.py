"""Named formats of the chart's values.schema.json: the regular expressions and what they mean.

scripts/gen_schema.py writes these patterns into the schema, and what each means under the schema's
`x-pattern-meanings`: tfchart reads that back from the chart it validates (any version of it), so a
message says "a DNS label" instead of printing a regular expression.
"""

from __future__ import annotations

DESCRIPTIONS: dict[str, str] = {}  # pattern -> what it means, for messages


def _format(pattern: str, meaning: str) -> str:
    DESCRIPTIONS[pattern] = meaning
    return pattern


DNS_LABEL = _format(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "a DNS label: lower-case letters, digits and '-', "
                    "starting and ending alphanumeric, e.g. my-release")
# Service names (and so the name prefix every object starts with) must also start with a letter.
DNS_1035_LABEL = _format(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", "a DNS-1035 label: lower-case letters, digits and '-', "
                         "starting with a letter, e.g. my-release")
DNS_SUBDOMAIN = _format(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                        "a DNS name: DNS labels joined by dots, e.g. cluster.local")
QUANTITY = _format(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$",
                   "a Kubernetes quantity, e.g. 500m, 2 or 4Gi")
LABEL_KEY = _format(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
                    "a label or annotation key: [prefix/]name, e.g. app.kubernetes.io/name")
LABEL_VALUE = _format(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$",
                      "a label value: at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends")
ENV_NAME = _format(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", "an environment variable name, e.g. MY_VAR")
EXTENDED_RESOURCE = _format(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    "an extended resource name <vendor-domain>/<resource>, e.g. nvidia.com/gpu")
REGISTRY = _format(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?)?$",
                   "a registry host[:port], e.g. ghcr.io or registry.example.com:5000")
REPOSITORY = _format(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$",
                     "an image repository, e.g. tf-distributed/trainer")
TAG = _format(r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$",
              "an image tag: letters, digits, '_', '.', '-' (not starting with '.' or '-')")
DIGEST = _format(r"^(sha256:[a-f0-9]{64})?$", "an image digest sha256:<64 hex digits>")
# Paths are single lines: no control character (newline, tab, NUL...) anywhere.
_PATH_CHAR = r"[^\x00-\x1f\x7f]"
_NAME_CHAR = r"[^/\x00-\x1f\x7f]"
_NAME_START = r"[^/.\x00-\x1f\x7f]"
ABSOLUTE_PATH = _format(rf"^/{_PATH_CHAR}*$", "an absolute path starting with /, on one line")
# A relative path without ".." segments (RE2: helm's validator has no look-ahead).
_SEGMENT = rf"({_NAME_START}{_NAME_CHAR}*|\.{_NAME_START}{_NAME_CHAR}*|\.\.{_NAME_CHAR}+|\.)"
SUB_PATH = _format(rf"^$|^{_SEGMENT}(/{_SEGMENT})*$",
                   "a relative path without '..' segments, on one line, e.g. runs/mnist")
# A file of a configMap/secret/downwardAPI volume: the API server also refuses a path starting with "..".
_FIRST_ITEM_SEGMENT = rf"({_NAME_START}{_NAME_CHAR}*|\.{_NAME_START}{_NAME_CHAR}*|\.)"
ITEM_PATH = _format(rf"^{_FIRST_ITEM_SEGMENT}(/{_SEGMENT})*$",
                    "a relative file path without '..' segments, not starting with '..', e.g. conf/app.json")
# A canonical absolute path: no trailing, doubled or "."/".." segments, so that comparing it with
# the paths the chart mounts (/tmp, /dev/shm, ...) is comparing strings.
_CANONICAL_SEGMENT = rf"({_NAME_START}{_NAME_CHAR}*|\.{_NAME_START}{_NAME_CHAR}*|\.\.{_NAME_CHAR}+)"
STORAGE_MOUNT_PATH = _format(rf"^(/{_CANONICAL_SEGMENT})+$",
                             "an absolute path on one line without '.', '..', empty or trailing segments, e.g. /data")
MODEL_NAME = _format(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$",
                     "a model name: letters, digits, '_' and '-', at most 63 characters")
INGRESS_HOST = _format(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                       "a host name such as tensorboard.example.com (a leading *. is allowed)")
DECIMAL = _format(r"^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$", "a positive decimal number such as 0.01 or 1e-3")
CAPABILITY = _format(r"^[A-Z_]+$", "a Linux capability name in capitals, e.g. NET_BIND_SERVICE")
URL_PATH = _format(r"^/[!-~]*$", "a URL path starting with /: printable ASCII without spaces")
CIDR = _format(r"^(([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])"
               r"|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*/([0-9]|[1-9][0-9]|1[01][0-9]|12[0-8]))$",
               "an IPv4 or IPv6 CIDR block, e.g. 10.0.0.0/8 or ::/0")
# A Prometheus duration as the Prometheus Operator's CRDs spell it (30s, 1m30s, 2h); empty = not set.
DURATION = _format(r"^(|0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
                   "a Prometheus duration such as 30s, 1m30s or 2h (empty: the Prometheus's own)")
PROMETHEUS_LABEL_NAME = _format(r"^[a-zA-Z_][a-zA-Z0-9_]*$",
                                "a Prometheus label name: letters, digits and '_', not starting with a digit")
PROMETHEUS_METRIC_NAME = _format(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
                                 "a Prometheus metric name: letters, digits, '_' and ':', not starting with a digit")
# A resource name of requests/limits: cpu, memory, or <domain>/<name> such as nvidia.com/gpu.
RESOURCE_NAME = _format(r"^([a-z0-9.-]+/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$",
                        "a resource name such as cpu, memory or nvidia.com/gpu")


def either_empty(pattern: str) -> str:
    """Pattern that also accepts the empty string (the chart's 'unset')."""
    return f"^$|{pattern}"
