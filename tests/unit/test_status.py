"""Status computation: the Running rule, stable conditions, and the no-churn comparison."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mysql_operator.api.v1 import MySQLClusterStatus
from mysql_operator.controller.children.problems import Problem
from mysql_operator.controller.status import (
    compute_status,
    condition,
    status_equal,
    status_patch,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 2, tzinfo=UTC)


def cr(replicas: int = 3, generation: int = 2, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "db", "namespace": "ns", "generation": generation},
        "spec": {"replicas": replicas, "storage": {"size": "1Gi"}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def sts(ready: int, updated: int, observed: int = 5, generation: int = 5) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "status": {"observedGeneration": observed, "readyReplicas": ready, "updatedReplicas": updated},
    }


def test_running_when_every_replica_is_updated_and_ready() -> None:
    status = compute_status(cr(), sts(3, 3), now=T0)
    assert status["phase"] == "Running" and status["readyReplicas"] == 3
    assert condition(status, "Ready")["status"] == "True"  # type: ignore[index]
    assert condition(status, "Progressing")["status"] == "False"  # type: ignore[index]
    assert condition(status, "Degraded")["status"] == "False"  # type: ignore[index]


def test_pending_while_the_statefulset_controller_has_not_seen_the_latest_spec() -> None:
    assert compute_status(cr(), sts(3, 3, observed=4), now=T0)["phase"] == "Pending"


def test_pending_while_replicas_are_not_all_ready_or_updated() -> None:
    assert compute_status(cr(), sts(2, 3), now=T0)["phase"] == "Pending"
    assert compute_status(cr(), sts(3, 2), now=T0)["phase"] == "Pending"
    status = compute_status(cr(), None, now=T0)
    assert status["phase"] == "Pending" and status["readyReplicas"] == 0
    assert condition(status, "Progressing")["reason"] == "Creating"  # type: ignore[index]


def test_fatal_problem_fails_and_names_the_field() -> None:
    problem = Problem("InvalidSchedule", "spec.backup.schedule 'x' is not a cron schedule")
    status = compute_status(cr(), sts(3, 3), [problem], now=T0)
    assert status["phase"] == "Failed"
    ready = condition(status, "Ready")
    assert ready is not None and ready["reason"] == "InvalidSchedule"
    assert "spec.backup.schedule" in ready["message"]


def test_non_fatal_problem_only_degrades() -> None:
    status = compute_status(
        cr(), sts(3, 3), [Problem("FinalBackupFailed", "job failed", fatal=False)], now=T0
    )
    assert status["phase"] == "Running"
    assert condition(status, "Degraded")["status"] == "True"  # type: ignore[index]


def test_terminating_while_deleting() -> None:
    assert compute_status(cr(), sts(3, 3), deleting=True, now=T0)["phase"] == "Terminating"


def test_primary_endpoint_and_observed_generation() -> None:
    status = compute_status(cr(generation=7), None, now=T0)
    assert status["primaryEndpoint"] == "db-primary.ns.svc:3306"
    assert status["observedGeneration"] == 7
    assert {c["observedGeneration"] for c in status["conditions"]} == {7}


def test_conditions_carry_every_metav1_field_and_validate_against_the_api() -> None:
    status = compute_status(cr(), sts(1, 3), now=T0)
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Progressing", "Degraded"]
    for c in status["conditions"]:
        assert set(c) == {"type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"}
        assert c["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    MySQLClusterStatus.model_validate(status)


def test_transition_time_is_kept_while_the_status_does_not_flip() -> None:
    first = compute_status(cr(), sts(1, 3), now=T0)
    again = compute_status(cr(status=first), sts(2, 3), now=T1)  # message changes, status does not
    ready = condition(again, "Ready")
    assert ready is not None and ready["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert ready["message"] == "2 of 3 replicas ready"


def test_transition_time_moves_when_the_status_flips() -> None:
    first = compute_status(cr(), sts(1, 3), now=T0)
    flipped = compute_status(cr(status=first), sts(3, 3), now=T1)
    assert condition(flipped, "Ready")["lastTransitionTime"] == "2026-01-02T00:00:00Z"  # type: ignore[index]
    assert condition(flipped, "Degraded")["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # type: ignore[index]


def test_recomputing_an_unchanged_cluster_gives_an_equal_status() -> None:
    first = compute_status(cr(), sts(3, 3), now=T0)
    assert status_equal(first, compute_status(cr(status=first), sts(3, 3), now=T1))


def test_status_equality_ignores_condition_order_and_missing_nones() -> None:
    a = compute_status(cr(), sts(3, 3), now=T0)
    b = {**a, "conditions": list(reversed(a["conditions"])), "extra": None}
    assert status_equal(a, b)
    assert not status_equal(a, {**a, "readyReplicas": 2})
    assert not status_equal(None, a)


def test_status_patch_deletes_keys_the_new_status_drops() -> None:
    assert status_patch({"phase": "Running", "legacy": 1}, {"phase": "Pending"}) == {
        "status": {"legacy": None, "phase": "Pending"}
    }
