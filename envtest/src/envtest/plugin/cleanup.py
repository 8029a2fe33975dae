"""What a test namespace holds when its test ends: its custom resources deleted while the operator
still runs (so finalizers are processed), waited for, and as a last resort unblocked.

Plain quorum lists, polled with a growing interval: a watch or a list served from the apiserver's
cache would answer sooner, but measured over the whole E2E suite that bought no wall time, and it
needs resourceVersion bookkeeping that is easy to get wrong. Polling starts at 50 ms, so a resource
without finalizers costs one extra list.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from envtest.objects import clear_finalizers, namespaced_url

FIRST_POLL = 0.05
"""Seconds before the first re-list; doubled after each, up to `MAX_POLL`."""
MAX_POLL = 1.0


@dataclass
class Swept:
    """What `delete_custom_resources` left behind."""

    remaining: list[tuple[str, str]] = field(default_factory=list)
    """(API path, name) of each custom resource still present when it returned."""

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
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Swept:
    """Delete every custom resource of `paths` in `namespace`; with `wait`, wait up to that many
    seconds for them to be gone (their finalizers processed)."""
    deadline = clock() + wait
    pending: dict[str, set[str]] = {}
    for path in paths:
        url = namespaced_url(server, path, namespace)
        names = {item["metadata"]["name"] for item in _list(session, url)}
        for name in names:
            session.delete(f"{url}/{name}", timeout=10)
        if names:
            pending[path] = names
    interval = FIRST_POLL
    while pending and wait > 0 and (left := deadline - clock()) > 0:
        sleep(min(interval, left))
        interval = min(interval * 2, MAX_POLL)
        for path in list(pending):
            listed = {i["metadata"]["name"] for i in _list(session, namespaced_url(server, path, namespace))}
            pending[path] &= listed  # one created after our delete is not ours to wait for
            if not pending[path]:
                del pending[path]
    return Swept([(path, name) for path, names in pending.items() for name in sorted(names)])


def strip_finalizers(
    session: requests.Session, server: str, namespace: str, remaining: list[tuple[str, str]]
) -> None:
    """Last resort so a namespace can go away when its operator could not finish (e.g. it crashed).
    `remaining` as `Swept.remaining` gives it; an object already gone is no error."""
    for path, name in remaining:
        clear_finalizers(session, f"{namespaced_url(server, path, namespace)}/{name}")


def wait_for_object(
    session: requests.Session,
    url: str,
    timeout: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Whether GET `url` answers 200 within `timeout` seconds (polled with a growing interval)."""
    deadline, interval = clock() + timeout, FIRST_POLL
    while True:
        if session.get(url, timeout=10).status_code == 200:
            return True
        left = deadline - clock()
        if left <= 0:
            return False
        sleep(min(interval, left))
        interval = min(interval * 2, MAX_POLL)


def _list(session: requests.Session, url: str) -> list[dict[str, Any]]:
    """Items of a list; [] when it failed (say the CRD is not served any more)."""
    resp = session.get(url, timeout=10)
    return (resp.json().get("items") or []) if resp.status_code == 200 else []
