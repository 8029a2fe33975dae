"""A clock for unit tests that moves only when the code under test sleeps: no test waits on time."""

from __future__ import annotations


class StepClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
