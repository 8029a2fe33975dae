"""Reliability with other writers around: a user editing the cluster while it is reconciled, and two
operator replicas with leader election (one reconciles, the other takes over when it dies)."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from conflictkit import apiserver_conflicts
from mysqlkit import Timeouts
from reliability_support import Scenario

from envtest import Cluster, eventually
from envtest.faults import WRITE_VERBS, FaultProxy
from envtest.plugin.context import TestContext
from envtest.plugin.runner import OperatorRunner
from mysql_operator.controller.wiring import build_manager

LEASE = {"lease_duration": 4.0, "renew_deadline": 3.0, "retry_period": 0.5}
"""Short leader-election timings (defaults 15/10/2 s), so a takeover fits in a test."""


def test_concurrent_spec_edits_converge_to_the_latest_spec(
    faults: FaultProxy, operator: OperatorRunner, scenario: Scenario, timeouts: Timeouts
) -> None:
    scenario.create("db")
    scenario.wait_running()
    stop, edits = threading.Event(), [0]

    def writer() -> None:
        rng = random.Random(7)
        while not stop.is_set():
            scenario.scale("db", rng.randint(1, 4))
            edits[0] += 1
            time.sleep(0.05)

    def counted() -> int:
        return apiserver_conflicts(scenario.api, timeouts, group="db.example.com", resource="mysqlclusters")

    thread = threading.Thread(target=writer, name="concurrent-writer", daemon=True)
    scenario.settle()
    scenario.mark()
    before = (faults.requests(code=409, client="operator"), counted())
    thread.start()
    time.sleep(4.0)
    stop.set()
    thread.join(5)
    scenario.scale("db", 3)  # the last word
    last_word = time.monotonic()
    scenario.wait_running()  # checks generation, readyReplicas and the StatefulSet
    seconds = time.monotonic() - last_word
    # No rule is in place, so the proxy only forwarded: each 409 is the apiserver's answer to a status
    # patch whose resourceVersion the writer's edits had made stale, and the apiserver counted it.
    assert faults.injections() == 0
    conflicts = faults.requests(code=409, client="operator") - before[0]
    manager: Any = operator.operator
    fault = "another writer edits the spec for 4 s (timed from its last edit)"
    scenario.record(fault, seconds, compare="change", edits=edits[0], conflicts=conflicts)
    assert edits[0] > 10, "the writer hardly wrote: nothing concurrent was tested"
    assert conflicts > 0, f"none of the operator's writes met one of {edits[0]} edits: nothing raced"
    assert int(manager.api_requests(code="409")) >= conflicts, "the operator did not see its conflicts"
    assert counted() - before[1] >= conflicts, "the apiserver counted fewer conflicts than it answered"
    scenario.finish()


def _candidate(identity: str) -> Any:
    """A factory for one replica of the operator with leader election in its namespace."""

    def factory(api_factory: Any, namespace: str | None = None) -> Any:
        manager = build_manager(
            api_factory,
            namespace=namespace,
            leader_elect=True,
            leader_election_namespace=namespace or "default",
            identity=identity,
        )
        manager.options = dataclasses.replace(manager.options, **LEASE)  # validated again
        return manager

    return factory


def _reconciler_writes(faults: FaultProxy, client: str) -> int:
    """Writes other than the election's own Lease renewals."""
    return faults.requests(verb=WRITE_VERBS, client=client) - faults.writes(client, resource="leases")


def test_leader_failover_one_reconciler_at_a_time_and_nothing_lost(
    faults: FaultProxy,
    envtest_context: TestContext,
    cluster: Cluster,
    namespace: str,
    scenario: Scenario,
) -> None:
    a = envtest_context.start_operator(cluster, namespace, _candidate("a"), name="a")
    b = envtest_context.start_operator(cluster, namespace, _candidate("b"), name="b")
    leader, standby = (a, b) if a.operator.is_leader else (b, a)  # type: ignore[union-attr]
    lead, stand = ("a", "b") if leader is a else ("b", "a")
    try:
        scenario.create("db-1")
        scenario.wait_running()
        assert _reconciler_writes(faults, lead) > 0
        assert _reconciler_writes(faults, stand) == 0, "the standby wrote while not leading"

        # The leader dies without a word: no lease release, its connections just stop.
        faults.kill_client(lead)
        killed = time.monotonic()
        lease_name = leader.operator.options.leader_election_id  # type: ignore[union-attr]
        held = _lease(scenario, namespace, lease_name)  # the dead leader's term, as the apiserver stored it
        assert held["holderIdentity"] == lead
        scenario.mark()
        scenario.scale("db-1", 2)
        scenario.create("db-2")
        eventually(
            lambda: standby.operator.is_leader or _fail(f"{stand} not leading"),  # type: ignore[union-attr]
            timeout=scenario.timeouts(15),
        )
        takeover = time.monotonic() - killed  # recorded for the benchmark table, not asserted
        # One reconciler at a time, judged by order rather than by a stopwatch: the standby took the
        # Lease in one transition, and only once the dead leader's term had run out (its last renewal
        # plus the lease duration; both replicas write these times from this process's clock).
        taken = _lease(scenario, namespace, lease_name)
        assert taken["holderIdentity"] == stand
        assert taken["leaseTransitions"] == held.get("leaseTransitions", 0) + 1
        expiry = _time(held["renewTime"]) + timedelta(seconds=held["leaseDurationSeconds"])
        assert _time(taken["acquireTime"]) >= expiry - timedelta(milliseconds=1), (held, taken)
        seconds = scenario.wait_running()
        fault = "leader killed (lease 4 s), spec changed + cluster created"
        scenario.record(fault, seconds, compare="change", takeover=round(takeover, 3))
        assert _reconciler_writes(faults, stand) > 0
        scenario.finish()
    finally:
        leader.stop(timeout=scenario.timeouts(2))
        envtest_context.stop_operator(cluster, standby)


def _lease(scenario: Scenario, namespace: str, name: str) -> dict[str, Any]:
    path = f"apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    lease = scenario.api.get(path)
    assert lease is not None, f"no Lease {path}"
    return lease["spec"]  # type: ignore[no-any-return]


def _time(micro: str) -> datetime:
    """A Lease's MicroTime (RFC 3339 with microseconds, `Z`)."""
    return datetime.fromisoformat(micro.replace("Z", "+00:00"))


def _fail(message: str) -> bool:
    raise AssertionError(message)
