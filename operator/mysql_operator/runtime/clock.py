"""Injectable time, so queues, backoff and leases can be tested by stepping time instead of sleeping."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: delays, deadlines, durations."""
        ...

    def time(self) -> float:
        """Seconds since the epoch: timestamps other processes read (Lease renewTime)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A clock that moves only when a test calls `advance`; both readings move together."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
