"""A work queue with client-go semantics: dedup, one worker per key, delays and per-key backoff.

Contract (the same as client-go's workqueue.RateLimitingInterface):

* `add(key)` queues a key unless it is already queued; a key being processed is remembered ("dirty")
  and queued again by `done(key)`, so no key is ever on two workers at once and an event that
  arrives during a reconcile is never lost.
* `get()` hands out a key and marks it processing; every `get` must be paired with `done(key)`.
* `add_after(key, delay)` queues the key once the delay has passed; of several pending delays for
  one key the earliest wins.
* `add_rate_limited(key)` = `add_after(key, backoff)` where backoff doubles per call for that key,
  and, with a `bucket` (ratelimit.py), is at least the wait for a token of the bucket all keys share
  (client-go's MaxOfRateLimiter over the per-item and the bucket limiter).
  Footgun: `forget(key)` must follow every success, or the key keeps its backoff (and the failure
  map grows with every key that ever failed).
* `shutdown()` wakes every blocked getter; afterwards `get` returns None at once and adds are
  dropped. Keys still queued are abandoned: stop must be prompt, and the next leader relists.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .clock import SYSTEM_CLOCK, Clock
from .ratelimit import TokenBucket
from .types import Key


def _ignore(_: float = 0.0) -> None:
    return None


@dataclass(frozen=True)
class QueueHooks:
    """What a queue reports (client-go's workqueue metrics provider); all no-ops by default."""

    added: Callable[[], None] = _ignore
    retried: Callable[[], None] = _ignore
    waited: Callable[[float], None] = _ignore
    """Seconds a key spent queued before a worker took it."""
    worked: Callable[[float], None] = _ignore
    """Seconds from get() to done()."""


class WorkQueue:
    def __init__(
        self,
        name: str = "",
        *,
        base_delay: float = 0.005,
        max_delay: float = 300.0,
        clock: Clock | None = None,
        hooks: QueueHooks | None = None,
        bucket: TokenBucket | None = None,
    ) -> None:
        self.name = name
        self._hooks = hooks or QueueHooks()
        self.base_delay = base_delay
        """Seconds of the first rate-limited requeue of a key; doubled on each further failure."""
        self.max_delay = max_delay
        """Upper bound of the per-key backoff, in seconds."""
        self._clock = clock or SYSTEM_CLOCK
        self.bucket = bucket
        """Overall limit of rate-limited requeues across keys; None = per-key backoff only."""
        self._cond = threading.Condition()
        self._queue: deque[Key] = deque()  # each key here is also in _dirty and not in _processing
        self._dirty: set[Key] = set()  # keys that need processing: queued, or re-added while processing
        self._processing: set[Key] = set()  # keys handed out by get() and not yet done()
        self._waiting: list[tuple[float, int, Key]] = []  # heap of (ready_at, seq, key); may hold stale rows
        self._ready_at: dict[Key, float] = {}  # key -> earliest ready_at; a heap row is live iff it matches
        self._seq = itertools.count()  # tie-breaker so the heap never compares keys of equal times
        self._failures: dict[Key, int] = {}  # key -> rate-limited requeues since the last forget()
        self._queued_at: dict[Key, float] = {}  # key -> when it entered _queue (metrics only)
        self._started_at: dict[Key, float] = {}  # key -> when get() handed it out (metrics only)
        self._shutting_down = False
        self._shut_down = threading.Event()  # set with _shutting_down; for waiters outside _cond

    # -- queueing -------------------------------------------------------------------------------

    def add(self, key: Key) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: Key) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._hooks.added()
        if key in self._processing:
            return  # done() queues it again, so it never runs on two workers at once
        self._enqueue_locked(key)

    def _enqueue_locked(self, key: Key) -> None:
        self._queue.append(key)
        self._queued_at[key] = self._clock.monotonic()
        self._cond.notify()

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            ready_at = self._clock.monotonic() + delay
            if key in self._ready_at and self._ready_at[key] <= ready_at:
                return
            self._ready_at[key] = ready_at
            heapq.heappush(self._waiting, (ready_at, next(self._seq), key))
            # A getter may be sleeping until a later item: let it recompute its wait.
            self._cond.notify_all()

    def add_rate_limited(self, key: Key, *, not_before: float = 0.0) -> float:
        """Requeue `key` after its backoff (or `not_before` seconds, if longer); returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        self._hooks.retried()
        # Every rate-limited add takes a token, even one whose own backoff is longer (as MaxOf does).
        shared = self.bucket.reserve() if self.bucket is not None else 0.0
        delay = max(self.backoff_for(failures), shared, not_before)
        self.add_after(key, delay)
        return delay

    def backoff_for(self, failures: int) -> float:
        # Capping the exponent first keeps 2**n from overflowing a float for long-failing keys.
        return min(self.base_delay * (2 ** min(failures, 64)), self.max_delay)

    def forget(self, key: Key) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: Key) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # -- consuming ------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> Key | None:
        """The next key, marked processing; None on shutdown or when `timeout` seconds pass."""
        with self._cond:
            deadline = None if timeout is None else self._clock.monotonic() + timeout
            while True:
                if self._shutting_down:
                    return None
                next_ready = self._promote_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    now = self._clock.monotonic()
                    self._hooks.waited(now - self._queued_at.pop(key, now))
                    self._started_at[key] = now
                    return key
                now = self._clock.monotonic()
                if deadline is not None and now >= deadline:
                    return None
                waits = [t - now for t in (deadline, next_ready) if t is not None]
                self._cond.wait(max(min(waits), 0.0) if waits else None)

    def _promote_due_locked(self) -> float | None:
        """Move delayed keys whose time has come into the queue; returns the next ready time."""
        now = self._clock.monotonic()
        while self._waiting:
            ready_at, _, key = self._waiting[0]
            if self._ready_at.get(key) != ready_at:
                heapq.heappop(self._waiting)  # superseded by an earlier add_after of the same key
                continue
            if ready_at > now:
                return ready_at
            heapq.heappop(self._waiting)
            del self._ready_at[key]
            self._add_locked(key)
        return None

    def done(self, key: Key) -> None:
        with self._cond:
            self._processing.discard(key)
            started = self._started_at.pop(key, None)
            if started is not None:
                self._hooks.worked(self._clock.monotonic() - started)
            if key in self._dirty and not self._shutting_down:
                self._enqueue_locked(key)

    # -- lifecycle ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()
        self._shut_down.set()

    def wait_shutdown(self, timeout: float) -> bool:
        """Block up to `timeout` seconds (real time) for shutdown; True once shut down.

        A separate Event, not _cond: add() notifies one waiter of _cond, and a waiter here would
        swallow the wake-up a getter needs.
        """
        return self._shut_down.wait(timeout)

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Keys ready to be handed out (not the delayed ones, not the ones being processed)."""
        with self._cond:
            self._promote_due_locked()
            return len(self._queue)

    def pending(self) -> int:
        """Keys waiting for a delay to pass."""
        with self._cond:
            return len(self._ready_at)
