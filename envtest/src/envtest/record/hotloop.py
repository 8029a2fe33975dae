"""Hot loops: an operator that keeps writing one object though nobody else changed it, or keeps
coming back to it many times a second.

Two checks on one test's record, per object (a subresource counts as its object: a status write
is a write of the object):

- **writes**: more than `Limits.writes` (N) successful writes by the operator in a row, with no
  write by anyone else to the object in between. A write by another user (a test's client, a
  controller) other than to its status is the only sign of a spec change a Metadata-level record
  carries (it holds no bodies, hence no generation); its status is what operators write in answer
  to a change, not a change. A status update that triggers another reconcile which updates the
  status again is the classic case: each pass is a write, and nobody else writes at all.
- **rate**: more than `Limits.rate` (M) requests by the operator on the object per second, sustained
  over `WINDOW` seconds (reads included: a requeue that reads the object afresh every pass shows
  here even when it writes nothing; one that reads a cache and writes nothing leaves no trace in the
  apiserver's log at all).

Defaults and why: see `Limits` and the record's documentation.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from envtest.record.events import Request

ObjectKey = tuple[str, str, str, str]
"""(group, resource, namespace, name)."""
WINDOW = 5.0
"""Seconds over which the rate check averages: long enough that a burst of a real reconcile (create
children, patch finalizer and status, re-read after a conflict) never trips it."""


@dataclass(frozen=True)
class Limits:
    writes: int = 20
    """N: writes of one object by the operator in a row, with no other user's write in between,
    above which the run is a hot loop."""
    rate: float = 5.0
    """M: requests per second by the operator on one object, over WINDOW seconds, above which the
    object is requeued too fast."""


@dataclass(frozen=True)
class HotLoop:
    key: ObjectKey
    check: str
    """"writes" or "rate"."""
    requests: tuple[Request, ...]
    """The run of writes, or the requests in the busiest window."""
    limit: float

    def object_name(self) -> str:
        group, resource, namespace, name = self.key
        kind = f"{resource}.{group}" if group else resource
        return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"

    def describe(self) -> str:
        what = Counter(f"{r.verb}{'/' + r.subresource if r.subresource else ''}" for r in self.requests)
        parts = ", ".join(f"{verb} x{count}" for verb, count in what.most_common())
        span = self.requests[-1].at - self.requests[0].received if self.requests else 0.0
        if self.check == "writes":
            return (
                f"the operator wrote {self.object_name()} {len(self.requests)} times in {span:.1f}s with "
                f"no change by anyone else in between (limit {int(self.limit)}): {parts}"
            )
        return (
            f"the operator made {len(self.requests)} requests on {self.object_name()} within "
            f"{WINDOW:.0f}s, {len(self.requests) / WINDOW:.1f}/s (limit {self.limit:g}/s): {parts}"
        )


@dataclass(frozen=True)
class Peaks:
    """The largest run and busiest window one record shows, hot or not: what the limits are tuned
    against (a suite's highest legitimate values, with a margin)."""

    writes: int = 0
    rate: float = 0.0

    def max(self, other: Peaks) -> Peaks:
        return Peaks(max(self.writes, other.writes), max(self.rate, other.rate))


def _by_object(requests: Iterable[Request]) -> dict[ObjectKey, list[Request]]:
    grouped: dict[ObjectKey, list[Request]] = defaultdict(list)
    for request in requests:
        key = request.object_key
        if key is not None and request.stage == "ResponseComplete":
            grouped[key].append(request)
    return grouped


def _longest_run(items: list[Request], operators: Collection[str]) -> list[Request]:
    """The longest run of successful operator writes with no other user's spec write between."""
    best: list[Request] = []
    run: list[Request] = []
    for r in sorted(items, key=lambda r: r.at):
        if r.user in operators:
            if r.is_write and 200 <= r.code < 300:
                run.append(r)
                if len(run) > len(best):
                    best = list(run)
        elif r.is_write and r.subresource != "status":
            run = []
    return best


def _busiest_window(items: list[Request], operators: Collection[str]) -> list[Request]:
    """The operator's requests on the object inside the WINDOW-second span that holds the most."""
    mine = sorted((r for r in items if r.user in operators), key=lambda r: r.received)
    best: tuple[int, int] = (0, 0)
    start = 0
    for end, r in enumerate(mine):
        while r.received - mine[start].received > WINDOW:
            start += 1
        if end + 1 - start > best[1] - best[0]:
            best = (start, end + 1)
    return mine[best[0] : best[1]]


def analyse(
    requests: Iterable[Request], operators: Collection[str], limits: Limits = Limits()
) -> tuple[list[HotLoop], Peaks]:
    """The hot loops in one test's record (at most one per object: the write check first), and
    the record's peaks."""
    found: list[HotLoop] = []
    peaks = Peaks()
    for key, items in sorted(_by_object(requests).items()):
        run, window = _longest_run(items, operators), _busiest_window(items, operators)
        peaks = peaks.max(Peaks(len(run), len(window) / WINDOW))
        if len(run) > limits.writes:
            found.append(HotLoop(key, "writes", tuple(run), limits.writes))
        elif len(window) > limits.rate * WINDOW:
            found.append(HotLoop(key, "rate", tuple(window), limits.rate))
    return found, peaks
