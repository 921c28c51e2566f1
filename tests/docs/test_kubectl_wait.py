"""The docs' `kubectl wait` commands (docs/lifecycle.md, "One object to wait on"), run by the real kubectl
(scripts/install_kubectl.sh, which `make setup` runs) against the tests' API server (tests/kubeapi.py, over a real
socket: discovery, get, list+watch): for each kind of release, on the one object `tfchart status -o json` names, in
each way a run ends, before and while kubectl waits. The fallbacks the docs give for a release without the run
supervisor (the object's own conditions) too."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import kubeapi as kf
from tests.chartlib import REPO
from tests.kubeapi import KubeServer, kube_server
from tfdcontract import ending_annotations

NS = "ml-training"
DOC = REPO / "docs" / "lifecycle.md"
DOC_OBJECT = "job/mnist-tf-distributed-chief"
#: Each kind of release (its --set values) and the run's object, the one to wait on.
KINDS = {
    "parameter_server": ((), "job/mnist-tf-distributed-chief"),
    "multi_worker_mirrored without a chief": (("training.strategy=multi_worker_mirrored", "chief.replicas=0"),
                                              "job/mnist-tf-distributed-worker"),
    "mirrored": (("training.strategy=mirrored",), "job/mnist-tf-distributed-chief"),
    "single_device": (("training.strategy=single_device",), "job/mnist-tf-distributed-chief"),
    "jobset": (("workload.kind=jobset",), "jobset/mnist-tf-distributed"),
    "jobset without a chief": (("workload.kind=jobset", "training.strategy=multi_worker_mirrored", "chief.replicas=0"),
                               "jobset/mnist-tf-distributed"),
}  # fmt: skip
#: How a run ends: the object's state (as its controller leaves it) and the ending the supervisor (or `tfchart stop`)
#: records; whether that is a success.
ENDINGS = {
    "succeeded": ("complete", "Succeeded: Job completed", True),
    "failed": ("failed", "Failed: BackoffLimitExceeded", False),
    "stalled": ("failed", "Stalled: step 1200 has not risen for 1800 s", False),
    "start-timeout": ("failed", "not every pod started within 600 s", False),
    "stopped": ("stopped", "stopped by tfchart stop (training ended early)", False),
}


def doc_commands() -> tuple[str, str]:
    """The section's two commands: the one that returns when the run ends, the one that tells success."""
    section = DOC.read_text(encoding="utf-8").split("## One object to wait on", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "docs/lifecycle.md, One object to wait on: no bash block"
    commands = [line for line in block.group(1).splitlines() if line.startswith("kubectl wait ")]
    assert len(commands) == 2 and all(DOC_OBJECT in command for command in commands), commands
    return commands[0], commands[1]


@pytest.fixture(scope="module")
def kubectl() -> Path:
    found = Path(os.environ.get("TFD_TOOLS_DIR", REPO / ".tools")) / "kubectl" / "kubectl"
    if not found.is_file():
        pytest.fail(f"no kubectl at {found}: run `bash scripts/install_kubectl.sh` (`make setup` does)", pytrace=False)
    return found


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as running, kf.discovered("jobset.x-k8s.io/v1alpha2"):
        yield running


def run_kubectl(kubectl: Path, server: KubeServer, command: str, tmp_path: Path) -> subprocess.Popen[str]:
    """The documented command line, by bash, with this kubectl first on PATH and the server's kubeconfig (kubectl's
    discovery cache in a folder of its own, so a cache of another server is never read)."""
    env = {**os.environ, "PATH": f"{kubectl.parent}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path),
           "KUBECONFIG": str(server.kubeconfig(NS)), "KUBECACHEDIR": str(tmp_path / "cache")}  # fmt: skip
    return subprocess.Popen(["bash", "-c", command], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def outcome(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out + err


def add_release(server: KubeServer, sets: tuple[str, ...], state: str) -> dict[str, Any]:
    """The release's run object in `state` (running, complete, failed, stopped: suspended by `tfchart stop`), with
    its Services (what `tfchart status` finds a release by besides). Returns the run object."""
    docs = kf.rendered(sets=sets, namespace=NS)
    server.add(*(kf.service(doc) for doc in docs if doc["kind"] == "Service"))
    jobset = next((doc for doc in docs if doc["kind"] == "JobSet"), None)
    if jobset is not None:
        states = {"running": "running", "complete": "completed", "failed": "failed", "stopped": "suspended"}
        run = kf.jobset(jobset, states[state])
        server.add(*kf.crds(*kf.JOBSET_CRDS), run)
        return run
    role = "worker" if "chief.replicas=0" in sets else "chief"
    run = kf.job(kf.manifest(docs, "Job", role), "running" if state == "stopped" else state)
    if state == "stopped":
        run["spec"]["suspend"] = True
    server.add(run)
    return run


def record_ending(server: KubeServer, run: dict[str, Any], ending: str, reason: str) -> None:
    """The run record, as the supervisor (or `tfchart stop`) writes it on the run's object."""
    record = ending_annotations(ending, reason, "2026-11-28T10:00:00Z")
    server.update(run["kind"], NS, run["metadata"]["name"], {"metadata": {"annotations": record}})


@pytest.mark.parametrize("kind", KINDS)
def test_status_names_the_one_object_and_the_docs_commands(kind: str, server: KubeServer,
                                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    sets, expected = KINDS[kind]
    add_release(server, sets, "running")
    code, out, err = kf.tfchart_in_process(server, capsys, NS, "status", "mnist", "-n", NS, "-o", "json")
    assert code == 0, err
    run = json.loads(out)["run"]
    until_ended, succeeded = doc_commands()
    assert run == {"object": expected, "wait": until_ended.replace(DOC_OBJECT, expected),
                   "succeeded": succeeded.replace(DOC_OBJECT, expected)}  # fmt: skip


@pytest.mark.parametrize(("kind", "ending"), [*((kind, ending) for kind in KINDS for ending in ("succeeded", "failed")),
                                             *((kind, ending) for kind in ("parameter_server", "jobset")
                                               for ending in ("stalled", "start-timeout", "stopped"))])
def test_the_docs_wait_returns_once_the_run_ended_and_tells_success(
    kind: str, ending: str, server: KubeServer, kubectl: Path, tmp_path: Path
) -> None:
    sets, target = KINDS[kind]
    state, reason, success = ENDINGS[ending]
    until_ended, succeeded = (command.replace(DOC_OBJECT, target) for command in doc_commands())
    run = add_release(server, sets, "running")
    code, said = outcome(run_kubectl(kubectl, server, until_ended.replace("--timeout=24h", "--timeout=0"), tmp_path))
    assert code == 1 and "condition not met" in said, said  # it still runs: no answer yet
    server.delete(run["kind"], NS, run["metadata"]["name"])
    record_ending(server, add_release(server, sets, state), ending, reason)
    code, said = outcome(run_kubectl(kubectl, server, until_ended, tmp_path))
    assert code == 0 and "condition met" in said, said
    code, said = outcome(run_kubectl(kubectl, server, succeeded, tmp_path))
    assert code == (0 if success else 1), said


@pytest.mark.parametrize("kind", ["parameter_server", "jobset"])
def test_a_run_that_ends_while_kubectl_waits(kind: str, server: KubeServer, kubectl: Path, tmp_path: Path) -> None:
    sets, target = KINDS[kind]
    until_ended, _ = (command.replace(DOC_OBJECT, target) for command in doc_commands())
    run = add_release(server, sets, "running")
    waiting = run_kubectl(kubectl, server, until_ended, tmp_path)
    with server.answered_one:  # kubectl watches the object: it saw the run still going
        assert server.answered_one.wait_for(lambda: any(call.verb == "watch" for call in server.calls), 60)
    assert waiting.poll() is None
    record_ending(server, run, "succeeded", "Succeeded: Job completed")
    code, said = outcome(waiting)
    assert code == 0 and "condition met" in said, said


@pytest.mark.parametrize("state", ["complete", "failed"])
@pytest.mark.parametrize("kind", ["parameter_server", "multi_worker_mirrored without a chief", "jobset"])
def test_without_the_supervisor_the_objects_own_status(
    kind: str, state: str, server: KubeServer, kubectl: Path, tmp_path: Path
) -> None:
    """No run record: a Job's Complete or Failed condition, a JobSet's terminalState (docs: the fallback)."""
    sets, target = KINDS[kind]
    add_release(server, sets, state)
    wait = f"kubectl wait {target} -n {NS} --timeout=0 --for="
    if target.startswith("jobset/"):
        ended = f"{wait}jsonpath='{{.status.terminalState}}'"
        done = f"{ended}=Completed"
    else:
        ended, done = f"{wait}condition={'Complete' if state == 'complete' else 'Failed'}", f"{wait}condition=Complete"
    assert outcome(run_kubectl(kubectl, server, ended, tmp_path))[0] == 0
    assert outcome(run_kubectl(kubectl, server, done, tmp_path))[0] == (0 if state == "complete" else 1)
