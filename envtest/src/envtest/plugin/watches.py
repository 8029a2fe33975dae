"""Waiting on the apiserver by watch events instead of polls: for an object to appear, and for the
custom resources of a test namespace to be gone once deleted.

Why the resourceVersions below matter: since Kubernetes 1.31 a list without resourceVersion is served
from the apiserver's watch cache once that cache has caught up with etcd, and for a kind nobody wrote
lately that takes an etcd progress notification, requested on a 100 ms tick. So a plain list costs
up to 0.1 s, teardown did two or three of them per test, and a poll added its own interval on top.
Here a list asks for a resourceVersion the cache already has (`NotOlderThan` our own delete, or an
earlier answer), which it serves at once with the same guarantee, and the wait is a watch, which
returns on the event itself.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import requests

from envtest.objects import namespaced_url

ViewRV = dict[str, str]
"""API path of a custom resource → a resourceVersion whose view of the namespace we already had."""


def wait_for_object(session: requests.Session, collection: str, name: str, timeout: float) -> bool:
    """Whether the object `name` of `collection` (a list URL) exists within `timeout` seconds.

    One watch from resourceVersion 0: the apiserver first replays what its cache holds (an object that
    exists arrives at once as ADDED), then sends the creation when it happens."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        params = {"fieldSelector": f"metadata.name={name}", "resourceVersion": "0"}
        with contextlib.closing(_watch(session, collection, params, left)) as events:
            if any(event.get("type") in ("ADDED", "MODIFIED") for event in events):
                return True
        # The watch ended or was refused (an identity may get but not watch): ask directly.
        if session.get(f"{collection}/{name}", timeout=10).status_code == 200:
            return True
        _pause(deadline)
    return False


@dataclass
class Swept:
    """What `delete_custom_resources` left behind, and how fresh its view was."""

    remaining: list[tuple[str, str]] = field(default_factory=list)
    """(API path, name) of each custom resource still present when it returned."""
    seen: ViewRV = field(default_factory=dict)
    """Per API path, the resourceVersion of its last answer: a later list may ask for a view not
    older than it, which the watch cache serves at once (see the module doc)."""

    @property
    def left(self) -> list[str]:
        """`plural/name` of what remains, as reports name it."""
        return [f"{path.rsplit('/', 1)[1]}/{name}" for path, name in self.remaining]


def delete_custom_resources(
    session: requests.Session,
    server: str,
    namespace: str,
    paths: list[str],
    *,
    wait: float = 0.0,
    seen: ViewRV | None = None,
) -> Swept:
    """Delete every custom resource of `paths` in `namespace`; with `wait`, wait that long for them to
    be gone (finalizers processed). `seen`: the views of an earlier call on this namespace, which
    this one's need not be fresher than (without it, or a delete of ours to date it, a quorum list)."""
    deadline = time.monotonic() + wait
    swept = Swept()
    for path in paths:
        url = namespaced_url(server, path, namespace)
        present, rv = _delete_all(session, url, (seen or {}).get(path))
        if present and wait > 0:
            rv = _wait_gone(session, url, present, rv, deadline)
        swept.remaining += [(path, name) for name in present.values()]
        if rv:
            swept.seen[path] = rv
    return swept


def strip_finalizers(
    session: requests.Session, server: str, namespace: str, remaining: list[tuple[str, str]]
) -> None:
    """Last resort so a namespace can go away when its operator could not finish (e.g. it crashed).
    `remaining` as `Swept.remaining` gives it; an object already gone is no error."""
    for path, name in remaining:
        session.patch(
            f"{namespaced_url(server, path, namespace)}/{name}",
            data=json.dumps({"metadata": {"finalizers": None}}),
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=10,
        )


def _delete_all(
    session: requests.Session, url: str, seen_rv: str | None
) -> tuple[dict[str, str], str | None]:
    """Delete every item; returns uid → name of those still present (finalizers pending), and the
    resourceVersion of the view that says so.

    With `seen_rv`: one list not older than it. Without: delete what a cache-served list shows, then
    confirm with a list not older than our own deletes, or a quorum list if none of them certainly
    wrote (only such a write is sure to follow every write the test made)."""
    if seen_rv:
        items, rv = _list(session, url, {"resourceVersion": seen_rv, "resourceVersionMatch": "NotOlderThan"})
        present = {i["metadata"]["uid"]: i["metadata"]["name"] for i in items if _delete(session, url, i)[0]}
        return present, rv
    items, _ = _list(session, url, {"resourceVersion": "0"})  # may trail the latest writes a little
    deleted = {item["metadata"]["uid"] for item in items}
    newest = max((_delete(session, url, item)[1] for item in items), default=0)
    params = {"resourceVersion": str(newest), "resourceVersionMatch": "NotOlderThan"} if newest else {}
    items, rv = _list(session, url, params)
    for item in items:
        if item["metadata"]["uid"] not in deleted:  # written just before teardown: the cache was behind
            _delete(session, url, item)
    return {i["metadata"]["uid"]: i["metadata"]["name"] for i in items}, rv


def _wait_gone(
    session: requests.Session, url: str, present: dict[str, str], rv: str | None, deadline: float
) -> str | None:
    """Watch from `rv` until every uid of `present` was deleted (each is removed from `present`)
    or the deadline passed; returns the last resourceVersion seen."""
    while present and (left := deadline - time.monotonic()) > 0:
        params = {"resourceVersion": rv, "allowWatchBookmarks": "true"} if rv else {}
        with contextlib.closing(_watch(session, url, params, left)) as events:
            for event in events:
                if event.get("type") == "ERROR":  # e.g. 410 Gone: a fresh list below instead
                    break
                meta = (event.get("object") or {}).get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                if event.get("type") == "DELETED":
                    present.pop(meta.get("uid", ""), None)
                    if not present:
                        return rv
        rv = _forget_listed_gone(session, url, present, rv)  # the watch ended early, or the deadline
        if present:
            _pause(deadline)
    return rv


def _forget_listed_gone(
    session: requests.Session, url: str, present: dict[str, str], rv: str | None
) -> str | None:
    params = {"resourceVersion": rv, "resourceVersionMatch": "NotOlderThan"} if rv else {}
    items, listed_rv = _list(session, url, params)
    if listed_rv is None:  # the list failed: that says nothing about what is gone
        return rv
    listed = {i["metadata"]["uid"] for i in items}
    for uid in [u for u in present if u not in listed]:
        del present[uid]
    return listed_rv


def _list(
    session: requests.Session, url: str, params: dict[str, str]
) -> tuple[list[dict[str, Any]], str | None]:
    """Items and resourceVersion of a list; ([], None) when it failed (say the CRD is not served)."""
    resp = session.get(url, params=params, timeout=10)
    if resp.status_code != 200:
        return [], None
    body = resp.json()
    return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion")


def _delete(session: requests.Session, url: str, item: dict[str, Any]) -> tuple[bool, int]:
    """DELETE `item`: whether it is still there (finalizers pending), and the resourceVersion of the
    write that marked it for deletion if this DELETE certainly made it (else 0).

    Certainty comes from a precondition on the resourceVersion we saw without a deletionTimestamp.
    A cache-served list is often a write behind an operator that is still updating status, so a
    conflict is answered with a GET (read from etcd, not the cache) and one more conditional try."""
    meta = item["metadata"]
    for attempt in range(2):
        if "deletionTimestamp" in meta:  # marked before us: deleting again writes nothing to date by
            resp = session.delete(f"{url}/{meta['name']}", timeout=10)
            return resp.status_code != 404 and _kind(resp) != "Status", 0
        preconditions = {"uid": meta["uid"], "resourceVersion": meta.get("resourceVersion")}
        resp = session.delete(f"{url}/{meta['name']}", json={"preconditions": preconditions}, timeout=10)
        if resp.status_code == 409 and attempt == 0:
            live = session.get(f"{url}/{meta['name']}", timeout=10)
            if live.status_code == 404:
                return False, 0
            if live.status_code == 200:
                meta = live.json().get("metadata") or {}
                continue
        if resp.status_code == 409:  # changed again, or unreadable: delete it whatever it is now
            resp = session.delete(f"{url}/{meta['name']}", timeout=10)
            return resp.status_code != 404 and _kind(resp) != "Status", 0
        break
    if resp.status_code != 200:
        return resp.status_code != 404, 0  # 404: gone already
    if _kind(resp) == "Status":
        return False, 0  # deleted outright: no finalizers, and no revision of it to date by
    after = resp.json().get("metadata") or {}
    try:
        return True, int(after["resourceVersion"]) if after.get("deletionTimestamp") else 0
    except (KeyError, ValueError):  # resourceVersions are opaque by contract; etcd's are integers
        return True, 0


def _kind(resp: requests.Response) -> str | None:
    try:
        return resp.json().get("kind")
    except ValueError:
        return None


def _pause(deadline: float) -> None:
    # Between two watches: a watch refused at once (say a 5xx) must not turn into a hot loop.
    time.sleep(min(0.05, max(deadline - time.monotonic(), 0.0)))


def _watch(
    session: requests.Session, url: str, params: dict[str, str], timeout: float
) -> Generator[dict[str, Any], None, None]:
    """The events of one watch request (server-side timeout `timeout`); closes it when the caller stops."""
    query = {**params, "watch": "true", "timeoutSeconds": str(max(1, math.ceil(timeout)))}
    resp = session.get(url, params=query, stream=True, timeout=(10, timeout + 10))
    try:
        if resp.status_code != 200:
            return
        for line in resp.iter_lines():
            if line:
                yield json.loads(line)
    except (requests.RequestException, ValueError):
        return  # a dropped or garbled stream: the caller looks again
    finally:
        resp.close()
