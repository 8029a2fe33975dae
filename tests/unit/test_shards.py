"""`make e2e SHARDS=4 SHARD=i` (pytest-split): the four groups partition the E2E suite.

Each group is collected by the Makefile's own command (`--collect-only` appended through PYTEST_ARGS),
so what is checked is what CI's shards run, split by pytest-split's own algorithm."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = ROOT / "tests" / "e2e" / ".test_durations"
SHARDS = 4
# Each test collects the E2E suite five times in subprocesses (over a minute on a loaded machine).
pytestmark = pytest.mark.timeout(600)


def collected(*make_vars: str) -> list[str]:
    """Node ids `make e2e` would run with `make_vars` (setup is taken as done: nothing is installed)."""
    cmd = [
        "make", "-s", "-o", "setup", "e2e", f"PY={sys.executable}", "WORKERS=0",
        "PYTEST_ARGS=--collect-only -q -p no:cacheprovider", *make_vars,
    ]  # fmt: skip
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(cmd)}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return [line for line in result.stdout.splitlines() if "::" in line]


def groups(*make_vars: str) -> list[list[str]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(
            pool.map(lambda i: collected(f"SHARDS={SHARDS}", f"SHARD={i}", *make_vars), range(1, SHARDS + 1))
        )


def assert_partition(suite: list[str], parts: list[list[str]]) -> None:
    seen: dict[str, list[int]] = {}
    for i, part in enumerate(parts, start=1):
        assert part, f"group {i} of {SHARDS} is empty"
        for nodeid in part:
            seen.setdefault(nodeid, []).append(i)
    assert sorted(nodeid for nodeid in suite if nodeid not in seen) == [], "in no group"
    assert {n: g for n, g in seen.items() if len(g) > 1} == {}, "in more than one group"
    assert seen.keys() == set(suite), "a group ran a test the unsplit suite does not collect"


@pytest.fixture(scope="module")
def suite() -> list[str]:
    ids = collected()
    assert len(ids) > SHARDS
    return ids


def test_stored_durations_split_the_e2e_suite_into_four_disjoint_groups_covering_it(suite: list[str]) -> None:
    assert DURATIONS.exists(), f"{DURATIONS.relative_to(ROOT)} is missing: run `make durations`"
    assert_partition(suite, groups())


def test_tests_missing_from_the_durations_still_run_in_exactly_one_group(
    suite: list[str], tmp_path: Path
) -> None:
    # Half the suite timed (one test far slower than the rest), the other half new since the last
    # refresh, and a test that no longer exists: every collected test must still run exactly once.
    timed = {nodeid: 1.0 + i for i, nodeid in enumerate(suite[::2])}
    timed[suite[0]] = 500.0
    timed["tests/e2e/test_gone.py::test_removed_long_ago"] = 1000.0
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps(timed))
    assert_partition(suite, groups(f"DURATIONS={durations}"))


def test_stored_durations_are_seconds_by_node_id() -> None:
    name = DURATIONS.relative_to(ROOT)
    try:
        durations = json.loads(DURATIONS.read_text())
    except (OSError, ValueError) as exc:
        pytest.fail(f"{name}: not readable JSON ({exc}); refresh it with `make durations`")
    assert isinstance(durations, dict) and durations, f"{name}: expected a non-empty JSON object"
    bad = {
        k: v
        for k, v in durations.items()
        if "::" not in k or not isinstance(v, int | float) or not math.isfinite(v) or v < 0
    }
    assert bad == {}, f"{name}: entries that are not node id -> seconds"
