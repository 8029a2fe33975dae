"""`make bench`: every benchmark in this folder, each writing its JSON to benchmarks/results/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
# Minutes each on 2 cores. Longer ones are run by hand: `bench_controlplane.py --cold` (≈ 20 min cold
# build), `bench_scale.py --sizes 100,300,1000` (≈ 1 h with both peers), `bench_harness.py --suite`
# (the E2E suite 6 times).
SCRIPTS: list[list[str]] = [
    ["bench_controlplane.py"],
    ["bench_start.py", "--pairs", "15"],
    ["bench_harness.py"],
    ["bench_requests.py"],
    ["bench_throughput.py", "--sizes", "100"],
    ["bench_binding_mode.py"],
    ["bench_scale.py", "--sizes", "100"],
    ["bench_webhooks.py"],
    ["bench_reliability.py"],
    ["bench_failover.py"],
]


def main() -> int:
    for script, *args in SCRIPTS:
        print(f"== {script} {' '.join(args)}", flush=True)
        subprocess.run([sys.executable, str(HERE / script), *args], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
