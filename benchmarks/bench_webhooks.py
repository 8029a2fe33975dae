"""Cost per test of admission webhooks: install (rewrite, create, probe until the apiserver calls the
server) and remove, for the two configurations a typical operator has (validating + mutating).

    python benchmarks/bench_webhooks.py [--runs 30] [--components minimal]

One local control plane, one reference WebhookServer; each run is what the `envtest_webhooks` fixture
does for one test, in a fresh namespace. Writes benchmarks/results/webhooks.json with the raw samples.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import secrets
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from envtest import binaries
from envtest.clusters import LocalCluster
from envtest.plane.controlplane import ControlPlane
from envtest.webhooks import WebhookServer, allow, install, serving_certs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "webhooks.json"
CONFIGS = ROOT / "tests" / "e2e" / "data" / "gadgets-webhooks.yaml"


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": round(statistics.median(ordered), 4),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4),
        "min": round(ordered[0], 4),
        "max": round(ordered[-1], 4),
    }


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    return out.stdout.strip() + ("+dirty" if dirty.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--components", default="minimal")
    args = parser.parse_args()
    binaries.resolve_all()
    plane = ControlPlane(args.components, progress=lambda _m: None)
    plane.start()
    cluster = LocalCluster.from_plane(plane)
    samples: dict[str, list[float]] = {"install": [], "remove": [], "probe_requests": []}
    try:
        with tempfile.TemporaryDirectory() as tmp, WebhookServer(serving_certs(Path(tmp))) as server:
            server.admission("/validate-gadget", lambda _req: allow())
            server.admission("/default-gadget", lambda _req: allow())
            s, api = cluster.session, cluster.server
            for run in range(args.runs):
                ns = f"bench-webhooks-{run}-{secrets.token_hex(3)}"
                s.post(
                    f"{api}/api/v1/namespaces", json={"metadata": {"name": ns}}, timeout=10
                ).raise_for_status()
                probes_before = server.requests["/envtest-webhook-probe"]
                began = time.monotonic()
                handle = install(s, api, [CONFIGS], endpoint=server, namespace=ns, run_id="bench")
                samples["install"].append(time.monotonic() - began)
                samples["probe_requests"].append(server.requests["/envtest-webhook-probe"] - probes_before)
                began = time.monotonic()
                handle.remove()
                samples["remove"].append(time.monotonic() - began)
    finally:
        cluster.close()
        plane.stop()
    result = {
        "what": "per test: install validating + mutating configuration (2 probes) and remove them",
        "command": f"python benchmarks/bench_webhooks.py --runs {args.runs} --components {args.components}",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "kubernetes": binaries.k8s_version(),
        "components": args.components,
        "runs": args.runs,
        "install_seconds": _summary(samples["install"]),
        "remove_seconds": _summary(samples["remove"]),
        "samples": {k: [round(v, 4) for v in vals] for k, vals in samples.items()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))


if __name__ == "__main__":
    main()
