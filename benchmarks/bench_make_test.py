"""`make test`'s pytest run (`pytest tests`, unit and E2E in one session) as it was and as it is,
alternating. A mode is WORKERS:SCHEDULER: `2:load` is how it ran before (`-n 2`, xdist's default
scheduler), `3:worksteal` how the Makefile runs it now (`-n 3 --dist worksteal`), and `2:worksteal`
separates what the scheduler brings from what the third worker brings.

    python benchmarks/bench_make_test.py [--order 3:worksteal,2:load,2:worksteal,...]

`load` gives each worker a run of consecutive tests first (a quarter of its share), then more as it
drains. Collected in path order, tests/e2e comes before tests/unit, so the first worker's first run held
every E2E test: it ran the whole E2E suite alone while the other ran the unit tests and then waited.
`worksteal` hands out every test up front, split evenly into consecutive blocks, and a worker that runs
out takes half of the longest queue left.

Each run is a fresh pytest process with its own shared plane, as `make test` runs it. Recorded per run:
wall seconds, exit code, pytest's summary line, the share of both cores busy (psutil), and per worker
(via benchmarks/worker_timeline.py) the seconds spent in tests and the seconds it sat idle after its
last test before the run ended. Medians count passing runs only; a failed run makes the script exit 1.
Writes benchmarks/results/make_test.json with every raw sample, machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from benchmeta import ROOT, run_metadata

RESULTS = ROOT / "benchmarks" / "results" / "make_test.json"
MODES = ("2:load", "2:worksteal", "3:worksteal")
DEFAULT_ORDER = "3:worksteal,2:load,2:worksteal,3:worksteal,2:load,3:worksteal"
SUMMARY = re.compile(r"^=*\s*(\d+ \w+.*|no tests ran.*) in [\d.]+s")


def summary(output: str) -> str:
    """pytest's final line ("2016 passed, 13 skipped in 365.1s"), whatever the outcome; "" if none."""
    for line in reversed(output.splitlines()):
        if SUMMARY.match(line.strip()):
            return line.strip().strip("= ")
    return ""


def workers(folder: Path, ended: float) -> dict[str, dict[str, float]]:
    """Per xdist worker: tests run, seconds inside them, and seconds idle after its last one."""
    out: dict[str, dict[str, float]] = {}
    for path in sorted(folder.glob("gw*.jsonl")):
        started: dict[str, float] = {}
        spans: list[float] = []
        last = 0.0
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "start":
                started[event["id"]] = event["t"]
            elif event["event"] == "finish" and event["id"] in started:
                spans.append(event["t"] - started[event["id"]])
                last = event["t"]
        if spans:
            out[path.stem] = {
                "tests": len(spans),
                "in_tests_seconds": round(sum(spans), 1),
                "idle_after_last_test_seconds": round(ended - last, 1),
            }
    return out


def run(mode: str, log: Path) -> dict[str, Any]:
    count, dist = mode.split(":")
    with tempfile.TemporaryDirectory(prefix="bench-make-test-") as folder:
        env = {
            **os.environ,
            "WORKER_TIMELINE_DIR": folder,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])
            ),
        }
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
        cpu_before = psutil.cpu_times()
        began = time.monotonic()
        with log.open("w") as out:
            proc = subprocess.run(
                [*argv, "-p", "worker_timeline"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        wall = time.monotonic() - began
        ended = time.time()
        cpu_after = psutil.cpu_times()
        # psutil counts guest time inside user time already: leave the guest fields out of the total.
        fields = [f for f in cpu_after._fields if not f.startswith("guest")]
        total = sum(getattr(cpu_after, f) - getattr(cpu_before, f) for f in fields)
        idle = (cpu_after.idle + cpu_after.iowait) - (cpu_before.idle + cpu_before.iowait)
        return {
            "mode": mode,
            "wall_seconds": round(wall, 1),
            "returncode": proc.returncode,
            "summary": summary(log.read_text()),
            "cpu_busy_share": round(1 - idle / total, 3) if total else None,
            "workers": workers(Path(folder), ended),
        }


def main() -> int:
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
        print(f"   cpu busy {sample['cpu_busy_share']}, workers: {sample['workers']}", flush=True)
    passed = {
        m: [s["wall_seconds"] for s in samples if s["mode"] == m and s["returncode"] == 0] for m in MODES
    }
    result = {
        **meta,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "what": "wall seconds of `python -m pytest tests -n WORKERS --dist SCHEDULER -p no:cacheprovider` "
        "(make test's pytest run), modes WORKERS:SCHEDULER alternating",
        "order": order,
        "all_passed": all(s["returncode"] == 0 for s in samples),
        "median_wall_seconds_of_passing_runs": {
            m: round(statistics.median(w), 1) for m, w in passed.items() if w
        },
        "samples": samples,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["median_wall_seconds_of_passing_runs"]), f"→ {args.out}; logs in {logs}")
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
