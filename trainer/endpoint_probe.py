"""The ``helm test`` probe of a release: every endpoint answers (standard library only).

The chart's test Job (``templates/tests/test-endpoints.yaml``) runs ``python -m trainer.endpoint_probe``
from the project's trainer image, with its whole configuration in the environment:

* ``TFD_CLUSTER``: the cluster map, ``{"chief": [...], "ps": [...], "worker": [...]}`` of
  ``host:port`` addresses, the same variable (and so the same size limit) as in the TensorFlow pods;
* ``TFD_TEST_URLS``: ``{"tensorboard": URL, "serving": URL}``, each only when the component is on;
* ``TFD_TEST_TIMEOUT``: seconds every check may keep failing, from the start of the probe;
* ``TFD_STORAGE_ROOT``: the shared volume, mounted read-only, whose ``status.json`` says whether
  training already ``Succeeded``.

Every TensorFlow task must accept a TCP connection, except once training ``Succeeded``: the
ps/worker tasks may then be scaled down and the chief Job has completed, so they are skipped.
TensorBoard and TensorFlow Serving's REST API must answer HTTP, any status included (Serving
answers 404 before the first export). A failed check is retried every 3 seconds until the
timeout. Each check prints one line (``ok``, ``skip`` or ``FAIL``); the exit status is 0 when
every check passed, else 1.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from tfdcontract import CHIEF, CLIENT_ROLES, STATEFUL_ROLES, SUCCEEDED
from tfdcontract.env import CLUSTER_ENV, STORAGE_ROOT_ENV, TEST_TIMEOUT_ENV, TEST_URLS_ENV

#: Seconds between two tries of a failing check.
POLL_SECONDS = 3.0
#: Seconds one TCP connect or HTTP request may take.
REQUEST_TIMEOUT_SECONDS = 5
#: The web components checked over HTTP, in this order, when TFD_TEST_URLS names them.
HTTP_COMPONENTS = CLIENT_ROLES


def training_state(storage_root: str) -> Any:
    """The ``state`` of ``<storage_root>/status.json``, or None when it is missing or not JSON."""
    status_path = os.path.join(storage_root, "status.json")
    try:
        with open(status_path) as f:
            return json.load(f).get("state")
    except (OSError, ValueError):
        return None


def tcp(address: str) -> str:
    """Connect to ``host:port``; raises when nothing accepts the connection."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=REQUEST_TIMEOUT_SECONDS):
        return "accepts connections"


def http(url: str) -> str:
    """GET the URL: any HTTP status is an answer; raises when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_SECONDS) as response:
            return f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}"


def wait(what: str, check: Callable[[], str], deadline: float, out: TextIO, poll_seconds: float = POLL_SECONDS) -> bool:
    """Run ``check`` until it passes (True) or fails after ``deadline`` (time.monotonic; False)."""
    while True:
        try:
            detail = check()
            print(f"ok    {what}: {detail}", file=out, flush=True)
            return True
        except Exception as error:
            if time.monotonic() > deadline:
                print(f"FAIL  {what}: {error}", file=out, flush=True)
                return False
            time.sleep(poll_seconds)


def run(environ: Mapping[str, str], out: TextIO | None = None, poll_seconds: float = POLL_SECONDS) -> int:
    """Check every endpoint the environment names; the exit status (0: all passed)."""
    stream = sys.stdout if out is None else out
    targets: dict[str, Any] = {"tensorflow": json.loads(environ[CLUSTER_ENV]), **json.loads(environ[TEST_URLS_ENV])}
    deadline = time.monotonic() + int(environ[TEST_TIMEOUT_ENV])
    state = training_state(environ[STORAGE_ROOT_ENV])
    results: list[bool] = []
    for job, addresses in targets.get("tensorflow", {}).items():
        for index, address in enumerate(addresses):
            if state == SUCCEEDED and job in STATEFUL_ROLES:
                print(f"skip  {job}:{index}: training Succeeded, task may be scaled down", file=stream, flush=True)
                continue
            if job == CHIEF and state == SUCCEEDED:
                print("skip  chief:0: training Succeeded, the chief Job has completed", file=stream, flush=True)
                continue
            check = functools.partial(tcp, address)
            results.append(wait(f"{job}:{index} {address}", check, deadline, stream, poll_seconds))
    for name in HTTP_COMPONENTS:
        if name in targets:
            check = functools.partial(http, targets[name])
            results.append(wait(f"{name} {targets[name]}", check, deadline, stream, poll_seconds))
    return 0 if all(results) else 1


def main() -> None:
    sys.exit(run(os.environ))


if __name__ == "__main__":
    main()
