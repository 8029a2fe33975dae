"""Control-plane costs: cold binary build, and warm start/stop of the minimal and the full plane.

    python benchmarks/bench_controlplane.py [--runs 5] [--cold]

Writes benchmarks/results/controlplane.json. `--cold` builds every binary from empty Go caches
(fresh GOMODCACHE, GOCACHE and cache dir under a temp dir; downloads off): the CI cold path.
Ratios compare the full plane with the minimal one measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmeta import run_metadata

from envtest import ControlPlane, binaries

RESULTS = Path(__file__).parent / "results" / "controlplane.json"


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def warm(components: str, runs: int) -> dict[str, object]:
    starts, stops, peaks = [], [], []
    for _ in range(runs):
        began = time.monotonic()
        plane = ControlPlane(components, progress=lambda _m: None)
        plane.start()
        starts.append(time.monotonic() - began)
        peaks.append({name: _vm_hwm_kib(p.pid) // 1024 for name, p in plane.processes.items() if p.pid})
        began = time.monotonic()
        plane.stop()
        stops.append(time.monotonic() - began)
    total_peak = [sum(p.values()) for p in peaks]
    return {
        "components": components,
        "runs": runs,
        "start_seconds": {
            "median": round(statistics.median(starts), 3),
            "min": round(min(starts), 3),
            "max": round(max(starts), 3),
        },
        "stop_seconds_median": round(statistics.median(stops), 3),
        "peak_rss_mib_total_median": statistics.median(total_peak),
        "peak_rss_mib_by_component_last_run": peaks[-1],
    }


def cold() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="envtest-cold-") as tmp:
        env = {
            **os.environ,
            "GOMODCACHE": f"{tmp}/gomod",
            "GOCACHE": f"{tmp}/gocache",
            "XDG_CACHE_HOME": f"{tmp}/xdg",
            "ENVTEST_OFFLINE": "1",
        }
        for var in ("KUBEBUILDER_ASSETS", *(k for k in os.environ if k.startswith("TEST_ASSET_"))):
            env.pop(var, None)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "envtest.cli", "binaries", "install", "--offline"],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Go's module cache is read-only; make it removable for the temp dir cleanup.
        subprocess.run(["chmod", "-R", "u+w", tmp], check=False)
        if proc.returncode != 0:
            raise SystemExit(f"cold install failed:\n{proc.stderr[-3000:]}")
        return {
            "wall_seconds": round(wall, 1),
            "cpu_seconds": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
            "peak_rss_mib_largest_child": after.ru_maxrss // 1024,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    # One run, one file: nothing is carried over from an older result (a cold build needs --cold).
    result: dict[str, object] = {**run_metadata(), "kubernetes": binaries.k8s_version()}
    if args.cold:
        result["cold_build"] = cold()
    binaries.resolve_all()
    minimal = warm("minimal", args.runs)
    full = warm("all", args.runs)
    result["warm_start"] = {"minimal": minimal, "all": full}
    result["ratios"] = {
        "all_vs_minimal_start": round(
            full["start_seconds"]["median"] / minimal["start_seconds"]["median"], 2
        ),  # type: ignore[index]
        "all_vs_minimal_peak_rss": round(
            full["peak_rss_mib_total_median"] / minimal["peak_rss_mib_total_median"], 2
        ),  # type: ignore[operator]
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
