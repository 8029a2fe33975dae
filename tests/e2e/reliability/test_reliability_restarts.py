"""Reliability across restarts: of kube-apiserver under a running operator (on a control plane of the
test's own), and of the operator itself, killed mid-reconcile or down while clusters are deleted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reliability_support import ManagerCounter, Scenario

from envtest import Cluster, LocalCluster, consistently, eventually
from envtest.faults import FaultProxy, Rule
from envtest.plugin.context import TestContext


def test_apiserver_restart_is_survived_without_restarting_the_operator(
    private_cluster: LocalCluster,
    envtest_context: TestContext,
    envtest_operator_factory: Any,
    make_api: Callable[[Any], Any],
) -> None:
    # No proxy: the operator's own connections must see the apiserver go away and come back.
    namespace = envtest_context.create_namespace(private_cluster)
    runner = envtest_context.start_operator(private_cluster, namespace, envtest_operator_factory)
    manager: Any = runner.operator
    scenario = Scenario(make_api(private_cluster), namespace, ManagerCounter(manager), envtest_context.nodeid)
    try:
        scenario.create("db")
        scenario.wait_running()
        scenario.settle()
        scenario.mark()
        private_cluster.restart("kube-apiserver")
        downtime = scenario.began_ago()
        # Changes right after the restart arrive through watches the operator had to re-establish.
        scenario.scale("db", 2)
        scenario.create("db-2")
        seconds = scenario.wait_running() - downtime  # from the apiserver's return
        fault = "kube-apiserver restarted, then spec changed + cluster created"
        scenario.record(fault, seconds, compare="change", downtime=round(downtime, 3))
        assert runner.operator is manager and not runner.errors, "the operator had to be restarted"
        scenario.finish()
    finally:
        envtest_context.stop_operator(private_cluster, runner)


def test_operator_killed_mid_reconcile_restarts_idempotently(
    faults: FaultProxy,
    envtest_context: TestContext,
    cluster: Cluster,
    namespace: str,
    envtest_operator_factory: Any,
    scenario: Scenario,
) -> None:
    # The first instance's StatefulSet create is held in the proxy: it dies with that reconcile half
    # done (finalizer, Secret and Service written, StatefulSet not).
    held = faults.add(Rule(verb="create", resource="statefulsets", client="first", latency=60.0))
    first = envtest_context.start_operator(cluster, namespace, envtest_operator_factory, name="first")
    scenario.create("db")
    eventually(
        lambda: held.fired == 1 or _fail("no StatefulSet create in flight"), timeout=scenario.timeouts(30)
    )
    secret = scenario.api.get(f"api/v1/namespaces/{namespace}/secrets/db-credentials")
    faults.kill_client("first")  # as a SIGKILL would: nothing it had in flight reaches the apiserver
    first.stop(timeout=scenario.timeouts(0.5))  # gives up on the held reconcile

    scenario.mark()
    second = envtest_context.start_operator(cluster, namespace, envtest_operator_factory, name="second")
    try:
        seconds = scenario.wait_running()
        scenario.record("operator killed mid-reconcile, restarted", seconds, compare="create")
        assert faults.requests(verb="create", resource="statefulsets", client="second") == 1
        assert faults.writes("second", resource=("secrets", "services")) == 0, "children made twice"
        again = scenario.api.get(f"api/v1/namespaces/{namespace}/secrets/db-credentials")
        assert again["metadata"]["uid"] == secret["metadata"]["uid"]
        assert again["data"] == secret["data"], "the password changed across the restart"
        scenario.finish()
    finally:
        envtest_context.stop_operator(cluster, second)


def test_deletes_while_the_operator_is_down_are_finalized_when_it_returns(
    faults: FaultProxy,
    envtest_context: TestContext,
    cluster: Cluster,
    namespace: str,
    envtest_operator_factory: Any,
    scenario: Scenario,
) -> None:
    first = envtest_context.start_operator(cluster, namespace, envtest_operator_factory, name="first")
    try:
        for name in ("db-1", "db-2"):
            scenario.create(name)
        scenario.wait_running()
        scenario.assert_children()
    finally:
        first.stop()
    scenario.delete_all(wait=False)

    def held_by_finalizer() -> None:
        for name in scenario.names:
            obj = scenario.get(name)
            assert obj is not None and obj["metadata"].get("deletionTimestamp"), f"{name}: {obj}"

    consistently(held_by_finalizer, duration=scenario.timeouts(2))
    scenario.mark()
    second = envtest_context.start_operator(cluster, namespace, envtest_operator_factory, name="second")
    try:
        scenario.wait_gone()
        fault = "2 clusters deleted while the operator was down (timed from its return)"
        scenario.record(fault, scenario.began_ago(), compare="delete")
    finally:
        envtest_context.stop_operator(cluster, second)


def _fail(message: str) -> bool:
    raise AssertionError(message)
