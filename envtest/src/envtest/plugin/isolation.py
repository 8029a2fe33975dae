"""How a test shares the cluster with the tests of the other xdist workers: a shared or an exclusive
hold on the run's isolation lock.

Namespaced tests isolate themselves (a namespace each) and share the cluster: each holds the lock
shared. A test that sees the whole cluster — a cluster-wide operator, custom resources of a
cluster-scoped kind — holds it exclusively: it starts once every other worker's test has finished
and released its namespaces, and no other test starts until it has finished and released its own.
So under `pytest -n N` such tests are serialised, and whatever appeared on the cluster while one
ran is that test's.

`flock(2)` on a file beside the run's base temp dir: the kernel lets go of a crashed worker's holds,
so a dead worker never blocks the run. Holds of one process are independent of each other (each is
its own open file), so a worker's next test may wait for its previous test's background release.
flock favours no one, and a worker's tests overlap their predecessors' releases, so shared holds
alone could keep an exclusive waiter out forever; a turnstile (a second lock, held by the exclusive
waiter while it waits and passed through briefly by every shared one) lets it in.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

LOCK = "envtest-isolation.lock"
TURNSTILE = "envtest-isolation.turnstile"


class Hold:
    """One test's hold; `release()` is idempotent and may come from any thread."""

    def __init__(self, fd: int, exclusive: bool) -> None:
        self.exclusive = exclusive
        self._fd: int | None = fd
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the file releases its flock


def hold(folder: Path, *, exclusive: bool) -> Hold:
    """Block until this test may run alongside the others (shared) or alone (exclusive)."""
    folder.mkdir(parents=True, exist_ok=True)
    turnstile = _open(folder / TURNSTILE)
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fd = _open(folder / LOCK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(turnstile)  # a shared hold passes through; an exclusive one held it while waiting
    return Hold(fd, exclusive)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
