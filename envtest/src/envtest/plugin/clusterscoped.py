"""Custom resources of cluster-scoped kinds that a test created, found and deleted at its teardown.

A namespace cannot hold them, so the namespace's release never reaches them: without this, a
`ClusterWidget` made by one test stays for every later test, and every worker's operator reconciles
it. The plugin lists each cluster-scoped kind of the session's CRDs when a test starts and again at
its teardown; what appeared in between is the test's when nobody else can have made it:

- the test ran alone (an exclusive hold, see `isolation`), or the run has no other worker; or
- it was written by this worker's admin clients, whose User-Agent names the worker: the apiserver
  records it as a field manager of the object (the `kube`, `k8s` and `cluster` fixtures' clients;
  an object holding no field besides its name has no manager to tell).

Those are deleted with the operator still running (finalizers processed, `FinalizerStuck` when they
are not) and, as a last resort, unblocked. The rest cannot be told apart from another worker's: they
get the run's labels, so the end-of-run sweep (and `envtest sweep` after a crash) removes them, and
the test gets a `ClusterScopedLeftover` warning naming them and the marker that would have made
them its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import requests

from envtest.objects import clear_finalizers
from envtest.plugin.cleanup import FIRST_POLL, MAX_POLL


@dataclass(frozen=True)
class Found:
    """One cluster-scoped custom resource."""

    path: str
    """`apis/<group>/<version>/<plural>`."""
    name: str
    uid: str
    managers: tuple[str, ...] = ()
    """Its field managers (a writing client's User-Agent prefix, unless it named one)."""

    @property
    def label(self) -> str:
        return f"{self.path.rsplit('/', 1)[1]}/{self.name}"


@dataclass
class Inventory:
    """What existed when a test started, per kind (uids)."""

    before: dict[str, set[str]] = field(default_factory=dict)


def user_agent(run_id: str, worker: str) -> str:
    """The admin clients' User-Agent in one worker of one run (its prefix becomes the field manager)."""
    return f"envtest-{run_id}-{worker}/1"


def manager_of(agent: str) -> str:
    """The field manager the apiserver derives from a User-Agent: what precedes its first '/'."""
    return agent.split("/", 1)[0]


def take(session: requests.Session, server: str, paths: Iterable[str]) -> Inventory:
    return Inventory({path: {item.uid for item in _list(session, server, path)} for path in paths})


def appeared(session: requests.Session, server: str, inventory: Inventory) -> list[Found]:
    """What exists now that did not when `inventory` was taken."""
    return [
        item
        for path, before in inventory.before.items()
        for item in _list(session, server, path)
        if item.uid not in before
    ]


def split(found: list[Found], *, alone: bool, manager: str) -> tuple[list[Found], list[Found]]:
    """(the test's own, those that cannot be told apart from another worker's)."""
    if alone:
        return found, []
    mine = [item for item in found if manager in item.managers]
    return mine, [item for item in found if manager not in item.managers]


def delete(
    session: requests.Session,
    server: str,
    found: list[Found],
    *,
    wait: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[Found]:
    """Delete each (uid precondition: never a namesake made since); with `wait`, wait that many
    seconds for them to be gone. What is still there is returned."""
    deadline = clock() + wait
    for item in found:
        session.delete(
            f"{server}/{item.path}/{item.name}",
            json={"preconditions": {"uid": item.uid}},
            timeout=10,
        )
    pending = list(found)
    interval = FIRST_POLL
    while True:
        pending = [item for item in pending if _exists(session, server, item)]
        left = deadline - clock()
        if not pending or wait <= 0 or left <= 0:
            return pending
        sleep(min(interval, left))
        interval = min(interval * 2, MAX_POLL)


def unblock(session: requests.Session, server: str, found: list[Found]) -> None:
    """Last resort: their finalizers removed, so they go (nobody is left to process them)."""
    for item in found:
        clear_finalizers(session, f"{server}/{item.path}/{item.name}")


def label(session: requests.Session, server: str, found: list[Found], labels: dict[str, str]) -> None:
    """Give each the run's labels, so the end-of-run sweep finds it."""
    for item in found:
        session.patch(
            f"{server}/{item.path}/{item.name}",
            data=json.dumps({"metadata": {"labels": labels}}),
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=10,
        )


def _exists(session: requests.Session, server: str, item: Found) -> bool:
    resp = session.get(f"{server}/{item.path}/{item.name}", timeout=10)
    return resp.status_code == 200 and resp.json().get("metadata", {}).get("uid") == item.uid


def _list(session: requests.Session, server: str, path: str) -> list[Found]:
    resp = session.get(f"{server}/{path}", timeout=10)
    if resp.status_code != 200:
        return []  # the CRD is gone, or not served at this version any more
    return [_found(path, item) for item in resp.json().get("items") or []]


def _found(path: str, item: dict[str, Any]) -> Found:
    meta = item.get("metadata") or {}
    managers = tuple(str(entry.get("manager")) for entry in meta.get("managedFields") or [])
    return Found(path, meta.get("name", ""), meta.get("uid", ""), managers)
