"""Reads from the informer caches, with our own writes laid over them until the caches catch up.

controller-runtime's client reads from the manager's caches too; what it leaves to each reconciler is
the lag: right after we create a StatefulSet or patch a status, the next reconcile (woken by that
very write's watch event on the cluster, a few milliseconds later) may still find the old object, or
none, in a cache and write again - a duplicate create (409), a status patch from a stale base (409),
or a needless write. So every object a write returns is kept here until the informer of its kind has
seen that resourceVersion: informers deliver a resource's events in resourceVersion order, so once
the informer's resourceVersion (advanced by events and bookmarks) reaches ours, the cache reflects
our write and everything after it, a later deletion included. resourceVersions compare as integers
(KEP-5504 made that an API guarantee); where one does not parse, the cache is trusted as it is.

Kinds without an informer (PVCs, Jobs, Pods) and `fresh=True` reads go to the apiserver.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .client import ApiClient
from .kinds import Kind
from .runtime.informer import Informer
from .runtime.types import make_key

Obj = dict[str, Any]
InformerLookup = Callable[[Kind], Informer]
"""The manager's `informer(kind)`: the current term's informer, LookupError when there is none."""


def _rv(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


class CachedClient:
    """An `ApiClient` whose reads come from the caches (see the module docstring)."""

    def __init__(self, api: ApiClient, informer: InformerLookup) -> None:
        self.api = api
        self._informer = informer
        self._lock = threading.Lock()
        self._written: dict[tuple[str, str], Obj] = {}  # (kind endpoint, key) -> what our write returned
        self.cache_reads = 0
        """Reads answered without a request (for tests and benchmarks)."""

    # -- reads -------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str, *, fresh: bool = False) -> Obj | None:
        informer = None if fresh else self._lookup(kind)
        if informer is None or not informer.has_synced():
            return self.api.get(kind, namespace, name, fresh=True)
        key = make_key(namespace, name)
        self.cache_reads += 1
        cached = informer.get(key)
        with self._lock:
            written = self._written.get((kind.endpoint, key))
            if written is None:
                return cached
            seen, ours = _rv(informer.resource_version), _rv(written["metadata"].get("resourceVersion"))
            if seen is None or ours is None or seen >= ours:
                del self._written[(kind.endpoint, key)]  # the cache has caught up with our write
                return cached
        return written

    def list(self, kind: Kind, namespace: str, label_selector: str) -> list[Obj]:
        return self.api.list(kind, namespace, label_selector)

    # -- writes: straight through, and remembered ---------------------------------------------

    def create(self, kind: Kind, obj: Obj) -> Obj:
        return self._remember(kind, self.api.create(kind, obj))

    def patch_merge(
        self, kind: Kind, namespace: str | None, name: str, patch: Obj, *, subresource: str | None = None
    ) -> Obj:
        return self._remember(
            kind, self.api.patch_merge(kind, namespace, name, patch, subresource=subresource)
        )

    def patch_json(
        self, kind: Kind, namespace: str | None, name: str, ops: list[Obj], *, subresource: str | None = None
    ) -> Obj:
        return self._remember(kind, self.api.patch_json(kind, namespace, name, ops, subresource=subresource))

    def apply(self, kind: Kind, obj: Obj, *, force: bool = True) -> Obj:
        return self._remember(kind, self.api.apply(kind, obj, force=force))  # type: ignore[attr-defined]

    def delete(
        self, kind: Kind, namespace: str | None, name: str, *, propagation_policy: str | None = None
    ) -> bool:
        with self._lock:
            self._written.pop((kind.endpoint, make_key(namespace, name)), None)
        return self.api.delete(kind, namespace, name, propagation_policy=propagation_policy)

    # -- internals ---------------------------------------------------------------------------

    def _lookup(self, kind: Kind) -> Informer | None:
        try:
            return self._informer(kind)
        except LookupError:
            return None

    def _remember(self, kind: Kind, obj: Obj) -> Obj:
        if self._lookup(kind) is None:
            return obj  # nothing would ever read it from here
        meta = obj.get("metadata") or {}
        key = (kind.endpoint, make_key(meta.get("namespace"), meta["name"]))
        # Like the metadata-only Secret informer: a password has no business staying in memory.
        kept = (
            {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
            if kind.kind == "Secret"
            else obj
        )
        with self._lock:
            self._written[key] = kept
        return obj
