"""B8: how long a run's GPUs stay held after its ending: from the chief Job's ending to its last ps/worker pod deleted.

The rendered supervisor (its container's command and environment from the chart's render, as a process, as the
tests run it) supervises a rendered release in the loopback API server (tests/kubeapi.py): the ps and worker
StatefulSets with their pods, the chief Job running, the supervisor's Deployment. Once the supervisor has made
its first look (and opened its watch), the chief Job ends as Kubernetes' Job controller writes it: Complete
(success), Failed BackoffLimitExceeded (failure), Failed DeadlineExceeded (deadline), or the Job deleted by hand
(deletion). The StatefulSet controller's part is played inline: once both StatefulSets are scaled to 0, their pods
are deleted (as the controller does after the scale), and the clock stops at the last one. In every third ending
of each kind the supervisor's watch is cut just before the ending (alternately with the API's event history
forgotten, so the resumed watch gets 410 Expired and lists again): none may be missed, and one that was would wait
for the next periodic look (10 s).

This is the supervisor's own share: the loopback API writes the Job's condition the moment the test ends it. A real
Job controller adds about a second before it writes the condition (REAL_JOB_CONTROLLER_SECONDS, measured once
against a real kube-apiserver, below). The polling supervisor before the watch (BEFORE: 7.75 s median of 5 when it
was measured) is not measured any more: its standard-library client cannot read a Job the API server sends chunked,
as the loopback API now does. The ratio is the p90 of the supervisor's latencies over every ending / the 10 s poll
interval; goal <= 0.2. A deletion's watch
is cut but its history never expired: without its DELETED event the supervisor cannot tell a deletion by hand from
one by `tfchart upgrade --recreate` and waits supervisor.chiefMissingSeconds (as a restarted one does).

    python bench/ending_latency.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from common import REPO, Result, print_rows

from tests.kubeapi import (
    KubeServer,
    condition,
    deployment,
    job,
    kube_server,
    manifest,
    pod,
    rendered,
    stateful_set,
)
from tfdcontract import CHIEF, PS, SUPERVISOR, WORKER
from tfdcontract.env import CHIEF_MISSING_ENV, KUBE_API_ENV, POLL_SECONDS_ENV, SERVICEACCOUNT_DIR_ENV

NAMESPACE = "ml-team"
RELEASE = "mnist"
PREFIX = f"{RELEASE}-tf-distributed"
POLL_SECONDS = 10.0  # the chart's supervisor.pollSeconds, the interval of today's polling supervisor
BEFORE = "1a4457c"  # the last commit whose supervisor only polls
# Issue 33's run against a real API server (kube-apiserver v1.36.2 with its Job, StatefulSet and garbage-collector
# controllers, RBAC on, a script playing the kubelet): the Job controller wrote Complete 1.0 s after the chief's pod
# succeeded, and the supervisor's scale reached the StatefulSets 22-55 ms after that condition.
REAL_JOB_CONTROLLER_SECONDS = 1.0
REAL_SUPERVISOR_SECONDS = (0.022, 0.055)
KINDS = ("success", "failure", "deadline", "deletion")
SETS = ("ps.replicas=1", "worker.replicas=2")
ENDING_TIMEOUT = 3 * POLL_SECONDS + 30  # far more than any ending takes, even one left to the periodic look


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The rendered container's environment (the namespace from its downward-API field)."""
    return {item["name"]: item.get("value", NAMESPACE) for item in container["env"]}


class Release:
    """The rendered release's objects in the API, and the supervisor's rendered command and environment."""

    def __init__(self) -> None:
        self.docs = rendered(sets=SETS, release=RELEASE, namespace=NAMESPACE)
        self.sets = [manifest(self.docs, "StatefulSet", role) for role in (PS, WORKER)]
        self.chief = manifest(self.docs, "Job", CHIEF)
        self.deployment = manifest(self.docs, "Deployment", SUPERVISOR)
        container = self.deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "-m", "trainer.supervisor"], container["command"]
        self.env = container_env(container)
        assert float(self.env[POLL_SECONDS_ENV]) == POLL_SECONDS, self.env[POLL_SECONDS_ENV]

    def load(self, server: KubeServer) -> list[str]:
        """A fresh cluster with the run going; the names of its ps/worker pods."""
        server.reset()
        server.add(*(stateful_set(doc) for doc in self.sets), job(self.chief, "running"), deployment(self.deployment))
        pods = [pod(doc, index=i) for doc in self.sets for i in range(doc["spec"]["replicas"])]
        server.add(*pods)
        return [p["metadata"]["name"] for p in pods]


def end(server: KubeServer, kind: str) -> None:
    """The chief Job's ending, as the Job controller writes it (or a person deleting it)."""
    name = f"{PREFIX}-chief"
    if kind == "deletion":
        server.delete("Job", NAMESPACE, name)
        return
    if kind == "success":
        done = ("CompletionsReached", "Reached expected number of succeeded pods")
        status = {"active": 0, "succeeded": 1, "conditions": [condition("SuccessCriteriaMet", *done),
                                                               condition("Complete", *done)]}
    else:
        why = (("BackoffLimitExceeded", "Job has reached the specified backoff limit") if kind == "failure"
               else ("DeadlineExceeded", "Job was active longer than specified deadline"))
        status = {"active": 0, "failed": 1, "conditions": [condition("FailureTarget", *why), condition("Failed", *why)]}
    server.update("Job", NAMESPACE, name, {"status": status})


def scaled_to_zero(server: KubeServer) -> bool:
    return all(server.objects[("statefulsets", NAMESPACE, f"{PREFIX}-{role}")]["spec"]["replicas"] == 0
               for role in (PS, WORKER))


def looked(server: KubeServer, watching: bool) -> Callable[[], bool]:
    """Whether the supervisor made its first look at the chief Job (and, watching, opened its watch)."""
    path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{PREFIX}-chief"
    return lambda: any(r.path == path for r in server.requests) and (
        not watching or any(r.call.verb == "watch" for r in server.requests))


@contextlib.contextmanager
def supervisor(server: KubeServer, env: dict[str, str], program: list[str], folder: Path) -> Iterator[None]:
    sa = folder / "sa"
    sa.mkdir(exist_ok=True)
    (sa / "token").write_text("bench-token\n")
    (sa / "namespace").write_text(NAMESPACE + "\n")
    environment = {**env, KUBE_API_ENV: server.url, SERVICEACCOUNT_DIR_ENV: str(sa), "PYTHONPATH": str(REPO),
                   "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen([sys.executable, *program], env=environment, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0].decode()
        if process.returncode not in (0, -15):
            raise SystemExit(f"B8: the supervisor exited {process.returncode}:\n{output[-3000:]}")


def one_ending(server: KubeServer, release: Release, kind: str, program: list[str], folder: Path, watching: bool,
               cut: str = "", offset: float = 0.0) -> float:
    """Seconds from the chief Job's ending, `offset` s after the supervisor's first look, to its last ps/worker pod
    deleted."""
    pods = release.load(server)
    with supervisor(server, release.env, program, folder):
        with server.answered_one:
            if not server.answered_one.wait_for(looked(server, watching), 60):
                raise SystemExit("B8: the supervisor never looked at the chief Job")
        time.sleep(offset)  # where in the supervisor's poll cycle the ending falls (the experiment, not a wait)
        if cut:
            server.cut_watches(expire=cut == "expired")
        with server.changed:
            ended = time.monotonic()
            end(server, kind)
            if not server.changed.wait_for(lambda: scaled_to_zero(server), ENDING_TIMEOUT):
                raise SystemExit(f"B8: a {kind} ending was not acted on in {ENDING_TIMEOUT:.0f} s")
        for name in pods:  # the StatefulSet controller, once scaled to 0: each pod marked, then gone
            server.update("Pod", NAMESPACE, name, {"metadata": {"deletionTimestamp": "2026-11-22T12:00:00Z"}})
            server.delete("Pod", NAMESPACE, name)
        return time.monotonic() - ended


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def results(repeat: int = 10) -> list[Result]:
    release = Release()
    latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cuts: dict[str, int] = {"cut": 0, "expired": 0}
    with tempfile.TemporaryDirectory(prefix="b8-") as temp, kube_server() as server:
        folder = Path(temp)
        for index in range(repeat):
            for kind in KINDS:
                cut = ("", "cut", "expired")[index % 3]
                if kind == "deletion" and cut == "expired":
                    cut = "cut"  # its DELETED event would be gone with the history: the grace applies (below)
                if cut:
                    cuts[cut] += 1
                latencies[kind].append(one_ending(server, release, kind, ["-m", "trainer.supervisor"], folder, True,
                                                  cut))
    every = [value for values in latencies.values() for value in values]
    ratio = p90(every) / POLL_SECONDS
    per_kind = ", ".join(f"{kind} {statistics.median(v):.2f}/{max(v):.2f}" for kind, v in latencies.items())
    details = [f"{kind}: " + " ".join(f"{value:.3f}" for value in values) for kind, values in latencies.items()]
    details.append(f"watch cut just before the ending in {cuts['cut']} endings, and the history expired too (410, "
                   f"listed again) in {cuts['expired']}; none missed: the slowest ending took {max(every):.2f} s "
                   f"(one left to the periodic look would take up to {POLL_SECONDS:.0f} s)")
    details.append("a deletion whose DELETED event the supervisor never gets (its watch's history expired, or it was "
                   "restarted) is not known to be one --recreate did not make: it waits supervisor.chiefMissingSeconds "
                   f"({release.env[CHIEF_MISSING_ENV]} s) for the Job to come back, as before")
    low, high = REAL_SUPERVISOR_SECONDS
    details.append(f"the supervisor's own share only: the loopback API writes the Job's condition at once. Against a "
                   f"real API server (issue 33) the Job controller wrote it {REAL_JOB_CONTROLLER_SECONDS:.1f} s after "
                   f"the chief's pod ended, and the supervisor's scale followed {low * 1000:.0f}-{high * 1000:.0f} ms "
                   f"later: a real ending frees ps/workers about {REAL_JOB_CONTROLLER_SECONDS + high:.1f} s after the "
                   "chief's pod, most of it the Job controller's")
    details.append(f"the polling supervisor before the watch ({BEFORE}) is not measured: its standard-library client "
                   "cannot read a Job sent chunked, as the API server sends one over 2 KiB (issue 33); measured "
                   "before that: median 7.75 s, max 9.16 s of 5 successes")
    return [Result(
        "B8", "ending -> last ps/worker pod deleted (rendered supervisor, loopback API)",
        f"median/max s per kind: {per_kind}; p90 of all {len(every)} endings {p90(every):.2f} s", ratio,
        "<= 0.2 (p90 / the 10 s poll)", ratio <= 0.2, details,
    )]  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10, help="endings of each kind")
    arguments = parser.parse_args()
    print_rows(results(arguments.repeat))
