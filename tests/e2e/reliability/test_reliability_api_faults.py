"""Reliability against a misbehaving apiserver (the fault proxy between operator and apiserver):
conflicts, lost replies, throttling and server errors, broken watches, and quiet steady state.
Each scenario ends with `Scenario.finish()`: converged, no duplicate or orphaned child, finalizers
removed on delete."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reliability_support import Scenario

from envtest import consistently, eventually
from envtest.faults import (
    WRITE_VERBS,
    CutWatch,
    DropReply,
    ExpireWatch,
    FaultProxy,
    Rule,
    conflict,
    internal_error,
    stale_precondition,
    too_many_requests,
    unavailable,
)
from envtest.plugin.runner import OperatorRunner


def test_baseline_converges_without_faults(
    faults: FaultProxy, operator: OperatorRunner, scenario: Scenario
) -> None:
    # The fault-free runs the benchmark compares each fault with: create, spec change, delete.
    # A fresh plane's first pods are slow (scheduler, volume binding): warm it up unmeasured.
    scenario.create("warm-up")
    scenario.wait_running()
    scenario.settle()
    scenario.mark()
    scenario.create("db")
    scenario.record("none: create", scenario.wait_running(["db"]), compare="create")
    scenario.settle()
    scenario.mark()
    scenario.scale("db", 2)
    scenario.record("none: spec change", scenario.wait_running(["db"]), compare="change")
    scenario.assert_children()
    scenario.settle()
    scenario.mark()
    scenario.delete_all(["db"])
    scenario.record("none: delete", scenario.began_ago(), compare="delete")
    scenario.delete_all()
    assert faults.injections() == 0


def test_conflicts_on_every_kind_of_write_are_retried_until_converged(
    faults: FaultProxy, operator: OperatorRunner, scenario: Scenario
) -> None:
    """A 409 on each kind of write the operator sends is retried until the cluster converges. Where
    the write carries a resourceVersion precondition (the finalizer patches, the /status patch) the
    409 is the apiserver's own: the proxy only makes the precondition stale, so each conflict also
    proves the precondition was sent. The StatefulSet is written by a forced server-side apply, which
    has no precondition to make stale: there the proxy answers 409 alone, standing in for any 409 that
    write could meet. The pacing of retries is not asserted here (child events wake the operator at
    once, legitimately); test_conflicts.py's `…_retried_with_growing_gaps` asserts the backoff from
    the gaps between the apiserver's 409s."""
    finalizer = faults.add(
        Rule(stale_precondition(), verb="patch", resource="mysqlclusters", subresource="", times=3)
    )
    status = faults.add(Rule(stale_precondition(), verb="patch", resource="mysqlclusters/status", times=3))
    scenario.mark()
    scenario.create("db")
    seconds = scenario.wait_running()
    assert (finalizer.fired, status.fired) == (3, 3)
    _assert_apiservers_409(faults, finalizer, status)
    scenario.record("409 Conflict x3 on the finalizer patch and x3 on /status", seconds, compare="create")

    # A spec change makes the operator apply its StatefulSet again: conflict on that too.
    child = faults.add(Rule(conflict(), verb=("patch", "update"), resource="statefulsets", times=3))
    scenario.settle()
    scenario.mark()
    scenario.scale("db", 2)
    seconds = scenario.wait_running()
    assert child.fired == 3
    scenario.record("409 Conflict x3 on the StatefulSet patch", seconds, compare="change")

    # Removing the finalizer on delete is a conditional patch of the cluster as well.
    removal = faults.add(
        Rule(stale_precondition(), verb="patch", resource="mysqlclusters", subresource="", times=2)
    )
    scenario.assert_children()
    scenario.delete_all()
    assert removal.fired == 2
    _assert_apiservers_409(faults, removal)


def _assert_apiservers_409(faults: FaultProxy, *rules: Rule) -> None:
    """Every request `rules` caught reached the apiserver and was answered 409 by it: a write that
    came without its precondition would have been forwarded as it was, and accepted."""
    for rule in rules:
        caught = [e for e in faults.exchanges(client="operator") if e.rule is rule]
        answers = [(e.forwarded, e.code) for e in caught]
        assert answers == [(True, "409")] * rule.times, f"{rule}: (forwarded, code) {answers}"


def test_lost_create_reply_is_adopted_not_duplicated(
    faults: FaultProxy, operator: OperatorRunner, scenario: Scenario
) -> None:
    # Every child create is applied by the apiserver but its reply never arrives. The operator reads
    # children from its informer cache, so it either sees its own object arrive by watch or creates
    # again and meets the apiserver's AlreadyExists: both must end in "ours", never in a duplicate.
    drops = faults.add(
        Rule(DropReply(), verb="create", resource=("statefulsets", "services", "secrets"), times=3)
    )
    scenario.mark()
    scenario.create("db")
    seconds = scenario.wait_running()
    assert drops.fired == 3
    creates = faults.requests(verb="create", resource="statefulsets")
    conflicts = faults.requests(verb="create", resource="statefulsets", code=409)
    assert 1 <= creates <= 2 and conflicts == creates - 1, (creates, conflicts)
    manager: Any = operator.operator
    assert manager.api_requests(verb="create", resource="statefulsets", code="409") == conflicts
    scenario.record("create applied, reply lost (x3)", seconds, compare="create")
    scenario.finish()


@dataclass(eq=False)
class Timed(Rule):
    """A rule that notes when (time.monotonic) each request it acts on reaches the proxy."""

    arrivals: list[float] = field(default_factory=list, init=False)

    def take(self, info: Any, client: str = "") -> bool:
        taken = super().take(info, client)
        if taken:
            self.arrivals.append(time.monotonic())
        return taken


def _burst(faults: FaultProxy, rule: Timed, scenario: Scenario, change: Callable[[], object]) -> list[float]:
    """`change` made while `rule` is in place, until it has caught `rule.times` requests; the gaps
    between those requests. Lower bounds on gaps hold on a loaded machine too: load only widens them."""
    assert rule.times, "a burst ends after a number of requests, not after a time"
    faults.add(rule)
    change()
    eventually(
        lambda: rule.fired == rule.times or _fail(f"{rule.fired} of {rule.times} requests caught"),
        timeout=scenario.timeouts(60),
    )
    faults.remove(rule)
    return [b - a for a, b in zip(rule.arrivals, rule.arrivals[1:], strict=False)]


def test_throttling_and_server_errors_are_backed_off_not_hot_looped(
    faults: FaultProxy, operator: OperatorRunner, scenario: Scenario
) -> None:
    # Only the reconciler's own calls fail; informers keep watching, so the only retries are its own.
    calls: dict[str, Any] = {
        "verb": ("get", *WRITE_VERBS),
        "resource": ("mysqlclusters", "statefulsets"),
        "client": "operator",
    }
    scenario.mark()
    # Each attempt fails at its first request, so each caught request is the next attempt.
    # Retry-After: 1 honoured means at least a second between attempts, whatever the base backoff is.
    throttle = Timed(too_many_requests(retry_after=1), **calls, times=3)
    gaps = _burst(faults, throttle, scenario, lambda: scenario.create("db"))
    assert min(gaps) >= 1.0, f"seconds between attempts answered 429 with Retry-After: 1: {gaps}"
    seconds = scenario.wait_running()
    scenario.record("429 (Retry-After: 1) x3", seconds, compare="create", caught=throttle.fired)

    # 5xx carry no Retry-After: the per-key exponential backoff alone must keep the rate down; a hot
    # loop would send the next attempt at once.
    manager: Any = operator.operator
    queue = manager.controllers[0].queue
    for replicas, answer in [(2, internal_error()), (3, unavailable())]:
        scenario.settle()
        scenario.mark()
        burst = Timed(answer, **calls, times=6)
        gaps = _burst(faults, burst, scenario, lambda r=replicas: scenario.scale("db", r))
        backoffs = [queue.backoff_for(failures) for failures in range(len(gaps))]
        assert all(gap >= least for gap, least in zip(gaps, backoffs, strict=True)), (
            f"seconds between attempts answered HTTP {answer.code}: {gaps}; backoff at least {backoffs}"
        )
        seconds = scenario.wait_running()
        scenario.record(f"HTTP {answer.code} x6", seconds, compare="change", caught=burst.fired)
    scenario.finish()


def test_cut_and_expired_watches_lose_no_event(
    faults: FaultProxy, operator: OperatorRunner, scenario: Scenario
) -> None:
    # Churn: the next watches of every kind are cut after one event or one second.
    churn = faults.add(Rule(CutWatch(after_events=1, after_seconds=1.0), verb="watch", times=8))
    faults.disconnect_watches()
    scenario.mark()
    scenario.create("db")
    scenario.wait_running()
    faults.remove(churn)

    # Cut the cluster watch and hold its reconnect while the spec changes: it must resume from
    # the last resourceVersion and deliver the change made in the gap.
    held = Rule(verb="watch", resource="mysqlclusters", latency=2.0, times=1)
    _change_during_gap(faults, scenario, held, replicas=2)
    scenario.record("watch cut, spec changed while disconnected", scenario.wait_running(), compare="change")

    # Same gap, but the reconnect is answered 410 Expired: relist, and find the change there.
    expired = Rule(ExpireWatch(), verb="watch", resource="mysqlclusters", latency=2.0, times=1)
    _change_during_gap(faults, scenario, expired, replicas=3)
    seconds = scenario.wait_running()
    scenario.record("watch expired (ERROR 410), spec changed in the gap", seconds, compare="change")
    # Watches were really cut while the cluster converged (how many reconnected inside that window,
    # up to the rule's 8, is the machine's pace, not a property); each gap was really made.
    assert churn.fired >= 1 and held.fired == 1 and expired.fired == 1, (churn, held, expired)
    scenario.finish()


def _change_during_gap(faults: FaultProxy, scenario: Scenario, rule: Rule, replicas: int) -> None:
    eventually(
        lambda: faults.open_watches("mysqlclusters") >= 1 or _fail("no cluster watch open"),
        timeout=scenario.timeouts(30),
    )
    faults.add(rule)
    assert faults.disconnect_watches(resource="mysqlclusters") >= 1
    # The informer reconnects and the proxy holds that request: the change lands in the gap.
    eventually(
        lambda: rule.fired == 1 or _fail("the operator did not re-watch"),
        timeout=scenario.timeouts(30),
        interval=0.02,
    )
    scenario.mark()
    scenario.scale("db", replicas)


def _fail(message: str) -> bool:
    raise AssertionError(message)


def test_steady_state_sends_no_writes(
    faults: FaultProxy, operator: OperatorRunner, scenario: Scenario
) -> None:
    for name in ("db-a", "db-b"):
        scenario.create(name, replicas=2)
    scenario.wait_running()
    before, since = faults.writes(), time.monotonic()

    def no_writes() -> None:
        late = [
            f"{e.info.verb} {e.info.full_resource} {e.info.name} ({e.received - since:+.2f}s)"
            for e in faults.exchanges(WRITE_VERBS)
            if e.received >= since
        ]
        assert faults.writes() == before, f"writes once converged: {late}"

    consistently(no_writes, duration=scenario.timeouts(10), interval=0.5)
    scenario.finish()
