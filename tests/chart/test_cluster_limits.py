"""The largest cluster the chart allows starts, and one task more is refused with the limit named.

TensorFlow reads the cluster map from one environment variable, TF_CONFIG, and Linux refuses any
single argument or NAME=value string over MAX_ARG_STRLEN (131072 bytes, NUL included). The schema's
maxima of ps.replicas and worker.replicas (scripts/gen_schema.py MAX_PS / MAX_WORKERS) are the most
tasks that fit with the longest names the chart allows; validateValues (_validate.tpl) computes the
size from the real names for every other combination. Here helm 3 and 4 render the largest clusters,
whose manifests run through the real /bin/sh prelude with their rendered environment; one task more
is refused by the chart's own rule (past the schema) and by the kernel; and the chart's size helpers
are held to len() of rendered maps.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.chart.test_render import run_prelude
from tests.chartlib import CHART, REPO, by_kind, env_of, helm, helm_path, named, parse_all, pod_spec, render, template

ENV_LIMIT = 131072  # Linux MAX_ARG_STRLEN: one argument or NAME=value string, NUL included
DNS_NAME_MAX = 253
LONGEST_RELEASE = "a" * 53  # helm's longest release name: a 45-character prefix with a hash
LONGEST_NAMESPACE = "n" * 63
LONGEST_PORT = 65535
SKIP_SCHEMA = ("--skip-schema-validation",)  # past the schema's maxima, to the chart's own rule


def generator() -> ModuleType:
    """scripts/gen_schema.py, which states MAX_PS and MAX_WORKERS."""
    spec = importlib.util.spec_from_file_location("gen_schema", REPO / "scripts" / "gen_schema.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN_SCHEMA = generator()
MAX_WORKERS: int = GEN_SCHEMA.MAX_WORKERS
MAX_PS: int = GEN_SCHEMA.MAX_PS
#: (ps, workers) of the largest clusters: workers alone, and parameter servers next to the one worker
#: parameter_server needs.
LARGEST = {"workers": (0, MAX_WORKERS), "ps": (MAX_PS, 1)}


def domain_of_length(length: int) -> str:
    """A valid clusterDomain of exactly `length` characters, in DNS labels of at most 63."""
    return "".join("." if i % 64 == 63 and i < length - 1 else "d" for i in range(length))


def map_sets(strategy: str, ps: int, workers: int, domain: str, ports: list[int]) -> list[str]:
    """The --set values that shape the cluster map (ports: chief, ps, worker)."""
    return [
        f"training.strategy={strategy}",
        f"ps.replicas={ps}",
        f"worker.replicas={workers}",
        f"training.batchSize={1 + workers}",  # synchronous replicas split the batch evenly
        f"clusterDomain={domain}",
        *(f"{role}.service.port={port}" for role, port in zip(("chief", "ps", "worker"), ports, strict=True)),
    ]


def longest_sets(ps: int, workers: int, domain: str) -> list[str]:
    strategy = "parameter_server" if ps else "multi_worker_mirrored"
    return map_sets(strategy, ps, workers, domain, [LONGEST_PORT] * 3)


@cache
def longest_domain(ps: int, workers: int) -> str:
    """The longest clusterDomain the chart allows with the longest release and namespace: the length its
    DNS rule names when a 253-character domain makes task hosts too long."""
    sets = longest_sets(ps, workers, domain_of_length(DNS_NAME_MAX))
    result = template("4", sets=sets, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    assert result.returncode != 0
    found = re.search(r"but DNS names are limited to 253, .* Fix: --set clusterDomain=<at most (\d+) characters>",
                      result.stderr)  # fmt: skip
    assert found, result.stderr
    return domain_of_length(int(found.group(1)))


def kernel_accepts(name: str, value: str) -> bool:
    """Whether execve takes NAME=value in the environment (E2BIG: it does not)."""
    try:
        subprocess.run(["/bin/true"], env={name: value}, check=True)
    except OSError as error:
        assert error.errno == errno.E2BIG, error
        return False
    return True


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def env_bytes(name: str, value: str) -> int:
    """What NAME=value costs execve: its bytes and a NUL."""
    return len(f"{name}={value}".encode()) + 1


def test_this_kernel_limits_one_variable_to_max_arg_strlen() -> None:
    # NAME=value plus its NUL: 131072 bytes start, 131073 do not.
    assert kernel_accepts("TF_CONFIG", "x" * (ENV_LIMIT - len("TF_CONFIG=") - 1))
    assert not kernel_accepts("TF_CONFIG", "x" * (ENV_LIMIT - len("TF_CONFIG=")))


def test_the_schema_states_the_generators_maxima() -> None:
    assert (MAX_WORKERS, MAX_PS) == (499, 510)  # stated in values.yaml and the chart README
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert schema["worker"]["properties"]["replicas"]["maximum"] == MAX_WORKERS
    assert schema["ps"]["properties"]["replicas"]["maximum"] == MAX_PS
    values = (CHART / "values.yaml").read_text()
    assert f"ps.replicas Number of parameter-server tasks (StatefulSet replicas), at most {MAX_PS}:" in values
    assert f"worker.replicas Number of worker tasks (StatefulSet replicas), at most {MAX_WORKERS}:" in values


def container_of(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    [doc] = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    container: dict[str, Any] = pod_spec(doc)["containers"][0]
    return container


def name_of(docs: list[dict[str, Any]], kind: str, suffix: str) -> str:
    [name] = [d["metadata"]["name"] for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    return name


def tf_config_through_the_prelude(container: dict[str, Any], hostname: str, index: int) -> str:
    """The TF_CONFIG the prelude execs the trainer with (so the kernel took it)."""
    result = run_prelude(container, hostname, str(index))
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def last_tasks(docs: list[dict[str, Any]], ps: int, workers: int) -> list[tuple[str, dict[str, Any], str, int]]:
    """(role, container, hostname, index) of the chief, the evaluator and each role's last task: those with
    the longest TF_CONFIG of their role."""
    tasks = []
    if any(d["metadata"]["name"].endswith("-chief") for d in by_kind(docs, "Job")):
        tasks.append(("chief", container_of(docs, "Job", "-chief"), name_of(docs, "Job", "-chief"), 0))
    if any(d["metadata"]["name"].endswith("-evaluator") for d in by_kind(docs, "Job")):
        tasks.append(("evaluator", container_of(docs, "Job", "-evaluator"), name_of(docs, "Job", "-evaluator"), 0))
    for role, count in (("ps", ps), ("worker", workers)):
        if count:
            name = name_of(docs, "StatefulSet", f"-{role}")
            tasks.append((role, container_of(docs, "StatefulSet", f"-{role}"), f"{name}-{count - 1}", count - 1))
    return tasks


def hosts(cluster: dict[str, list[str]]) -> list[str]:
    return [address.rsplit(":", 1)[0] for tasks in cluster.values() for address in tasks]


@pytest.mark.parametrize("shape", sorted(LARGEST))
def test_the_largest_cluster_starts_with_the_longest_names(shape: str, helm_major: str) -> None:
    ps, workers = LARGEST[shape]
    sets = longest_sets(ps, workers, longest_domain(ps, workers))
    docs = render(helm_major, sets=sets, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    cluster_text = env_of(container_of(docs, "Job", "-chief"))["TFD_CLUSTER"]
    cluster = json.loads(cluster_text)
    assert (len(cluster.get("ps", [])), len(cluster["worker"])) == (ps, workers)
    assert max(map(len, hosts(cluster))) == DNS_NAME_MAX
    assert len(name_of(docs, "Job", "-chief")) == len("-chief") + 45  # the longest object-name prefix
    # Each role's last task has its longest index, so its longest TF_CONFIG; the kernel takes them all.
    sizes = []
    for role, container, hostname, index in last_tasks(docs, ps, workers):
        assert env_of(container)["TFD_CLUSTER"] == cluster_text
        tf_config = tf_config_through_the_prelude(container, hostname, index)
        assert json.loads(tf_config) == {"cluster": cluster, "task": {"type": role, "index": index}}
        assert tf_config == compact(json.loads(tf_config))  # compact, as the chart counts it
        sizes.append(env_bytes("TF_CONFIG", tf_config))
    assert max(sizes) <= ENV_LIMIT
    # The helm test pod carries the same map in the same variable: it starts too.
    test_pod = container_of(docs, "Job", "-test")
    assert env_of(test_pod)["TFD_CLUSTER"] == cluster_text
    probe = [sys.executable, "-c", "import json, os; print(len(json.loads(os.environ['TFD_CLUSTER'])['chief']))"]
    env = {"PATH": os.environ["PATH"], **{e["name"]: e["value"] for e in test_pod["env"] if "value" in e}}
    assert subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout == "1\n"


REFUSAL = re.compile(
    r"  - (?P<path>[a-z.]+): the cluster map of (?P<tasks>\d+) tasks would be (?P<map>\d+) bytes and TF_CONFIG "
    rf"(?P<tf_config>\d+) bytes; Linux limits one environment variable to {ENV_LIMIT} bytes \(MAX_ARG_STRLEN\), so "
    r"the pods would not start \(Argument list too long\)\. Fix: fewer tasks \(--set (?P<fix>\S+)\) or shorter "
    r"release/namespace names or clusterDomain\n"
)


@pytest.mark.parametrize("shape", sorted(LARGEST))
def test_one_task_more_is_refused_by_the_chart_and_by_the_kernel(shape: str, helm_major: str) -> None:
    ps, workers = LARGEST[shape]
    role, fitting = ("ps", MAX_PS) if ps else ("worker", MAX_WORKERS)
    more_ps, more_workers = (ps + 1, workers) if ps else (ps, workers + 1)
    domain = longest_domain(ps, workers)  # one more task makes no host longer: the same names
    refused = template(helm_major, sets=longest_sets(more_ps, more_workers, domain), release=LONGEST_RELEASE,
                       namespace=LONGEST_NAMESPACE, extra=SKIP_SCHEMA)  # fmt: skip
    assert refused.returncode != 0
    assert "tf-distributed: 1 problem(s) in values:" in refused.stderr, refused.stderr
    found = REFUSAL.search(refused.stderr)
    assert found, refused.stderr
    assert found["path"] == f"{role}.replicas" and found["fix"] == f"{role}.replicas={fitting}"
    assert int(found["tasks"]) == 1 + more_ps + more_workers
    # The map and TF_CONFIG of the refused cluster, built like the rendered ones: the sizes the chart
    # names are theirs, and the kernel refuses them.
    docs = render(helm_major, sets=longest_sets(ps, workers, domain), release=LONGEST_RELEASE,
                  namespace=LONGEST_NAMESPACE)  # fmt: skip
    container = container_of(docs, "StatefulSet", f"-{role}")
    cluster = json.loads(env_of(container)["TFD_CLUSTER"])
    service_host, port = cluster[role][-1].rsplit(":", 1)
    pod, rest = service_host.split(".", 1)
    pod_prefix = pod.rsplit("-", 1)[0]
    cluster[role].append(f"{pod_prefix}-{fitting}.{rest}:{port}")
    bigger_map = compact(cluster)
    assert len(bigger_map) == int(found["map"])
    last = [(task, len(addresses) - 1) for task, addresses in cluster.items()]
    tf_configs = [compact({"cluster": cluster, "task": {"type": task, "index": index}}) for task, index in last]
    assert max(env_bytes("TF_CONFIG", text) for text in tf_configs) == int(found["tf_config"]) > ENV_LIMIT
    assert not kernel_accepts("TF_CONFIG", max(tf_configs, key=len))
    env = [dict(item, value=bigger_map) if item["name"] == "TFD_CLUSTER" else item for item in container["env"]]
    with pytest.raises(OSError) as kernel:
        run_prelude(dict(container, env=env), f"{pod_prefix}-{fitting}", str(fitting))
    assert kernel.value.errno == errno.E2BIG


def tfchart_validate(major: str, *args: str) -> tuple[int, dict[str, Any]]:
    """The real `tfchart validate -o json` on helm <major>: (exit code, report)."""
    argv = [sys.executable, "-m", "tfchart", "--helm", str(helm_path(major)), "validate", "-o", "json", *args]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.parametrize(("role", "maximum"), [("worker", MAX_WORKERS), ("ps", MAX_PS)])
def test_the_schema_refuses_one_task_more(role: str, maximum: int, helm_major: str) -> None:
    item = f"{role}.replicas={maximum + 1}"
    result = template(helm_major, sets=[item])
    assert result.returncode != 0
    assert str(maximum) in result.stderr
    assert (f"{role}.replicas" if helm_major == "3" else f"at '/{role}/replicas'") in result.stderr
    code, report = tfchart_validate(helm_major, "--set", item)
    assert code == 1 and not report["rulesChecked"]
    [problem] = report["problems"]
    assert (problem["path"], problem["file"]) == (f"{role}.replicas", f"--set {item}")
    assert problem["value"] == str(maximum + 1)
    assert str(maximum) in problem["message"]


def test_a_larger_combination_is_refused_with_the_limit_the_size_and_a_count_that_fits(helm_major: str) -> None:
    # One parameter server next to the most workers: one address too many with the longest names.
    sets = [*longest_sets(0, MAX_WORKERS, longest_domain(0, MAX_WORKERS)), "training.strategy=parameter_server",
            "ps.replicas=1"]  # fmt: skip
    result = template(helm_major, sets=sets, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    assert result.returncode != 0
    # tfchart validate, given the release, says word for word what the chart says.
    code, report = tfchart_validate(helm_major, LONGEST_RELEASE, "-n", LONGEST_NAMESPACE,
                                    *(arg for item in sets for arg in ("--set", item)))  # fmt: skip
    assert code == 1 and report["rulesChecked"]
    [problem] = report["problems"]
    assert problem["path"] == "worker.replicas"
    assert f"Linux limits one environment variable to {ENV_LIMIT} bytes" in problem["message"]
    assert problem["fix"] == f"fewer tasks (--set worker.replicas={MAX_WORKERS - 1}) or " + (
        "shorter release/namespace names or clusterDomain"
    )
    assert f"  - {problem['path']}: {problem['message']}. Fix: {problem['fix']}\n" in result.stderr
    fewer = [*sets, f"worker.replicas={MAX_WORKERS - 1}"]
    fixed = template(helm_major, sets=fewer, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    assert fixed.returncode == 0, fixed.stderr


# The chart's own size helpers, rendered next to the map they describe.
SIZE_PROBE = """\
{{- $tasks := include "tf-distributed.clusterTasks" . | fromJson }}
{{- $counts := dict "context" . "ps" (int $tasks.ps) "workers" (int $tasks.worker) }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: size-probe
data:
  mapBytes: {{ include "tf-distributed.clusterMapBytes" $counts | quote }}
  tfConfigBytes: {{ include "tf-distributed.tfConfigBytes" $counts | quote }}
  longestTaskHost: {{ include "tf-distributed.longestTaskHost" . | quote }}
"""


def size_probe_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart with one more template: a ConfigMap of what validateValues computes of the cluster map."""
    chart = tmp_path_factory.mktemp("size-probe") / "tf-distributed"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-size-probe.yaml").write_text(SIZE_PROBE)
    return chart


@pytest.fixture(scope="module")
def probe_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return size_probe_chart(tmp_path_factory)


@pytest.mark.parametrize("seed", range(12))
def test_the_charts_size_helpers_match_the_rendered_map(seed: int, probe_chart: Path) -> None:
    rng = random.Random(seed)
    release = rng.choice(["mnist", "x", "team-a-tf-distributed-run", "r" + "e" * rng.randrange(0, 52)])
    namespace = "n" * rng.randrange(1, 64)
    strategy = rng.choice(["parameter_server", "multi_worker_mirrored", "mirrored"])
    ps, workers = rng.randrange(1, 40), rng.randrange(1, 130)
    ports = [rng.choice([1, 80, 2222, 65535]) for _ in range(3)]
    domain = domain_of_length(rng.randrange(3, 60))
    overrides = rng.choice([[], ["nameOverride=tfd"], ["fullnameOverride=" + "f" * rng.randrange(1, 46)]])
    sets = [
        *map_sets(strategy, ps, workers, domain, ports),
        f"evaluator.enabled={rng.choice(['true', 'false'])}",
        *overrides,
    ]
    args = ["template", release, str(probe_chart), "--namespace", namespace]
    result = helm("4", *args, *(arg for item in sets for arg in ("--set", item)))
    assert result.returncode == 0, result.stderr
    docs = parse_all(result.stdout)
    computed = named(docs, "ConfigMap", "size-probe")["data"]
    cluster_text = env_of(container_of(docs, "Job", "-chief"))["TFD_CLUSTER"]
    assert int(computed["mapBytes"]) == len(cluster_text)
    cluster = json.loads(cluster_text)
    longest = json.loads(computed["longestTaskHost"])
    role, _, index = longest["task"].partition(" ")
    assert longest["length"] == len(cluster[role][int(index or 0)].rsplit(":", 1)[0]) == max(map(len, hosts(cluster)))
    tasks = last_tasks(docs, len(cluster.get("ps", [])), len(cluster.get("worker", [])))
    tf_configs = [tf_config_through_the_prelude(container, hostname, index) for _, container, hostname, index in tasks]
    assert int(computed["tfConfigBytes"]) == max(env_bytes("TF_CONFIG", text) for text in tf_configs)
