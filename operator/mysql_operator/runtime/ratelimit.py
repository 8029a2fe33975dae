"""A token bucket shared by every key of a work queue: client-go's BucketRateLimiter.

client-go's default controller rate limiter is MaxOf(per-key exponential backoff, one bucket of
10 qps with a burst of 100): the per-key backoff slows one failing key down, the bucket caps how
fast *all* failing keys together come back, so a mass failure (an apiserver restart, a webhook
that rejects everything) cannot turn into a retry storm however many keys fail at once. The
WorkQueue takes the larger of the two delays, as MaxOfRateLimiter does.

Like golang.org/x/time/rate's `Reserve().Delay()`, a reservation is never refused: when the bucket is
empty the tokens go negative and the caller is told how long to wait for its own token, so the
delays handed out grow by 1/qps per key and the keys come back spread at `qps`.
"""

from __future__ import annotations

import threading

from .clock import SYSTEM_CLOCK, Clock

DEFAULT_QPS = 10.0
"""client-go's DefaultControllerRateLimiter: rate.NewLimiter(rate.Limit(10), 100)."""
DEFAULT_BURST = 100


class TokenBucket:
    def __init__(
        self, qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST, *, clock: Clock | None = None
    ) -> None:
        if qps <= 0:
            raise ValueError(f"TokenBucket: qps must be > 0, got {qps}")
        if burst < 1:
            raise ValueError(f"TokenBucket: burst must be at least 1, got {burst}")
        self.qps = qps
        """Tokens added per second."""
        self.burst = burst
        """Most tokens the bucket holds: that many requeues pass at once after a quiet spell."""
        self._clock = clock or SYSTEM_CLOCK
        self._lock = threading.Lock()
        self._tokens = float(burst)  # may go negative: reservations already promised beyond the bucket
        self._last = self._clock.monotonic()  # when _tokens was last brought up to date

    def reserve(self) -> float:
        """Take one token; returns the seconds to wait until it is ours (0 while the bucket holds some)."""
        with self._lock:
            now = self._clock.monotonic()
            self._tokens = min(self._tokens + (now - self._last) * self.qps, float(self.burst))
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps
