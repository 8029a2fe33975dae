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

The retry loop is tenacity's; the clock and sleep are parameters so unit tests step time instead of
sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, retry_if_result

from envtest.notfound import is_object_not_found

__all__ = ["consistently", "eventually"]

T = TypeVar("T")

Clock = Callable[[], float]
"""Monotonic seconds; time.monotonic unless a test injects a fake."""
Sleep = Callable[[float], None]


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
    retrying = Retrying(
        sleep=sleep,
        stop=deadline.stop,
        wait=deadline.wait,
        retry=retry_if_exception(not_yet),
        # The last retryable failure comes out as itself, so we can chain from it below; a RetryError
        # would hide it one level deeper.
        reraise=True,
    )
    try:
        return retrying(counted)
    except BaseException as exc:
        if not not_yet(exc):
            raise
        # Only reachable on timeout: before the stop, tenacity swallows every "not yet".
        attempts = "attempt" if counted.attempts == 1 else "attempts"
        raise AssertionError(
            f"eventually({_name(check, description)}) still failing after {deadline.elapsed():.1f}s "
            f"and {counted.attempts} {attempts}; last observed:\n{_observed(exc)}"
        ) from exc


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
