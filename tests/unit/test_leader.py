from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from mysql_operator.runtime.clock import FakeClock
from mysql_operator.runtime.leader import (
    LeaderElector,
    LeaseConflict,
    NoElectionNamespace,
    election_namespace,
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
    assert not b.try_acquire_or_renew()  # b sees a's record: its lease runs from now, on b's clock
    clock.advance(15)  # a stopped renewing (killed)
    assert b.try_acquire_or_renew()
    assert store.spec["holderIdentity"] == "b"
    assert store.spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew(), "the old leader sees the new holder and steps down"


def test_conflict_means_the_race_was_lost(store: FakeLeaseStore, clock: FakeClock) -> None:
    candidate(store, clock, "old").try_acquire_or_renew()
    stale = StaleView(store, store.get())
    a = candidate(store, clock, "a")
    b = candidate(stale, clock, "b")
    assert not a.try_acquire_or_renew() and not b.try_acquire_or_renew()  # both observe "old"
    clock.advance(20)  # expired: both candidates see a free lease
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


class SlowStore(FakeLeaseStore):
    """Every successful write takes `delay` seconds of the fake clock (a slow apiserver)."""

    def __init__(self, clock: FakeClock, delay: float) -> None:
        super().__init__()
        self.clock, self.delay = clock, delay

    def _store(self, lease: dict[str, Any]) -> dict[str, Any]:
        stored = super()._store(lease)
        self.clock.advance(self.delay)
        return stored


def test_renew_deadline_runs_from_when_the_renewal_was_sent(clock: FakeClock) -> None:
    store = SlowStore(clock, delay=4.0)
    a = candidate(store, clock, "a")
    sent = clock.monotonic()
    assert a.try_acquire_or_renew()  # the reply arrives 4 s after the request left
    clock.advance(10 - 4 - 0.01)
    assert a.holds_lease(), "still inside renew_deadline counted from the send"
    clock.advance(0.02)
    assert clock.monotonic() - sent > 10
    assert not a.holds_lease(), "the deadline counts from the send, not from the slow reply"
    store.fail = OSError("apiserver unreachable")
    assert not a.try_acquire_or_renew()


def test_two_slow_renewals_cannot_outlast_the_lease_seen_by_a_standby(clock: FakeClock) -> None:
    store = SlowStore(clock, delay=4.0)
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    a.try_acquire_or_renew()
    store.delay = 0.0
    assert not b.try_acquire_or_renew()
    b_saw = clock.monotonic()  # b's lease clock starts at its observation
    store.delay = 4.0
    clock.advance(2)
    a.try_acquire_or_renew()  # sent at b_saw + 2, stored, reply 4 s later
    store.fail = OSError("partition")
    # a may write only until 10 s after it sent that renewal ...
    a_last_write_ok = b_saw + 2 + 10
    # ... and b, having observed that renewal no earlier than when it was sent, waits 15 s from then.
    while clock.monotonic() < a_last_write_ok + 0.01:
        clock.advance(0.5)
        a.try_acquire_or_renew()
    assert not a.holds_lease() and not a.is_leader
    assert not b.try_acquire_or_renew(), "b observed the renewal at most 12 s ago: not expired yet"


def test_expiry_uses_the_local_observation_time_not_the_holders_clock(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    skewed = FakeClock(start=clock.time() - 3600)  # the holder's wall clock is an hour behind
    a = candidate(store, skewed, "a")
    b = candidate(store, clock, "b")
    assert a.try_acquire_or_renew()
    assert parse_micro_time(store.spec["renewTime"]) < clock.time() - 3000, "renewTime is in b's past"
    assert not b.try_acquire_or_renew(), "b just saw the record change: the lease is fresh for b"
    clock.advance(14.9)
    assert not b.try_acquire_or_renew()
    clock.advance(0.1)
    assert b.try_acquire_or_renew(), "15 s on b's own clock without a change: expired"


def test_a_renewed_record_restarts_the_standbys_lease_clock(store: FakeLeaseStore, clock: FakeClock) -> None:
    a, b = candidate(store, clock, "a"), candidate(store, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.advance(10)
    a.try_acquire_or_renew()  # renewTime changes
    clock.advance(1)
    assert not b.try_acquire_or_renew()  # b sees the renewal now: 11 s after its first look
    clock.advance(14.9)
    assert not b.try_acquire_or_renew(), "26 s after b first saw a, but only 14.9 s after the renewal"
    clock.advance(0.1)
    assert b.try_acquire_or_renew()


def forbidden() -> Exception:
    from pykube.exceptions import HTTPError

    return HTTPError(403, 'leases.coordination.k8s.io "lock" is forbidden: User cannot get leases')


def test_a_refused_lease_is_a_problem_at_once_and_clears_on_success(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    elector = candidate(store, clock, "a")
    store.fail = forbidden()
    assert not elector.try_acquire_or_renew()
    problem = elector.problem()
    assert problem is not None and "HTTP 403" in problem and "default/lock" in problem
    clock.advance(5)
    assert elector.denied_for() == 5
    store.fail = None
    elector.try_acquire_or_renew()
    assert elector.problem() is None and elector.denied_for() == 0


def test_an_unreachable_lease_is_a_problem_only_after_the_grace(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    elector = candidate(store, clock, "a")  # grace: one lease duration (15 s)
    store.fail = ConnectionError("connection refused")
    elector.try_acquire_or_renew()
    clock.advance(14)
    elector.try_acquire_or_renew()
    assert elector.problem() is None, "a blip is not a problem"
    clock.advance(1)
    elector.try_acquire_or_renew()
    problem = elector.problem()
    assert problem is not None and "unreachable for 15s" in problem and "connection refused" in problem
    assert elector.denied_for() == 0, "not a denial: /healthz stays green"


def test_a_standby_that_reads_a_held_lease_or_loses_a_race_has_no_problem(
    store: FakeLeaseStore, clock: FakeClock
) -> None:
    leader, standby = candidate(store, clock, "a"), candidate(store, clock, "b")
    assert leader.try_acquire_or_renew()
    assert not standby.try_acquire_or_renew()
    assert standby.problem() is None
    racer = candidate(StaleView(store, None), clock, "c")  # saw no lease; its create gets 409
    racer._failed(ConnectionError("earlier blip"))
    assert not racer.try_acquire_or_renew()
    assert racer.problem() is None and racer._failing_since is None, "a conflict is an answer"


def test_election_namespace_prefers_the_configured_then_pod_then_serviceaccount(tmp_path: Path) -> None:
    sa = tmp_path / "namespace"
    sa.write_text("from-sa\n")
    env = {"POD_NAMESPACE": "from-env"}
    assert election_namespace("given", environ=env, serviceaccount_file=sa) == "given"
    assert election_namespace(None, environ=env, serviceaccount_file=sa) == "from-env"
    assert election_namespace(None, environ={}, serviceaccount_file=sa) == "from-sa"


def test_election_namespace_out_of_cluster_is_an_error_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(NoElectionNamespace, match="--leader-election-namespace"):
        election_namespace(None, environ={"POD_NAMESPACE": " "}, serviceaccount_file=tmp_path / "absent")
