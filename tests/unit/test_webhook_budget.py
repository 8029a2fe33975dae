"""The webhook server's memory budget (runtime/budget.py): the bound a body's parse is charged is an
upper bound of what json.loads really holds (tracemalloc), for hostile and for real bodies; holds wait
for room and give it back."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from collections.abc import Callable

import pytest

from mysql_operator.runtime.budget import MemoryBudget, parsed_bound

N = 200_000


def hostile() -> dict[str, Callable[[], bytes]]:
    return {
        "empty dicts": lambda: b"[" + b",".join([b"{}"] * N) + b"]",
        "empty lists": lambda: b"[" + b",".join([b"[]"] * N) + b"]",
        "distinct ints": lambda: json.dumps(list(range(10**6, 10**6 + N))).encode(),
        "floats": lambda: json.dumps([i + 0.5 for i in range(N)]).encode(),
        "short strings": lambda: json.dumps([f"s{i}" for i in range(N)]).encode(),
        "one wide key per dict": lambda: json.dumps([{f"k{i}": i} for i in range(N // 4)]).encode(),
        "a wide dict": lambda: json.dumps({f"k{i}": i for i in range(N)}).encode(),
        "astral text": lambda: json.dumps(["x" * 1000 + "\U0001f600"] * 200, ensure_ascii=False).encode(),
        "nested lists": lambda: b"[" * 900 + b"]" * 900,
    }


def admission_review() -> bytes:
    """A real-shaped AdmissionReview of a MySQLCluster carrying 200 KiB of annotations, twice."""
    obj = {
        "apiVersion": "db.example.com/v1",
        "kind": "MySQLCluster",
        "metadata": {
            "name": "db",
            "namespace": "team",
            "annotations": {f"example.com/note-{i}": "x" * 200 for i in range(1000)},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}}] * 50,
        },
        "spec": {"replicas": 3, "engine": "mariadb", "storage": {"size": "1Gi"}},
    }
    request = {"uid": "u", "operation": "UPDATE", "object": obj, "oldObject": obj}
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def conversion_review() -> bytes:
    objects = [
        {
            "apiVersion": "db.example.com/v1alpha1",
            "kind": "MySQLCluster",
            "metadata": {"name": f"db-{i}", "namespace": "team", "labels": {"team": "a"}},
            "spec": {"replicas": 3, "version": "8.0", "storageSize": "1Gi", "backup": {"enabled": True}},
        }
        for i in range(2000)
    ]
    request = {"uid": "u", "desiredAPIVersion": "db.example.com/v1", "objects": objects}
    return json.dumps(
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": request}
    ).encode()


def measured_peak(make: Callable[[], bytes]) -> tuple[int, int]:
    """(peak bytes allocated from the body's creation through its parse, the bound of that body)."""
    tracemalloc.start()
    try:
        body = make()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0] - len(body)
        parsed = json.loads(body)
        peak = tracemalloc.get_traced_memory()[1] - before
        bound = parsed_bound(body)
        del parsed
        return peak, bound
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", list(hostile()))
def test_the_bound_covers_what_hostile_json_really_takes(kind: str) -> None:
    peak, bound = measured_peak(hostile()[kind])
    assert peak <= bound, f"{kind}: parse held {peak} bytes, bound {bound}"


@pytest.mark.parametrize("make", [admission_review, conversion_review], ids=["admission", "conversion"])
def test_the_bound_of_a_real_review_is_neither_under_nor_wildly_over(make: Callable[[], bytes]) -> None:
    peak, bound = measured_peak(make)
    assert peak <= bound <= 8 * peak, f"parse held {peak} bytes, bound {bound}"


def test_a_hold_waits_for_room_and_gives_it_back() -> None:
    budget = MemoryBudget(100)
    first = budget.reserve(70, time.monotonic() + 60)
    assert first is not None and budget.in_use == 70
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(budget.reserve(50, time.monotonic() + 60)))
    waiter.start()
    first.release()
    waiter.join(timeout=60)
    assert got and got[0] is not None and budget.in_use == 50 and budget.peak == 70


def test_a_hold_that_cannot_fit_is_refused_at_once_and_one_out_of_time_too() -> None:
    budget = MemoryBudget(100)
    assert budget.reserve(101, time.monotonic() + 60) is None, "more than the whole budget: never"
    hold = budget.reserve(60, time.monotonic() + 60)
    assert hold is not None
    assert budget.reserve(50, time.monotonic() - 1) is None, "no room, and its deadline passed"
    assert budget.reserve(41, time.monotonic() - 1) is None, "one byte over what is left, out of time"
    exact = budget.reserve(40, time.monotonic())
    assert exact is not None and budget.in_use == 100
    exact.release()
    hold.release()
    hold.release()  # idempotent: the bytes are given back once
    assert budget.in_use == 0
