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

A read never answers with an object older than one the informer has delivered, nor older than our
write: the cached object wins when its own resourceVersion is at least ours (someone wrote after
us), ours wins when the cached one is older, and an absent cached object means "deleted after our
write" only if the informer had caught up *before* its store was read. The informer moves its store
and its resourceVersion together under one lock, so reading the resourceVersion first makes that
inference sound; reading the store first would let our write arrive in between and hand back the
stale object with the overlay already dropped.

Kinds without an informer (PVCs, Jobs, Pods) and `fresh=True` reads go to the apiserver.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..runtime.informer import Informer
from ..runtime.multinamespace import AnyInformer
from ..runtime.types import make_key, split_key
from .client import ApiClient
from .kinds import Kind

Obj = dict[str, Any]
InformerLookup = Callable[[Kind], AnyInformer]
"""The manager's `informer(kind)`: the current term's informer, LookupError when there is none."""


PRUNE_MIN = 64
"""Remembered writes below which nothing is pruned (see `CachedClient._prune`)."""


def _caught_up(informer: Informer, written: Obj) -> bool:
    """Whether the informer has seen our write (or resourceVersions do not compare)."""
    seen, ours = _rv(informer.resource_version), _rv(written["metadata"].get("resourceVersion"))
    return seen is None or ours is None or seen >= ours


def _newest(seen: str | None, cached: Obj | None, written: Obj) -> tuple[Obj | None, bool]:
    """What a read answers given the informer's resourceVersion `seen` (read before the store), the
    cached object and our write; and whether the cache has settled past our write (forget it)."""
    ours = _rv(written["metadata"].get("resourceVersion"))
    if ours is None:
        return cached, True
    if cached is not None:
        theirs = _rv(cached["metadata"].get("resourceVersion"))
        if theirs is None or theirs >= ours:
            return cached, True
        return written, False  # the store still holds what came before our write
    caught_up = _rv(seen)
    if caught_up is None or caught_up >= ours:
        return None, True  # the informer saw our write, then a deletion
    return written, False


def _equalities(selector: str) -> dict[str, str] | None:
    """`a=b,c=d` as a dict; None for anything else (set-based terms go to the apiserver)."""
    terms: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, sep, value = term.partition("=")
        if not sep or value.startswith("=") or key.endswith("!") or not key:
            return None
        terms[key.strip()] = value.strip()
    return terms


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
        # (kind endpoint, key) -> the kind and what our write returned, until its informer catches up.
        self._written: dict[tuple[str, str], tuple[Kind, Obj]] = {}
        self._prune_at = PRUNE_MIN
        self.cache_reads = 0
        """Reads answered without a request (for tests and benchmarks)."""

    @property
    def remembered(self) -> int:
        """Writes still laid over the caches (for tests and benchmarks)."""
        with self._lock:
            return len(self._written)

    # -- reads -------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str, *, fresh: bool = False) -> Obj | None:
        informer = None if fresh else self._lookup(kind, namespace)
        if informer is None or not informer.has_synced():
            return self.api.get(kind, namespace, name, fresh=True)
        key = make_key(namespace, name)
        self.cache_reads += 1
        seen = informer.resource_version  # before the store: see the module docstring
        cached = informer.get(key)
        with self._lock:
            entry = self._written.get((kind.endpoint, key))
            if entry is None:
                return cached
            answer, settled = _newest(seen, cached, entry[1])
            if settled:
                del self._written[(kind.endpoint, key)]
        return answer

    def list(self, kind: Kind, namespace: str, label_selector: str, *, fresh: bool = False) -> list[Obj]:
        """From the cache when an informer of the kind holds the namespace (its objects, our writes laid
        over them as for `get`); else a LIST. `label_selector`: `key=value` terms joined by commas."""
        informer = None if fresh else self._lookup(kind, namespace)
        wanted = _equalities(label_selector)
        if informer is None or not informer.has_synced() or wanted is None:
            return self.api.list(kind, namespace, label_selector)
        self.cache_reads += 1
        # What we wrote that the cache may not show yet (our write may be what gave or took a label),
        # and what the cache holds with these labels; each is then read as `get` reads it and checked
        # on that. Our writes first: one forgotten after this read was in the cache before `select`.
        with self._lock:
            names = {
                obj["metadata"]["name"]
                for (endpoint, _key), (_kind, obj) in self._written.items()
                if endpoint == kind.endpoint and obj["metadata"].get("namespace") == namespace
            }
        names.update(split_key(key)[1] for key in informer.select_keys(namespace, wanted))
        found = []
        for name in sorted(names):
            newest = self.get(kind, namespace, name)
            labels = ((newest or {}).get("metadata") or {}).get("labels") or {}
            if newest is not None and all(labels.get(k) == v for k, v in wanted.items()):
                found.append(newest)
        return found

    def events(self, namespace: str, kind: str, name: str) -> list[Obj]:
        return self.api.events(namespace, kind, name)

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
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> bool:
        with self._lock:
            self._written.pop((kind.endpoint, make_key(namespace, name)), None)
        return self.api.delete(
            kind,
            namespace,
            name,
            propagation_policy=propagation_policy,
            uid=uid,
            grace_period_seconds=grace_period_seconds,
        )

    # -- internals ---------------------------------------------------------------------------

    def _lookup(self, kind: Kind, namespace: str | None) -> Informer | None:
        """The informer holding `namespace`'s objects of `kind` (one per namespace when the operator
        watches several: resourceVersions compare only within what one informer has seen)."""
        try:
            return self._informer(kind).for_namespace(namespace)
        except LookupError:
            return None

    def _remember(self, kind: Kind, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        if self._lookup(kind, meta.get("namespace")) is None:
            return obj  # nothing would ever read it from here
        key = (kind.endpoint, make_key(meta.get("namespace"), meta["name"]))
        # As the informers keep it: no managedFields (often most of an object, and never read from a
        # cache), and, like the metadata-only Secret informer, no password.
        kept = {k: v for k, v in obj.items() if kind.kind != "Secret" or k in ("apiVersion", "kind")}
        kept["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        with self._lock:
            self._written[key] = (kind, kept)
            if len(self._written) >= self._prune_at:
                self._prune()
        return obj

    def _prune(self) -> None:
        """Forget the writes the caches have caught up with. A get() does that for what it reads;
        most children are never read again once they are right, so without this the writes of every
        object the operator ever touched would stay. Amortized: runs when the map has doubled."""
        for key, (kind, obj) in list(self._written.items()):
            informer = self._lookup(kind, obj["metadata"].get("namespace"))
            if informer is None or _caught_up(informer, obj):
                del self._written[key]
        self._prune_at = max(PRUNE_MIN, 2 * len(self._written))
