"""`make bench`: every benchmark in this folder, each writing its JSON to benchmarks/results/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
# The cold build takes ~20 minutes on 2 cores: run `bench_controlplane.py --cold` by hand for it.
SCRIPTS = ["bench_controlplane.py", "bench_harness.py", "bench_reliability.py"]


def main() -> int:
    for script in SCRIPTS:
        if (HERE / script).exists():
            print(f"== {script}", flush=True)
            subprocess.run([sys.executable, str(HERE / script)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
