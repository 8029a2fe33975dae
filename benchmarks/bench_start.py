"""Start time of a plane against controller-runtime's envtest, on the same binaries and CRDs.

    python benchmarks/bench_start.py [--pairs 15]
    python benchmarks/bench_start.py --pairs 12 --against-src <another checkout> --out <file>

Both start etcd + kube-apiserver, install api/crd and are ready when /readyz is ok and every CRD is
Established and served by discovery. Each side runs in a fresh process and times its own start (the
interpreter's and Go runtime's own start-up excluded on both sides). Runs are interleaved in pairs,
the order alternating, and the result is the median of the per-pair ratios (ours / peer) with min
and max. The peer is benchmarks/peers/crenvtest, built here from the Go module proxy.
Ours starts etcd from a plane template (envtest.plane.template); the one start that makes it, after
the templates are removed, is recorded beside the pairs as `first_start_seconds` (once per binaries).
Each of our starts also records kube-apiserver's resident memory a second after ready (the peer's is
not recorded). Writes benchmarks/results/start.json with every raw sample.

`--against-src DIR`: the peer is this harness from another checkout instead (DIR/envtest/src first on
PYTHONPATH; same binaries, same templates): what a change to the start bought, pair by pair.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmeta import ROOT, run_metadata

from envtest import binaries
from envtest.plane import template

RESULTS = ROOT / "benchmarks" / "results" / "start.json"
PEER_SRC = ROOT / "benchmarks" / "peers" / "crenvtest"
CRDS = ROOT / "api" / "crd"

OURS = """
import json, sys, time
import psutil
import envtest
from envtest import ControlPlane
plane = ControlPlane("minimal", crds=[sys.argv[1]], progress=lambda _m: None)
began = time.monotonic()
plane.start()
started = time.monotonic() - began
time.sleep(1.0)  # kube-apiserver's resident memory a second after ready: what GOGC costs at rest
rss = psutil.Process(plane.processes["kube-apiserver"].pid).memory_info().rss
began = time.monotonic()
plane.stop()
stopped = time.monotonic() - began
print(json.dumps({"start_seconds": started, "stop_seconds": stopped, "apiserver_rss_mb": rss / 2**20,
                  "module": envtest.__file__}))
"""


def build_peer() -> Path:
    out = binaries.cache_root().parent / "peers" / "crenvtest"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    print("building the controller-runtime envtest peer (go build)", file=sys.stderr, flush=True)
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=PEER_SRC, env=env, check=True)
    return out


def run_json(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--against-src", type=Path, metavar="DIR", help="peer: this harness from DIR")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    paths = binaries.resolve_all(["etcd", "kube-apiserver"])
    assets = paths["kube-apiserver"].parent
    if paths["etcd"].parent != assets:
        raise SystemExit("etcd and kube-apiserver must share a directory for the peer's KUBEBUILDER_ASSETS")
    ours_argv = [sys.executable, "-c", OURS, str(CRDS)]
    peer_env: dict[str, str] | None = None
    if args.against_src:
        src = (args.against_src / "envtest" / "src").resolve()
        peer_argv, peer_env = ours_argv, {**os.environ, "PYTHONPATH": str(src)}
        peer_name = f"this harness from {args.against_src} (PYTHONPATH={src})"
    else:
        peer_argv = [str(build_peer()), "--assets", str(assets), "--crds", str(CRDS)]
        peer_name = "sigs.k8s.io/controller-runtime/pkg/envtest (benchmarks/peers/crenvtest/go.mod)"
    meta = run_metadata()
    first: dict[str, Any] = {}
    if not args.against_src:
        shutil.rmtree(template.root(paths["kube-apiserver"]), ignore_errors=True)
        first = run_json(ours_argv)
        print(f"first start, template made: {first}", file=sys.stderr, flush=True)
    samples: list[dict[str, float]] = []
    for i in range(args.pairs):
        order = ("ours", "peer") if i % 2 == 0 else ("peer", "ours")
        pair: dict[str, float] = {}
        for side in order:
            result = run_json(ours_argv, None) if side == "ours" else run_json(peer_argv, peer_env)
            if args.against_src and side == "peer" and not result["module"].startswith(str(src)):
                raise SystemExit(f"the peer imported envtest from {result['module']}, not {src}")
            pair[side] = round(result["start_seconds"], 4)
            pair[f"{side}_stop"] = round(result["stop_seconds"], 4)
            if "apiserver_rss_mb" in result:  # ours; the Go peer does not say
                pair[f"{side}_apiserver_rss_mb"] = round(result["apiserver_rss_mb"], 1)
        pair["ratio"] = round(pair["ours"] / pair["peer"], 4)
        samples.append(pair)
        print(f"pair {i + 1}/{args.pairs}: {pair}", file=sys.stderr, flush=True)
    ratios = [p["ratio"] for p in samples]
    result = {
        **meta,
        "kubernetes": binaries.k8s_version(),
        "peer": peer_name,
        "pairs": args.pairs,
        "ratio_ours_over_peer": {
            "median": round(statistics.median(ratios), 3),
            "min": round(min(ratios), 3),
            "max": round(max(ratios), 3),
        },
        "start_seconds_median": {
            "ours": round(statistics.median(p["ours"] for p in samples), 3),
            "peer": round(statistics.median(p["peer"] for p in samples), 3),
        },
        "apiserver_rss_mb_median": {
            side: round(statistics.median(p[f"{side}_apiserver_rss_mb"] for p in samples), 1)
            for side in ("ours", "peer")
            if all(f"{side}_apiserver_rss_mb" in p for p in samples)
        },
        "first_start_seconds": round(first["start_seconds"], 3) if first else None,
        "stop_seconds_median": {
            "ours": round(statistics.median(p["ours_stop"] for p in samples), 3),
            "peer": round(statistics.median(p["peer_stop"] for p in samples), 3),
        },
        "samples": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
