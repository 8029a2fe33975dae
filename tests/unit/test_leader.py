from __future__ import annotations

import copy
from typing import Any

import pytest
from mysql_operator.runtime.clock import FakeClock
from mysql_operator.runtime.leader import (
    LeaderElector,
    LeaseConflict,
    format_micro_time,
    parse_micro_time,
)


class FakeLeaseStore:
    """One Lease with apiserver semantics: resourceVersion bumps on write, stale writes get 409."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.writes = 0
        self.fail: Exception | None = None

    def get(self) -> dict[str, Any] | None:
        if self.fail:
            raise self.fail
        return copy.deepcopy(self.lease)

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        if self.lease is not None:
            raise LeaseConflict("AlreadyExists")
        return self._store(lease)

    def update(self, lease: dict[str, Any]) -> dict[str, Any]:
        assert self.lease is not None
        if lease["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise LeaseConflict("the object has been modified")
        return self._store(lease)

    def _store(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.writes += 1
        self.lease = copy.deepcopy(lease)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)

    @property
    def spec(self) -> dict[str, Any]:
        assert self.lease is not None
        return self.lease["spec"]


class StaleView:
    """A candidate whose read happened before another candidate's write (the race)."""

    def __init__(self, store: FakeLeaseStore, snapshot: dict[str, Any] | None) -> None:
        self.store, self.snapshot = store, snapshot

    def get(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.snapshot)

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self.store.create(lease)

    def update(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self.store.update(lease)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store() -> FakeLeaseStore:
    return FakeLeaseStore()


def candidate(store: Any, clock: FakeClock, identity: str, **kwargs: Any) -> LeaderElector:
    return LeaderElector(
        store,
        identity,
        name="lock",
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        clock=clock,
        **kwargs,
    )


def test_acquires_an_absent_lease(store: FakeLeaseStore, clock: FakeClock) -> None:
    a = candidate(store, clock, "a")
    assert a.try_acquire_or_renew()
    assert store.spec["holderIdentity"] == "a"
    assert store.spec["leaseDurationSeconds"] == 15
    assert store.spec["leaseTransitions"] == 0
    assert parse_micro_time(store.spec["renewTime"]) == pytest.approx(clock.time())


def test_leader_renews_on_each_step(store: FakeLeaseStore, clock: FakeClock) -> None:
    a = candidate(store, clock, "a")
    a.try_acquire_or_renew()
    clock.advance(2)
    assert a.try_acquire_or_renew()
    assert parse_micro_time(store.spec["renewTime"]) == pytest.approx(clock.time())
    assert store.spec["acquireTime"] != store.spec["renewTime"], "renewal keeps the acquire time"
    assert store.writes == 2


def test_standby_waits_while_the_lease_is_fresh(store: FakeLeaseStore, clock: FakeClock) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    a.try_acquire_or_renew()
    clock.advance(14)
    assert not b.try_acquire_or_renew()
    assert store.spec["holderIdentity"] == "a"
    assert store.writes == 1, "a standby only reads a held lease"


def test_standby_takes_over_an_expired_lease(store: FakeLeaseStore, clock: FakeClock) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    a.try_acquire_or_renew()
    clock.advance(15.1)  # a stopped renewing (killed)
    assert b.try_acquire_or_renew()
    assert store.spec["holderIdentity"] == "b"
    assert store.spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew(), "the old leader sees the new holder and steps down"


def test_conflict_means_the_race_was_lost(store: FakeLeaseStore, clock: FakeClock) -> None:
    candidate(store, clock, "old").try_acquire_or_renew()
    clock.advance(20)  # expired: both candidates see a free lease
    stale = StaleView(store, store.get())
    a = candidate(store, clock, "a")
    b = candidate(stale, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew(), "b's write carried the old resourceVersion"
    assert store.spec["holderIdentity"] == "a"


def test_create_race_is_lost_on_already_exists(store: FakeLeaseStore, clock: FakeClock) -> None:
    stale = StaleView(store, None)  # b saw no lease, a created it meanwhile
    a, b = candidate(store, clock, "a"), candidate(stale, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()


def test_leader_steps_down_when_renewal_fails_past_the_deadline(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    changes: list[bool] = []
    a = candidate(store, clock, "a", on_change=changes.append)
    a.try_acquire_or_renew()
    store.fail = OSError("apiserver unreachable")
    for _ in range(5):  # 2 s apart: still within the 10 s renew deadline
        clock.advance(2)
        assert a.try_acquire_or_renew()
    clock.advance(0.5)
    assert not a.try_acquire_or_renew()
    assert changes == [True, False]


def test_next_wait_never_overshoots_the_renew_deadline(store: FakeLeaseStore, clock: FakeClock) -> None:
    a = candidate(store, clock, "a")
    assert a.next_wait() == 2, "a standby retries every retry_period"
    a.try_acquire_or_renew()
    clock.advance(9)
    assert a.next_wait() == pytest.approx(1.01)


def test_release_clears_the_holder_so_a_standby_takes_over_at_once(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert "holderIdentity" not in store.spec
    assert not a.is_leader
    assert b.try_acquire_or_renew(), "no need to wait for the lease to expire"
    assert store.spec["leaseTransitions"] == 1


def test_release_by_a_non_leader_writes_nothing(store: FakeLeaseStore, clock: FakeClock) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    assert not b.release()
    assert store.spec["holderIdentity"] == "a"
    assert store.writes == 1


def test_bad_timings_are_rejected(store: FakeLeaseStore, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
        LeaderElector(store, "a", lease_duration=5, renew_deadline=10, retry_period=2, clock=clock)


def test_micro_time_round_trips() -> None:
    stamp = format_micro_time(1_700_000_000.25)
    assert stamp == "2023-11-14T22:13:20.250000Z"
    assert parse_micro_time(stamp) == 1_700_000_000.25
    assert parse_micro_time("garbage") is None
