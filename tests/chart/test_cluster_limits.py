"""The largest cluster the chart allows starts, and one task more is refused with the limit named.

TensorFlow reads the cluster map from one environment variable, TF_CONFIG, and Linux refuses any
single argument or NAME=value string over MAX_ARG_STRLEN (131072 bytes, NUL included). The schema's
maxima of ps.replicas and worker.replicas are the most tasks that fit with the longest names the
chart allows (tfchart/rules.py MAX_PS / MAX_WORKERS); validateValues and its twin rules.py compute
the exact size from the real names for every other combination. Here the rendered manifests run
through the real /bin/sh prelude with their rendered environment.
"""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
from typing import Any

import pytest

from tests.chart.test_render import run_prelude
from tests.chartlib import CHART, by_kind, env_of, pod_spec, render, template
from tfchart import rules
from tfchart.validate import validate

LONGEST_RELEASE = "a" * 53  # helm's longest release name: a 45-character prefix with a hash
LONGEST_NAMESPACE = "n" * 63


def domain_of_length(length: int) -> str:
    """A valid clusterDomain of exactly `length` characters (DNS labels of at most 63)."""
    first = min(40, length - 2)
    return f"{'c' * first}.{'d' * (length - first - 1)}"


def longest(ps: int, workers: int) -> tuple[rules.ClusterShape, list[str]]:
    """The shape of the longest names for these counts, and the --set values that render it."""
    shape = rules.longest_shape(ps, workers)
    strategy = "parameter_server" if ps else "multi_worker_mirrored"
    return shape, map_sets(strategy, ps, workers, domain_of_length(shape.domain), [65535, 65535, 65535])


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


def kernel_accepts(name: str, value: str) -> bool:
    """Whether execve takes NAME=value in the environment (E2BIG: it does not)."""
    try:
        subprocess.run(["/bin/true"], env={name: value}, check=True)
    except OSError as error:
        assert error.errno == errno.E2BIG, error
        return False
    return True


def test_this_kernel_limits_one_variable_to_max_arg_strlen() -> None:
    # NAME=value plus its NUL: 131072 bytes start, 131073 do not.
    assert kernel_accepts("TF_CONFIG", "x" * (rules.ENV_LIMIT - len("TF_CONFIG=") - 1))
    assert not kernel_accepts("TF_CONFIG", "x" * (rules.ENV_LIMIT - len("TF_CONFIG=")))


def test_schema_maxima_are_computed_from_the_longest_names() -> None:
    assert (rules.MAX_WORKERS, rules.MAX_PS) == (499, 510)  # stated in values.yaml and the chart README
    for ps, workers in ((0, rules.MAX_WORKERS), (rules.MAX_PS, 1)):
        shape, _ = longest(ps, workers)
        assert shape.longest_host()[1] == rules.DNS_NAME_MAX
        assert shape.fits()
    assert not longest(0, rules.MAX_WORKERS + 1)[0].fits()
    assert not longest(rules.MAX_PS + 1, 1)[0].fits()
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert schema["worker"]["properties"]["replicas"]["maximum"] == rules.MAX_WORKERS
    assert schema["ps"]["properties"]["replicas"]["maximum"] == rules.MAX_PS
    values = (CHART / "values.yaml").read_text()
    assert f"ps.replicas Number of parameter-server tasks (StatefulSet replicas), at most {rules.MAX_PS}:" in values
    assert f"worker.replicas Number of worker tasks (StatefulSet replicas), at most {rules.MAX_WORKERS}:" in values


def container_of(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    [doc] = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    container: dict[str, Any] = pod_spec(doc)["containers"][0]
    return container


def tf_config_through_the_prelude(container: dict[str, Any], hostname: str, index: int) -> dict[str, Any]:
    result = run_prelude(container, hostname, str(index))
    assert result.returncode == 0, result.stderr[-2000:]
    tf_config: dict[str, Any] = json.loads(result.stdout)
    # The whole NAME=value string, as execve counted it.
    assert len(f"TF_CONFIG={result.stdout.strip()}".encode()) + 1 <= rules.ENV_LIMIT
    return tf_config


@pytest.mark.parametrize(("ps", "workers"), [(0, rules.MAX_WORKERS), (rules.MAX_PS, 1)], ids=["workers", "ps"])
def test_the_largest_cluster_starts_with_the_longest_names(ps: int, workers: int, helm_major: str) -> None:
    shape, sets = longest(ps, workers)
    docs = render(helm_major, sets=sets, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    chief = container_of(docs, "Job", "-chief")
    cluster_text = env_of(chief)["TFD_CLUSTER"]
    assert len(cluster_text) == shape.map_bytes()
    cluster = json.loads(cluster_text)
    assert max(len(address.rsplit(":", 1)[0]) for tasks in cluster.values() for address in tasks) == 253
    # Each role's last task has its longest index, so its longest TF_CONFIG.
    sizes = [len(json.dumps(tf_config_through_the_prelude(chief, "chief", 0), separators=(",", ":")))]
    for role, count in (("ps", ps), ("worker", workers)):
        if not count:
            continue
        container = container_of(docs, "StatefulSet", f"-{role}")
        assert env_of(container)["TFD_CLUSTER"] == cluster_text
        [name] = [d["metadata"]["name"] for d in by_kind(docs, "StatefulSet") if d["metadata"]["name"].endswith(role)]
        tf_config = tf_config_through_the_prelude(container, f"{name}-{count - 1}", count - 1)
        assert tf_config["task"] == {"type": role, "index": count - 1}
        assert len(tf_config["cluster"][role]) == count
        sizes.append(len(json.dumps(tf_config, separators=(",", ":"))))
    assert len("TF_CONFIG=") + max(sizes) + 1 == shape.tf_config_bytes() <= rules.ENV_LIMIT
    # The helm test pod carries the same map in the same variable: it starts too.
    test_pod = container_of(docs, "Job", "-test")
    assert env_of(test_pod)["TFD_CLUSTER"] == cluster_text
    probe = [sys.executable, "-c", "import json, os; print(len(json.loads(os.environ['TFD_CLUSTER'])['chief']))"]
    env = {"PATH": os.environ["PATH"], **{e["name"]: e["value"] for e in test_pod["env"] if "value" in e}}
    assert subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout == "1\n"


def test_one_task_more_does_not_start() -> None:
    """The map of MAX_WORKERS + 1 tasks, built like the rendered one, is refused by the kernel."""
    _, sets = longest(0, rules.MAX_WORKERS)
    docs = render("4", sets=sets, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    container = container_of(docs, "StatefulSet", "-worker")
    cluster = json.loads(env_of(container)["TFD_CLUSTER"])
    last = cluster["worker"][-1]
    service_host, port = last.rsplit(":", 1)
    pod, rest = service_host.split(".", 1)
    cluster["worker"].append(f"{pod.rsplit('-', 1)[0]}-{rules.MAX_WORKERS}.{rest}:{port}")
    bigger_map = json.dumps(cluster, separators=(",", ":"))
    assert len(bigger_map) == longest(0, rules.MAX_WORKERS + 1)[0].map_bytes()
    env = [dict(item, value=bigger_map) if item["name"] == "TFD_CLUSTER" else item for item in container["env"]]
    bigger = dict(container, env=env)
    with pytest.raises(OSError) as refused:
        run_prelude(bigger, pod, str(rules.MAX_WORKERS))
    assert refused.value.errno == errno.E2BIG


@pytest.mark.parametrize(
    ("sets", "key", "maximum"),
    [
        ([f"worker.replicas={rules.MAX_WORKERS + 1}"], "worker/replicas", rules.MAX_WORKERS),
        ([f"ps.replicas={rules.MAX_PS + 1}"], "ps/replicas", rules.MAX_PS),
    ],
    ids=["workers", "ps"],
)
def test_the_schema_refuses_one_task_more(sets: list[str], key: str, maximum: int, helm_major: str) -> None:
    result = template(helm_major, sets=sets)
    assert result.returncode != 0
    assert str(maximum) in result.stderr
    assert (key.replace("/", ".") if helm_major == "3" else f"at '/{key}'") in result.stderr
    report = validate(CHART, sets=[("--set", item) for item in sets])
    [problem] = report.problems
    assert (problem.path, problem.message) == (key.replace("/", "."), f"must be <= {maximum} (got {maximum + 1})")


def test_a_larger_combination_is_refused_with_the_limit_the_size_and_a_count_that_fits(helm_major: str) -> None:
    # One parameter server next to the most workers: one address too many with the longest names.
    _, sets = longest(0, rules.MAX_WORKERS)
    sets = [*sets, "training.strategy=parameter_server", "ps.replicas=1"]
    result = template(helm_major, sets=sets, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    assert result.returncode != 0
    # tfchart validate does not know the release: it assumes the longest names, which these are...
    report = validate(CHART, sets=[("--set", item) for item in sets])
    [assumed] = report.problems
    assert assumed.path == "worker.replicas" and "(with the longest release name and namespace" in assumed.message
    # ...and with the release named, rules.py says word for word what the chart says.
    [problem] = rules.check(report.values, rules.Release(LONGEST_RELEASE, LONGEST_NAMESPACE))
    assert problem.path == "worker.replicas"
    assert f"Linux limits one environment variable to {rules.ENV_LIMIT} bytes" in problem.message
    assert problem.fix == f"fewer tasks (--set worker.replicas={rules.MAX_WORKERS - 1}) or " + (
        "shorter release/namespace names or clusterDomain"
    )
    assert f"  - {problem.path}: {problem.message}. Fix: {problem.fix}" in result.stderr
    fewer = [*sets, f"worker.replicas={rules.MAX_WORKERS - 1}"]
    fixed = template(helm_major, sets=fewer, release=LONGEST_RELEASE, namespace=LONGEST_NAMESPACE)
    assert fixed.returncode == 0, fixed.stderr


def rendered_shape(docs: list[dict[str, Any]]) -> tuple[str, str]:
    container = container_of(docs, "Job", "-chief")
    cluster = json.loads(env_of(container)["TFD_CLUSTER"])
    return env_of(container)["TFD_CLUSTER"], cluster["chief"][0]


@pytest.mark.parametrize("seed", range(12))
def test_size_formula_and_names_match_the_rendered_map(seed: int) -> None:
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
    docs = render("4", sets=sets, release=release, namespace=namespace)
    text, chief = rendered_shape(docs)
    report = validate(CHART, sets=[("--set", item) for item in sets])
    assert report.valid, report.problems
    names = rules.names(report.values, rules.Release(release, namespace))
    assert chief.startswith(f"{names.fullname}-chief.{names.fullname}-chief.{namespace}.svc.{domain}:")
    shape = rules.cluster_shape(report.values, names)
    assert shape is not None
    assert shape.map_bytes() == len(text)
    cluster = json.loads(text)
    hosts = [address.rsplit(":", 1)[0] for tasks in cluster.values() for address in tasks]
    assert shape.longest_host()[1] == max(map(len, hosts))
