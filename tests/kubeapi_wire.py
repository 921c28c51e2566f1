"""How kube-apiserver puts an answer on the wire, for tests/kubeapi.py: framing, content negotiation, Status bodies.

What a real kube-apiserver v1.36.2 does (the recordings that tests/test_kube_transcripts.py replays show it):

- Go's net/http buffers the first 2,048 bytes of a body. An answer that fits is sent with Content-Length; a longer
  one with Transfer-Encoding: chunked, each chunk being a flush of that buffer or a write that bypassed it
  (`go_chunks`). A single object is one write, so one chunk (`[9091, 0]`); a list is streamed item by item, so a
  first chunk of exactly 2,048 bytes cut mid-JSON, then roughly one chunk per item, then `]}\\n` (`[2048, 7094, 3,
  0]`). A watch and a pod's log flush after each write: chunked whatever their size, one event per chunk.
- JSON comes compact with a trailing newline (Go's encoder), except the 406 NotAcceptable body: pretty-printed,
  no newline.
- An Accept header none of whose media ranges the endpoint serves gets 406 NotAcceptable naming the types it
  serves (application/json, application/yaml, application/vnd.kubernetes.protobuf), pods/log included: a log is
  sent as text/plain, but `Accept: text/plain` is refused before any kubelet is asked.
- Errors are metav1.Status objects: `reason` by code, `details.kind` the plural resource (the Kind for 422),
  `details.group` absent for the core group.

Gaps (the fake answers differently, on purpose): a client that accepts only YAML or protobuf still gets JSON; no
Audit-Id is ever the same as the server's, and the API Priority and Fairness headers carry fixed uids.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

GO_BUFFER = 2048  # net/http's bufferBeforeChunkingSize: a body up to this size gets a Content-Length
SERVED_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
ACCEPTED_RANGES = {*SERVED_TYPES, "application/*", "*/*"}
NOT_ACCEPTABLE = "only the following media types are accepted: " + ", ".join(SERVED_TYPES)
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           406: "NotAcceptable", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
           500: "InternalError"}  # fmt: skip
# API Priority and Fairness answers each request with the uids of the flow schema and priority level that took it
FAIRNESS = (("X-Kubernetes-Pf-Flowschema-Uid", "4e68e4eb-c450-48ea-a2d3-afd73a185a61"),
            ("X-Kubernetes-Pf-Prioritylevel-Uid", "7f97ba09-d60d-494f-9d99-81f66680d5a0"))  # fmt: skip


def go_chunks(writes: Iterable[bytes]) -> list[bytes] | None:
    """The chunks Go's 2,048-byte response buffer makes of these writes (bufio.Writer.Write, then the handler's
    end), or None when the whole body stayed in the buffer: then it goes with a Content-Length."""
    chunks: list[bytes] = []
    buffer = b""
    for data in writes:
        while len(data) > GO_BUFFER - len(buffer):
            if not buffer:  # a large write into an empty buffer goes straight through
                chunks.append(data)
                data = b""
                break
            room = GO_BUFFER - len(buffer)
            chunks.append(buffer + data[:room])
            buffer, data = b"", data[room:]
        buffer += data
    if not chunks:
        return None
    return [*chunks, buffer] if buffer else chunks


def encoded(document: Any) -> bytes:
    """A JSON body as Go's encoder writes it: compact, with a trailing newline."""
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


def writes_of(document: dict[str, Any]) -> list[bytes]:
    """The writes of an answer: a single object in one; a list streamed as the API server's list encoder does
    (the list's own fields and `"items":[`, then each item, a comma before each after the first, then `]}`)."""
    items = document.get("items")
    if not (isinstance(items, list) and str(document.get("kind", "")).endswith("List")):
        return [encoded(document)]
    head = json.dumps({k: v for k, v in document.items() if k != "items"}, separators=(",", ":"))
    writes = [head[:-1].encode() + b',"items":[']
    for index, item in enumerate(items):
        writes += [b","] if index else []
        writes.append(json.dumps(item, separators=(",", ":")).encode())
    return [*writes, b"]}\n"]


def acceptable(accept: str | None) -> bool:
    """Whether an Accept header names a media type the API server answers with (no header: anything)."""
    if not accept or not accept.strip():
        return True
    ranges = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(ranges & ACCEPTED_RANGES)


def not_acceptable_body() -> bytes:
    """The 406 body: the one Status the API server sends pretty-printed, without a trailing newline."""
    return json.dumps(failure(406, NOT_ACCEPTABLE), indent=2).encode()


def failure(code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None,
            ) -> dict[str, Any]:  # fmt: skip
    """A metav1.Status error body, as the API server sends it (`reason` "": none, as for a kubelet's 500)."""
    reason = REASONS.get(code, "Unknown") if reason is None else reason
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            **({"reason": reason} if reason else {}), **({"details": details} if details is not None else {}),
            "code": code}  # fmt: skip


def qualified(resource: str, group: str) -> str:
    """`jobs.batch`, `configmaps`: how the API server names a resource in its messages."""
    return f"{resource}.{group}" if group else resource


def object_details(resource: str, group: str, name: str | None = None) -> dict[str, Any]:
    """A Status's details naming an object (or a collection): name, group (absent for core), plural kind."""
    return {**({"name": name} if name else {}), **({"group": group} if group else {}), "kind": resource}


def not_found(resource: str, group: str, name: str) -> dict[str, Any]:
    return failure(404, f'{qualified(resource, group)} "{name}" not found', details=object_details(resource, group,
                                                                                                 name))


def already_exists(resource: str, group: str, name: str) -> dict[str, Any]:
    return failure(409, f'{qualified(resource, group)} "{name}" already exists', "AlreadyExists",
                   object_details(resource, group, name))


def conflict(resource: str, group: str, name: str) -> dict[str, Any]:
    return failure(409, f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": the object has '
                   "been modified; please apply your changes to the latest version and try again", "Conflict",
                   object_details(resource, group, name))  # fmt: skip


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> dict[str, Any]:
    """422 Invalid: `Kind.group "name" is invalid: field: message` (several in brackets), with the causes."""
    said = [f"{cause['field']}: {cause['message']}" for cause in causes]
    message = f'{kind}{"." + group if group else ""} "{name}" is invalid: ' + (
        said[0] if len(said) == 1 else "[" + ", ".join(said) + "]")
    return failure(422, message, "Invalid", {"name": name, **({"group": group} if group else {}), "kind": kind,
                                             "causes": causes})  # fmt: skip


def deleted(resource: str, group: str, name: str, uid: str) -> dict[str, Any]:
    """The Status a DELETE answers when the object went at once."""
    details = {"name": name, **({"group": group} if group else {}), "kind": resource, "uid": uid}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def audit_headers() -> list[tuple[str, str]]:
    """The headers every answer starts with, in the API server's order (Content-Type goes after them)."""
    return [("Audit-Id", str(uuid.uuid4())), ("Cache-Control", "no-cache, private")]
