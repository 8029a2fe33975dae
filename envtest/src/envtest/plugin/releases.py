"""Namespace releases that run after the test has returned.

Releasing a test namespace (its leftover custom resources deleted and unblocked, the namespace
deleted in the background, its cluster-wide grants removed) needs nothing from the test and the test
needs nothing from it: the operator has stopped and nobody reads the namespace again. So it is
handed to a small pool and the next test starts at once. Held (`deferred`), a release waits for
`start()`: the plugin calls it when the next test's body begins, so that the release does not compete
with that test's setup (its operator's first lists) for the apiserver. The session drains the pool
before it sweeps or stops the cluster; a release that failed is reported as a warning by the test
that follows (or, for the last one, in the run's summary), never dropped.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from envtest.errors import EnvtestWarning

DRAIN_TIMEOUT = 60.0
"""Seconds the session waits for releases still running when it ends."""


class ReleaseFailed(EnvtestWarning):
    """A test namespace could not be released; the session's sweep (or the plane's end) clears it."""


class Releases:
    def __init__(self, workers: int = 2, *, deferred: bool = False) -> None:
        self._workers = workers
        self._deferred = deferred
        self._pool: ThreadPoolExecutor | None = None
        self._queued: list[tuple[str, Callable[[], None]]] = []
        self._pending: list[tuple[str, Future[None]]] = []
        self.failures: list[str] = []
        """Failures no test has warned about yet (what `drain` leaves for the summary)."""

    @property
    def pending(self) -> int:
        """Releases not finished yet (held ones included)."""
        return len(self._queued) + sum(not future.done() for _, future in self._pending)

    def submit(self, namespace: str, release: Callable[[], None]) -> None:
        self.warn_failed()
        self._queued.append((namespace, release))
        if not self._deferred:
            self.start()

    def start(self) -> None:
        """Run the releases held so far."""
        queued, self._queued = self._queued, []
        if queued and self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="envtest-release")
        for namespace, release in queued:
            assert self._pool is not None
            self._pending.append((namespace, self._pool.submit(release)))

    def warn_failed(self) -> None:
        """Warn (in the calling test) about every release that failed since the last call."""
        self._reap()
        failures, self.failures = self.failures, []
        for failure in failures:
            warnings.warn(ReleaseFailed(failure), stacklevel=2)

    def drain(self, timeout: float = DRAIN_TIMEOUT) -> list[str]:
        """Wait for every pending release (up to `timeout` s); the failures nobody warned about."""
        self.start()
        if self._pending:
            wait([future for _, future in self._pending], timeout=timeout)
        self._reap()
        for namespace, _ in self._pending:  # still running after the timeout
            self.failures.append(f"releasing namespace {namespace} did not finish in {timeout:.0f}s")
        self._pending = []
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        return self.failures

    def _reap(self) -> None:
        still: list[tuple[str, Future[None]]] = []
        for namespace, future in self._pending:
            if not future.done():
                still.append((namespace, future))
            elif (exc := future.exception()) is not None:
                self.failures.append(f"releasing namespace {namespace} failed: {type(exc).__name__}: {exc}")
        self._pending = still
