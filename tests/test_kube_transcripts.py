"""tests/kubeapi.py against recordings of a real kube-apiserver v1.36.2: each recorded request is sent again, byte
for byte as recorded (credentials aside), to the fake seeded with objects of the same kinds and names (the chart's
render of the recorded release, `helm install mnist -n ml -f values/cpu.yaml`), and its answer must match the
recorded one in status, content type, framing (by the rule the server follows, since the fake's bodies are not the
same size), Status reason, code and details, and the body's shape: kind, top-level keys, a list's paging fields, a
watch's event types, one event per chunk, the stream ended by its 0 chunk.

Tolerated on purpose, since the fake is not the recorded cluster: bodies of other sizes (so framing is checked by
the server's rule on the fake's own body), how many events and BOOKMARKs a watch sees (runs of one type count
once; the fake bookmarks every second, the server about once a minute), watches cut to WATCH_SECONDS, a
resourceVersion of the recorded cluster in a watch or exact list replaced by one of the fake's with the same
meaning (the list's, one from before two writes, one compacted away).

The recordings are outside test data: TFD_KUBE_TRANSCRIPTS names their folder (`.ci/run` sets it where the folder
exists). Without it the replay skips in one line, since it checks the tests' fake, not the product; under CI it
must run. What the fake cannot answer like the server is listed in GAPS, and each fact a README of the recordings
lists is mapped to the case that checks it in FACTS (a new fact fails test_each_fact_of_the_readmes_has_a_case).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from tests import kubeapi as kf
from tests.kubeapi import KubeServer, kube_server
from tests.kubeapi_rbac import service_account
from tests.kubeapi_wire import GO_BUFFER, encoded

ROOT = Path(__file__).resolve().parents[1]
VARIABLE = "TFD_KUBE_TRANSCRIPTS"
NS = "ml"
SUPERVISOR = service_account(NS, "mnist-tf-distributed-supervisor")
SA_TOKEN, BAD_TOKEN = "supervisor-token", "not-a-token"
WATCH_SECONDS = 2  # a recorded watch's timeoutSeconds (up to 75) is cut to this; the fake bookmarks every second
CHIEF = "mnist-tf-distributed-chief"
PS = "mnist-tf-distributed-ps"

# recordings the fake cannot answer as the server did: not replayed, and why (the fake's docstring names them too)
GAPS = {
    "extended/67-log-kubelet-unreachable": "no kubelet: the fake holds logs itself, so no log request can fail to "
                                           "reach one (the server's 500 Status without a reason)",
}  # fmt: skip
# each fact of each README -> the recordings (replayed here) or the test of this module that shows it
FACTS: dict[str, dict[int, tuple[str, ...]]] = {
    "README.md": {
        1: ("01-get-job-large", "02-get-configmap-small", "05-list-jobs-fieldselector", "06-list-pods-limit",
            "test_the_chunking_threshold_is_2048_bytes"),
        2: ("21-log-text-plain-406", "22-log-any-unscheduled", "23-log-json-unscheduled"),
        3: ("22-log-any-unscheduled", "23-log-json-unscheduled"),
        4: ("09-watch-job-fieldselector",),
        5: ("34-watch-rv-1-410", "32-list-expired-rv"),
        6: ("31-watch-expired-410",),
        7: ("33-watch-bookmarks", "09-watch-job-fieldselector"),
        8: ("08-list-bad-fieldselector-400", "19-sa-forbidden-403", "20-sa-forbidden-scale-other",
            "03-get-missing-404", "30-delete-gone-404", "25-create-conflict-409", "17-patch-wrong-content-type-415",
            "15-patch-job-template-dryrun-422", "16-patch-sts-selector-dryrun-422"),
        9: ("12-patch-job-annotation-merge", "13-patch-job-strategic", "14-patch-job-jsonpatch", "10-get-scale",
            "11-patch-scale-merge"),
        10: ("28-delete-foreground", "29-delete-background", "30-delete-gone-404"),
        11: ("26-patch-job-suspend", "27-get-job-after-suspend", "test_a_suspended_job_gets_the_controllers_condition"),
        12: ("06-list-pods-limit", "07-list-pods-continue"),
    },
    "extended/README.md": {
        1: ("extended/15-get-configmap-2048-bytes-content-length", "extended/16-get-configmap-2049-bytes-chunked",
            "extended/37-patch-job-immutable-dryrun-422", "test_the_chunking_threshold_is_2048_bytes"),
        2: ("extended/01-get-job-chief", "extended/07-list-jobs-fieldselector", "extended/09-list-pods-limit2-page1"),
        3: ("extended/60-log-accept-textplain-406", "extended/02-get-configmap-small"),
        4: ("extended/60-log-accept-textplain-406", "extended/64-sa-log-accept-textplain-406",
            "extended/61-log-accept-any-200", "extended/62-log-accept-json-200", "extended/63-log-accept-json-any-200"),
        5: ("extended/68-log-pod-not-scheduled-204", "extended/66-log-bad-container-400"),
        6: ("extended/20-watch-job-bookmarks",),
        7: ("extended/20-watch-job-bookmarks",),
        8: ("extended/22-watch-too-old-rv-410", "extended/23-list-exact-compacted-rv-410",
            "extended/21-watch-compacted-rv-inside-watchcache",
            "extended/24-list-continue-compacted-served-from-cache-200"),
        9: ("extended/12-list-bad-fieldselector-400", "extended/13-list-malformed-fieldselector-400",
            "extended/14-list-bad-continue-400", "extended/41-patch-bad-json-400", "extended/58-bad-token-401",
            "extended/38-patch-job-completions-dryrun-422", "extended/43-create-configmap-conflict-409"),
        10: ("extended/52-sa-list-jobs-forbidden-403", "extended/53-sa-get-other-job-forbidden-403",
             "extended/54-sa-delete-job-forbidden-403", "extended/57-sa-list-events-forbidden-403",
             "extended/51-sa-list-jobs-fieldselector-allowed"),
        11: ("extended/30-get-sts-scale", "extended/31-patch-sts-scale-merge",
             "extended/32-patch-sts-scale-merge-back"),
        12: ("extended/33-patch-job-annotations-merge", "extended/34-patch-job-annotations-strategic",
             "extended/35-patch-job-annotations-jsonpatch", "extended/40-patch-wrong-content-type-415",
             "extended/19-patch-jobset-strategic-415", "extended/36-patch-jsonpatch-test-fails"),
        13: ("extended/93-delete-job-background", "extended/95-delete-job-foreground",
             "extended/96-delete-job-foreground-again", "extended/94-delete-job-no-policy-warning",
             "extended/97-delete-gone-job-404", "extended/98-delete-gone-job-bg-404"),
        14: ("extended/42-create-job-conflict-409", "extended/43-create-configmap-conflict-409",
             "extended/44-put-stale-rv-409"),
        15: ("extended/90-job-suspend-patch", "extended/91-job-suspended-get-after-5s",
             "test_a_suspended_job_gets_the_controllers_condition"),
        16: ("extended/80-events-list-pod", "extended/81-events-list-job", "extended/92-events-list-job-after-suspend"),
    },
}  # fmt: skip


def folder() -> Path | None:
    value = os.environ.get(VARIABLE)
    return Path(value) if value else None


def require_folder() -> Path:
    """The recordings' folder; skips (fails under CI) where it is not given."""
    found = folder()
    if found is None:
        why = f"{VARIABLE} is not set: no recordings of a real API server to check tests/kubeapi.py against"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI must run it: .ci/run sets it where the recordings are)")
        pytest.skip(why)
    assert found.is_dir(), f"{VARIABLE}={found} is not a folder"
    return found


def recordings() -> list[str]:
    """Every recording, as its path under the folder without .json (`01-get-job-large`, `extended/...`)."""
    found = folder()
    if found is None or not found.is_dir():
        return []
    return sorted(str(path.relative_to(found).with_suffix("")) for path in found.rglob("*.json"))


# -- the cluster the recordings were made on ----------------------------------------------------------------


def event(involved: dict[str, Any], name: str, reason: str, message: str, by: str) -> dict[str, Any]:
    """An Event as core/v1 shows it: written by the scheduler through events.k8s.io (`source: {}`, the component
    in reportingComponent), or by a controller."""
    regarding = {"kind": involved["kind"], "namespace": NS, "name": involved["metadata"]["name"],
                 "uid": kf.uid_of(involved), "apiVersion": involved["apiVersion"]}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{involved['metadata']['name']}.{name}",
                                                             "namespace": NS},
            "involvedObject": regarding, "reason": reason, "message": message, "type": "Normal",
            "source": {} if by == "default-scheduler" else {"component": by}, "firstTimestamp": None,
            "lastTimestamp": None, "eventTime": kf.ago(minutes=5).replace("Z", ".000000Z"), "action": reason,
            "reportingComponent": by, "reportingInstance": f"{by}-vm"}  # fmt: skip


def release(server: KubeServer, chief_pod: str, scheduled: bool) -> None:
    """The release as the recordings saw it: the chart's objects with their controllers' status, one pod of each
    workload (the chief's under its recorded name, bound to a node or not), their events, and the namespace's
    root CA ConfigMap."""
    docs = kf.rendered([str(ROOT / "values/cpu.yaml")], release="mnist", namespace=NS)
    for doc in docs:
        kind = doc["kind"]
        shapes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "Job": kf.job, "StatefulSet": kf.stateful_set, "Deployment": kf.deployment, "Service": kf.service}
        server.add(shapes[kind](doc) if kind in shapes else doc)
    chief = kf.job(kf.manifest(docs, "Job", "chief"))
    pods = [kf.pod(chief, chief_pod) if scheduled else kf.pod(chief, chief_pod, phase="Pending", unschedulable="no")]
    for role, count in (("ps", 1), ("worker", 2)):
        pods += [kf.pod(kf.manifest(docs, "StatefulSet", role), index=i) for i in range(count)]
    pods += [kf.pod(kf.manifest(docs, "Deployment", role)) for role in ("serving", "supervisor", "tensorboard")]
    server.add(*pods)
    server.set_log(NS, chief_pod, [f"step {step} loss 0.{step}" for step in range(0, 90, 10)])
    server.add(event(pods[0], "18ec24437a900d52", "Scheduled", "Successfully assigned", "default-scheduler"),
               event(pods[0], "18ec2443cb021e33", "Pulled", "Container image already present", "kubelet"),
               event(chief, "18ec2443743f2737", "SuccessfulCreate", f"Created pod: {chief_pod}", "job-controller"),
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": NS},
                "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n" + "A" * 1100 + "\n-----END CERTIFICATE-----\n"}})


def padded_config_map(server: KubeServer, namespace: str, name: str, size: int) -> None:
    """A ConfigMap whose JSON body, as the fake serves it, is exactly `size` bytes."""
    server.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                "data": {"pad": ""}})  # fmt: skip
    stored = server.get("ConfigMap", namespace, name)
    assert stored is not None
    missing = size - len(encoded(stored))
    server.update("ConfigMap", namespace, name, {"data": {"pad": "x" * missing}})
    stored = server.get("ConfigMap", namespace, name)
    assert stored is not None and len(encoded(stored)) == size


def job_named(server: KubeServer, name: str) -> None:
    chief = server.get("Job", NS, CHIEF)
    assert chief is not None
    copied = {**chief, "metadata": {k: v for k, v in chief["metadata"].items() if k not in ("uid", "resourceVersion")}}
    copied["metadata"]["name"] = name
    server.add(copied)


def jobset_release(server: KubeServer) -> None:
    server.add(*kf.crds(*kf.JOBSET_CRDS))
    docs = kf.rendered([str(ROOT / "values/cpu.yaml")], ["workload.kind=jobset"], release="mj", namespace="ml-js")
    server.add(next(doc for doc in docs if doc["kind"] == "JobSet"))  # no JobSet controller ran: no status


def annotate_chief(server: KubeServer) -> None:
    for count in range(2):
        server.update("Job", NS, CHIEF, {"metadata": {"annotations": {"tf-distributed.io/transcript": str(count)}}})


@dataclass
class Setup:
    """What a recording needs beyond the release: objects or writes `before` it (returning query parameters that
    replace the recorded ones: a resourceVersion of this server), writes `during` a watch, its credentials."""

    before: Callable[[KubeServer], dict[str, str] | None] = lambda server: None
    during: Callable[[KubeServer], None] | None = None
    token: str | None = None


def watch_from_list(server: KubeServer) -> dict[str, str]:
    return {"resourceVersion": str(server.revision)}


def watch_from_before_writes(server: KubeServer) -> dict[str, str]:
    since = str(server.revision)
    annotate_chief(server)
    return {"resourceVersion": since}


def compacted(server: KubeServer) -> dict[str, str]:
    since = str(server.revision)
    annotate_chief(server)
    server.cut_watches(expire=True)
    return {"resourceVersion": since}


def scheduled_nowhere(name: str) -> Callable[[KubeServer], None]:
    def add(server: KubeServer) -> None:
        server.add(kf.running_pod(name, NS, "", {"cpu": "100m"}, phase="Pending"))
        server.update("Pod", NS, name, {"spec": {"nodeName": None}})

    return add


def gone(name: str) -> Callable[[KubeServer], None]:
    """The Job existed and the garbage collector has removed it."""

    def delete(server: KubeServer) -> None:
        if name != CHIEF:
            job_named(server, name)
        server.delete("Job", NS, name)

    return delete


SETUPS: dict[str, Setup] = {
    "09-watch-job-fieldselector": Setup(watch_from_list, annotate_chief),
    "extended/20-watch-job-bookmarks": Setup(watch_from_list, annotate_chief),
    "31-watch-expired-410": Setup(watch_from_before_writes),
    "extended/21-watch-compacted-rv-inside-watchcache": Setup(watch_from_before_writes),
    "32-list-expired-rv": Setup(compacted),
    "extended/23-list-exact-compacted-rv-410": Setup(compacted),
    "28-delete-foreground": Setup(lambda server: job_named(server, "tr-del-fg")),
    "29-delete-background": Setup(lambda server: job_named(server, "tr-del-bg")),
    "30-delete-gone-404": Setup(gone("tr-del-bg")),
    "extended/93-delete-job-background": Setup(lambda server: job_named(server, "ceo7-bg")),
    "extended/94-delete-job-no-policy-warning": Setup(lambda server: job_named(server, "ceo7-default")),
    "extended/96-delete-job-foreground-again": Setup(lambda server: server.update("Job", NS, CHIEF, {
        "metadata": {"deletionTimestamp": kf.ago(seconds=1), "finalizers": ["foregroundDeletion"]}})),
    "extended/97-delete-gone-job-404": Setup(gone(CHIEF)),
    "extended/98-delete-gone-job-bg-404": Setup(gone("ceo7-bg")),
    "extended/15-get-configmap-2048-bytes-content-length": Setup(
        lambda server: padded_config_map(server, "ceo7-scratch", "cm1645", GO_BUFFER)),
    "extended/16-get-configmap-2049-bytes-chunked": Setup(
        lambda server: padded_config_map(server, "ceo7-scratch", "cm1646", GO_BUFFER + 1)),
    "extended/68-log-pod-not-scheduled-204": Setup(scheduled_nowhere("ceo7-unscheduled")),
    "extended/58-bad-token-401": Setup(token=BAD_TOKEN),
    "14-patch-job-jsonpatch": Setup(annotate_chief),  # the recordings before it had annotated the Job
    "extended/35-patch-job-annotations-jsonpatch": Setup(annotate_chief),
}
for _name in ("17-get-jobset-crd-object", "18-get-jobset-missing-404", "19-patch-jobset-strategic-415"):
    SETUPS[f"extended/{_name}"] = Setup(jobset_release)


# -- sending a recorded request, reading the answer off the wire ----------------------------------------------


@dataclass
class Answer:
    """An answer as it came over the socket."""

    status: int
    headers: list[tuple[str, str]]
    framing: str  # content-length | chunked | none
    chunks: list[bytes] = field(default_factory=list)  # the data chunks (without the final 0 one)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name.lower()), None)


def read_answer(connection: socket.socket, head: bytes) -> Answer:
    """Parses an HTTP/1.1 answer whose head (status line and headers) has been read, reading the body to its
    framing's end: Content-Length bytes, the 0 chunk, or the connection's close."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = [(name, value.strip()) for name, _, value in (line.partition(":") for line in lines if line)]
    answer = Answer(int(status_line.split()[1]), headers, "none")
    stream = connection.makefile("rb")
    if (answer.header("Transfer-Encoding") or "").lower() == "chunked":
        answer.framing = "chunked"
        while True:
            line = stream.readline()
            assert line.endswith(b"\r\n"), f"the connection ended before the last (0) chunk: {line!r}"
            if not (size := int(line.strip(), 16)):
                break
            answer.chunks.append(stream.read(size))
            assert stream.readline() == b"\r\n"
        answer.body = b"".join(answer.chunks)
    elif answer.header("Content-Length") is not None:
        answer.framing = "content-length"
        answer.body = stream.read(int(answer.header("Content-Length") or 0))
    return answer


def send(server: KubeServer, name: str, recorded: dict[str, Any], setup: Setup, query: dict[str, str] | None,
         ) -> Answer:  # fmt: skip
    request = recorded["request"]
    parts = urlsplit(request["path"])
    params = dict(parse_qsl(parts.query, keep_blank_values=True)) | (query or {})
    if "timeoutSeconds" in params:
        params["timeoutSeconds"] = str(min(int(params["timeoutSeconds"]), WATCH_SECONDS))
    target = parts.path + (f"?{urlencode(params)}" if params else "")
    headers = request["headers"].items() if isinstance(request["headers"], dict) else request["headers"]
    kept = [(k, v) for k, v in headers if k.lower() not in ("host", "authorization", "content-length", "connection")]
    body = request.get("body")
    payload = b"" if body is None else body.encode() if isinstance(body, str) else json.dumps(body).encode()
    token = setup.token or (SA_TOKEN if server.users is not None and via_service_account(name) else "t0ken")
    lines = [f"{request['method']} {target} HTTP/1.1", f"Host: {server.url.split('//')[1]}", *(f"{k}: {v}" for k, v
             in kept), f"Authorization: Bearer {token}", "Connection: close",
             *([f"Content-Length: {len(payload)}"] if body is not None else [])]  # fmt: skip
    host, port = server.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + payload)
        head = b""
        while b"\r\n\r\n" not in head:
            data = connection.recv(1)
            assert data, f"the connection closed before the answer's head: {head!r}"
            head += data
        if setup.during:
            setup.during(server)
        return read_answer(connection, head.split(b"\r\n\r\n")[0])


def via_service_account(name: str) -> bool:
    """Whether the recording was made with the token of the chart's supervisor service account (`-sa-` names)."""
    return "-sa-" in name


# -- what must match ------------------------------------------------------------------------------------------


def recorded_answer(recorded: dict[str, Any]) -> tuple[int, str | None, str, str]:
    response = recorded["response"]
    status = int(response["status_line"].split()[1])
    content_type = next((v for k, v in response["headers"] if k.lower() == "content-type"), None)
    framing = {"close-delimited": "none"}.get(response["framing"], response["framing"])
    return status, content_type, framing, response.get("body_text") or ""


def events_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def shape(document: Any) -> dict[str, Any]:
    """What is compared of a JSON body: its kind and top-level keys; a Status's status, reason, code and details'
    keys (a 422's causes by reason and field); a Scale's spec and status keys; a list's paging fields."""
    if not isinstance(document, dict):
        return {"type": type(document).__name__}
    found: dict[str, Any] = {"kind": document.get("kind"), "keys": sorted(document)}
    if document.get("kind") == "Status":
        details = document.get("details")
        found |= {"status": document.get("status"), "reason": document.get("reason"), "code": document.get("code"),
                  "details": None if details is None else sorted(details)}  # fmt: skip
        if details and "causes" in details:
            found["causes"] = [(cause.get("reason"), cause.get("field")) for cause in details["causes"]]
    if document.get("kind") == "Scale":
        found |= {"spec": sorted(document["spec"]), "status": sorted(document["status"])}
    if isinstance(document.get("items"), list):
        found |= {"metadata": sorted(document["metadata"]),
                  "remaining": document["metadata"].get("remainingItemCount"),
                  "item keys have kind": any("kind" in item for item in document["items"])}  # fmt: skip
    return found


def watch_shape(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A watch's event types in order (a run of one type as one: how many writes or bookmarks come depends on time
    and on what the recording's cluster did), each ERROR's Status shape, whether the first BOOKMARK marks the end of
    the initial events."""
    types: list[str] = []
    for each in events:
        if types[-1:] != [each["type"]]:
            types.append(each["type"])
    bookmarks = [each for each in events if each["type"] == "BOOKMARK"]
    initial_end = bool(bookmarks) and "k8s.io/initial-events-end" in (
        bookmarks[0]["object"]["metadata"].get("annotations") or {})
    return {"types": types, "errors": [shape(e["object"]) for e in events if e["type"] == "ERROR"],
            "objects": sorted({e["object"].get("kind", "") for e in events}), "initial end": initial_end}


def check_framing(answer: Answer, recorded_framing: str, streamed: bool) -> None:
    """The server's rule: a watch or a log is always chunked; any other body with Content-Length up to 2,048
    bytes, chunked above; a chunked object is one chunk, a chunked list starts with a full 2,048-byte buffer."""
    if streamed:
        assert answer.framing == recorded_framing == "chunked"
        return
    if answer.status == 204:
        assert answer.framing == "none" and answer.body == b"" and answer.header("Content-Type") is None
        return
    assert answer.framing == ("chunked" if len(answer.body) > GO_BUFFER else "content-length"), (
        f"{len(answer.body)} bytes sent {answer.framing}")
    if answer.framing == "chunked":
        document = json.loads(answer.body)
        sizes = [len(chunk) for chunk in answer.chunks]
        assert sizes == [len(answer.body)] if "items" not in document else sizes[0] == GO_BUFFER, sizes


def replay(name: str, recorded: dict[str, Any]) -> None:
    setup = SETUPS.get(name, Setup())
    status, content_type, framing, text = recorded_answer(recorded)
    extended = name.startswith("extended/")
    with kube_server() as server:
        release(server, f"{CHIEF}-{'lscf6' if extended else 'vmhbz'}", scheduled=extended)
        if via_service_account(name) or setup.token:
            server.authenticate({SA_TOKEN: SUPERVISOR})
        query = setup.before(server)
        answer = send(server, name, recorded, setup, query)
    said = f"{name}: {answer.status} {answer.framing} {answer.body[:300]!r}"
    assert answer.status == status, said
    assert (answer.header("Content-Type") or None) == content_type, said
    watching = "watch=" in recorded["request"]["path"]
    is_log = "/log" in recorded["request"]["path"].split("?")[0]
    check_framing(answer, framing, watching or (is_log and status == 200))
    if watching:
        assert all(chunk.endswith(b"\n") and chunk.count(b"\n") == 1 for chunk in answer.chunks), said  # one each
        assert watch_shape(events_of(answer.body.decode())) == watch_shape(events_of(text)), said
    elif status == 406:
        assert answer.body == text.encode(), said  # pretty-printed, no newline: the one body compared byte for byte
    elif status == 204:
        assert answer.body == b"", said
    elif is_log and status == 200:
        assert answer.body.decode().endswith("\n") and not answer.body.startswith(b"{"), said  # the log's text
    else:
        assert answer.body.endswith(b"\n"), said
        assert shape(json.loads(answer.body)) == shape(json.loads(text)), said
    if answer.status == 200 and "Warning" in {k for k, _ in recorded["response"]["headers"]}:
        assert answer.header("Warning") == next(v for k, v in recorded["response"]["headers"] if k == "Warning")


@pytest.mark.parametrize("name", recordings() or ["(no recordings)"])
def test_the_fake_answers_each_recorded_request_as_the_real_server_did(name: str) -> None:
    found = require_folder()
    if name in GAPS:
        pytest.skip(f"not replayed: {GAPS[name]}")
    replay(name, json.loads((found / f"{name}.json").read_text(encoding="utf-8")))


def test_each_fact_of_the_readmes_has_a_case() -> None:
    """Every numbered fact of each README maps to recordings that exist here and are replayed, or to a test of this
    module; every gap names a recording that exists."""
    found = require_folder()
    names, tests = set(recordings()), {key for key in globals() if key.startswith("test_")}
    for readme, facts in FACTS.items():
        text = (found / readme).read_text(encoding="utf-8")
        section = text.split("Facts a faithful fake must reproduce", 1)[1].split("\n## ", 1)[0]
        numbers = [int(n) for n in re.findall(r"^(\d+)\. ", section, flags=re.MULTILINE)]
        assert sorted(facts) == numbers, f"{readme}: facts {numbers}, cases for {sorted(facts)}"
        for number, cases in facts.items():
            for case in cases:
                assert case in tests or (case in names and case not in GAPS), f"{readme} fact {number}: {case}"
    assert set(GAPS) <= names


def test_the_chunking_threshold_is_2048_bytes() -> None:
    """Go's buffer, exactly: 2,048 bytes in one write go with a Content-Length, 2,049 chunked as one chunk; a list's
    writes fill the buffer first."""
    with kube_server() as server:
        for size, framing in ((GO_BUFFER, "content-length"), (GO_BUFFER + 1, "chunked")):
            padded_config_map(server, NS, f"cm{size}", size)
            answer = send(server, "", {"request": {"method": "GET", "headers": [["Accept", "application/json"]],
                                                   "path": f"/api/v1/namespaces/{NS}/configmaps/cm{size}"}}, Setup(),
                          None)  # fmt: skip
            assert (answer.framing, len(answer.body)) == (framing, size)
            assert [len(chunk) for chunk in answer.chunks] == ([size] if framing == "chunked" else [])
        listed = send(server, "", {"request": {"method": "GET", "path": f"/api/v1/namespaces/{NS}/configmaps",
                                               "headers": [["Accept", "application/json"]]}}, Setup(), None)
        assert len(listed.chunks[0]) == GO_BUFFER and listed.chunks[-1].endswith(b"]}\n")


def test_a_suspended_job_gets_the_controllers_condition() -> None:
    """JobController (what the supervisor and suspend tests run) suspends a Job as the recorded Job controller did:
    the Suspended condition, `active` and `startTime` gone, `ready` 0."""
    found = require_folder()
    after = json.loads(json.loads((found / "extended/91-job-suspended-get-after-5s.json").read_text())["response"][
        "body_text"])["status"]  # fmt: skip
    with kube_server() as server:
        release(server, f"{CHIEF}-lscf6", scheduled=True)
        chief = server.get("Job", NS, CHIEF)
        assert chief is not None
        server.update("Job", NS, CHIEF, {"spec": {"suspend": True}})
        controller = kf.JobController(server, chief, None, None)  # type: ignore[arg-type]  # no pod runs
        suspending = threading.Thread(target=controller._suspended, daemon=True)
        suspending.start()
        with server.changed:
            assert server.changed.wait_for(lambda: "conditions" in (server.objects[("jobs", NS, CHIEF)]["status"]), 30)
        status = server.objects[("jobs", NS, CHIEF)]["status"]
        server.delete("Job", NS, CHIEF)
        suspending.join(30)

    def essential(found: dict[str, Any]) -> Iterator[Any]:
        yield sorted(found)
        yield from ((c["type"], c["status"], c["reason"], c["message"]) for c in found["conditions"])
        yield found.get("ready")

    assert list(essential(status)) == list(essential(after))
