"""One informer over several namespaces: an Informer per namespace behind the Informer's own interface.

controller-runtime's multi-namespace cache does the same (`cache.Options.DefaultNamespaces`): an operator
allowed into a few namespaces only (a Role in each, no ClusterRole) cannot list or watch a kind across
the cluster, so it lists and watches each namespace on its own. Reads route by the key's namespace;
events from every namespace reach every handler; it has synced when each of its informers has.

A resourceVersion is only comparable with what the informer of the same namespace has seen, so the
cache's overlay asks `for_namespace(ns)` for that informer before it compares (`Informer.for_namespace`
returns the informer itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .informer import Handler, Informer
from .types import Key, split_key


class MultiNamespaceInformer:
    """Informers of one kind, one per namespace, read and subscribed to as one."""

    def __init__(self, informers: Iterable[Informer]) -> None:
        self._by_namespace: dict[str | None, Informer] = {i.namespace: i for i in informers}
        if not self._by_namespace:
            raise ValueError("MultiNamespaceInformer needs at least one informer")
        self.kind = next(iter(self._by_namespace.values())).kind

    @property
    def namespaces(self) -> list[str | None]:
        return list(self._by_namespace)

    def for_namespace(self, namespace: str | None) -> Informer | None:
        """The informer of `namespace`; None for a namespace this one does not watch."""
        return self._by_namespace.get(namespace)

    # -- the Informer interface ------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> Handler:
        for informer in self._by_namespace.values():
            informer.add_handler(handler)
        return handler

    def remove_handler(self, handler: Handler) -> None:
        for informer in self._by_namespace.values():
            informer.remove_handler(handler)

    def start(self) -> None:
        for informer in self._by_namespace.values():
            informer.start()

    def request_stop(self) -> None:
        for informer in self._by_namespace.values():
            informer.request_stop()

    def stop(self, timeout: float = 5.0) -> None:
        self.request_stop()  # all at once, so the reads end in parallel
        for informer in self._by_namespace.values():
            informer.stop(timeout)

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self._by_namespace.values())

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return all(i.wait_for_sync(timeout) for i in self._by_namespace.values())

    def get(self, key: Key) -> dict[str, Any] | None:
        informer = self._by_namespace.get(split_key(key)[0])
        return None if informer is None else informer.get(key)

    def list(self) -> list[dict[str, Any]]:
        return [obj for informer in self._by_namespace.values() for obj in informer.list()]

    def select(self, namespace: str | None, labels: dict[str, str]) -> list[dict[str, Any]]:
        if namespace is not None:
            informer = self._by_namespace.get(namespace)
            return [] if informer is None else informer.select(namespace, labels)
        found = [obj for informer in self._by_namespace.values() for obj in informer.select(None, labels)]
        return sorted(found, key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))

    def keys(self) -> list[Key]:
        keys: list[Key] = []
        for informer in self._by_namespace.values():
            keys += informer.keys()
        return keys

    def denied_for(self) -> float:
        return max(i.denied_for() for i in self._by_namespace.values())

    @property
    def resource_version(self) -> str | None:
        """Not comparable across namespaces: ask `for_namespace(ns).resource_version`."""
        return None

    @property
    def relists(self) -> int:
        return sum(i.relists for i in self._by_namespace.values())


AnyInformer = Informer | MultiNamespaceInformer
"""What the manager hands out per kind: one informer, or one per watched namespace."""
