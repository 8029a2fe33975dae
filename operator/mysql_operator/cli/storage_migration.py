"""Re-store every MySQLCluster at the storage version (v1), then trim the CRD's `status.storedVersions`.

    python -m mysql_operator migrate-storage [--kubeconfig FILE] [--context NAME]

Run it once after installing a CRD whose storage version changed (v1beta1 → v1), with the conversion
webhook serving. Exit 0: every object is stored at v1 and `storedVersions` is `["v1"]`, so a later
release may stop serving v1beta1. Exit 1: a write failed (each is named), or the apiserver does not
store at v1 yet, or the CRD changed meanwhile; nothing was trimmed, and running it again is safe.
Exit 2: bad input (options, kubeconfig).

A one-shot command, not a step of the operator's start: it is needed once per upgrade, not on every
leader change; it must see every namespace (an operator may watch one); its exit code is what a Job or
an upgrade script gates on; and the operator needs CRD status rights only for it.

How, and why each step:
1. Wait until discovery's `storageVersionHash` for the resource names the hub: the apiserver picks up
   a CRD change asynchronously, and a write before that would still be encoded at the old version.
   (kube-storage-version-migrator watches the same hash.)
2. List every object (in pages) and send each a merge patch that changes nothing but carries the
   resourceVersion it was listed with. The apiserver decodes the object, applies the empty change,
   encodes it at the storage version and writes it only if the bytes differ: an object stored at
   v1beta1 is written (its resourceVersion moves), one already at v1 is left alone. A 409 means
   someone wrote the object after the list — that write stored it at v1 — and a 404 that it is gone:
   both are done. Any other error is a failure; note that the patch is an UPDATE to admission, so an
   object the validating webhook would no longer let in fails here, by name: fix it and run again.
3. Only when every object is done: JSON-patch `status.storedVersions` to the hub, with tests that
   `metadata.generation` (so the storage version) and `storedVersions` did not change since step 1.
   If either did, the apiserver refuses the patch and nothing is trimmed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests

from ..api import v1

log = logging.getLogger(__name__)

Obj = dict[str, Any]

CRD_NAME = f"{v1.PLURAL}.{v1.GROUP}"
CRD_API = "apiextensions.k8s.io/v1"
FIELD_MANAGER = "mysql-operator-storage-migration"
PAGE_SIZE = 250
NOT_FOUND = 404
CONFLICT = 409
_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"


class MigrationError(Exception):
    """The migration could not start (the apiserver does not store at the hub) or could not list."""


class Http(Protocol):
    """What is used of pykube's HTTPClient: relative URLs under `/apis/<version>`."""

    def get(self, **kwargs: Any) -> requests.Response: ...

    def patch(self, **kwargs: Any) -> requests.Response: ...


@dataclass
class Outcome:
    rewritten: list[str] = field(default_factory=list)
    """`namespace/name` of objects written again: they were stored at an older version."""
    current: list[str] = field(default_factory=list)
    """Already stored at the hub: the apiserver wrote nothing."""
    moved: list[str] = field(default_factory=list)
    """Written by someone else since the list (so stored at the hub by that write), or deleted."""
    failed: dict[str, str] = field(default_factory=dict)
    """`namespace/name` → the apiserver's answer. Non-empty means storedVersions was left alone."""
    stored_versions: list[str] = field(default_factory=list)
    """The CRD's status.storedVersions at the end."""

    @property
    def trimmed(self) -> bool:
        return not self.failed and self.stored_versions == [v1.VERSION]


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """What discovery publishes for a resource stored as group/version/kind
    (k8s.io/apiserver/pkg/endpoints/discovery.StorageVersionHash)."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def migrate(
    http: Http,
    *,
    ready_timeout: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Steps 1-3 of the module docstring. Raises MigrationError when it cannot start or list; a failed
    write is recorded in the Outcome (the other objects are still migrated) and blocks the trim."""
    crd = _get_crd(http)
    storage = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
    if storage != [v1.VERSION]:
        raise MigrationError(f"CRD {CRD_NAME} stores {storage}, not {v1.VERSION}: install the new CRD first")
    _wait_for_storage_hash(http, ready_timeout, clock, sleep)
    crd = _get_crd(http)  # generation and storedVersions as of now: the trim's preconditions
    outcome = Outcome()
    for obj in _list_all(http):
        _restore(http, obj, outcome)
    stored = list(crd.get("status", {}).get("storedVersions") or [])
    if outcome.failed:
        log.error("not trimming storedVersions: %d write(s) failed", len(outcome.failed))
        outcome.stored_versions = stored
        return outcome
    if stored != [v1.VERSION]:
        stored = _trim(http, crd, stored)
    outcome.stored_versions = stored
    log.info(
        "storage migrated: %d rewritten, %d already at %s, %d changed or gone; storedVersions %s",
        len(outcome.rewritten),
        len(outcome.current),
        v1.VERSION,
        len(outcome.moved),
        stored,
    )
    return outcome


def _get_crd(http: Http) -> Obj:
    response = http.get(version=CRD_API, url=f"customresourcedefinitions/{CRD_NAME}")
    if response.status_code != 200:
        raise MigrationError(f"CRD {CRD_NAME}: HTTP {response.status_code}: {_message(response)}")
    return response.json()  # type: ignore[no-any-return]


def _wait_for_storage_hash(
    http: Http, timeout: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    want = storage_version_hash(v1.GROUP, v1.VERSION, v1.KIND)
    deadline, seen = clock() + timeout, None
    while True:
        response = http.get(version=v1.API_VERSION, url="")
        if response.status_code == 200:
            resources = response.json().get("resources") or []
            seen = next((r.get("storageVersionHash") for r in resources if r.get("name") == v1.PLURAL), None)
            if seen == want:
                return
        if clock() >= deadline:
            raise MigrationError(
                f"the apiserver does not store {v1.PLURAL} at {v1.VERSION} after {timeout:.0f}s "
                f"(discovery storageVersionHash {seen!r}, want {want!r}): is the new CRD installed?"
            )
        sleep(0.5)


def _list_all(http: Http) -> list[Obj]:
    items: list[Obj] = []
    params: dict[str, Any] = {"limit": PAGE_SIZE}
    while True:
        response = http.get(version=v1.API_VERSION, url=v1.PLURAL, params=params)
        if response.status_code != 200:
            # 410 on a later page: the continue token expired. Nothing was trimmed; a rerun starts over.
            raise MigrationError(f"list {v1.PLURAL}: HTTP {response.status_code}: {_message(response)}")
        page = response.json()
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        params = {"limit": PAGE_SIZE, "continue": token}


def _restore(http: Http, obj: Obj, outcome: Outcome) -> None:
    meta = obj["metadata"]
    key, listed = f"{meta['namespace']}/{meta['name']}", meta["resourceVersion"]
    response = http.patch(
        version=v1.API_VERSION,
        namespace=meta["namespace"],
        url=f"{v1.PLURAL}/{meta['name']}",
        data=json.dumps({"metadata": {"resourceVersion": listed}}),
        headers={"Content-Type": _MERGE},
        params={"fieldManager": FIELD_MANAGER},
    )
    if response.status_code == 200:
        written = response.json()["metadata"]["resourceVersion"] != listed
        (outcome.rewritten if written else outcome.current).append(key)
    elif response.status_code in (CONFLICT, NOT_FOUND):
        outcome.moved.append(key)
    else:
        outcome.failed[key] = f"HTTP {response.status_code}: {_message(response)}"
        log.error("re-storing %s failed: %s", key, outcome.failed[key])


def _trim(http: Http, crd: Obj, stored: list[str]) -> list[str]:
    ops = [
        {"op": "test", "path": "/metadata/generation", "value": crd["metadata"]["generation"]},
        {"op": "test", "path": "/status/storedVersions", "value": stored},
        {"op": "replace", "path": "/status/storedVersions", "value": [v1.VERSION]},
    ]
    response = http.patch(
        version=CRD_API,
        url=f"customresourcedefinitions/{CRD_NAME}/status",
        data=json.dumps(ops),
        headers={"Content-Type": _JSON_PATCH},
        params={"fieldManager": FIELD_MANAGER},
    )
    if response.status_code != 200:
        raise MigrationError(
            f"trimming {CRD_NAME} status.storedVersions {stored} → [{v1.VERSION}]: "
            f"HTTP {response.status_code}: {_message(response)} (did the CRD change meanwhile? run again)"
        )
    return list(response.json()["status"]["storedVersions"])


def _message(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    return str(body.get("message") or body)[:300] if isinstance(body, dict) else str(body)[:300]
