"""Namespace releases that run after the test has returned.

Releasing a test namespace (its leftover custom resources deleted and unblocked, the namespace
deleted in the background, its cluster-wide grants removed) needs nothing from the test and the test
needs nothing from it: the operator has stopped and nobody reads the namespace again. So it is
handed to a small pool and the next test starts at once. The session drains the pool before it
sweeps or stops the cluster. A release that failed is reported in the run's summary under the test
that owned the namespace, never raised inside whichever test happens to run next: that test did
nothing wrong, and a warning there would make it fail under `-W error`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

DRAIN_TIMEOUT = 60.0
"""Seconds the session waits for releases still running when it ends."""


class Releases:
    def __init__(self, workers: int = 2) -> None:
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[str, str, Future[None]]] = []  # (test id, namespace, its release)
        self.failures: list[str] = []
        """One line per failed release, naming the test and the namespace (the summary shows them)."""

    @property
    def pending(self) -> int:
        """Releases not finished yet."""
        return sum(not future.done() for _, _, future in self._pending)

    def submit(self, test: str, namespace: str, release: Callable[[], None]) -> Future[None]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="envtest-release")
        self._reap()
        future = self._pool.submit(release)
        self._pending.append((test, namespace, future))
        return future

    def drain(self, timeout: float = DRAIN_TIMEOUT) -> list[str]:
        """Wait for every pending release (up to `timeout` s); every failure so far."""
        if self._pending:
            wait([future for _, _, future in self._pending], timeout=timeout)
        self._reap()
        for test, namespace, _ in self._pending:  # still running after the timeout
            self.failures.append(f"{test}: releasing namespace {namespace} did not finish in {timeout:.0f}s")
        self._pending = []
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        return self.failures

    def _reap(self) -> None:
        still: list[tuple[str, str, Future[None]]] = []
        for test, namespace, future in self._pending:
            if not future.done():
                still.append((test, namespace, future))
            elif (exc := future.exception()) is not None:
                self.failures.append(
                    f"{test}: releasing namespace {namespace} failed: {type(exc).__name__}: {exc}"
                )
        self._pending = still
