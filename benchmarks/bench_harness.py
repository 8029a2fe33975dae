"""Harness overhead per test, and the project's own E2E suite serial vs. `-n 2`.

    python benchmarks/bench_harness.py [--tests 16]             # → benchmarks/results/harness.json
    python benchmarks/bench_harness.py --suite [--repeat 3]     # → benchmarks/results/harness_suite.json

Default: a generated suite in a temp dir (each test: a namespace, the reference operator in-process
with the project's RBAC, one MySQLCluster converging to Running, teardown with the finalizer
processed), run with `-n 0` and then `-n 2`. The plugin appends each fixture's timing to
$ENVTEST_TIMINGS (`envtest.plugin.context`); per test, the overhead is their sum: namespace_create +
operator_start + operator_teardown + namespace_delete (the project's budget is 0.15 s median).

`--against PYTHON --pairs 5`: the same generated suite's wall time under this interpreter's harness and
under another install's (say a checkout of an older commit), in alternating pairs at `-n 0` and `-n 2`
(A B B A …) → benchmarks/results/harness_against.json.

`--suite`: `pytest tests/e2e` of this repository, `-n 2` and `-n 0` alternating so that neither
always runs first (n2 n0 n0 n2 n2 n0 … for `--repeat 3`), each run's wall time recorded. Long:
each run is minutes. Each result file holds one run's raw samples with date, commit and machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmeta import run_metadata

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PARTS = ("namespace_create", "operator_start", "operator_teardown", "namespace_delete")
BACKGROUND = ("namespace_release",)
BUDGET = 0.15
"""Seconds: the project's budget for the median per-test overhead."""

INI = f"""
[pytest]
envtest_crds = {ROOT / "api" / "crd"}
envtest_operator = mysql_operator:build_manager
envtest_operator_rbac =
    {ROOT / "operator" / "config" / "rbac.yaml"}
    {ROOT / "operator" / "config" / "leader_election_role.yaml"}
"""

TESTS = """
import pytest
from envtest import assert_matches, eventually

@pytest.mark.parametrize("i", range({n}))
def test_converges(i, operator, namespace, cluster):
    base = f"{{cluster.server}}/apis/db.example.com/v1/namespaces/{{namespace}}/mysqlclusters"
    body = {{"apiVersion": "db.example.com/v1", "kind": "MySQLCluster",
             "metadata": {{"name": "bench"}}, "spec": {{"replicas": 1, "storage": {{"size": "1Gi"}}}}}}
    assert cluster.session.post(base, json=body, timeout=10).status_code == 201

    def running():
        live = cluster.session.get(f"{{base}}/bench", timeout=10).json()
        assert_matches(live, {{"status": {{"phase": "Running"}}}})

    eventually(running, timeout=120)
"""


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(samples), 3),
        "min": round(min(samples), 3),
        "max": round(max(samples), 3),
        "n": len(samples),
    }


def per_test(timings: Path) -> list[dict[str, Any]]:
    """One row per test that has all four parts: each part's seconds and their sum."""
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    if timings.exists():
        for line in timings.read_text().splitlines():
            record = json.loads(line)
            if record.get("what") in PARTS and record.get("test"):
                rows[record["test"]][record["what"]] += record["seconds"]  # several operators: add up
    return [
        {"test": test, **{p: round(parts[p], 4) for p in PARTS}, "total": round(sum(parts.values()), 4)}
        for test, parts in rows.items()
        if all(p in parts for p in PARTS)
    ]


def background(timings: Path) -> dict[str, Any]:
    """What runs beside the tests, not waited for by them: finished tests' namespaces released."""
    seconds: dict[str, list[float]] = defaultdict(list)
    if timings.exists():
        for line in timings.read_text().splitlines():
            record = json.loads(line)
            if record.get("what") in BACKGROUND:
                seconds[record["what"]].append(record["seconds"])
    return {what: summary(values) for what, values in seconds.items()}


def overhead(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    return {
        "total": summary([r["total"] for r in rows]),
        "parts": {p: summary([r[p] for r in rows]) for p in PARTS},
    }


def run_pytest(
    args: list[str], cwd: Path, timings: Path, log: Path | None = None, python: str = sys.executable
) -> tuple[float, Any]:
    timings.unlink(missing_ok=True)
    env = {**os.environ, "ENVTEST_TIMINGS": str(timings)}
    began = time.monotonic()
    proc = subprocess.run([python, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - began
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    return wall, proc


# -- default: per-test overhead -------------------------------------------------------------------


def bench_overhead(tests: int) -> dict[str, Any]:
    meta = run_metadata()
    walls: dict[str, float] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    beside: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="envtest-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "pytest.ini").write_text(INI)
        (workdir / "test_bench.py").write_text(TESTS.format(n=tests))
        for workers in (0, 2):
            mode = f"n{workers}"
            timings = workdir / f"timings-{mode}.jsonl"
            wall, proc = run_pytest(["-q", "-p", "no:cacheprovider", "-n", str(workers)], workdir, timings)
            if proc.returncode != 0:
                raise SystemExit(
                    f"benchmark suite failed ({mode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
                )
            walls[mode] = round(wall, 1)
            rows[mode] = per_test(timings)
            beside[mode] = background(timings)
    per_mode = {mode: overhead(r) for mode, r in rows.items()}
    return {
        **meta,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "what": "per-test harness overhead: namespace_create + operator_start + operator_teardown "
        "+ namespace_delete, each test one MySQLCluster converging with the reference operator",
        "tests": tests,
        "budget_seconds": BUDGET,
        "within_budget": {mode: o["total"]["median"] <= BUDGET for mode, o in per_mode.items() if o},
        "per_test_overhead_seconds": per_mode,
        "background_seconds": beside,
        "generated_suite_wall_seconds": walls,
        "samples": rows,
        "note": "n2: two xdist workers on one shared control plane (and on the machine's two cores): "
        "the parts include waiting for the other worker; the wall includes starting the plane once; "
        "background_seconds is what ran beside the tests",
    }


# -- --against: this harness against another install, on the same generated suite ----------------


def bench_against(peer: str, pairs: int, tests: int) -> dict[str, Any]:
    """Alternating pairs (A B, B A, …) per worker count, so neither install always runs first."""
    meta = run_metadata()
    where = subprocess.run(  # from a neutral folder: a checkout's ./envtest would shadow the install
        [peer, "-c", "import envtest, pathlib; print(pathlib.Path(envtest.__file__).resolve().parent)"],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()
    peer_commit = (
        subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="envtest-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "pytest.ini").write_text(INI)
        (workdir / "test_bench.py").write_text(TESTS.format(n=tests))
        for i in range(pairs):
            for workers in (0, 2):
                order = [("this", sys.executable), ("peer", peer)]
                for who, python in order if i % 2 == 0 else order[::-1]:
                    args = ["-q", "-p", "no:cacheprovider", "-n", str(workers)]
                    wall, proc = run_pytest(args, workdir, workdir / "timings.jsonl", python=python)
                    tail = (proc.stdout.strip().splitlines() or [""])[-1]
                    samples.append(
                        {
                            "pair": i,
                            "who": who,
                            "workers": workers,
                            "wall_seconds": round(wall, 2),
                            "summary": tail,
                        }
                    )
                    print(f"pair {i} n{workers} {who}: {wall:.1f}s {tail}", flush=True)
                    if proc.returncode != 0:
                        raise SystemExit(f"{who} failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    result: dict[str, Any] = {}
    for workers in (0, 2):
        walls = {
            who: [s["wall_seconds"] for s in samples if s["who"] == who and s["workers"] == workers]
            for who in ("this", "peer")
        }
        result[f"n{workers}"] = {
            **{who: summary(w) for who, w in walls.items()},
            "ratio_this_over_peer": round(
                statistics.median(walls["this"]) / statistics.median(walls["peer"]), 3
            ),
        }
    return {
        **meta,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "what": f"wall seconds of the generated {tests}-test suite (bench_harness's), this install against "
        "a peer install, alternating pairs per worker count",
        "peer": {"python": peer, "envtest": where, "commit": peer_commit},
        "wall_seconds": result,
        "samples": samples,
    }


# -- --suite: the project's E2E suite -------------------------------------------------------------


def schedule(repeat: int) -> list[int]:
    """Worker counts in alternating pairs: n2 n0, n0 n2, n2 n0, … (ABBA: no mode always goes first)."""
    order: list[int] = []
    for i in range(repeat):
        order += [2, 0] if i % 2 == 0 else [0, 2]
    return order


def bench_suite(repeat: int, logs: Path) -> dict[str, Any]:
    meta = run_metadata()
    logs.mkdir(parents=True, exist_ok=True)
    samples: list[dict[str, Any]] = []
    rows: dict[str, list[dict[str, Any]]] = {"n0": [], "n2": []}
    for i, workers in enumerate(schedule(repeat)):
        mode = f"n{workers}"
        log = logs / f"{i:02d}-{mode}.log"
        timings = logs / f"{i:02d}-{mode}.timings.jsonl"
        args = ["tests/e2e", "-p", "no:cacheprovider", "-q", "-n", str(workers)]
        print(f"== run {i + 1}/{2 * repeat}: pytest {' '.join(args)}", flush=True)
        wall, proc = run_pytest(args, ROOT, timings, log)
        tail = (proc.stdout.strip().splitlines() or [""])[-1]
        samples.append(
            {
                "run": i,
                "mode": mode,
                "wall_seconds": round(wall, 1),
                "returncode": proc.returncode,
                "summary": tail,
            }
        )
        rows[mode] += per_test(timings)
        print(f"   {mode}: {wall:.1f}s, exit {proc.returncode}: {tail}", flush=True)
    walls = {m: [s["wall_seconds"] for s in samples if s["mode"] == m] for m in ("n0", "n2")}
    return {
        **meta,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "what": "wall seconds of `python -m pytest tests/e2e -p no:cacheprovider` with -n 2 and -n 0, "
        "alternating (n2 n0 n0 n2 …)",
        "repeat": repeat,
        "all_passed": all(s["returncode"] == 0 for s in samples),
        "wall_seconds": {m: summary(w) for m, w in walls.items()},
        "ratio_n2_over_n0": {
            "median": round(statistics.median(walls["n2"]) / statistics.median(walls["n0"]), 2),
            "min": round(min(walls["n2"]) / min(walls["n0"]), 2),
        },
        "per_test_overhead_seconds": {mode: overhead(r) for mode, r in rows.items()},
        "samples": samples,
        "logs": str(logs),
        "note": "each run starts its own control plane (in-process for -n 0, shared for -n 2); tests "
        "that need a plane of their own (private_cluster) start one in either mode",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tests", type=int, default=16, help="tests in the generated suite (default 16)")
    parser.add_argument("--suite", action="store_true", help="time the project's E2E suite instead")
    parser.add_argument("--repeat", type=int, default=3, help="--suite: pairs of runs (default 3)")
    parser.add_argument("--logs", type=Path, default=None, help="--suite: where each run's output goes")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: benchmarks/results/…)")
    parser.add_argument("--against", metavar="PYTHON", help="a peer install's interpreter (see the doc)")
    parser.add_argument("--pairs", type=int, default=5, help="--against: pairs per worker count (default 5)")
    args = parser.parse_args()
    if args.against:
        result, target = bench_against(args.against, args.pairs, args.tests), RESULTS / "harness_against.json"
    elif args.suite:
        logs = args.logs or Path(tempfile.mkdtemp(prefix="envtest-bench-suite-"))
        result, target = bench_suite(args.repeat, logs), RESULTS / "harness_suite.json"
    else:
        result, target = bench_overhead(args.tests), RESULTS / "harness.json"
    target = args.out or target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2) + "\n")
    brief = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(brief, indent=2))


if __name__ == "__main__":
    main()
