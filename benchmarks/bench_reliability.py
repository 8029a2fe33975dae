"""Cost of each fault of the reliability table: time to reconverge and extra API calls.

    python benchmarks/bench_reliability.py [--runs 3] [--workers 1]

Runs the reliability scenarios themselves (tests/e2e/reliability/test_reliability_*.py) with
$RELIABILITY_RESULTS set, so what is measured is exactly what the suite asserts. Each scenario
appends one line per fault: seconds from the fault (or the change made during it) until every
cluster is Running again, and the API requests and writes the operator sent meanwhile (counted by
the fault proxy; by the operator's own metrics for the kube-apiserver restart, which runs unproxied).
Ratios are against the fault-free runs of the same suite run (`test_baseline_converges_without_faults`),
of the kind the fault interrupts: "create" (new cluster → Running), "change" (spec change → Running)
or "delete" (delete → gone, finalizer removed).

Writes benchmarks/results/reliability.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from envtest import binaries

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "reliability.json"
SUITE = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("tests/e2e/reliability/test_reliability_*.py"))
BASELINE = "none:"
MEASURES = ("seconds", "requests", "writes")


def run_suite(workers: int, target: Path) -> float:
    env = {**os.environ, "RELIABILITY_RESULTS": str(target)}
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *SUITE, "-q", "-p", "no:cacheprovider", "-n", str(workers)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the reliability suite failed; nothing measured:\n{proc.stdout[-4000:]}")
    return time.monotonic() - began


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def summarize(lines: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Medians per fault, each set against the fault-free run of the same kind ("compare")."""
    by_fault: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        by_fault[line["fault"]].append(line)
    rows = []
    for fault, samples in by_fault.items():
        row: dict[str, Any] = {"fault": fault, "compare": samples[0]["compare"], "test": samples[0]["test"]}
        row["samples"] = len(samples)
        for measure in MEASURES:
            values = [s[measure] for s in samples if s.get(measure) is not None]
            row[measure] = _median(values) if values else None
        extras = {k for s in samples for k in s if k not in (*MEASURES, "fault", "test", "compare")}
        row["details"] = {k: _median([s[k] for s in samples if k in s]) for k in sorted(extras)}
        rows.append(row)
    baselines = {r["compare"]: r for r in rows if r["fault"].startswith(BASELINE)}
    missing = {r["compare"] for r in rows} - set(baselines)
    if missing:
        raise SystemExit(f"no fault-free run recorded for {sorted(missing)}; did the baseline test run?")
    for row in rows:
        base = baselines[row["compare"]]
        row["seconds_vs_baseline"] = round(row["seconds"] / base["seconds"], 2)
        row["extra_requests"] = round(row["requests"] - base["requests"], 1)
        row["requests_vs_baseline"] = round(row["requests"] / base["requests"], 2)
    order = {"create": 0, "change": 1, "delete": 2}
    rows.sort(key=lambda r: (order.get(r["compare"], 9), not r["fault"].startswith(BASELINE), r["test"]))
    return baselines, rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "| fault | vs | reconverged in (s) | x fault-free | API requests | extra | writes | details |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        details = ", ".join(f"{k} {v:g}" for k, v in r["details"].items())
        out.append(
            f"| {r['fault']} | {r['compare']} | {r['seconds']:.2f} | {r['seconds_vs_baseline']:.1f} "
            f"| {r['requests']:g} | {r['extra_requests']:+g} | {r['writes']:g} | {details} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="suite runs; medians are reported")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (1: least noise)")
    args = parser.parse_args()
    lines: list[dict[str, Any]] = []
    walls = []
    with tempfile.TemporaryDirectory(prefix="envtest-bench-") as tmp:
        for i in range(args.runs):
            target = Path(tmp) / f"run-{i}.jsonl"
            walls.append(round(run_suite(args.workers, target), 1))
            lines += [json.loads(x) for x in target.read_text().splitlines() if x.strip()]
            print(f"run {i + 1}/{args.runs}: {walls[-1]} s", file=sys.stderr)
    base, rows = summarize(lines)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "kubernetes": binaries.k8s_version(),
        "runs": args.runs,
        "workers": args.workers,
        "suite_wall_seconds": walls,
        "baselines": {kind: {k: row[k] for k in MEASURES} for kind, row in base.items()},
        "faults": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
