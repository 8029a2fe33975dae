"""benchmarks/bench_record.py's pure parts: the ABBA order of the runs and the noise verdict."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from bench_modules import BENCHMARKS, import_from

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return import_from(BENCHMARKS, "bench_record")


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
