"""The event recorder: aggregation of repeats within a window, sent off the caller's thread through a
bounded queue, and never failing (nor blocking) its caller."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from operator_fakes import FakeKube, cluster
from prometheus_client import CollectorRegistry
from runtime_fakes import PATIENCE

from mysql_operator.controller.events import EventRecorder
from mysql_operator.controller.kinds import Event
from mysql_operator.runtime.clock import FakeClock

OBJ = {**cluster(), "metadata": {"name": "db", "namespace": "ns", "uid": "u1"}}


class Flushing(EventRecorder):
    """Writes at once on the caller's thread, as the sender would: for the tests of what is written."""

    def event(self, *args: Any) -> None:
        super().event(*args)
        self.flush()


def recorder(kube: FakeKube, **kwargs: Any) -> EventRecorder:
    kwargs.setdefault("now", lambda: datetime(2026, 1, 1, tzinfo=UTC))
    return Flushing(kube, instance="pod-1", **kwargs)  # type: ignore[arg-type]


def events(kube: FakeKube) -> list[dict]:
    return [o for (endpoint, _, _), o in kube.objects.items() if endpoint == Event.endpoint]


def test_event_names_the_object_and_the_operator() -> None:
    kube = FakeKube()
    recorder(kube).event(OBJ, "Normal", "Created", "created Service db-headless")
    (event,) = events(kube)
    assert event["involvedObject"] == {
        "apiVersion": "db.example.com/v1beta1",
        "kind": "MySQLCluster",
        "name": "db",
        "namespace": "ns",
        "uid": "u1",
    }
    assert (event["type"], event["reason"], event["count"]) == ("Normal", "Created", 1)
    assert event["source"] == {"component": "mysql-operator"} and event["reportingInstance"] == "pod-1"
    assert event["metadata"]["name"].startswith("db.")


def test_a_repeat_bumps_the_count_instead_of_creating_another() -> None:
    kube = FakeKube()
    rec = recorder(kube)
    for _ in range(3):
        rec.event(OBJ, "Warning", "InvalidSchedule", "bad")
    (event,) = events(kube)
    assert event["count"] == 3
    assert event["series"] == {"count": 3, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}
    assert [w[0] for w in kube.writes] == ["create", "patch", "patch"]


def test_a_repeat_after_the_window_starts_a_new_event() -> None:
    kube = FakeKube()
    clock = FakeClock()
    rec = recorder(kube, clock=clock, now=None, window=600.0)
    rec.event(OBJ, "Warning", "InvalidSchedule", "bad")
    clock.advance(599)
    rec.event(OBJ, "Warning", "InvalidSchedule", "bad")
    clock.advance(599)  # within the window of the *last* occurrence: still one series
    rec.event(OBJ, "Warning", "InvalidSchedule", "bad")
    assert [e["count"] for e in events(kube)] == [3]
    clock.advance(601)
    rec.event(OBJ, "Warning", "InvalidSchedule", "bad")
    assert sorted(e["count"] for e in events(kube)) == [1, 3]


def test_a_different_message_or_object_is_another_event() -> None:
    kube = FakeKube()
    rec = recorder(kube)
    rec.event(OBJ, "Warning", "InvalidSchedule", "bad")
    rec.event(OBJ, "Warning", "InvalidSchedule", "worse")
    other = {**OBJ, "metadata": {"name": "db2", "namespace": "ns", "uid": "u2"}}
    rec.event(other, "Warning", "InvalidSchedule", "bad")
    assert [e["count"] for e in events(kube)] == [1, 1, 1]


class BlockingKube(FakeKube):
    """Holds every create until released: an apiserver that does not answer."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def create(self, kind: Any, obj: dict) -> dict:
        self.entered.set()
        assert self.release.wait(PATIENCE)
        return super().create(kind, obj)


def test_event_returns_while_the_apiserver_hangs_and_a_full_queue_drops_and_counts() -> None:
    kube = BlockingKube()
    registry = CollectorRegistry()
    rec = EventRecorder(kube, queue_size=2, registry=registry)  # type: ignore[arg-type]
    rec.start()
    try:
        rec.event(OBJ, "Normal", "Created", "first")
        assert kube.entered.wait(PATIENCE), "the sender took the first event and hangs on it"
        for i in range(5):  # the caller never waits: 2 fit the queue, 3 are dropped
            rec.event(OBJ, "Normal", "Created", f"more {i}")
        assert registry.get_sample_value("events_dropped_total") == 3
    finally:
        kube.release.set()
        rec.stop(timeout=PATIENCE)
    assert sorted(e["message"] for e in events(kube)) == ["first", "more 0", "more 1"], "stop sends the rest"


def test_events_are_sent_by_the_sender_thread() -> None:
    kube = FakeKube()
    seen: list[str] = []
    create = kube.create

    def record_thread(kind: Any, obj: dict) -> dict:
        seen.append(threading.current_thread().name)
        return create(kind, obj)

    kube.create = record_thread  # type: ignore[method-assign]
    rec = EventRecorder(kube)  # type: ignore[arg-type]
    rec.start()
    rec.event(OBJ, "Normal", "Created", "x")
    rec.stop(timeout=PATIENCE)
    assert seen == ["event-sender"]
    assert len(events(kube)) == 1


def test_an_expired_event_is_written_anew() -> None:
    kube = FakeKube()
    rec = recorder(kube)
    rec.event(OBJ, "Normal", "Created", "x")
    kube.objects.clear()
    rec.event(OBJ, "Normal", "Created", "x")
    (event,) = events(kube)
    assert event["count"] == 1


def test_failures_are_swallowed() -> None:
    kube = FakeKube()
    kube.fail_next("create", "events", 403, "Forbidden", "no")
    recorder(kube).event(OBJ, "Normal", "Created", "x")  # does not raise
    assert events(kube) == []
