"""benchmarks/bench_record.py's pure parts: the ABBA order of the runs and the noise verdict."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    # The benchmarks are scripts that import their siblings (benchmeta) from their folder.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("bench_record")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_modes_alternate_so_neither_always_runs_first(bench: ModuleType) -> None:
    assert bench.order(3) == ["off", "failed", "failed", "off", "off", "failed"]


def test_a_difference_inside_either_modes_spread_is_noise(bench: ModuleType) -> None:
    verdict = bench.verdict({"off": [100.0, 110.0, 104.0], "failed": [103.0, 108.0, 106.0]})
    assert verdict["difference_seconds"] == 2.0
    assert verdict["noise_seconds"] == 10.0
    assert verdict["within_noise"] is True


def test_a_difference_beyond_both_spreads_is_a_cost(bench: ModuleType) -> None:
    verdict = bench.verdict({"off": [100.0, 101.0, 100.5], "failed": [120.0, 121.0, 120.5]})
    assert verdict["difference_seconds"] == 20.0
    assert verdict["within_noise"] is False


def test_every_default_path_exists(bench: ModuleType) -> None:
    assert all((ROOT / path).is_file() for path in bench.SUITE)
