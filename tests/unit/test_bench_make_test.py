"""benchmarks/bench_make_test.py's pure parts (a worker's time from its timeline, pytest's summary line)
and the timeline plugin it loads into each pytest process."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from bench_modules import BENCHMARKS, import_from

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return import_from(BENCHMARKS, "bench_make_test")


def _timeline(path: Path, *events: tuple[str, str, float]) -> None:
    path.write_text("".join(json.dumps({"event": e, "id": i, "t": t}) + "\n" for e, i, t in events))


def test_a_workers_time_in_tests_leaves_out_its_waits(bench: ModuleType, tmp_path: Path) -> None:
    # gw0 waits 41 s between its tests (for a lock, say): not time in tests.
    _timeline(tmp_path / "gw0.jsonl", ("start", "a", 100.0), ("finish", "a", 160.0), ("start", "b", 201.0),
              ("finish", "b", 400.0))  # fmt: skip
    _timeline(tmp_path / "gw1.jsonl", ("start", "c", 100.5), ("finish", "c", 250.0))
    # The controller re-fires its workers' hooks: its file is not a worker's.
    _timeline(tmp_path / "controller.jsonl", ("start", "a", 100.0), ("finish", "c", 250.0))
    assert bench.workers(tmp_path, ended=402.0) == {
        "gw0": {"tests": 2, "in_tests_seconds": 259.0, "idle_after_last_test_seconds": 2.0},
        "gw1": {"tests": 1, "in_tests_seconds": 149.5, "idle_after_last_test_seconds": 152.0},
    }


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("....\n== 2016 passed, 13 skipped, 28 warnings in 365.12s (0:06:05) ==\n",
         "2016 passed, 13 skipped, 28 warnings in 365.12s (0:06:05)"),
        ("F.\nFAILED tests/a.py::test_x\n2 failed, 5 passed in 3.10s\n", "2 failed, 5 passed in 3.10s"),
        ("===== no tests ran in 0.01s =====\n", "no tests ran in 0.01s"),
        ("Traceback (most recent call last):\nKeyboardInterrupt\n", ""),
    ],
)  # fmt: skip
def test_the_summary_line_is_found_whatever_the_outcome(
    bench: ModuleType, output: str, expected: str
) -> None:
    assert bench.summary(output) == expected


def test_the_plugin_writes_each_tests_start_and_finish_for_its_worker(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "timeline"
    folder.mkdir()
    monkeypatch.setenv("WORKER_TIMELINE_DIR", str(folder))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    pytester.makepyfile("def test_one(): pass\ndef test_two(): pass\n")
    pytester.runpytest_inprocess("-p", "worker_timeline", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    events = [json.loads(line) for line in (folder / "gw7.jsonl").read_text().splitlines()]
    assert [(e["event"], e["id"].split("::")[1]) for e in events] == [
        ("start", "test_one"), ("finish", "test_one"), ("start", "test_two"), ("finish", "test_two"),
    ]  # fmt: skip
