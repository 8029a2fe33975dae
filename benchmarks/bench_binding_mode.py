"""How long one small StatefulSet with claims takes to become Ready under each volumeBindingMode.

    python benchmarks/bench_binding_mode.py [--pairs 8] [--replicas 3]

The scale of a test, not of bench_throughput.py: one plane with every component; for each pair, kwok's
default StorageClass is made again with `Immediate` (what kwok ships) and with `WaitForFirstConsumer`
(kind's default class), alternating which goes first, and each time a StatefulSet of `--replicas` pods
(OrderedReady: one pod after the other, a claim each) is created in a fresh namespace and timed until
all its replicas are Ready. `bench_throughput.py --peer-binding-mode WaitForFirstConsumer` measures the
same choice at 1,000 StatefulSets. Writes benchmarks/results/binding_mode.json (or `--out`) with raw
samples.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_throughput import set_binding_mode, statefulset
from benchmeta import ROOT, run_metadata

from envtest import ControlPlane, eventually

RESULTS = ROOT / "benchmarks" / "results" / "binding_mode.json"
MODES = ("Immediate", "WaitForFirstConsumer")
TIMEOUT = 120.0
POLL = 0.02
"""Seconds between polls: short beside the 0.3 s a StatefulSet takes with Immediate binding."""


def ready_seconds(session: Any, server: str, namespace: str, replicas: int) -> float:
    """Seconds from creating the StatefulSet in a new namespace to `replicas` Ready pods."""
    made = session.post(f"{server}/api/v1/namespaces", json={"metadata": {"name": namespace}}, timeout=10)
    if made.status_code != 201:
        raise SystemExit(f"creating namespace {namespace}: {made.status_code} {made.text[:300]}")
    account = f"{server}/api/v1/namespaces/{namespace}/serviceaccounts/default"

    def account_made() -> None:
        if session.get(account, timeout=10).status_code != 200:
            raise AssertionError("not yet")  # raised, not asserted: `python -O` keeps every check

    eventually(account_made, timeout=TIMEOUT, interval=POLL, description=f"{namespace}'s ServiceAccount")
    body = statefulset(0)
    body["spec"]["replicas"] = replicas
    url = f"{server}/apis/apps/v1/namespaces/{namespace}/statefulsets"
    began = time.monotonic()
    created = session.post(url, json=body, timeout=10)
    if created.status_code != 201:
        raise SystemExit(f"creating the StatefulSet: {created.status_code} {created.text[:300]}")

    def ready() -> None:
        status = session.get(f"{url}/s0", timeout=10).json().get("status", {})
        if (status.get("readyReplicas") or 0) < replicas:
            raise AssertionError(status)

    eventually(ready, timeout=TIMEOUT, interval=POLL, description=f"{namespace}'s StatefulSet")
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    order: list[str] = []
    with ControlPlane("all", progress=lambda _m: None) as plane:
        session = plane.admin_session()
        for pair in range(args.pairs):
            for mode in MODES if pair % 2 == 0 else MODES[::-1]:
                set_binding_mode(session, plane.server, mode)
                seconds = ready_seconds(session, plane.server, f"p{pair}-{mode.lower()}", args.replicas)
                samples[mode].append(round(seconds, 3))
                order.append(mode)
                print(f"{mode}: {seconds:.3f} s", file=sys.stderr, flush=True)
    result = {
        **run_metadata(),
        "replicas": args.replicas,
        "order": order,
        "samples": samples,
        "median_seconds": {mode: round(statistics.median(v), 3) for mode, v in samples.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median_seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
