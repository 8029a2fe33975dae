"""Harness overhead per test, and suite wall time serial vs. `-n 2`.

    python benchmarks/bench_harness.py [--tests 8]

Generates a small suite in a temp dir (each test: a namespace, the reference operator in-process, one
MySQLCluster converging to Running, teardown with the finalizer processed), runs it with `-n 0` and
`-n 2`, and reads the per-fixture timings the plugin appends to $ENVTEST_TIMINGS. Writes
benchmarks/results/harness.json.
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

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "harness.json"

INI = f"""
[pytest]
envtest_crds = {ROOT / "api" / "crd"}
envtest_operator = mysql_operator.app:build_manager
envtest_operator_rbac = {ROOT / "operator" / "config" / "rbac.yaml"}
"""

TESTS = """
import pytest
from envtest import assert_matches, eventually

@pytest.mark.parametrize("i", range({n}))
def test_converges(i, operator, namespace, cluster):
    base = f"{{cluster.server}}/apis/db.example.com/v1beta1/namespaces/{{namespace}}/mysqlclusters"
    body = {{"apiVersion": "db.example.com/v1beta1", "kind": "MySQLCluster",
             "metadata": {{"name": "bench"}}, "spec": {{"replicas": 1, "storage": {{"size": "1Gi"}}}}}}
    assert cluster.session.post(base, json=body, timeout=10).status_code == 201

    def running():
        live = cluster.session.get(f"{{base}}/bench", timeout=10).json()
        assert_matches(live, {{"status": {{"phase": "Running"}}}})

    eventually(running, timeout=120)
"""


def run_suite(workdir: Path, workers: int) -> tuple[float, dict[str, list[float]]]:
    timings = workdir / f"timings-{workers}.jsonl"
    timings.unlink(missing_ok=True)
    env = {**os.environ, "ENVTEST_TIMINGS": str(timings)}
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(
            f"benchmark suite failed (-n {workers}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        )
    by_kind: dict[str, list[float]] = defaultdict(list)
    for line in timings.read_text().splitlines():
        record = json.loads(line)
        by_kind[record["what"]].append(record["seconds"])
    return wall, by_kind


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(samples), 3), "max": round(max(samples), 3), "n": len(samples)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tests", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envtest-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "pytest.ini").write_text(INI)
        (workdir / "test_bench.py").write_text(TESTS.format(n=args.tests))
        serial_wall, serial = run_suite(workdir, 0)
        parallel_wall, parallel = run_suite(workdir, 2)
    result = {
        "tests": args.tests,
        "suite_wall_seconds": {"n0": round(serial_wall, 1), "n2": round(parallel_wall, 1)},
        "ratios": {"n2_vs_n0_wall": round(parallel_wall / serial_wall, 2)},
        "per_test_overhead_seconds_n0": {k: summary(v) for k, v in sorted(serial.items())},
        "per_test_overhead_seconds_n2": {k: summary(v) for k, v in sorted(parallel.items())},
        "note": "suite wall includes starting the control plane once (in-process for -n 0, shared for -n 2)",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
