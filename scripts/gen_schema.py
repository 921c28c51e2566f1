#!/usr/bin/env python3
"""Generate charts/tf-distributed/values.schema.json from values.yaml.

values.yaml is the single source of truth for keys, defaults and descriptions (its `## @param`
lines, which also feed the README table). This script adds types and constraints from the RULES
table below and writes a JSON Schema (draft-07) in which every object the chart defines has
`additionalProperties: false`. `--check` exits 1 when the committed schema is out of date.

Usage: python scripts/gen_schema.py [--check]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
CHART = REPO / "charts" / "tf-distributed"
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"

Schema = dict[str, Any]

from schema_formats import (  # noqa: E402  (scripts/ is on sys.path: this script's folder)
    ABSOLUTE_PATH,
    CAPABILITY,
    CIDR,
    DECIMAL,
    DESCRIPTIONS,
    DIGEST,
    DNS_1035_LABEL,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DURATION,
    ENV_NAME,
    EXTENDED_RESOURCE,
    INGRESS_HOST,
    ITEM_PATH,
    LABEL_KEY,
    LABEL_VALUE,
    MODEL_NAME,
    PROMETHEUS_LABEL_NAME,
    PROMETHEUS_METRIC_NAME,
    QUANTITY,
    REGISTRY,
    REPOSITORY,
    RESOURCE_NAME,
    STORAGE_MOUNT_PATH,
    SUB_PATH,
    TAG,
    URL_PATH,
    either_empty,
)

from tfdcontract import (  # noqa: E402
    CHIEF,
    EVALUATOR,
    PS,
    SERVING,
    SUPERVISOR,
    TENSORBOARD,
    WORKER,
)

# The most tasks whose TF_CONFIG still fits one environment variable with the longest names the chart
# allows: Linux takes at most 131072 bytes (MAX_ARG_STRLEN) per NAME=value string, and the cluster map
# is largest with a 53-character release (a 45-character object-name prefix), a 63-character namespace,
# 5-digit ports and the clusterDomain that makes the longest task host 253 characters. Workers under
# multi_worker_mirrored (the chief and the workers); parameter servers next to the one worker
# parameter_server needs. tests/chart/test_cluster_limits.py renders both with helm 3 and 4 and sees
# one task more refused by the chart's size rule (_validate.tpl), which also catches larger ps + worker
# combinations with the real names.
MAX_WORKERS = 499
MAX_PS = 510


def string_map(value_pattern: str | None = None, key_pattern: str | None = None) -> Schema:
    values: Schema = {"type": "string"}
    if value_pattern:
        values["pattern"] = value_pattern
    schema: Schema = {"type": "object", "additionalProperties": values}
    if key_pattern:
        schema["propertyNames"] = {"pattern": key_pattern}
    return schema


# Kubernetes caps quantities at 2^63-1 and rounds them to 1n, so 64 characters say everything.
QUANTITY_STRING: Schema = {"type": "string", "pattern": QUANTITY, "maxLength": 64}
QUANTITY_VALUE: Schema = {
    "oneOf": [
        QUANTITY_STRING,
        {"type": "number", "minimum": 0},
    ],
    "description": "A Kubernetes quantity, e.g. 500m, 2, 4Gi",
}


def key_to_path_source(source: str) -> Schema:
    """A configMap/secret/downwardAPI volume source: only its items' file paths are checked here."""
    return {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"path": {"type": "string", "pattern": ITEM_PATH, "description": "File path"}},
                },
            },
        },
    }


def resource_list(description: str) -> Schema:
    return {
        "type": "object",
        "description": description,
        "propertyNames": {"pattern": RESOURCE_NAME},
        "additionalProperties": QUANTITY_VALUE,
    }


LABEL_SELECTOR: Schema = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {
            **string_map(LABEL_VALUE, LABEL_KEY),
            "description": "Labels a pod or namespace must carry",
        },
        "matchExpressions": {
            "type": "array",
            "description": "Set-based requirements (key, operator, values)",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string", "pattern": LABEL_KEY, "description": "Label key"},
                    "operator": {
                        "type": "string",
                        "enum": ["In", "NotIn", "Exists", "DoesNotExist"],
                        "description": "Set operator",
                    },
                    "values": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Label values",
                    },
                },
            },
        },
    },
}

SECCOMP: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type"],
    "properties": {
        "type": {
            "type": "string",
            "enum": ["RuntimeDefault", "Localhost", "Unconfined"],
            "description": "Seccomp profile type",
        },
        "localhostProfile": {"type": "string", "description": "Profile file on the node (type Localhost)"},
    },
}

# A Kubernetes Probe of one's own (<role>.custom*Probe): its fields are named here, their contents are
# left to the API server; {} = the chart's probe.
PROBE: Schema = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **{handler: {"type": "object", "description": f"Kubernetes {handler} check (validated by the API server)"}
           for handler in ("exec", "httpGet", "tcpSocket", "grpc")},
        **{field: {"type": "integer", "minimum": 0, "description": f"Kubernetes Probe {field}"}
           for field in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold",
                         "successThreshold", "terminationGracePeriodSeconds")},
    },
}

ID = {"type": "integer", "minimum": 0, "maximum": 2147483647}

PORT: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}
# Non-empty: in a NetworkPolicy rule an empty `to` or `ports` list means every destination or port.
CIDRS: Schema = {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string", "pattern": CIDR}}
EGRESS_RULE: Schema = {
    "type": "object",
    "additionalProperties": False,
    "description": "A Kubernetes NetworkPolicyEgressRule (no `to`: every destination; no `ports`: every port)",
    "properties": {
        "to": {
            "type": "array",
            "description": "Destinations: ipBlock, or namespaceSelector and/or podSelector",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "ipBlock": {
                        "type": "object",
                        "description": "Addresses outside the cluster's pods",
                        "additionalProperties": False,
                        "required": ["cidr"],
                        "properties": {
                            "cidr": {"type": "string", "pattern": CIDR, "description": "Addresses admitted"},
                            "except": {
                                "type": "array",
                                "items": {"type": "string", "pattern": CIDR},
                                "description": "Addresses within cidr that stay blocked",
                            },
                        },
                    },
                    "namespaceSelector": {**LABEL_SELECTOR, "description": "Namespaces admitted"},
                    "podSelector": {**LABEL_SELECTOR, "description": "Pods admitted"},
                },
            },
        },
        "ports": {
            "type": "array",
            "description": "Ports admitted",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "port": {
                        "oneOf": [PORT, {"type": "string", "pattern": DNS_1035_LABEL, "maxLength": 15}],
                        "description": "Port number or name",
                    },
                    "endPort": {**PORT, "description": "Last port of a range starting at port"},
                    "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"], "description": "Protocol"},
                },
            },
        },
    },
}

# The Prometheus Operator's RelabelConfig (monitoring.coreos.com/v1), its fields as its CRDs declare them.
RELABEL_CONFIG: Schema = {
    "type": "object",
    "additionalProperties": False,
    "description": "A Prometheus Operator RelabelConfig",
    "properties": {
        "action": {
            "type": "string",
            "enum": [
                "replace", "Replace", "keep", "Keep", "drop", "Drop",
                "hashmod", "HashMod", "labelmap", "LabelMap", "labeldrop", "LabelDrop",
                "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase",
                "keepequal", "KeepEqual", "dropequal", "DropEqual",
            ],
            "description": "Relabel action (default replace)",
        },
        "sourceLabels": {
            "type": "array",
            "items": {"type": "string", "pattern": PROMETHEUS_LABEL_NAME},
            "description": "Labels whose values are joined with separator and matched against regex",
        },
        "separator": {"type": "string", "description": "Separator of the joined source label values (default ;)"},
        "targetLabel": {"type": "string", "description": "Label the result is written to"},
        "regex": {"type": "string", "description": "Regular expression matched against the joined values"},
        "modulus": {"type": "integer", "minimum": 0, "description": "Modulus of the hash (action hashmod)"},
        "replacement": {"type": "string", "description": "Replacement value, with regex groups as $1"},
    },
}
MONITOR_NAMESPACE_SELECTOR: Schema = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "any": {"type": "boolean", "description": "Every namespace"},
        "matchNames": {
            "type": "array",
            "items": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63},
            "description": "Names of the namespaces",
        },
    },
}

# Labels of a Prometheus alert: Prometheus label names, any string values.
ALERT_LABELS: Schema = string_map(None, PROMETHEUS_LABEL_NAME)
# The Prometheus Operator's Rule (PrometheusRule spec.groups[].rules[]), as its CRD declares it.
PROMETHEUS_RULE: Schema = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "description": "A Prometheus alerting or recording rule",
    "properties": {
        "alert": {"type": "string", "minLength": 1, "description": "Name of the alert"},
        "record": {"type": "string", "pattern": PROMETHEUS_METRIC_NAME, "description": "Name of the recorded series"},
        "expr": {"type": ["string", "integer"], "minLength": 1, "description": "PromQL expression"},
        "for": {"type": "string", "pattern": DURATION, "description": "How long the condition must hold"},
        "keep_firing_for": {"type": "string", "pattern": DURATION, "description": "How long an alert keeps firing"},
        "labels": {**ALERT_LABELS, "description": "Labels of the alert or series"},
        "annotations": {**string_map(), "description": "Annotations of the alert"},
    },
}

# Ordered (glob over the dotted key path, schema fragment). The first match wins. Keys of a
# fragment are merged over the inferred type; "description" always comes from values.yaml.
RULES: list[tuple[str, Schema]] = [
    ("global.imageRegistry", {"type": "string", "pattern": REGISTRY}),
    (
        "global.imagePullSecrets",
        {"type": "array", "items": {"type": "string", "pattern": DNS_SUBDOMAIN}, "uniqueItems": True},
    ),
    ("nameOverride", {"type": "string", "pattern": either_empty(DNS_LABEL), "maxLength": 40}),
    ("fullnameOverride", {"type": "string", "pattern": either_empty(DNS_1035_LABEL), "maxLength": 45}),
    ("namespaceOverride", {"type": "string", "pattern": either_empty(DNS_LABEL), "maxLength": 63}),
    ("clusterDomain", {"type": "string", "pattern": DNS_SUBDOMAIN, "maxLength": 253}),
    ("commonLabels", string_map(LABEL_VALUE, LABEL_KEY)),
    ("commonAnnotations", string_map(None, LABEL_KEY)),
    ("schedulerName", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN)}),
    ("scheduling.gang.provider", {"type": "string", "enum": ["none", "volcano", "coscheduling"]}),
    ("scheduling.gang.scheduleTimeoutSeconds", {"type": "integer", "minimum": 0, "maximum": 86400}),
    # Volcano Queues are cluster-scoped objects; Kueue's names are also label values (at most 63).
    ("scheduling.gang.volcanoQueue", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN), "maxLength": 253}),
    ("scheduling.kueue.queueName", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN), "maxLength": 63}),
    ("scheduling.kueue.priorityClass", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN), "maxLength": 63}),
    # Topology-aware placement: a Kueue Topology level is a node label key; a Volcano HyperNode tier an integer
    # (the HyperNode CRD's spec.tier, minimum 0; PodGroup networkTopology.highestTierAllowed, minimum 0).
    ("scheduling.topology.mode", {"type": "string", "enum": ["none", "required", "preferred"]}),
    ("scheduling.topology.level", {"type": "string", "pattern": either_empty(LABEL_KEY), "maxLength": 316}),
    ("scheduling.topology.tier", {"type": ["integer", "null"], "minimum": 0}),
    ("scheduling.topology.*.mode", {"type": "string", "enum": ["", "none", "required", "preferred"]}),
    ("scheduling.topology.*.level", {"type": "string", "pattern": either_empty(LABEL_KEY), "maxLength": 316}),
    ("scheduling.topology.*.tier", {"type": ["integer", "null"], "minimum": 0}),
    ("scheduling.startTimeoutSeconds", {"type": "integer", "minimum": 0, "maximum": 604800}),
    ("workload.kind", {"type": "string", "enum": ["native", "jobset"]}),
    ("workload.jobset.maxRestarts", {"type": "integer", "minimum": 0, "maximum": 1000}),
    # the JobSet's spec.ttlSecondsAfterFinished is an int32
    ("workload.jobset.ttlSecondsAfterFinished", {"type": ["integer", "null"], "minimum": 0, "maximum": 2147483647}),
    ("*.workingDir", {"type": "string", "pattern": ABSOLUTE_PATH}),
    ("*.home", {"type": "string", "pattern": either_empty(ABSOLUTE_PATH)}),
    ("*image.registry", {"type": "string", "pattern": REGISTRY}),
    # The supervisor runs trainer.supervisor: its image is the project's, never empty.
    ("supervisor.image.repository", {"type": "string", "pattern": REPOSITORY}),
    ("*image.repository", {"type": "string", "pattern": either_empty(REPOSITORY)}),
    ("*image.tag", {"type": "string", "pattern": TAG}),
    ("*image.digest", {"type": "string", "pattern": DIGEST}),
    ("image.pullPolicy", {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]}),
    ("*.image.pullPolicy", {"type": "string", "enum": ["", "Always", "IfNotPresent", "Never"]}),
    (
        "training.strategy",
        {"type": "string", "enum": ["parameter_server", "multi_worker_mirrored", "mirrored", "single_device"]},
    ),
    ("training.modelName", {"type": "string", "pattern": MODEL_NAME}),
    ("training.dataset", {"type": "string", "enum": ["mnist", "mnist_tfrecord", "digits", "synthetic"]}),
    ("training.dataDir", {"type": "string", "pattern": either_empty(ABSOLUTE_PATH)}),
    ("training.batchSize", {"type": "integer", "minimum": 1, "maximum": 1048576}),
    ("training.trainSteps", {"type": "integer", "minimum": 1}),
    # `helm --set` passes decimals as strings, so a decimal string is accepted too (range checked
    # in validateValues).
    (
        "training.learningRate",
        {
            "oneOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
                {"type": "string", "pattern": DECIMAL},
            ]
        },
    ),
    ("training.checkpointEverySteps", {"type": "integer", "minimum": 1}),
    ("training.logEverySteps", {"type": "integer", "minimum": 1}),
    ("training.stepsPerExecution", {"type": "integer", "minimum": 1}),
    ("training.precision", {"type": "string", "enum": ["auto", "float32", "mixed_bfloat16"]}),
    ("training.cleanup.onSuccess", {"type": "string", "enum": ["scaleDown", "keep"]}),
    ("training.cleanup.onFailure", {"type": "string", "enum": ["scaleDown", "keep"]}),
    ("training.checkpointEverySeconds", {"type": "integer", "minimum": 0, "maximum": 31536000}),
    ("training.extraArgs", {"type": "array", "items": {"type": "string"}}),
    ("storage.existingClaim", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN), "maxLength": 253}),
    ("storage.storageClassName", {"type": ["string", "null"], "pattern": either_empty(DNS_SUBDOMAIN)}),
    (
        "storage.accessModes",
        {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "string", "enum": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]},
        },
    ),
    ("storage.size", QUANTITY_STRING),
    ("storage.mountPath", {"type": "string", "pattern": STORAGE_MOUNT_PATH}),
    ("storage.subPath", {"type": "string", "pattern": SUB_PATH}),
    ("storage.annotations", string_map(None, LABEL_KEY)),
    # MAX_PS / MAX_WORKERS: the most tasks whose TF_CONFIG fits one environment variable (see above).
    ("ps.replicas", {"type": "integer", "minimum": 0, "maximum": MAX_PS}),
    ("worker.replicas", {"type": "integer", "minimum": 0, "maximum": MAX_WORKERS}),
    ("chief.replicas", {"type": "integer", "minimum": 0, "maximum": 1}),
    ("evaluator.replicas", {"type": "integer", "minimum": 1, "maximum": 1}),
    ("tensorboard.replicas", {"type": "integer", "minimum": 1, "maximum": 10}),
    ("serving.replicas", {"type": "integer", "minimum": 1, "maximum": 100}),
    (
        "training.exportMinAccuracy",
        {"oneOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "string", "pattern": DECIMAL}]},
    ),
    ("serving.modelVersionPolicy.type", {"type": "string", "enum": ["latest", "specific", "all"]}),
    ("serving.modelVersionPolicy.latest", {"type": "integer", "minimum": 1, "maximum": 1000}),
    ("serving.modelVersionPolicy.versions", {"type": "array", "uniqueItems": True, "maxItems": 1000,
                                             "items": {"type": "integer", "minimum": 1, "maximum": 2**53 - 1}}),
    ("*.command", {"type": "array", "items": {"type": "string"}}),
    ("*.args", {"type": "array", "items": {"type": "string"}}),
    (
        "*.extraEnv",
        {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": ENV_NAME, "description": "Variable name"},
                    "value": {"type": "string", "description": "Literal value (quote numbers and booleans)"},
                    "valueFrom": {
                        "type": "object",
                        "description": "Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, ...)",
                        "additionalProperties": False,
                        "properties": {
                            k: {"type": "object", "description": f"Kubernetes {k}"}
                            for k in ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")
                        },
                    },
                },
            },
        },
    ),
    (
        "*.resources",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "requests": resource_list("Minimum resources the scheduler reserves (cpu, memory, ephemeral-storage)"),
                "limits": resource_list("Maximum resources the container may use"),
            },
        },
    ),
    ("*.gpu.count", {"type": "integer", "minimum": 0, "maximum": 64}),
    ("*.gpu.resourceName", {"type": "string", "pattern": EXTENDED_RESOURCE}),
    ("*.nodeSelector", string_map(LABEL_VALUE, LABEL_KEY)),
    (
        "*.tolerations",
        {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "key": {
                        "type": "string",
                        "description": "Taint key (empty with operator Exists matches every taint)",
                    },
                    "operator": {"type": "string", "enum": ["Exists", "Equal"], "description": "Exists or Equal"},
                    "value": {"type": "string", "description": "Taint value (operator Equal)"},
                    "effect": {
                        "type": "string",
                        "enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"],
                        "description": "Taint effect to tolerate",
                    },
                    "tolerationSeconds": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "How long a NoExecute taint is tolerated",
                    },
                },
            },
        },
    ),
    (
        "*.affinity",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                k: {"type": "object", "description": f"Kubernetes {k} (validated by the API server)"}
                for k in ("nodeAffinity", "podAffinity", "podAntiAffinity")
            },
        },
    ),
    (
        "*.topologySpreadConstraints",
        {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["maxSkew", "topologyKey", "whenUnsatisfiable"],
                "properties": {
                    "maxSkew": {"type": "integer", "minimum": 1, "description": "Allowed imbalance between domains"},
                    "topologyKey": {
                        "type": "string",
                        "pattern": LABEL_KEY,
                        "description": "Node label that defines a domain",
                    },
                    "whenUnsatisfiable": {
                        "type": "string",
                        "enum": ["DoNotSchedule", "ScheduleAnyway"],
                        "description": "What the scheduler does when it cannot satisfy the spread",
                    },
                    "labelSelector": {**LABEL_SELECTOR, "description": "Pods counted for the spread"},
                    "minDomains": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Minimum number of eligible domains",
                    },
                    "matchLabelKeys": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Pod label keys whose values select the pods counted",
                    },
                    "nodeAffinityPolicy": {
                        "type": "string",
                        "enum": ["Honor", "Ignore"],
                        "description": "Whether node affinity limits the domains",
                    },
                    "nodeTaintsPolicy": {
                        "type": "string",
                        "enum": ["Honor", "Ignore"],
                        "description": "Whether node taints limit the domains",
                    },
                },
            },
        },
    ),
    ("*.priorityClassName", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN)}),
    ("*.podLabels", string_map(LABEL_VALUE, LABEL_KEY)),
    ("*.podAnnotations", string_map(None, LABEL_KEY)),
    (
        "*.extraVolumes",
        {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": DNS_LABEL, "description": "Volume name"},
                    **{source: key_to_path_source(source) for source in ("configMap", "secret", "downwardAPI")},
                    "projected": {
                        "type": "object",
                        "properties": {
                            "sources": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        source: key_to_path_source(source)
                                        for source in ("configMap", "secret", "downwardAPI")
                                    },
                                },
                            },
                        },
                    },
                },
                "description": "A Kubernetes Volume (its source fields are validated by the API server; the "
                "file paths of its items here too, as tfchart local writes them)",
            },
        },
    ),
    (
        "*.extraVolumeMounts",
        {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "mountPath"],
                "properties": {
                    "name": {"type": "string", "pattern": DNS_LABEL, "description": "Name of a volume of the pod"},
                    "mountPath": {
                        "type": "string",
                        "pattern": ABSOLUTE_PATH,
                        "description": "Absolute path in the container",
                    },
                    "subPath": {"type": "string", "pattern": SUB_PATH, "description": "Sub-path of the volume"},
                    "subPathExpr": {
                        "type": "string",
                        "pattern": SUB_PATH,
                        "description": "Sub-path with $(VAR) expansion",
                    },
                    "readOnly": {"type": "boolean", "description": "Mount read-only"},
                    "recursiveReadOnly": {
                        "type": "string",
                        "enum": ["Disabled", "IfPossible", "Enabled"],
                        "description": "Recursive read-only mode",
                    },
                    "mountPropagation": {
                        "type": "string",
                        "enum": ["None", "HostToContainer", "Bidirectional"],
                        "description": "Mount propagation",
                    },
                },
            },
        },
    ),
    ("*.podSecurityContext.runAsUser", ID),
    ("*.podSecurityContext.runAsGroup", ID),
    ("*.podSecurityContext.fsGroup", ID),
    ("*.podSecurityContext.fsGroupChangePolicy", {"type": "string", "enum": ["OnRootMismatch", "Always"]}),
    ("*.podSecurityContext.seccompProfile", SECCOMP),
    ("*.containerSecurityContext.runAsUser", ID),
    ("*.containerSecurityContext.runAsGroup", ID),
    ("*.containerSecurityContext.seccompProfile", SECCOMP),
    (
        "*.containerSecurityContext.capabilities",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "add": {
                    "type": "array",
                    "items": {"type": "string", "pattern": CAPABILITY},
                    "description": "Capabilities added",
                },
                "drop": {
                    "type": "array",
                    "items": {"type": "string", "pattern": CAPABILITY},
                    "description": "Capabilities dropped",
                },
            },
        },
    ),
    ("*.service.port", {"type": "integer", "minimum": 1, "maximum": 65535}),
    ("*.service.restPort", {"type": "integer", "minimum": 1, "maximum": 65535}),
    ("*.service.grpcPort", {"type": "integer", "minimum": 1, "maximum": 65535}),
    ("*.service.type", {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]}),
    ("*.backoffLimit", {"type": "integer", "minimum": 0, "maximum": 1000}),
    ("*Probe.initialDelaySeconds", {"type": "integer", "minimum": 0, "maximum": 86400}),
    ("*Probe.periodSeconds", {"type": "integer", "minimum": 1, "maximum": 86400}),
    ("*Probe.timeoutSeconds", {"type": "integer", "minimum": 1, "maximum": 86400}),
    ("*Probe.failureThreshold", {"type": "integer", "minimum": 1, "maximum": 100000}),
    # Kubernetes rejects any other successThreshold for liveness and startup probes
    ("*.livenessProbe.successThreshold", {"type": "integer", "minimum": 1, "maximum": 1}),
    ("*.startupProbe.successThreshold", {"type": "integer", "minimum": 1, "maximum": 1}),
    ("*Probe.successThreshold", {"type": "integer", "minimum": 1, "maximum": 100000}),
    ("*.custom*Probe", PROBE),
    ("chief.activeDeadlineSeconds", {"type": ["integer", "null"], "minimum": 1}),
    # at least 6 s: the trainer saves within the grace minus 5 s (--shutdown-grace-seconds >= 1)
    ("chief.terminationGracePeriodSeconds", {"type": "integer", "minimum": 6, "maximum": 86400}),
    ("supervisor.pollSeconds", {"type": "integer", "minimum": 1, "maximum": 3600}),
    ("supervisor.chiefMissingSeconds", {"type": "integer", "minimum": 0, "maximum": 86400}),
    ("training.stallTimeoutSeconds", {"type": "integer", "minimum": 0, "maximum": 604800}),
    ("chief.ttlSecondsAfterFinished", {"type": ["integer", "null"], "minimum": 0}),
    ("*.ingress.className", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN)}),
    (
        "*.ingress.host",
        {"type": "string", "pattern": INGRESS_HOST},
    ),
    ("*.ingress.path", {"type": "string", "pattern": URL_PATH}),
    ("*.ingress.tlsSecretName", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN)}),
    ("*.ingress.annotations", string_map(None, LABEL_KEY)),
    ("serving.pollSeconds", {"type": "integer", "minimum": 1, "maximum": 86400}),
    ("serviceAccount.name", {"type": "string", "pattern": either_empty(DNS_SUBDOMAIN)}),
    ("serviceAccount.annotations", string_map(None, LABEL_KEY)),
    ("networkPolicy.clientPodSelector", LABEL_SELECTOR),
    ("networkPolicy.clientNamespaceSelector", {**LABEL_SELECTOR, "type": ["object", "null"]}),
    (
        "networkPolicy.ingressControllerSelector",
        {
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": {
                "namespaceSelector": {**LABEL_SELECTOR, "description": "Namespaces of the ingress controller"},
                "podSelector": {**LABEL_SELECTOR, "description": "Pods of the ingress controller"},
            },
        },
    ),
    ("networkPolicy.egress.dns.namespaceSelector", LABEL_SELECTOR),
    ("networkPolicy.egress.dns.podSelector", LABEL_SELECTOR),
    ("networkPolicy.egress.*.cidrs", CIDRS),
    ("networkPolicy.egress.apiServer.ports", {"type": "array", "minItems": 1, "uniqueItems": True, "items": PORT}),
    ("networkPolicy.egress.extraRules", {"type": "array", "items": EGRESS_RULE}),
    ("tests.timeoutSeconds", {"type": "integer", "minimum": 10, "maximum": 86400}),
    ("metrics.port", PORT),
    ("metrics.lingerSeconds", {"type": "integer", "minimum": 0, "maximum": 3600}),
    ("metrics.scraper.namespaceSelector", {**LABEL_SELECTOR, "type": ["object", "null"]}),
    ("metrics.scraper.podSelector", LABEL_SELECTOR),
    ("metrics.*Monitor.namespace", {"type": "string", "pattern": either_empty(DNS_LABEL), "maxLength": 63}),
    ("metrics.*Monitor.labels", string_map(LABEL_VALUE, LABEL_KEY)),
    ("metrics.*Monitor.annotations", string_map(None, LABEL_KEY)),
    ("metrics.*Monitor.interval", {"type": "string", "pattern": DURATION}),
    ("metrics.*Monitor.scrapeTimeout", {"type": "string", "pattern": DURATION}),
    ("metrics.*Monitor.namespaceSelector", MONITOR_NAMESPACE_SELECTOR),
    ("metrics.*Monitor.relabelings", {"type": "array", "items": RELABEL_CONFIG}),
    ("metrics.*Monitor.metricRelabelings", {"type": "array", "items": RELABEL_CONFIG}),
    ("metrics.prometheusRule.namespace", {"type": "string", "pattern": either_empty(DNS_LABEL), "maxLength": 63}),
    ("metrics.prometheusRule.labels", string_map(LABEL_VALUE, LABEL_KEY)),
    ("metrics.prometheusRule.annotations", string_map(None, LABEL_KEY)),
    ("metrics.prometheusRule.interval", {"type": "string", "pattern": DURATION}),
    ("metrics.prometheusRule.alertLabels", ALERT_LABELS),
    ("metrics.prometheusRule.*.labels", ALERT_LABELS),
    ("metrics.prometheusRule.*.for", {"type": "string", "pattern": DURATION}),
    ("metrics.prometheusRule.*Seconds", {"type": "integer", "minimum": 0, "maximum": 31536000}),
    ("metrics.prometheusRule.additionalRules", {"type": "array", "items": PROMETHEUS_RULE}),
    ("serving.metrics.path", {"type": "string", "pattern": URL_PATH, "maxLength": 256}),
]

# Objects that only group other keys: they get a description here (no @param line of their own).
GROUP_DESCRIPTIONS = {
    "": "Values of the tf-distributed chart",
    "global": "Values shared with a parent chart when tf-distributed is a subchart",
    "image": "Trainer image used by every TensorFlow role (and TensorBoard while one runs the trainer) unless a "
    "component sets its own",
    "training": "What to train and how (rendered into the trainer's arguments)",
    "storage": "Shared volume for checkpoints, logs and exported models",
    "serviceAccount": "ServiceAccount of the release's pods",
    "rbac": "RBAC of the run supervisor",
    SUPERVISOR: "The run supervisor: frees the ps/worker pods on every ending of the chief Job",
    "supervisor.progress": "The chief's progress on its Job (tf-distributed.io/progress), written by the supervisor",
    "training.cleanup": "What the supervisor does with the ps/worker StatefulSets when the run ends",
    "serving.modelVersionPolicy": "Which exported model versions TensorFlow Serving loads (its model config file)",
    "networkPolicy": "NetworkPolicies isolating the release's pods",
    "networkPolicy.ingressControllerSelector": (
        "The ingress controller, admitted to TensorBoard / Serving while their Ingress is enabled (null = none)"
    ),
    "networkPolicy.egress": "Egress of the TensorFlow pods and the supervisor",
    "networkPolicy.egress.dns": "The cluster DNS, reached on port 53",
    "networkPolicy.egress.apiServer": "The API server, reached by the supervisor",
    "networkPolicy.egress.download": "HTTPS reached by the chief for training.download",
    "tests": "The `helm test` Job",
    "metrics": "Prometheus metrics of the TensorFlow pods, and the ServiceMonitor / PodMonitor that scrape them",
    "metrics.scraper": "The Prometheus admitted by the NetworkPolicies to the metrics ports",
    "metrics.serviceMonitor": "A Prometheus Operator ServiceMonitor (through the TensorFlow roles' headless Services)",
    "metrics.podMonitor": "A Prometheus Operator PodMonitor (selects the TensorFlow and Serving pods directly)",
    "metrics.prometheusRule": "A Prometheus Operator PrometheusRule: this release's alerts",
    "metrics.prometheusRule.runStalled": "Alert TFDistributedRunStalled: the chief's step stopped rising while Running",
    "metrics.prometheusRule.gpusHeldAfterRunEnded": "Alert TFDistributedGPUsHeldAfterRunEnded (kube-state-metrics)",
    "metrics.prometheusRule.checkpointsStopped": "Alert TFDistributedCheckpointsStopped: no checkpoint while Running",
    "serving.metrics": "TensorFlow Serving's Prometheus metrics, on its REST port (its monitoring config file)",
    "scheduling": "How the TensorFlow pods are scheduled and admitted",
    "workload": "Which Kubernetes objects run the TensorFlow pods: native StatefulSets and Jobs, or one JobSet",
    "workload.jobset": "The JobSet's own settings (workload.kind=jobset)",
    "scheduling.gang": "Gang scheduling of the TensorFlow pods (one PodGroup for all of them)",
    "scheduling.kueue": "Kueue admission of the TensorFlow pods (one plain-pod group for all of them)",
    "scheduling.topology": "Topology-aware placement of the ps, worker and chief pods (Kueue TAS, Volcano HyperNodes)",
    "scheduling.topology.ps": "The ps pods' own placement (empty: as scheduling.topology)",
    "scheduling.topology.worker": "The worker pods' own placement (empty: as scheduling.topology)",
    "scheduling.topology.chief": "The chief pod's own placement (empty: as scheduling.topology)",
    PS: "Parameter-server StatefulSet (training.strategy=parameter_server)",
    WORKER: "Worker StatefulSet (parameter_server and multi_worker_mirrored)",
    CHIEF: "Chief (coordinator) Job: owns completion",
    EVALUATOR: "Optional evaluator Job",
    TENSORBOARD: "TensorBoard Deployment and Service",
    SERVING: "TensorFlow Serving Deployment and Service",
}
COMPONENT_GROUPS = {
    "image": "Image of this component (empty fields fall back to image.*)",
    "resources": "Resource requests and limits (GPUs go in gpu.count)",
    "gpu": "GPUs per pod, rendered as a limit of gpu.resourceName",
    "podSecurityContext": "Pod security context (Pod Security 'restricted' by default)",
    "containerSecurityContext": "Container security context (Pod Security 'restricted' by default)",
    "service": "Ports of the component's Service",
    "ingress": "Optional Ingress (off by default: nothing is exposed outside the cluster)",
    "capabilities": "Linux capabilities",
    "requests": "Minimum resources the scheduler reserves",
    "limits": "Maximum resources the container may use",
    "seccompProfile": "Seccomp profile",
    "podDisruptionBudget": "PodDisruptionBudget of the component's pods (maxUnavailable 0)",
    "startupProbe": "Startup probe of the TensorFlow server (TCP on its port); custom*Probe replaces it",
    "livenessProbe": "Liveness probe of the TensorFlow server (TCP on its port); custom*Probe replaces it",
    "readinessProbe": "Readiness probe of the TensorFlow server (TCP on its port); custom*Probe replaces it",
}


def param_descriptions(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    # readme-generator modifiers ([object], [array, default: ...]) are not part of the description.
    for match in re.finditer(r"^\s*## @param ([A-Za-z0-9_.\[\]-]+) (?:\[[^]]*\] )?(.+)$", text, re.MULTILINE):
        found[match.group(1)] = match.group(2).strip()
    return found


def inferred(value: Any) -> Schema:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    if isinstance(value, dict):
        return {"type": "object"}
    raise ValueError(f"cannot infer a type for {value!r}: give it a rule")


def rule_for(path: str) -> Schema | None:
    for pattern, fragment in RULES:
        if fnmatch.fnmatchcase(path, pattern):
            return json.loads(json.dumps(fragment))
    return None


def nullable(path: str) -> bool:
    """Whether the rule for `path` admits null (so a user may drop the key, which helm does with nulls)."""
    return "null" in str((rule_for(path) or {}).get("type"))


def group_description(path: str) -> str:
    if path in GROUP_DESCRIPTIONS:
        return GROUP_DESCRIPTIONS[path]
    last = path.rsplit(".", 1)[-1]
    if last in COMPONENT_GROUPS:
        return COMPONENT_GROUPS[last]
    raise KeyError(f"no description for object '{path}': add a `## @param` line or a group description")


def build(value: Any, path: str, descriptions: dict[str, str]) -> Schema:
    schema = rule_for(path) if path else None
    if schema is None:
        schema = inferred(value)
        if isinstance(value, dict):
            schema["additionalProperties"] = False
            schema["properties"] = {
                key: build(child, f"{path}.{key}" if path else key, descriptions) for key, child in value.items()
            }
            # helm drops keys whose value is null while merging, so nullable keys cannot be required.
            schema["required"] = [
                key
                for key, child in value.items()
                if child is not None and not nullable(f"{path}.{key}" if path else key)
            ]
    elif isinstance(value, dict) and "properties" in schema and schema.get("additionalProperties") is False:
        # A rule that fixes the shape: children with values still get their own rules/descriptions.
        for key, child in value.items():
            sub = f"{path}.{key}"
            if rule_for(sub) is not None:
                schema["properties"][key] = build(child, sub, descriptions)
            elif key not in schema["properties"]:
                raise KeyError(f"values.yaml has '{sub}' but the rule for '{path}' does not allow it")
            elif sub in descriptions:
                schema["properties"][key]["description"] = descriptions[sub]
    description = descriptions.get(path) or group_description(path)
    schema = {"description": description, **{k: v for k, v in schema.items() if k != "description"}}
    return schema


def generate() -> str:
    text = VALUES.read_text()
    values = yaml.safe_load(text)
    descriptions = param_descriptions(text)
    root = build(values, "", descriptions)
    # Parent charts may carry any globals: `global` must accept keys it does not know.
    root["properties"]["global"]["additionalProperties"] = True
    used = set(re.findall(r'"pattern": ("(?:[^"\\]|\\.)*")', json.dumps(root)))
    patterns = {json.loads(text) for text in used}
    meanings = {pattern: meaning for pattern, meaning in sorted(DESCRIPTIONS.items())
                if pattern in patterns or f"^$|{pattern}" in patterns}  # fmt: skip
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://github.com/tf-distributed/tf-distributed/charts/tf-distributed/values.schema.json",
        "title": "tf-distributed values",
        # what each pattern means, for messages (tfchart validate): never a regular expression shown to users
        "x-pattern-meanings": meanings,
        **root,
    }
    return json.dumps(schema, indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when the committed schema is out of date")
    options = parser.parse_args()
    generated = generate()
    if options.check:
        if not SCHEMA.exists() or SCHEMA.read_text() != generated:
            print(f"{SCHEMA} is out of date: run python scripts/gen_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(generated)
    print(f"wrote {SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
