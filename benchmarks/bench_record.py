"""What the record costs: the reference operator's E2E suite with the record on against off.

    python benchmarks/bench_record.py [--pairs 3] [--workers 2] [PATH ...]
    # → benchmarks/results/record_cost.json

Each run is `pytest PATH… -n WORKERS --envtest-record=MODE` in a fresh process (its own plane: `off`
starts kube-apiserver without an audit log and reads nothing; `failed`, the default, writes the audit
log and follows it for every test). The modes alternate in ABBA order (off on on off off on …) so that
neither always runs first, on a warm machine or a cold one. The whole run's wall time is what is
compared — plane start, audit writing, following and attribution, the session-end RBAC report.

Verdict: the difference of the medians is "within noise" when it is smaller than the larger of the two
modes' own spreads (max - min of its samples); the record stays on by default only then.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmeta import run_metadata

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SUITE = (
    "tests/e2e/test_convergence.py",
    "tests/e2e/test_finalizer.py",
    "tests/e2e/test_gc.py",
    "tests/e2e/test_conflicts.py",
    "tests/e2e/test_adoption.py",
    "tests/e2e/test_apply.py",
    "tests/e2e/test_final_backup.py",
    "tests/e2e/test_operator_webhooks.py",
)
"""The reference operator's own E2E files (convergence, finalizers, GC, conflicts, adoption, apply,
backups, webhooks): the tests whose operator the record follows."""


def order(pairs: int) -> list[str]:
    """ABBA: off on, on off, off on, …"""
    return [mode for i in range(pairs) for mode in (("off", "failed") if i % 2 == 0 else ("failed", "off"))]


def one_run(paths: list[str], mode: str, workers: int) -> tuple[float, int, str]:
    cmd = [sys.executable, "-m", "pytest", *paths, "-n", str(workers), "-q", "-p", "no:cacheprovider"]
    cmd.append(f"--envtest-record={mode}")
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    return wall, proc.returncode, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def spread(samples: list[float]) -> float:
    return max(samples) - min(samples)


def verdict(samples: dict[str, list[float]]) -> dict[str, Any]:
    off, on = samples["off"], samples["failed"]
    difference = statistics.median(on) - statistics.median(off)
    noise = max(spread(off), spread(on))
    return {
        "median_off_seconds": round(statistics.median(off), 2),
        "median_on_seconds": round(statistics.median(on), 2),
        "difference_seconds": round(difference, 2),
        "difference_ratio": round(statistics.median(on) / statistics.median(off), 3),
        "noise_seconds": round(noise, 2),
        "within_noise": abs(difference) <= noise,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=list(SUITE))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "record_cost.json")
    args = parser.parse_args()
    meta = run_metadata()
    samples: dict[str, list[float]] = {"off": [], "failed": []}
    runs = []
    for mode in order(args.pairs):
        wall, code, tail = one_run(args.paths, mode, args.workers)
        print(f"record={mode:6} {wall:7.1f} s  exit {code}  {tail}", file=sys.stderr)
        samples[mode].append(round(wall, 2))
        runs.append({"mode": mode, "wall_seconds": round(wall, 2), "exit": code, "summary": tail})
    result = {
        **meta,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "what": "the reference operator's E2E files, whole pytest run, record off vs on (failed)",
        "paths": args.paths,
        "workers": args.workers,
        "all_passed": all(run["exit"] == 0 for run in runs),
        "runs_in_order": runs,
        "samples": samples,
        **verdict(samples),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps({k: v for k, v in result.items() if k.endswith(("seconds", "ratio", "noise"))}, indent=2)
    )
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
