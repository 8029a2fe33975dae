"""Write fencing: a reconcile that belongs to a term which has ended must not write.

Leader election alone cannot stop a reconcile already in flight when the lease is lost (or when
stop() gives up waiting for it): it would go on writing while a successor reconciles the same
objects. So every write request of the manager's clients passes `Fence.check()` just before it
leaves the process, and fails with `Fenced` unless the calling thread's term is the current one and
the lease is still held (within renew_deadline of the last renewal *sent*, see leader.py).

Terms are bound to threads: a controller worker calls `enter(term)` once when it starts; threads
that never entered a term (the elector, tests) are not fenced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_local = threading.local()


class Fenced(Exception):
    """A write refused before it was sent: this thread's term is over (lease lost or stopping)."""


def enter(term: int) -> None:
    """Bind the calling thread to `term`: its writes pass only while that term is current."""
    _local.term = term


def current_thread_term() -> int | None:
    return getattr(_local, "term", None)


class Fence:
    def __init__(self, holds_lease: Callable[[], bool] = lambda: True) -> None:
        self._holds_lease = holds_lease
        """False once the lease may be someone else's; checked on every write."""
        self._lock = threading.Lock()
        self._term = 0  # the latest term handed out
        self._open = False  # whether that term may still write

    def open(self) -> int:
        """Begin a new term; every earlier one is closed for good. Returns the new term."""
        with self._lock:
            self._term += 1
            self._open = True
            return self._term

    def close(self) -> None:
        """End the current term: from now on its threads' writes raise Fenced."""
        with self._lock:
            self._open = False

    def allows(self, term: int) -> bool:
        with self._lock:
            current = self._open and term == self._term
        return current and self._holds_lease()

    def check(self) -> None:
        term = current_thread_term()
        if term is not None and not self.allows(term):
            raise Fenced(f"term {term} has ended: write refused ({threading.current_thread().name})")
