"""The loopback API's list+watch, read by the pinned kubernetes client's own Watch (the protocol as a real client
reads it): events after a list's resourceVersion through the selectors, an object entering or leaving them,
bookmarks, timeoutSeconds, and 410 Expired once the history no longer reaches back; and the connection under it,
kept alive across answers of every framing as Go's server keeps it."""

from __future__ import annotations

import http.client
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import KubeServer, kube_server

NS = "ml"


def config_map(name: str, team: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS,
                                                                  "labels": {"team": team}}, "data": {}}


def core(server: KubeServer) -> Any:
    """The pinned client's CoreV1Api, through a kubeconfig of the server."""
    return client.CoreV1Api(config.new_client_from_config(str(server.kubeconfig())))  # type: ignore[no-untyped-call]


def events(server: KubeServer, since: str, **options: Any) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of each event of one watch from `since`, until its timeoutSeconds (1 s)."""
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        core(server).list_namespaced_config_map, NS, resource_version=since, **{"timeout_seconds": 1, **options})
    return [(event["type"], meta.get("name", ""), meta["resourceVersion"])
            for event in stream for meta in [event["raw_object"]["metadata"]]]


def test_a_watch_gets_each_write_after_its_resource_version_through_its_selectors() -> None:
    with kube_server() as server:
        server.add(config_map("a", "vision"), config_map("b", "speech"))
        listing = core(server).list_namespaced_config_map(NS, label_selector="team=vision")
        since = listing.metadata.resource_version
        assert [int(item.metadata.resource_version) for item in listing.items] == [int(since) - 1]  # a's last write
        server.update("ConfigMap", NS, "a", {"data": {"step": "1"}})
        server.update("ConfigMap", NS, "b", {"data": {"step": "1"}})  # not selected: unseen
        server.update("ConfigMap", NS, "b", {"metadata": {"labels": {"team": "vision"}}})  # enters the selector
        server.update("ConfigMap", NS, "a", {"metadata": {"labels": {"team": "speech"}}})  # leaves it
        server.delete("ConfigMap", NS, "b")
        seen = events(server, since, label_selector="team=vision")
        assert [(kind, name) for kind, name, _ in seen] == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a"),
                                                             ("DELETED", "b")]
        versions = [int(version) for _, _, version in seen]
        assert versions == sorted(versions) and versions[0] > int(since)
        assert [(kind, name) for kind, name, _ in events(server, str(versions[1]), field_selector="metadata.name=a")
                ] == [("MODIFIED", "a")]  # watched by name, leaving the label selector is a change of it


def test_a_watch_from_zero_starts_with_what_exists_and_bookmarks_a_quiet_stream() -> None:
    with kube_server() as server:
        server.add(config_map("a", "vision"))
        seen = events(server, "0", allow_watch_bookmarks=True, timeout_seconds=2)
        assert [kind for kind, _, _ in seen][:1] == ["ADDED"] and "BOOKMARK" in [kind for kind, _, _ in seen]


def test_a_resource_version_older_than_the_history_is_410_expired() -> None:
    with kube_server() as server:
        server.add(config_map("a", "vision"))
        since = core(server).list_namespaced_config_map(NS).metadata.resource_version
        server.update("ConfigMap", NS, "a", {"data": {"step": "1"}})
        server.cut_watches(expire=True)
        with pytest.raises(ApiException) as expired:
            events(server, since)
        assert expired.value.status == 410
        again = core(server).list_namespaced_config_map(NS).metadata.resource_version  # listed again: watchable
        server.update("ConfigMap", NS, "a", {"data": {"step": "2"}})
        assert [kind for kind, _, _ in events(server, again)] == ["MODIFIED"]


def test_one_keep_alive_connection_carries_every_framing_as_go_s_server_does() -> None:
    """As urllib3's pool and helm's Go client reuse a connection: a small answer (Content-Length), a large one (chunked,
    over 2,048 bytes), an error, a watch to its timeout and a request after it all go over one connection; a client
    that asks to close gets `Connection: close` and the connection ends."""
    with kube_server() as server:
        server.add(config_map("a", "vision"), {**config_map("big", "vision"), "data": {"pad": "x" * 3000}})
        host, port = server.url.split("//")[1].split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        base = f"/api/v1/namespaces/{NS}/configmaps"
        asked = [(f"{base}/a", 200, None), (f"{base}/big", 200, "chunked"), (f"{base}/gone", 404, None),
                 (f"{base}?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Da", 200, "chunked"),
                 (f"{base}/a", 200, None)]  # fmt: skip
        connection.connect()
        opened = connection.sock
        for path, status, framing in asked:
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            body = response.read()
            assert (response.status, response.getheader("Transfer-Encoding")) == (status, framing), path
            assert response.getheader("Content-Length") == (None if framing else str(len(body)))
            assert connection.sock is opened and not response.will_close, path
        connection.request("GET", f"{base}/a", headers={"Connection": "close"})
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("Connection") == "close" and response.will_close
        response.read()
        connection.close()
