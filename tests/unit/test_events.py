"""The event recorder: aggregation of repeats, and never failing its caller."""

from __future__ import annotations

from datetime import UTC, datetime

from operator_fakes import FakeKube, cluster

from mysql_operator.events import EventRecorder
from mysql_operator.kinds import Event

OBJ = {**cluster(), "metadata": {"name": "db", "namespace": "ns", "uid": "u1"}}


def recorder(kube: FakeKube) -> EventRecorder:
    return EventRecorder(kube, instance="pod-1", now=lambda: datetime(2026, 1, 1, tzinfo=UTC))  # type: ignore[arg-type]


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
    assert [w[0] for w in kube.writes] == ["create", "patch", "patch"]


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
