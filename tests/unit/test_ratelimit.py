"""The token bucket shared by a work queue's keys, and how it combines with the per-key backoff."""

from __future__ import annotations

import pytest

from mysql_operator.runtime.clock import FakeClock
from mysql_operator.runtime.ratelimit import DEFAULT_BURST, DEFAULT_QPS, TokenBucket
from mysql_operator.runtime.types import Key
from mysql_operator.runtime.workqueue import WorkQueue


def test_defaults_are_client_go_s_10_qps_burst_100() -> None:
    assert (DEFAULT_QPS, DEFAULT_BURST) == (10.0, 100)


def test_burst_passes_at_once_then_each_token_waits_one_interval_more() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])


def test_tokens_refill_at_qps_up_to_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    bucket.reserve(), bucket.reserve()
    clock.advance(0.1)
    assert bucket.reserve() == pytest.approx(0.0, abs=1e-6), "one token back after 1/qps"
    clock.advance(3600)
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1]), "never more than burst"


def test_promised_tokens_are_paid_back_before_new_ones() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=1, clock=clock)
    bucket.reserve()
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.advance(0.2)
    assert bucket.reserve() == pytest.approx(0.1), "the two reservations made meanwhile come first"


@pytest.mark.parametrize(("qps", "burst", "field"), [(0, 1, "qps"), (1, 0, "burst")])
def test_bad_settings_name_the_field(qps: float, burst: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TokenBucket(qps=qps, burst=burst)


def test_queue_waits_for_the_larger_of_key_backoff_and_shared_bucket() -> None:
    clock = FakeClock()
    queue = WorkQueue(
        "q", base_delay=0.005, max_delay=1000.0, clock=clock, bucket=TokenBucket(qps=10, burst=2, clock=clock)
    )
    # Many keys failing at once: their own backoffs are 5 ms, the bucket spreads them at 10/s.
    delays = [queue.add_rate_limited(Key(f"ns/k{i}")) for i in range(5)]
    assert delays == pytest.approx([0.005, 0.005, 0.1, 0.2, 0.3])
    # One key failing often: its own backoff outgrows what the bucket asks.
    clock.advance(100.0)
    hot = Key("ns/hot")
    delays = [queue.add_rate_limited(hot) for _ in range(12)]
    assert delays[-1] == pytest.approx(0.005 * 2**11)
    assert queue.num_requeues(hot) == 12


def test_bucket_delay_holds_the_key_back_until_due() -> None:
    clock = FakeClock()
    queue = WorkQueue("q", clock=clock, bucket=TokenBucket(qps=1, burst=1, clock=clock))
    queue.add_rate_limited(Key("ns/a"))
    queue.add_rate_limited(Key("ns/b"))
    clock.advance(0.005)
    assert queue.get(timeout=0) == Key("ns/a")
    assert queue.get(timeout=0) is None, "b waits for its token"
    clock.advance(1.0)
    assert queue.get(timeout=0) == Key("ns/b")


def test_requeue_after_is_not_rate_limited() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock)
    queue = WorkQueue("q", clock=clock, bucket=bucket)
    for i in range(5):
        queue.add_after(Key(f"ns/{i}"), 0.5)
    assert bucket.reserve() == 0.0, "add_after took no token"
