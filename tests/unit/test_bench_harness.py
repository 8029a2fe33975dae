"""benchmarks/bench_harness.py's pure parts: the alternating order of the suite runs, and how the
plugin's per-fixture timings add up to one overhead per test."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from bench_modules import BENCHMARKS, import_from


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return import_from(BENCHMARKS, "bench_harness")


def test_suite_runs_alternate_so_neither_mode_always_goes_first(bench: ModuleType) -> None:
    assert bench.schedule(3) == [2, 0, 0, 2, 2, 0]
    assert bench.schedule(1) == [2, 0]


def test_per_test_overhead_adds_up_the_four_parts_of_each_test(bench: ModuleType, tmp_path: Path) -> None:
    records = [
        {"what": "namespace_create", "seconds": 0.01, "test": "t::a"},
        {"what": "operator_start", "seconds": 0.05, "test": "t::a"},
        {"what": "operator_start", "seconds": 0.04, "test": "t::a"},  # a second operator in one test
        {"what": "operator_teardown", "seconds": 0.03, "test": "t::a"},
        {"what": "operator_teardown", "seconds": 0.02, "test": "t::a"},
        {"what": "namespace_delete", "seconds": 0.02, "test": "t::a"},
        {"what": "namespace_create", "seconds": 0.01, "test": "t::no-operator"},  # not a full row
        {"what": "namespace_delete", "seconds": 0.01, "test": "t::no-operator"},
        {"what": "webhooks_install", "seconds": 0.5},  # another fixture's record, no test id
    ]
    timings = tmp_path / "timings.jsonl"
    timings.write_text("".join(json.dumps(r) + "\n" for r in records))
    (row,) = bench.per_test(timings)
    assert row["test"] == "t::a"
    assert row["operator_start"] == 0.09 and row["operator_teardown"] == 0.05
    assert row["total"] == pytest.approx(0.17)
    summary = bench.overhead([row, {**row, "total": 0.3}])
    assert summary["total"] == {"median": 0.235, "min": 0.17, "max": 0.3, "n": 2}
