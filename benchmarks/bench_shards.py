"""The E2E suite split into 4 pytest-split groups, each group run one after another on this machine, and
the unsharded suite, each as `make e2e` runs it (-n 2, its own control plane per run).

    python benchmarks/bench_shards.py [--repeat 1] [--note "..."]   # → benchmarks/results/shards.json

On CI the groups run at once on 4 machines, so the wall time a user waits is the slowest group's (plus a
job's setup, which the unsharded job pays too): the predicted CI speed-up is unsharded / slowest group.
Run order alternates per repetition (unsharded first, then last) so that a machine getting busier or
warmer does not always favour one side. Every run's wall time is kept (raw samples), with each run's
outcome counts from its JUnit report: a run with failures is recorded, and flagged, not dropped.
Refresh tests/e2e/.test_durations (`make durations`) first: the groups are only as even as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmeta import run_metadata

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DURATIONS = ROOT / "tests" / "e2e" / ".test_durations"
SHARDS = 4


def make_e2e(junit: Path, *make_vars: str) -> list[str]:
    """The Makefile's own `make e2e` command (setup taken as done), with a JUnit report."""
    return [
        "make", "-s", "-o", "setup", "e2e", f"PY={sys.executable}",
        f"PYTEST_ARGS=-p no:cacheprovider --junitxml={junit}", *make_vars,
    ]  # fmt: skip


def outcome(junit: Path) -> dict[str, int]:
    """Counts of the run's JUnit report (all zero when pytest wrote none)."""
    if not junit.exists():
        return {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    suites = list(ET.parse(junit).getroot().iter("testsuite"))
    return {k: sum(int(s.get(k) or 0) for s in suites) for k in ("tests", "failures", "errors", "skipped")}


def timed_run(label: str, cmd: list[str], junit: Path, log: Path) -> dict[str, Any]:
    print(f"bench_shards: {label} …", file=sys.stderr, flush=True)
    start = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = round(time.monotonic() - start, 2)
    counts = outcome(junit)
    print(f"bench_shards: {label}: {wall:.1f}s, exit {rc}, {counts}", file=sys.stderr, flush=True)
    if rc:  # the log goes with the temp dir: what went wrong must reach the terminal
        print("\n".join(log.read_text().splitlines()[-40:]), file=sys.stderr, flush=True)
    return {"label": label, "wall_s": wall, "exit": rc, **counts}


def estimates(collected: list[str]) -> list[float]:
    """pytest-split's own estimate of each group (seconds, from the stored durations)."""
    from pytest_split.algorithms import Algorithms

    class Item:  # the algorithm reads only the node id
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    durations = json.loads(DURATIONS.read_text())
    groups = Algorithms.least_duration.value(SHARDS, [Item(n) for n in collected], durations)
    return [round(g.duration, 1) for g in groups]


def collect() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "::" in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--note", default="", help="e.g. what else the machine was doing")
    args = parser.parse_args()
    if not DURATIONS.exists():
        sys.exit(f"bench_shards: {DURATIONS.relative_to(ROOT)} is missing: run `make durations` first")
    meta = run_metadata()
    collected = collect()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        logs = Path(tmp)
        for rep in range(args.repeat):
            plan = [("unsharded", ())] + [
                (f"shard_{i}", (f"SHARDS={SHARDS}", f"SHARD={i}")) for i in range(1, SHARDS + 1)
            ]
            if rep % 2:  # unsharded last on odd repetitions
                plan = plan[1:] + plan[:1]
            for label, make_vars in plan:
                junit = logs / f"{label}-{rep}.xml"
                runs.append(timed_run(label, make_e2e(junit, *make_vars), junit, logs / f"{label}-{rep}.log"))

    def samples(label: str) -> list[float]:
        return [r["wall_s"] for r in runs if r["label"] == label]

    shard_s = [round(statistics.median(samples(f"shard_{i}")), 2) for i in range(1, SHARDS + 1)]
    unsharded_s = round(statistics.median(samples("unsharded")), 2)
    shard_tests = sum(r["tests"] for r in runs if r["label"].startswith("shard_")) // args.repeat
    result = {
        **meta,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "note": args.note,
        "what": (
            f"wall seconds of `make e2e` (pytest tests/e2e -n 2) unsharded and as each of {SHARDS} "
            "pytest-split groups (`make e2e SHARDS=4 SHARD=i`, least_duration), one after another"
        ),
        "repeat": args.repeat,
        "shard_s": shard_s,
        "unsharded_s": unsharded_s,
        "slowest_shard_over_unsharded": round(max(shard_s) / unsharded_s, 3),
        "predicted_ci_speedup": round(unsharded_s / max(shard_s), 2),
        "sum_of_shards_over_unsharded": round(sum(shard_s) / unsharded_s, 3),
        "estimated_shard_s": estimates(collected),
        "tests_collected": len(collected),
        "tests_run_by_shards": shard_tests,
        "all_passed": all(r["exit"] == 0 and not (r["failures"] or r["errors"]) for r in runs),
        "durations_sha256": hashlib.sha256(DURATIONS.read_bytes()).hexdigest()[:16],
        "samples": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "shards.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("shard_s", "unsharded_s", "predicted_ci_speedup")}))
    print(f"bench_shards: wrote {out.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
