"""`make test`'s pytest run (`pytest tests`, unit and E2E in one session) as it was and as it is,
alternating: `2:load` (`-n 2`, xdist's default `load` scheduler) and `3:worksteal` (`-n 3 --dist
worksteal`, the Makefile's default now). A mode is WORKERS:SCHEDULER.

    python benchmarks/bench_make_test.py [--order 3:worksteal,2:load,3:worksteal,2:load,3:worksteal]

`load` gives each worker one run of consecutive tests first (a quarter of its share), then more as it
drains. Collected in path order, tests/e2e comes before tests/unit, so the first worker's first chunk
held every E2E test and it ran the whole E2E suite alone while the other ran the unit tests and then
waited. `worksteal` starts the same way but lets an idle worker take half of a busy one's queue. A third
worker uses the core that E2E tests leave idle while they wait on the apiserver and the operator.

Each run is a fresh pytest process with its own shared plane, as `make test` runs it. Recorded per run:
wall seconds, exit code, pytest's summary line, and each worker's busy seconds (from the start of its
first test to the end of its last, via benchmarks/worker_timeline.py) and idle seconds before the run
ended. Writes benchmarks/results/make_test.json with every raw sample, machine, date and commit.
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
from pathlib import Path
from typing import Any

from benchmeta import ROOT, run_metadata

RESULTS = ROOT / "benchmarks" / "results" / "make_test.json"
MODES = ("2:load", "3:worksteal")
DEFAULT_ORDER = "3:worksteal,2:load,3:worksteal,2:load,3:worksteal"
"""Three of the new (the issue asks for a median of three), two of the old between them."""


def workers(folder: Path, ended: float) -> dict[str, dict[str, float]]:
    """Per xdist worker: busy seconds (first test's start to last test's end) and idle seconds after."""
    out: dict[str, dict[str, float]] = {}
    for path in sorted(folder.glob("gw*.jsonl")):
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        starts = [e["t"] for e in events if e["event"] == "start"]
        finishes = [e["t"] for e in events if e["event"] == "finish"]
        if starts and finishes:
            out[path.stem] = {
                "tests": len(starts),
                "busy_seconds": round(max(finishes) - min(starts), 1),
                "idle_before_end_seconds": round(ended - max(finishes), 1),
            }
    return out


def run(mode: str, log: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-make-test-") as folder:
        env = {
            **os.environ,
            "WORKER_TIMELINE_DIR": folder,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])
            ),
        }
        count, dist = mode.split(":")
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "tests",
            "-n",
            count,
            "--dist",
            dist,
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        began = time.monotonic()
        with log.open("w") as out:
            proc = subprocess.run(
                [*argv, "-p", "worker_timeline"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        wall = time.monotonic() - began
        ended = time.time()
        tail = next(
            (line for line in reversed(log.read_text().splitlines()) if " in " in line and "passed" in line),
            "",
        )
        return {
            "mode": mode,
            "wall_seconds": round(wall, 1),
            "returncode": proc.returncode,
            "summary": tail.strip("= "),
            "workers": workers(Path(folder), ended),
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--order", default=DEFAULT_ORDER, help=f"comma-separated modes (default {DEFAULT_ORDER})"
    )
    parser.add_argument("--logs", type=Path, default=None, help="where each run's output goes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    order = args.order.split(",")
    if unknown := sorted(set(order) - set(MODES)):
        parser.error(f"--order: unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="bench-make-test-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    meta = run_metadata()
    samples = []
    for i, mode in enumerate(order):
        print(f"== run {i + 1}/{len(order)}: {mode}", flush=True)
        sample = {"run": i, **run(mode, logs / f"{i:02d}-{mode.replace(':', '-')}.log")}
        samples.append(sample)
        print(f"   {sample['wall_seconds']}s, exit {sample['returncode']}: {sample['summary']}", flush=True)
        print(f"   workers: {sample['workers']}", flush=True)
    walls = {m: [s["wall_seconds"] for s in samples if s["mode"] == m] for m in MODES}
    result = {
        **meta,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "what": "wall seconds of `python -m pytest tests -n WORKERS --dist SCHEDULER -p no:cacheprovider` "
        "(make test's pytest run), modes WORKERS:SCHEDULER alternating",
        "order": order,
        "all_passed": all(s["returncode"] == 0 for s in samples),
        "median_wall_seconds": {m: statistics.median(w) for m, w in walls.items() if w},
        "samples": samples,
        "logs": str(logs),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["median_wall_seconds"]), f"→ {args.out}")


if __name__ == "__main__":
    main()
