"""Vocabulary shared by the runtime and reconcilers: keys, results, the Reconciler protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType, Protocol

Key = NewType("Key", str)
"""`namespace/name` of the primary object (just `name` for cluster-scoped ones)."""


def make_key(namespace: str | None, name: str) -> Key:
    return Key(f"{namespace}/{name}" if namespace else name)


def split_key(key: Key) -> tuple[str | None, str]:
    namespace, _, name = key.rpartition("/")
    return (namespace or None), name


@dataclass(frozen=True)
class Result:
    """What a reconcile asks of the queue after it returned normally.

    An exception raised by reconcile means "retry with per-key exponential backoff";
    a 409 Conflict is the common case and is logged at debug level only.
    """

    requeue_after: float | None = None
    """Seconds until the key is reconciled again; None = only when something changes."""
    requeue: bool = False
    """Requeue with rate-limited backoff, as after an error, without logging one."""


class Reconciler(Protocol):
    def reconcile(self, key: Key) -> Result: ...
