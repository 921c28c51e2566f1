"""Watching: Kubernetes' list+watch of the supervisor's objects, through the kubernetes client's Watch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import watch

from trainer.kube import NO_ANSWER, ApiException, Kube

log = logging.getLogger("trainer.supervisor")

# One watch request lasts this long (timeoutSeconds; the API server ends it, and it is made again from the last
# resourceVersion); its socket waits a little longer for the server's clean end.
WATCH_SECONDS = 300
WATCH_READ_MARGIN_SECONDS = 30
# A watch cut is made again at once; one that cannot be made (the API away, a refusal) is tried again after this
# long, doubling up to the poll.
WATCH_RETRY_SECONDS = 0.1


class RawWatch(watch.Watch):
    """The client's Watch, its objects left as the API server sent them (dicts): the supervisor reads them as
    JSON, and a model would refuse an object the server accepts (an unknown field, a missing one)."""

    def get_return_type(self, func: Any) -> None:
        return None


class Watcher:
    """Kubernetes' list+watch of the objects `lister` lists (one kind, its selectors), in a thread: each event (and
    each list) calls `heard`, which only wakes the supervisor's loop; what to do is then decided from a fresh read of
    the cluster, never from the event. A watch ended by the server (timeoutSeconds) or cut is made again from the
    last resourceVersion seen (the events' and the bookmarks'), so none is missed; a resourceVersion too old for the
    API server (410 Gone, as an HTTP status or an ERROR event, which the client's Watch raises as ApiException 410) is
    listed again, and that list too wakes the loop. A refusal (403: the Role does not allow watch) or an API away is
    tried again, doubling the wait up to `retry_max`: meanwhile the loop's periodic look does the work."""

    def __init__(self, name: str, kube: Kube, lister: Any, heard: Callable[[str, Mapping[str, Any]], None],
                 retry_max: float) -> None:
        self.name, self.kube, self.lister, self.heard = name, kube, lister, heard
        self.retry_max = retry_max
        self.version: str | None = None  # the last resourceVersion seen; None: list first
        self.lists = self.watches = 0
        self.stopping = threading.Event()
        self.stream: RawWatch | None = None
        self.thread = threading.Thread(target=self.run, daemon=True, name=f"watch-{name}")

    def start(self) -> Watcher:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.stream is not None:
            self.stream.stop()  # type: ignore[no-untyped-call]

    def run(self) -> None:
        retry = 0.0  # the first try again after a watch that worked is at once (a cut connection)
        while not self.stopping.is_set():
            try:
                if self.version is None:
                    self.relist()
                if self.follow():
                    retry = 0.0
                    continue
            except ApiException as error:
                if self.stopping.is_set():  # stopped: its connection closed under it
                    return
                if error.status == 410:  # too old: list again
                    log.info("watch of %s: resourceVersion %s expired; listing again", self.name, self.version)
                    self.version = None
                    continue
                if error.status:
                    log.warning("cannot watch %s: HTTP %s %s (does the supervisor's Role allow list and watch?); "
                                "looking every poll meanwhile", self.name, error.status, error.reason)
                else:
                    log.info("watch of %s cut (%s); resuming from resourceVersion %s", self.name, error.reason,
                             self.version)
            except NO_ANSWER as error:
                if self.stopping.is_set():
                    return
                log.info("watch of %s cut (%s); resuming from resourceVersion %s", self.name, error, self.version)
            self.stopping.wait(retry)
            retry = min(max(2 * retry, WATCH_RETRY_SECONDS), self.retry_max)

    def relist(self) -> None:
        listing = self.kube.list(self.lister)
        self.lists += 1
        metadata = listing.get("metadata")
        self.version = str(metadata.get("resourceVersion") or "") or None if isinstance(metadata, dict) else None
        self.heard("LISTED", listing)

    def follow(self) -> bool:
        """One watch request, read to its end; True when it ended as the server ends it."""
        self.stream = RawWatch()  # type: ignore[no-untyped-call]
        self.watches += 1
        events = self.stream.stream(  # type: ignore[no-untyped-call]
            self.lister, resource_version=self.version or "0", allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS, _request_timeout=WATCH_SECONDS + WATCH_READ_MARGIN_SECONDS)
        for event in events:
            if self.stopping.is_set():
                return True
            if not isinstance(event, dict):
                continue
            kind, obj = str(event.get("type")), event.get("object") or {}
            self.version = str((obj.get("metadata") or {}).get("resourceVersion") or self.version)
            if kind != "BOOKMARK":
                self.heard(kind, obj)
        return True
