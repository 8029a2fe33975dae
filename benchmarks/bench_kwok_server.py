"""kwok's own start with and without its kubelet-like server, on one running apiserver.

    python benchmarks/bench_kwok_server.py [--pairs 20]

The plane-level benchmark (bench_pod_streams.py) times a whole start, where a loaded machine's noise is
seconds; this isolates the step the feature changes. One plane (etcd, kube-apiserver, the
controller-manager) runs throughout; each run registers a fresh fake Node and starts kwok for it with
exactly the flags the plane uses, with pod streams on (server, certificates, rules) or off, and times
spawn → Node Ready (→ server listening, when on). Runs are interleaved in pairs, order alternating.
Writes benchmarks/results/kwok_server.json with every raw sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import yaml
from benchmeta import ROOT, run_metadata

from envtest import binaries
from envtest.binaries import gobuild
from envtest.pins import PINNED
from envtest.plane import kwok, streams
from envtest.plane.controlplane import ControlPlane, _listening
from envtest.plane.ports import free_port

RESULTS = ROOT / "benchmarks" / "results" / "kwok_server.json"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=20)
    args = parser.parse_args()
    kwok_bin = binaries.resolve("kwok")
    meta = run_metadata()
    samples: list[dict[str, float]] = []
    with ControlPlane("etcd,kube-apiserver,kube-controller-manager", progress=lambda _m: None) as plane:
        pki = plane.workdir / "pki"
        plane.ca.issue_serving("kwok", ["127.0.0.1"]).write(pki, "kwok")  # type: ignore[union-attr]
        stages = kwok.stage_config(binaries.kwok_stages_dir(), "complete")
        configs = {"off": plane.workdir / "off.yaml", "on": plane.workdir / "on.yaml"}
        configs["off"].write_text(stages)
        rules = yaml.safe_dump_all(streams.rules(plane.workdir / "pods"), sort_keys=False)
        configs["on"].write_text(stages + "---\n" + rules)
        kubeconfig = plane._component_kubeconfig("kwok")
        session = plane.admin_session()

        def run(mode: str, n: int) -> float:
            name = f"bench-{mode}-{n}"
            plane._create(kwok.fake_node(name))
            argv = [str(kwok_bin), *kwok.kwok_args(kubeconfig=kubeconfig, config=configs[mode])]
            argv = [a for a in argv if not a.startswith("--manage-nodes-with")] + [
                f"--manage-single-node={name}"
            ]
            port = free_port()
            if mode == "on":
                argv += kwok.server_args(
                    port=port, cert=pki / "kwok.crt", key=pki / "kwok.key", client_ca=pki / "ca.crt"
                )
            began = time.monotonic()
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                while True:
                    node = session.get(f"{plane.server}/api/v1/nodes/{name}", timeout=5).json()
                    conditions = node.get("status", {}).get("conditions", [])
                    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
                    if ready and (mode == "off" or _listening(port)):
                        return time.monotonic() - began
                    time.sleep(0.005)
            finally:
                proc.terminate()
                proc.wait()
                session.delete(f"{plane.server}/api/v1/nodes/{name}", timeout=5)

        for i in range(args.pairs):
            order = ("on", "off") if i % 2 == 0 else ("off", "on")
            pair = {mode: round(run(mode, i), 4) for mode in order}
            pair["added"] = round(pair["on"] - pair["off"], 4)
            samples.append(pair)
            print(f"pair {i + 1}/{args.pairs}: {pair}", file=sys.stderr, flush=True)
    added = [p["added"] for p in samples]
    result = {
        **meta,
        "kwok": gobuild.kwok_build_id(PINNED.kwok),
        "pairs": args.pairs,
        "added_seconds": {
            "median": round(statistics.median(added), 4),
            "min": round(min(added), 4),
            "max": round(max(added), 4),
        },
        "median_seconds": {m: round(statistics.median(p[m] for p in samples), 4) for m in ("on", "off")},
        "samples": samples,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
