from __future__ import annotations

import threading
import time

import pytest

from mysql_operator.runtime.clock import FakeClock
from mysql_operator.runtime.types import Key
from mysql_operator.runtime.workqueue import WorkQueue

A, B = Key("ns/a"), Key("ns/b")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> WorkQueue:
    return WorkQueue("test", base_delay=0.005, max_delay=0.04, clock=clock)


def drain(queue: WorkQueue) -> list[Key]:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_add_deduplicates_queued_keys(queue: WorkQueue) -> None:
    queue.add(A)
    queue.add(B)
    queue.add(A)
    assert len(queue) == 2
    assert drain(queue) == [A, B]


def test_key_is_never_handed_to_two_workers_at_once(queue: WorkQueue) -> None:
    queue.add(A)
    assert queue.get(timeout=0) == A
    queue.add(A)
    assert queue.get(timeout=0) is None, "A is still being processed"
    queue.done(A)
    assert queue.get(timeout=0) == A


def test_readd_while_processing_runs_once_more(queue: WorkQueue) -> None:
    queue.add(A)
    key = queue.get(timeout=0)
    queue.add(A)
    queue.add(A)
    queue.done(key)  # type: ignore[arg-type]
    assert drain(queue) == [A]


def test_done_without_readd_does_not_requeue(queue: WorkQueue) -> None:
    queue.add(A)
    queue.done(queue.get(timeout=0))  # type: ignore[arg-type]
    assert queue.get(timeout=0) is None


def test_rate_limited_backoff_doubles_up_to_max_and_forget_resets_it(queue: WorkQueue) -> None:
    delays = [queue.add_rate_limited(A) for _ in range(5)]
    assert delays == [0.005, 0.01, 0.02, 0.04, 0.04]
    assert queue.num_requeues(A) == 5
    assert queue.num_requeues(B) == 0, "backoff is per key"
    queue.forget(A)
    assert queue.num_requeues(A) == 0
    assert queue.add_rate_limited(A) == 0.005


def test_rate_limited_key_is_ready_only_after_its_backoff(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add_rate_limited(A)
    queue.add_rate_limited(A)  # second failure: 10 ms; the earlier 5 ms delay still stands
    assert queue.get(timeout=0) is None
    clock.advance(0.005)
    assert queue.get(timeout=0) == A


def test_not_before_stretches_the_backoff(queue: WorkQueue, clock: FakeClock) -> None:
    assert queue.add_rate_limited(A, not_before=7.0) == 7.0
    clock.advance(6.9)
    assert queue.get(timeout=0) is None
    clock.advance(0.1)
    assert queue.get(timeout=0) == A


def test_add_after_waits_for_the_clock(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add_after(A, 10.0)
    assert queue.get(timeout=0) is None
    assert queue.pending() == 1
    clock.advance(9.9)
    assert queue.get(timeout=0) is None
    clock.advance(0.1)
    assert queue.get(timeout=0) == A
    assert queue.pending() == 0


def test_add_after_keeps_only_the_earliest_delay(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add_after(A, 10.0)
    queue.add_after(A, 5.0)
    queue.add_after(A, 8.0)
    clock.advance(5.0)
    assert drain(queue) == [A]
    clock.advance(10.0)
    assert drain(queue) == [], "superseded delays must not fire again"


def test_add_after_of_a_queued_key_does_not_duplicate_it(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add(A)
    queue.add_after(A, 1.0)
    clock.advance(1.0)
    assert drain(queue) == [A]


def test_len_counts_only_ready_keys(queue: WorkQueue) -> None:
    queue.add(A)
    queue.add_after(B, 1.0)
    assert len(queue) == 1
    queue.get(timeout=0)
    assert len(queue) == 0


PATIENCE = 30.0
"""Seconds a join gives up after; only a failing test waits that long."""


class ReadClock(FakeClock):
    """A fake clock that tells which threads have read it. A getter reads the clock under the queue's
    lock and then waits without looking at the queue again, so once it has read the clock, only a
    notify can wake it: the state these tests need, reached without a sleep."""

    def __init__(self) -> None:
        super().__init__()
        self.readers: set[threading.Thread] = set()
        self.read = threading.Condition()

    def monotonic(self) -> float:
        with self.read:
            self.readers.add(threading.current_thread())
            self.read.notify_all()
        return super().monotonic()

    def wait_read_by(self, threads: list[threading.Thread]) -> None:
        with self.read:
            assert self.read.wait_for(lambda: set(threads) <= self.readers, PATIENCE), "never got()"


def test_shutdown_wakes_blocked_getters() -> None:
    clock = ReadClock()
    queue = WorkQueue("test", clock=clock)
    results: list[Key | None] = []
    getters = [threading.Thread(target=lambda: results.append(queue.get()), daemon=True) for _ in range(3)]
    for t in getters:
        t.start()
    clock.wait_read_by(getters)  # each is blocked in get(), or on its way into the wait
    queue.shutdown()
    for t in getters:
        t.join(PATIENCE)
        assert not t.is_alive()
    assert results == [None, None, None]
    queue.add(A)
    assert queue.get(timeout=0) is None, "adds after shutdown are dropped"


def test_blocked_getter_wakes_when_a_delayed_key_comes_due() -> None:
    clock = ReadClock()
    queue = WorkQueue("test", clock=clock)
    got: list[Key | None] = []
    # No timeout: blocked with nothing delayed, the getter sleeps until notified.
    getter = threading.Thread(target=lambda: got.append(queue.get()), daemon=True)
    getter.start()
    clock.wait_read_by([getter])
    queue.add_after(A, 0.05)  # it must recompute its wait, now bounded by A's time
    clock.advance(0.05)
    getter.join(PATIENCE)
    assert got == [A]


def test_get_timeout_returns_none() -> None:
    real = WorkQueue("real-clock")
    got: list[Key | None] = [A]
    getter = threading.Thread(target=lambda: got.__setitem__(0, real.get(timeout=0.05)), daemon=True)
    getter.start()
    getter.join(PATIENCE)
    assert not getter.is_alive(), "get() outlived its timeout"
    assert got == [None]


def test_concurrent_workers_never_process_one_key_together() -> None:
    queue = WorkQueue("stress")
    keys = [Key(f"ns/k{i}") for i in range(5)]
    in_flight: set[Key] = set()
    lock = threading.Lock()
    overlaps: list[Key] = []
    processed = [0]

    def worker() -> None:
        while (key := queue.get(timeout=0.1)) is not None:
            with lock:
                if key in in_flight:
                    overlaps.append(key)
                in_flight.add(key)
            time.sleep(0.0005)
            if processed[0] < 300:
                queue.add(key)  # re-added while processing: must wait for done()
            with lock:
                in_flight.discard(key)
                processed[0] += 1
            queue.done(key)

    for k in keys:
        queue.add(k)
    workers = [threading.Thread(target=worker) for _ in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(10)
    assert overlaps == []
    assert processed[0] >= 300
