"""What serving fake pods' logs, exec, attach and port-forward adds to a local plane's start.

    python benchmarks/bench_pod_streams.py [--pairs 10]

A plane of every component starts with pod streams on (kwok's server, its certificates, the
apiserver's kubelet flags) and off, each in a fresh process, interleaved in pairs with the order
alternating. Each run times its whole start and the two steps the feature touches: the PKI (two more
certificates) and kwok (its server starts before the Node turns Ready). The result is the median of
the per-pair differences (on - off) with min and max. Writes benchmarks/results/pod_streams.json with
every raw sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from benchmeta import ROOT, run_metadata

from envtest import binaries

RESULTS = ROOT / "benchmarks" / "results" / "pod_streams.json"

ONE_START = """
import json, sys, time
from envtest import ControlPlane
stamps = []
def progress(message):
    stamps.append((time.monotonic(), message))
plane = ControlPlane("all", pod_streams=sys.argv[1] == "on", progress=progress)
began = time.monotonic()
plane.start()
ended = time.monotonic()
at = {m: t for t, m in stamps}
result = {
    "start_seconds": ended - began,
    "pki_seconds": at["starting kube-apiserver"] - at["starting etcd"],
    "kwok_seconds": ended - at["starting kwok"],
}
plane.stop()
print(json.dumps(result))
"""

MEASURES = ("start_seconds", "pki_seconds", "kwok_seconds")


def run_one(mode: str) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", ONE_START, mode], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        raise SystemExit(f"plane start ({mode}) failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    binaries.resolve_all()  # installs (and builds the patched kwok) before any timing
    meta = run_metadata()
    samples: list[dict[str, dict[str, float]]] = []
    for i in range(args.pairs):
        order = ("on", "off") if i % 2 == 0 else ("off", "on")
        pair = {mode: {k: round(v, 4) for k, v in run_one(mode).items()} for mode in order}
        samples.append(pair)
        print(f"pair {i + 1}/{args.pairs}: {pair}", file=sys.stderr, flush=True)
    result = {
        **meta,
        "kubernetes": binaries.k8s_version(),
        "pairs": args.pairs,
        "added_seconds": {m: summary([p["on"][m] - p["off"][m] for p in samples]) for m in MEASURES},
        "median_seconds": {
            mode: {m: round(statistics.median(p[mode][m] for p in samples), 4) for m in MEASURES}
            for mode in ("on", "off")
        },
        "samples": samples,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
