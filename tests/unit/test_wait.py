"""eventually / consistently on a fake clock: time is stepped by the injected sleep, never waited out."""

from __future__ import annotations

import pytest

from envtest.wait import consistently, eventually


class FakeClock:
    """A monotonic clock that only moves when sleep() is called, and records every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class Flaky:
    """Fails with AssertionError(<state>) until the n-th call, then returns the value."""

    def __init__(self, succeed_on: int, value: object = "ok") -> None:
        self.succeed_on = succeed_on
        self.value = value
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        assert self.calls >= self.succeed_on, f"readyReplicas={self.calls}"
        return self.value


# --- eventually ------------------------------------------------------------------------------------


def test_eventually_returns_first_success_value_without_sleeping(clock: FakeClock) -> None:
    assert eventually(lambda: 42, clock=clock, sleep=clock.sleep) == 42
    assert clock.sleeps == []


def test_eventually_succeeds_after_n_attempts_at_the_interval(clock: FakeClock) -> None:
    check = Flaky(succeed_on=4, value={"phase": "Running"})
    result = eventually(check, timeout=10, interval=0.5, clock=clock, sleep=clock.sleep)
    assert result == {"phase": "Running"}
    assert check.calls == 4
    assert clock.sleeps == [0.5, 0.5, 0.5]


def test_eventually_timeout_reports_description_time_attempts_and_last_state(clock: FakeClock) -> None:
    check = Flaky(succeed_on=10**6)
    with pytest.raises(AssertionError) as info:
        eventually(check, timeout=2, interval=0.5, description="db is ready", clock=clock, sleep=clock.sleep)
    message = str(info.value)
    assert "eventually(db is ready)" in message
    assert "after 2.0s" in message
    # attempts at t = 0, 0.5, 1.0, 1.5, 2.0
    assert "5 attempts" in message
    assert check.calls == 5
    # the last observed state, not an earlier one (pytest's assert rewriting appends its explanation)
    assert "last observed:\nreadyReplicas=5" in message
    assert "readyReplicas=4" not in message
    assert isinstance(info.value.__cause__, AssertionError)
    assert str(info.value.__cause__).startswith("readyReplicas=5")


def test_eventually_last_sleep_is_cut_to_the_deadline(clock: FakeClock) -> None:
    with pytest.raises(AssertionError):
        eventually(Flaky(succeed_on=10**6), timeout=1, interval=0.4, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == pytest.approx([0.4, 0.4, 0.2])
    assert clock.now == pytest.approx(1001.0)


def test_eventually_names_the_check_by_qualname_without_description(clock: FakeClock) -> None:
    def pods_scheduled() -> None:
        raise AssertionError("0 of 3 scheduled")

    with pytest.raises(AssertionError, match=r"pods_scheduled\) still failing") as info:
        eventually(pods_scheduled, timeout=0, clock=clock, sleep=clock.sleep)
    assert "1 attempt;" in str(info.value)


def test_eventually_zero_timeout_tries_exactly_once(clock: FakeClock) -> None:
    check = Flaky(succeed_on=2)
    with pytest.raises(AssertionError):
        eventually(check, timeout=0, clock=clock, sleep=clock.sleep)
    assert check.calls == 1
    assert clock.sleeps == []


def test_eventually_propagates_non_assertion_error_immediately(clock: FakeClock) -> None:
    calls = 0

    def buggy() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("status")

    with pytest.raises(KeyError, match="status"):
        eventually(buggy, timeout=30, clock=clock, sleep=clock.sleep)
    assert calls == 1
    assert clock.sleeps == []


def test_eventually_retry_on_adds_exception_types(clock: FakeClock) -> None:
    class ObjectDoesNotExist(Exception):
        pass

    calls = 0

    def get() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ObjectDoesNotExist("mysqlcluster db not found")
        assert calls >= 4, "no status yet"
        return "found"

    result = eventually(
        get, retry_on=(AssertionError, ObjectDoesNotExist), timeout=5, clock=clock, sleep=clock.sleep
    )
    assert result == "found"
    assert calls == 4


def test_eventually_timeout_on_added_type_names_it(clock: FakeClock) -> None:
    class ObjectDoesNotExist(Exception):
        pass

    def get() -> None:
        raise ObjectDoesNotExist("mysqlcluster db not found")

    with pytest.raises(AssertionError) as info:
        eventually(get, retry_on=(ObjectDoesNotExist,), timeout=1, clock=clock, sleep=clock.sleep)
    assert str(info.value).endswith("ObjectDoesNotExist: mysqlcluster db not found")
    assert isinstance(info.value.__cause__, ObjectDoesNotExist)


def test_eventually_reports_bare_assert_without_message(clock: FakeClock) -> None:
    def bare() -> None:
        raise AssertionError

    with pytest.raises(AssertionError, match=r"AssertionError \(no message\)"):
        eventually(bare, timeout=0, clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("kwargs", [{"timeout": -1}, {"interval": -0.1}])
def test_eventually_rejects_negative_times_naming_the_field(kwargs: dict[str, float]) -> None:
    field = next(iter(kwargs))
    with pytest.raises(ValueError, match=field):
        eventually(lambda: None, **kwargs)


def test_eventually_really_sleeps_with_default_clock() -> None:
    # The defaults are wired to real time: a short real run converges.
    check = Flaky(succeed_on=3)
    assert eventually(check, timeout=5, interval=0.01) == "ok"
    assert check.calls == 3


# --- consistently ----------------------------------------------------------------------------------


def test_consistently_returns_last_value_after_the_whole_duration(clock: FakeClock) -> None:
    calls = 0

    def count() -> int:
        nonlocal calls
        calls += 1
        return calls

    result = consistently(count, duration=2, interval=0.5, clock=clock, sleep=clock.sleep)
    # attempts at t = 0, 0.5, 1.0, 1.5, 2.0
    assert result == 5
    assert clock.now == pytest.approx(1002.0)


def test_consistently_fails_at_the_first_failure_with_time_and_attempt(clock: FakeClock) -> None:
    calls = 0

    def steady() -> None:
        nonlocal calls
        calls += 1
        assert calls < 3, f"phase=Failed on call {calls}"

    with pytest.raises(AssertionError) as info:
        consistently(
            steady, duration=10, interval=0.5, description="no restarts", clock=clock, sleep=clock.sleep
        )
    message = str(info.value)
    assert calls == 3  # stopped at the first failure, not at the end of duration
    assert "consistently(no restarts) failed after 1.0s on attempt 3" in message
    assert "phase=Failed on call 3" in message
    assert isinstance(info.value.__cause__, AssertionError)


def test_consistently_propagates_non_assertion_error_unchanged(clock: FakeClock) -> None:
    def buggy() -> None:
        raise TypeError("bad check")

    with pytest.raises(TypeError, match="bad check"):
        consistently(buggy, duration=5, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


def test_consistently_zero_duration_checks_once(clock: FakeClock) -> None:
    assert consistently(lambda: "v", duration=0, clock=clock, sleep=clock.sleep) == "v"
    assert clock.sleeps == []


def test_consistently_rejects_negative_duration() -> None:
    with pytest.raises(ValueError, match="duration"):
        consistently(lambda: None, duration=-1)


def test_eventually_async_awaits_the_check_until_it_passes_and_times_out_like_eventually() -> None:
    import asyncio

    from envtest.wait import eventually_async

    now = [0.0]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    calls = [0]

    async def third_time() -> str:
        calls[0] += 1
        assert calls[0] >= 3, f"call {calls[0]}"
        return "ready"

    result = asyncio.run(eventually_async(third_time, interval=1.0, clock=lambda: now[0], sleep=fake_sleep))
    assert (result, calls[0], slept) == ("ready", 3, [1.0, 1.0])

    async def never() -> None:
        raise AssertionError("still Pending")

    with pytest.raises(
        AssertionError,
        match=r"never\) still failing after 2\.0s and 3 attempts; last observed:\nstill Pending",
    ):
        asyncio.run(
            eventually_async(never, timeout=2.0, interval=1.0, clock=lambda: now[0], sleep=fake_sleep)
        )
