from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

import pykube
import pytest
import requests
from pykube.exceptions import HTTPError
from pykube.objects import NamespacedAPIObject
from runtime_fakes import PATIENCE, wait_for

from mysql_operator.runtime.client import raise_for_status
from mysql_operator.runtime.clock import FakeClock
from mysql_operator.runtime.controller import Controller, owner_keys
from mysql_operator.runtime.metrics import Metrics
from mysql_operator.runtime.types import Key, Result

KEY = Key("ns/db")


class MySQLCluster(NamespacedAPIObject):
    version = "db.example.com/v1alpha1"
    endpoint = "mysqlclusters"
    kind = "MySQLCluster"


class FakeInformer:
    def __init__(self) -> None:
        self.handlers: list[Callable[[str, dict[str, Any], dict[str, Any] | None], None]] = []
        self.cache: list[dict[str, Any]] = []

    def add_handler(self, handler: Callable[[str, dict[str, Any], dict[str, Any] | None], None]) -> None:
        self.handlers.append(handler)
        for o in self.cache:  # an Informer replays its cache to a new handler
            handler("ADDED", o, None)

    def remove_handler(self, handler: Callable[[str, dict[str, Any], dict[str, Any] | None], None]) -> None:
        self.handlers.remove(handler)

    def keys(self) -> list[Key]:
        return [Key(f"{o['metadata']['namespace']}/{o['metadata']['name']}") for o in self.cache]

    def fire(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        for handler in self.handlers:
            handler(event_type, obj, old)


class ScriptedReconciler:
    """Returns (or raises) the scripted outcomes in order, then succeeds."""

    def __init__(self, *outcomes: Result | Exception) -> None:
        self.outcomes = list(outcomes)
        self.keys: list[Key] = []

    def reconcile(self, key: Key) -> Result:
        self.keys.append(key)
        outcome = self.outcomes.pop(0) if self.outcomes else Result()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def owner_ref(kind: str = "MySQLCluster", name: str = "db", controller: bool = True, api: str = "") -> dict:
    return {
        "apiVersion": api or "db.example.com/v1alpha1",
        "kind": kind,
        "name": name,
        "uid": "u-" + name,
        "controller": controller,
    }


def child(*refs: dict[str, Any], name: str = "db-0") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "ownerReferences": list(refs)}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make(reconciler: Any, clock: FakeClock) -> tuple[Controller, dict[type, FakeInformer], Metrics]:
    controller = Controller("mysql", reconciler).for_(MySQLCluster).owns(pykube.StatefulSet, pykube.Secret)
    informers = {kind: FakeInformer() for kind in controller.kinds}
    metrics = Metrics()
    controller.setup(informers, metrics=metrics, clock=clock)  # type: ignore[arg-type]
    return controller, informers, metrics


def ready_keys(controller: Controller) -> list[Key]:
    assert controller.queue is not None
    keys = []
    while (key := controller.queue.get(timeout=0)) is not None:
        keys.append(key)
        controller.queue.done(key)
    return keys


def outcome_count(metrics: Metrics, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": "mysql", "result": result}
    )
    return value or 0.0


def test_primary_event_enqueues_its_own_key(clock: FakeClock) -> None:
    controller, informers, _ = make(ScriptedReconciler(), clock)
    informers[MySQLCluster].fire("ADDED", {"metadata": {"name": "db", "namespace": "ns"}})
    assert ready_keys(controller) == [KEY]


def test_owned_event_enqueues_the_controlling_owner(clock: FakeClock) -> None:
    controller, informers, _ = make(ScriptedReconciler(), clock)
    informers[pykube.StatefulSet].fire(
        "MODIFIED",
        child(
            owner_ref(name="not-controller", controller=False),
            owner_ref(kind="ReplicaSet", name="other-kind"),
            owner_ref(name="db"),
        ),
    )
    informers[pykube.Secret].fire("DELETED", child(owner_ref(name="db"), name="db-credentials"))
    assert ready_keys(controller) == [KEY]


def test_owned_event_without_matching_owner_enqueues_nothing(clock: FakeClock) -> None:
    controller, informers, _ = make(ScriptedReconciler(), clock)
    informers[pykube.StatefulSet].fire("ADDED", child())
    informers[pykube.StatefulSet].fire("ADDED", child(owner_ref(api="other.example.com/v1")))
    assert ready_keys(controller) == []


def test_owner_keys_of_a_cluster_scoped_owner_have_no_namespace() -> None:
    ref = {"apiVersion": "v1", "kind": "Namespace", "name": "team", "controller": True}
    assert owner_keys(child(ref), pykube.Namespace) == [Key("team")]


def test_success_forgets_the_backoff(clock: FakeClock) -> None:
    controller, _, metrics = make(ScriptedReconciler(RuntimeError("boom"), Result()), clock)
    queue = controller.queue
    assert queue is not None
    queue.add(KEY)
    assert controller.process_next(timeout=0)
    assert queue.num_requeues(KEY) == 1
    clock.advance(1)
    assert controller.process_next(timeout=0)
    assert queue.num_requeues(KEY) == 0
    assert outcome_count(metrics, "success") == 1
    errors = {"controller": "mysql"}
    assert metrics.registry.get_sample_value("controller_runtime_reconcile_errors_total", errors) == 1


def test_conflict_requeues_with_backoff_logged_at_debug_only(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    reconciler = ScriptedReconciler(HTTPError(409, "the object has been modified"))
    controller, _, metrics = make(reconciler, clock)
    assert controller.queue is not None
    controller.queue.add(KEY)
    with caplog.at_level(logging.DEBUG, logger="mysql_operator"):
        controller.process_next(timeout=0)
    assert controller.queue.num_requeues(KEY) == 1
    assert ready_keys(controller) == [], "requeued with backoff, not at once"
    clock.advance(0.005)
    assert ready_keys(controller) == [KEY]
    assert outcome_count(metrics, "error") == 1
    assert [r.levelno for r in caplog.records if "conflict" in r.getMessage()] == [logging.DEBUG]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_requests_http_error_409_is_a_conflict_too(clock: FakeClock) -> None:
    response = requests.Response()
    response.status_code = 409
    controller, _, metrics = make(ScriptedReconciler(requests.HTTPError(response=response)), clock)
    assert controller.queue is not None
    controller.queue.add(KEY)
    controller.process_next(timeout=0)
    assert outcome_count(metrics, "error") == 1


def test_other_errors_requeue_rate_limited(clock: FakeClock) -> None:
    controller, _, metrics = make(ScriptedReconciler(ValueError("bad"), ValueError("bad")), clock)
    queue = controller.queue
    assert queue is not None
    queue.add(KEY)
    controller.process_next(timeout=0)
    clock.advance(0.005)
    controller.process_next(timeout=0)
    assert queue.num_requeues(KEY) == 2
    clock.advance(0.009)
    assert ready_keys(controller) == [], "second backoff is 10 ms"
    clock.advance(0.001)
    assert ready_keys(controller) == [KEY]
    assert outcome_count(metrics, "error") == 2


def test_retry_after_of_a_429_is_honoured(clock: FakeClock) -> None:
    response = requests.Response()
    response.status_code = 429
    response.headers["Retry-After"] = "7"
    response.headers["Content-Type"] = "application/json"
    response._content = (
        b'{"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}'
    )
    with pytest.raises(HTTPError) as caught:
        raise_for_status(response)
    assert caught.value.retry_after == 7.0  # type: ignore[attr-defined]
    controller, _, _ = make(ScriptedReconciler(caught.value), clock)
    assert controller.queue is not None
    controller.queue.add(KEY)
    controller.process_next(timeout=0)
    clock.advance(6.9)
    assert ready_keys(controller) == []
    clock.advance(0.1)
    assert ready_keys(controller) == [KEY]


def test_requeue_after_adds_the_key_after_the_delay(clock: FakeClock) -> None:
    controller, _, metrics = make(ScriptedReconciler(Result(requeue_after=30)), clock)
    queue = controller.queue
    assert queue is not None
    queue.add(KEY)
    controller.process_next(timeout=0)
    assert queue.num_requeues(KEY) == 0
    clock.advance(29.9)
    assert ready_keys(controller) == []
    clock.advance(0.1)
    assert ready_keys(controller) == [KEY]
    assert outcome_count(metrics, "requeue_after") == 1


def test_requeue_is_rate_limited(clock: FakeClock) -> None:
    controller, _, metrics = make(ScriptedReconciler(Result(requeue=True)), clock)
    assert controller.queue is not None
    controller.queue.add(KEY)
    controller.process_next(timeout=0)
    assert controller.queue.num_requeues(KEY) == 1
    assert outcome_count(metrics, "requeue") == 1


def test_workers_reconcile_until_stopped() -> None:
    reconciler = ScriptedReconciler()
    controller = Controller("mysql", reconciler, workers=3).for_(MySQLCluster)
    informer = FakeInformer()
    controller.setup({MySQLCluster: informer})  # type: ignore[dict-item]
    controller.start()
    informer.fire("ADDED", {"metadata": {"name": "db", "namespace": "ns"}})
    wait_for(lambda: reconciler.keys == [KEY], what="the reconcile")
    controller.stop(timeout=2)
    assert controller.queue is not None and controller.queue.shutting_down


def test_for_twice_and_missing_for_are_errors() -> None:
    controller = Controller("mysql", ScriptedReconciler())
    with pytest.raises(ValueError, match="no primary kind"):
        _ = controller.kinds
    controller.for_(MySQLCluster)
    with pytest.raises(ValueError, match="already reconciles"):
        controller.for_(pykube.Secret)


def test_removed_owner_reference_still_wakes_the_owner_that_lost_it(clock: FakeClock) -> None:
    controller, informers, _ = make(ScriptedReconciler(), clock)
    before = child(owner_ref(name="db"))
    after = child()  # someone stripped our reference
    informers[pykube.StatefulSet].fire("MODIFIED", after, before)
    assert ready_keys(controller) == [KEY]


def test_changed_controller_enqueues_old_and_new_owner(clock: FakeClock) -> None:
    controller, informers, _ = make(ScriptedReconciler(), clock)
    informers[pykube.StatefulSet].fire(
        "MODIFIED", child(owner_ref(name="other")), child(owner_ref(name="db"))
    )
    assert sorted(ready_keys(controller)) == [KEY, Key("ns/other")]


def test_watches_maps_events_of_another_kind_to_keys(clock: FakeClock) -> None:
    controller = Controller("mysql", ScriptedReconciler()).for_(MySQLCluster)
    controller.watches(pykube.Secret, lambda o: [Key(f"ns/{o['metadata']['labels']['instance']}")])
    informers = {kind: FakeInformer() for kind in controller.kinds}
    controller.setup(informers, clock=clock)  # type: ignore[arg-type]
    secret = {"metadata": {"name": "db-credentials", "namespace": "ns", "labels": {"instance": "db"}}}
    informers[pykube.Secret].fire("DELETED", secret, secret)
    assert ready_keys(controller) == [KEY]


def test_resync_enqueues_every_cached_object_spread_over_the_jitter_window(clock: FakeClock) -> None:
    controller = Controller(
        "mysql", ScriptedReconciler(), resync_period=1000.0, resync_jitter=0.1, rng=random.Random(7)
    ).for_(MySQLCluster)
    informer = FakeInformer()
    controller.setup({MySQLCluster: informer}, clock=clock)  # type: ignore[dict-item]
    informer.cache = [{"metadata": {"name": f"db{i}", "namespace": "ns"}} for i in range(20)]
    assert controller.resync() == 20
    assert ready_keys(controller) == [], "no key is due at once: spread, not a thundering herd"
    clock.advance(50)
    first_half = ready_keys(controller)
    assert 0 < len(first_half) < 20
    clock.advance(50)
    assert sorted(first_half + ready_keys(controller)) == sorted(Key(f"ns/db{i}") for i in range(20))


def test_resync_period_is_jittered_within_bounds() -> None:
    controller = Controller("mysql", ScriptedReconciler(), resync_period=100.0, resync_jitter=0.1)
    periods = {round(controller.next_resync_in(), 6) for _ in range(50)}
    assert len(periods) > 1 and all(90.0 <= p <= 110.0 for p in periods)


def test_a_worker_of_an_ended_term_never_takes_keys_of_the_next_term() -> None:
    release = threading.Event()
    taken: list[tuple[Key, str]] = []

    class Blocking:
        def reconcile(self, key: Key) -> Result:
            taken.append((key, threading.current_thread().name))
            if key == KEY:
                release.wait(PATIENCE)
            return Result()

    controller = Controller("mysql", Blocking(), workers=1, resync_period=None).for_(MySQLCluster)
    controller.setup({MySQLCluster: FakeInformer()})  # type: ignore[dict-item]
    controller.start(term=1)
    assert controller.queue is not None
    controller.queue.add(KEY)
    wait_for(lambda: taken, what="term 1's reconcile")
    (old_worker,) = controller._threads
    controller.stop(timeout=0.05)  # gives up waiting: the worker is still in its reconcile
    controller.setup({MySQLCluster: FakeInformer()})  # type: ignore[dict-item]  # term 2, no workers yet
    controller.queue.add(Key("ns/term-2"))
    release.set()
    # Once the old worker has ended, whatever it was going to take, it took.
    old_worker.join(PATIENCE)
    assert not old_worker.is_alive(), "the old worker kept going: it serves the new term's queue"
    assert taken == [(KEY, "mysql-worker-0")], "the old worker took a key from the new term's queue"
    assert len(controller.queue) == 1


class Bug(BaseException):
    """Not even an Exception: the reconcile must still not take the worker down."""


def test_a_reconciler_bug_is_a_counted_panic_requeued_never_fatal(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Buggy:
        calls = 0

        def reconcile(self, key: Key) -> Result:
            self.calls += 1
            if self.calls == 1:
                raise KeyError("status")
            if self.calls == 2:
                raise Bug("worse")
            return Result()

    controller, _, metrics = make(Buggy(), clock)
    queue = controller.queue
    assert queue is not None
    queue.add(KEY)
    with caplog.at_level(logging.ERROR, logger="mysql_operator"):
        assert controller.process_next(timeout=0)
        clock.advance(0.005)
        assert controller.process_next(timeout=0)
    clock.advance(0.01)
    assert controller.process_next(timeout=0)
    panics = metrics.registry.get_sample_value(
        "controller_runtime_reconcile_panics_total", {"controller": "mysql"}
    )
    assert panics == 2
    assert (outcome_count(metrics, "error"), outcome_count(metrics, "success")) == (2, 1)
    assert len([r for r in caplog.records if r.exc_info]) == 2, "each logged with its traceback"


def test_api_and_connection_errors_are_not_panics(clock: FakeClock) -> None:
    errors = (HTTPError(500, "etcd"), requests.ConnectionError("reset"), ConnectionResetError())
    controller, _, metrics = make(ScriptedReconciler(*errors), clock)
    assert controller.queue is not None
    controller.queue.add(KEY)
    for _ in errors:
        assert controller.process_next(timeout=0)
        clock.advance(1.0)
    assert outcome_count(metrics, "error") == 3
    assert not metrics.registry.get_sample_value(
        "controller_runtime_reconcile_panics_total", {"controller": "mysql"}
    )


def test_many_failing_keys_come_back_at_the_shared_rate(clock: FakeClock) -> None:
    failing = ScriptedReconciler(*[RuntimeError("apiserver restarting")] * 6)
    controller = Controller("mysql", failing, qps=10, burst=2).for_(MySQLCluster)
    controller.setup({MySQLCluster: FakeInformer()}, clock=clock)  # type: ignore[dict-item]
    queue = controller.queue
    assert queue is not None
    for i in range(6):
        queue.add(Key(f"ns/db{i}"))
    for _ in range(6):
        assert controller.process_next(timeout=0)
    clock.advance(0.005)
    assert len(ready_keys(controller)) == 2, "the burst comes back after the per-key backoff"
    clock.advance(0.1 - 0.005)
    assert len(ready_keys(controller)) == 1, "then one per 1/qps"
    clock.advance(0.3)
    assert len(ready_keys(controller)) == 3


def test_bad_rate_limit_settings_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="qps"):
        Controller("mysql", ScriptedReconciler(), qps=0)


def test_a_new_term_on_synced_informers_enqueues_every_cached_object(clock: FakeClock) -> None:
    controller = Controller("mysql", ScriptedReconciler()).for_(MySQLCluster).owns(pykube.StatefulSet)
    primary, owned = FakeInformer(), FakeInformer()
    primary.cache = [{"metadata": {"name": "db", "namespace": "ns"}}]
    owned.cache = [child(owner_ref(name="other"))]
    informers = {MySQLCluster: primary, pykube.StatefulSet: owned}
    controller.setup(informers, clock=clock)  # type: ignore[arg-type]
    assert sorted(ready_keys(controller)) == [Key("ns/db"), Key("ns/other")]
    controller.stop(timeout=0)
    controller.teardown()
    assert primary.handlers == [] and owned.handlers == [], "the ended term no longer listens"
    controller.setup(informers, clock=clock)  # type: ignore[arg-type]  # the next term, same informers
    assert sorted(ready_keys(controller)) == [Key("ns/db"), Key("ns/other")]
    assert len(primary.handlers) == 1


def test_subscribing_after_start_feeds_the_running_workers(clock: FakeClock) -> None:
    controller = Controller("mysql", ScriptedReconciler()).for_(MySQLCluster)
    primary = FakeInformer()
    primary.cache = [{"metadata": {"name": "db", "namespace": "ns"}}]
    controller.setup({MySQLCluster: primary}, clock=clock, subscribe=False)  # type: ignore[dict-item]
    assert ready_keys(controller) == [] and primary.handlers == []
    controller.subscribe({MySQLCluster: primary})  # type: ignore[dict-item]
    assert ready_keys(controller) == [KEY]
