"""Hot loops: an operator that keeps writing one object though nobody else changed anything, or
keeps coming back to it many times a second on its own.

A Metadata-level record holds no bodies, so no generation: the only sign that something changed is
a write by another user (a test's client, a controller, kwok). Two checks on one test's record, per
object (a subresource counts as its object):

- **writes**: more than `Limits.writes` (N) successful writes by the operator in a row, none of
  them explained by a change someone else made since the write before. A write of the object
  itself is explained by another user's write of the object (its status aside: that is not a spec
  change), or by a spec change a test's client or a person (a user that is no `system:` component)
  made anywhere — a parent edited while the operator updates its children; a write of its status,
  which reports on the world, by another user's write of anything in the test's namespaces. The
  classic case trips it: a status update that triggers a reconcile that updates the status again,
  with nobody else writing at all; so does an operator that rewrites a child each time another
  controller updates the child's status.
- **rate**: more than `Limits.rate` (M) requests per second by the operator on the object, over
  `WINDOW` seconds in which nobody else wrote anything in the test's namespaces (reads count: a
  requeue that reads the object afresh each pass shows here even when it writes nothing; one that
  reads a cache and writes nothing leaves no trace in the apiserver's log at all).

A legitimate convergence answers other users' writes (pods starting, a StatefulSet's status), so
neither check counts across them. Defaults and why: see `Limits` and the record's documentation.
"""

from __future__ import annotations

import bisect
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
                f"no change by anyone else to explain it (limit {int(self.limit)}): {parts}"
            )
        return (
            f"the operator made {len(self.requests)} requests on {self.object_name()} within "
            f"{WINDOW:.0f}s in which nobody else wrote anything, {len(self.requests) / WINDOW:.1f}/s "
            f"(limit {self.limit:g}/s): {parts}"
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


def _between(times: list[float], after: float, before: float) -> bool:
    """Whether sorted `times` holds one in (after, before)."""
    i = bisect.bisect_right(times, after)
    return i < len(times) and times[i] < before


def _longest_run(
    mine: list[Request], spec_changes: list[float], test_changes: list[float], world: list[float]
) -> list[Request]:
    """The longest run of the operator's successful writes (`mine`, in order) none of which a change
    by someone else explains (see the module's docstring)."""
    writes = [r for r in mine if r.is_write and 200 <= r.code < 300]
    best: list[Request] = []
    run: list[Request] = []
    for r in writes:
        if run:
            since = run[-1].received
            explained = (
                _between(spec_changes, since, r.received)
                or _between(test_changes, since, r.received)
                or (r.subresource == "status" and _between(world, since, r.received))
            )
            run = [] if explained else run
        run.append(r)
        if len(run) > len(best):
            best = list(run)
    return best


def _busiest_window(mine: list[Request], world: list[float]) -> list[Request]:
    """The operator's requests on the object inside the WINDOW-second span, with no other user's
    write in it, that holds the most."""
    ordered = sorted(mine, key=lambda r: r.received)
    best: tuple[int, int] = (0, 0)
    start = 0
    for end, r in enumerate(ordered):
        while start < end and (
            r.received - ordered[start].received > WINDOW
            or _between(world, ordered[start].received, r.received)
        ):
            start += 1
        if end + 1 - start > best[1] - best[0]:
            best = (start, end + 1)
    return ordered[best[0] : best[1]]


def analyse(
    requests: Iterable[Request], operators: Collection[str], limits: Limits = Limits()
) -> tuple[list[HotLoop], Peaks]:
    """The hot loops in one test's record (at most one per object: the write check first), and
    the record's peaks."""
    items = [r for r in requests if r.stage == "ResponseComplete"]
    # Order by when each request was received: a change another user made is seen by the operator
    # only after the apiserver received it, and the operator's answer is received after that. (The
    # stage timestamps are not causal: a write's effect is visible before its event is stamped.)
    others = sorted((r for r in items if r.user not in operators and r.is_write), key=lambda r: r.received)
    world = [r.received for r in others]
    spec_changes: dict[ObjectKey, list[float]] = defaultdict(list)
    for r in others:
        if r.object_key is not None and r.subresource != "status":
            spec_changes[r.object_key].append(r.received)
    # A spec change by a person or a test's client (no `system:` user: the control plane's components
    # all are) anywhere: a parent edited while the operator updates its children explains them.
    test_changes = [
        r.received for r in others if r.subresource != "status" and not r.user.startswith("system:")
    ]
    found: list[HotLoop] = []
    peaks = Peaks()
    for key, on_object in sorted(_by_object(items).items()):
        mine = sorted((r for r in on_object if r.user in operators), key=lambda r: r.received)
        if not mine:
            continue
        run = _longest_run(mine, spec_changes.get(key, []), test_changes, world)
        window = _busiest_window(mine, world)
        peaks = peaks.max(Peaks(len(run), len(window) / WINDOW))
        if len(run) > limits.writes:
            found.append(HotLoop(key, "writes", tuple(run), limits.writes))
        elif len(window) > limits.rate * WINDOW:
            found.append(HotLoop(key, "rate", tuple(window), limits.rate))
    return found, peaks
