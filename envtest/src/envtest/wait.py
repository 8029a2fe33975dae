"""Waiting on a live cluster: `eventually` (converges in time) and `consistently` (holds for a while).

Both take a *check*: a callable that returns a value when the state is as wanted and raises
AssertionError when it is not, so the same plain ``assert`` statements work in both::

    def ready() -> dict:
        obj = pykube.Deployment.objects(api).get(name="web").obj
        assert obj["status"]["readyReplicas"] == 3, obj["status"]
        return obj

    obj = eventually(ready, timeout=60, description="web has 3 ready replicas")

"Not yet" means AssertionError, or NotFound for an *object* from the kubernetes client (ApiException
404), pykube-ng (ObjectDoesNotExist, HTTPError 404) or requests (HTTPError 404) — so
``eventually(lambda: core.read_namespaced_config_map("cm", ns))`` waits for the ConfigMap to appear.
A 404 for an unknown *resource* (a typo, a CRD not installed) is not "not yet": see envtest.notfound.
``retry_on`` adds exception types to these. Any other exception is a bug in the check, or a failure no
amount of waiting fixes, and propagates at once instead of burning the timeout.

`eventually_async` is `eventually` for async tests: its check is a coroutine function, and its waits
yield to the test's event loop.

The retry loop is tenacity's; the clock and sleep are parameters so unit tests step time instead of
sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, retry_if_result

from envtest.notfound import is_object_not_found

__all__ = ["consistently", "eventually", "eventually_async"]

T = TypeVar("T")

Clock = Callable[[], float]
"""Monotonic seconds; time.monotonic unless a test injects a fake."""
Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


class _Deadline:
    """Stop and wait strategies for tenacity that share one injected clock.

    tenacity's own stop_after_delay reads time.monotonic directly, which a fake sleep cannot advance;
    and its wait_fixed may sleep past the deadline. Here the last sleep is cut short so the final
    attempt runs at the deadline, and a wait never lasts longer than asked.
    """

    def __init__(self, seconds: float, interval: float, clock: Clock) -> None:
        self.clock = clock
        self.start = clock()
        self.end = self.start + seconds
        self.interval = interval

    def elapsed(self) -> float:
        return self.clock() - self.start

    def stop(self, _state: RetryCallState) -> bool:
        return self.clock() >= self.end

    def wait(self, _state: RetryCallState) -> float:
        return max(0.0, min(self.interval, self.end - self.clock()))


class _Counted(Generic[T]):
    """Wraps a check to count attempts; tenacity's statistics are thread-local and clock-bound."""

    def __init__(self, check: Callable[[], T]) -> None:
        self.check = check
        self.attempts = 0

    def __call__(self) -> T:
        self.attempts += 1
        return self.check()


def poll_pause(polls: int) -> float:
    """Seconds before the next look at something that usually comes within a few hundred ms (a CRD
    established, a plane's default ServiceAccount), after `polls` looks: 10 ms, doubling to 100 ms."""
    return min(0.1, 0.01 * 2 ** min(polls, 4))


def _name(check: Callable[..., object], description: str | None) -> str:
    return description or getattr(check, "__qualname__", None) or repr(check)


def _observed(exc: BaseException) -> str:
    """The failure as a reader needs it; a bare `assert` outside pytest's rewriting has an empty message."""
    text = str(exc)
    if isinstance(exc, AssertionError):
        return text or "AssertionError (no message)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_non_negative(**values: float) -> None:
    for field, value in values.items():
        if value < 0:
            raise ValueError(f"{field} must be >= 0 seconds, got {value!r}")


def _not_yet(retry_on: tuple[type[BaseException], ...]) -> Callable[[BaseException], bool]:
    def judge(exc: BaseException) -> bool:
        return isinstance(exc, (AssertionError, *retry_on)) or is_object_not_found(exc)

    return judge


def _until_deadline(deadline: _Deadline, not_yet: Callable[[BaseException], bool]) -> dict[str, Any]:
    """tenacity's settings of `eventually`: retry every "not yet" until the deadline."""
    return {
        "stop": deadline.stop,
        "wait": deadline.wait,
        "retry": retry_if_exception(not_yet),
        # The last retryable failure comes out as itself, so we can chain from it; a RetryError would
        # hide it one level deeper.
        "reraise": True,
    }


def eventually(
    check: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.25,
    description: str | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> T:
    """Call ``check`` until it returns, and return what it returned.

    ``check`` is retried every ``interval`` seconds while it says "not yet": AssertionError, an object's
    NotFound from the kubernetes client, pykube-ng or requests, or one of ``retry_on`` (added to those,
    never replacing them). It always runs at least once, and once more at the deadline. Any other
    exception (a 404 for an unknown resource included) propagates unchanged at once.

    On timeout raises AssertionError naming the check, the seconds waited, the number of attempts and
    the last failure (the last state observed), chained from that failure.
    """
    _check_non_negative(timeout=timeout, interval=interval)
    counted = _Counted(check)
    deadline = _Deadline(timeout, interval, clock)
    not_yet = _not_yet(retry_on)
    retrying = Retrying(sleep=sleep, **_until_deadline(deadline, not_yet))
    try:
        return retrying(counted)
    except BaseException as exc:
        if not not_yet(exc):
            raise
        # Only reachable on timeout: before the stop, tenacity swallows every "not yet".
        raise _timed_out(check, description, deadline, counted.attempts, exc) from exc


async def eventually_async(
    check: Callable[[], Awaitable[T]],
    *,
    timeout: float = 30.0,
    interval: float = 0.25,
    description: str | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    clock: Clock = time.monotonic,
    sleep: AsyncSleep = asyncio.sleep,
) -> T:
    """`eventually` for async tests: awaits ``check()`` until it returns, with the same "not yet"
    (the asyncio clients' NotFound included), the same deadline and the same message on timeout::

        cm = await eventually_async(lambda: core.read_namespaced_config_map("web", namespace))
    """
    _check_non_negative(timeout=timeout, interval=interval)
    attempts = [0]
    deadline = _Deadline(timeout, interval, clock)
    not_yet = _not_yet(retry_on)

    async def counted() -> T:
        attempts[0] += 1
        return await check()

    retrying = AsyncRetrying(sleep=sleep, **_until_deadline(deadline, not_yet))
    try:
        return await retrying(counted)
    except BaseException as exc:
        if not not_yet(exc):
            raise
        raise _timed_out(check, description, deadline, attempts[0], exc) from exc


def _timed_out(
    check: Callable[..., object],
    description: str | None,
    deadline: _Deadline,
    attempts: int,
    exc: BaseException,
) -> AssertionError:
    counted = "attempt" if attempts == 1 else "attempts"
    return AssertionError(
        f"eventually({_name(check, description)}) still failing after {deadline.elapsed():.1f}s "
        f"and {attempts} {counted}; last observed:\n{_observed(exc)}"
    )


def consistently(
    check: Callable[[], T],
    *,
    duration: float = 5.0,
    interval: float = 0.25,
    description: str | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> T:
    """Call ``check`` every ``interval`` seconds for ``duration`` seconds; return its last value.

    Runs at least once, and once more at the end of ``duration``. The first AssertionError fails at
    once with an AssertionError saying after how many seconds and on which attempt the state broke,
    chained from the failure; any other exception propagates unchanged.
    """
    _check_non_negative(duration=duration, interval=interval)
    counted = _Counted(check)
    deadline = _Deadline(duration, interval, clock)
    retrying = Retrying(
        sleep=sleep,
        stop=deadline.stop,
        wait=deadline.wait,
        # Every success asks for another round until the stop; a failure is never retried.
        retry=retry_if_result(lambda _value: True),
        # Reaching the end of duration is the success case: hand back the last value.
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )
    try:
        return retrying(counted)
    except AssertionError as exc:
        raise AssertionError(
            f"consistently({_name(check, description)}) failed after {deadline.elapsed():.1f}s "
            f"on attempt {counted.attempts} (of a {duration:g}s hold):\n{_observed(exc)}"
        ) from exc
