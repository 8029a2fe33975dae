"""Leader failover: from the leader's death to the new leader's first reconcile, warm vs cold standby.

    python benchmarks/bench_failover.py [--pairs 8] [--clusters 200]

One local plane (etcd + kube-apiserver + api/crd) holds `--clusters` MySQLClusters, each with the
children the operator made for it. Per sample two replicas of the operator run in-process with
leader election on a short lease (2 s duration, 1.5 s renew deadline, 0.25 s retry period): the
leader converges everything, the standby stands by, then the leader dies without releasing the
Lease (its renewals stop; nothing tells the standby). Measured on the standby:

  takeover_s     death → it holds the Lease (the lease wait: the same for both modes)
  first_s        it holds the Lease → its first reconcile (what the standby's caches decide)
  total_s        death → first reconcile (what a user waits for)
  lists          list requests it sent after taking over (a cold standby lists every kind)

`warm` is this runtime's default (ManagerOptions.warm_standby: informers run and sync while
standing by); `cold` starts them only on taking over (the earlier path). Samples are interleaved in
pairs, the order alternating; the result is the medians and the per-pair differences, every raw
sample kept in benchmarks/results/failover.json (failover_<N>.json for another --clusters).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pykube
from benchmeta import ROOT, run_metadata

from envtest import ControlPlane
from mysql_operator import build_manager
from mysql_operator.runtime.manager import Manager
from mysql_operator.runtime.types import Key, Result

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_CLUSTERS = 200
NAMESPACE = "bench"
LEASE = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.25}


def cluster(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "db.example.com/v1",
        "kind": "MySQLCluster",
        "metadata": {"name": f"db-{i}", "namespace": NAMESPACE},
        "spec": {"replicas": 1, "storage": {"size": "1Gi"}},
    }


class FirstReconcile:
    """Wraps a reconciler and notes the monotonic time of its first call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.first: float | None = None
        self.calls = 0
        self.lock = threading.Lock()

    def reconcile(self, key: Key) -> Result:
        with self.lock:
            if self.first is None:
                self.first = time.monotonic()
            self.calls += 1
        return self.inner.reconcile(key)  # type: ignore[no-any-return]


def replica(plane: ControlPlane, identity: str, lease: str, warm: bool) -> Manager:
    config = pykube.KubeConfig.from_file(str(plane.kubeconfig))
    manager = build_manager(
        lambda: pykube.HTTPClient(config),
        namespace=NAMESPACE,
        leader_elect=True,
        leader_election_namespace=NAMESPACE,
        identity=identity,
        metrics_port=None,
        health_port=None,
    )
    manager.options = dataclasses.replace(
        manager.options, leader_election_id=lease, warm_standby=warm, **LEASE
    )
    return manager


def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.005)


def converged(manager: Manager, n: int) -> bool:
    """Every cluster reconciled since start and nothing queued (a full pass with nothing left)."""
    (controller,) = manager.controllers
    queue = controller.queue
    done = manager.registry.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": controller.name, "result": "success"}
    )
    return queue is not None and (done or 0) >= n and len(queue) == 0 and queue.pending() == 0


def sample(plane: ControlPlane, n: int, warm: bool, index: int) -> dict[str, Any]:
    lease = f"failover-{index}"
    leader = replica(plane, f"leader-{index}", lease, warm)
    leader.start()
    standby: Manager | None = None
    try:
        wait(lambda: converged(leader, n), 600, "the leader's first pass")
        standby = replica(plane, f"standby-{index}", lease, warm)
        (controller,) = standby.controllers
        timed = controller.reconciler = FirstReconcile(controller.reconciler)
        led: list[float] = []
        changed = standby._leadership_changed
        standby._leadership_changed = lambda leading: (  # type: ignore[method-assign]
            led.append(time.monotonic()) if leading else None,
            changed(leading),
        )[-1]
        standby.start()
        assert not standby.is_leader
        if warm:
            wait(lambda: all(standby.informer(k).has_synced() for k in controller.kinds), 60, "warm caches")
        # The leader dies: renewals stop, the Lease is not released.
        leader._elector.release = lambda: False  # type: ignore[union-attr, method-assign]
        killed = time.monotonic()
        leader.stop(timeout=0.0)
        wait(lambda: led, 60, "the takeover")
        lists_before = standby.api_requests(verb="list")
        wait(lambda: timed.first is not None, 60, "the new leader's first reconcile")
        assert timed.first is not None
        wait(lambda: converged(standby, n), 600, "the new leader's full pass")
        return {
            "mode": "warm" if warm else "cold",
            "takeover_s": round(led[0] - killed, 4),
            "first_s": round(timed.first - led[0], 4),
            "total_s": round(timed.first - killed, 4),
            "lists": int(standby.api_requests(verb="list") - lists_before),
        }
    finally:
        leader.stop(timeout=5)
        if standby is not None:
            standby.stop(timeout=5)


def seed(plane: ControlPlane, n: int) -> None:
    session = plane.admin_session()
    session.post(f"{plane.server}/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}}, timeout=10)
    base = f"{plane.server}/apis/db.example.com/v1/namespaces/{NAMESPACE}/mysqlclusters"
    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(lambda i: session.post(base, json=cluster(i), timeout=30).status_code, range(n))
        )
    if codes.count(201) != n:
        raise SystemExit(f"creating the clusters failed: {sorted(set(codes))}")


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--clusters", type=int, default=DEFAULT_CLUSTERS)
    args = parser.parse_args()
    meta = run_metadata()
    samples: list[dict[str, Any]] = []
    with ControlPlane("minimal", crds=[ROOT / "api" / "crd"], progress=lambda _m: None) as plane:
        seed(plane, args.clusters)
        for i in range(args.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            pair = []
            for warm in order:
                s = {"pair": i, **sample(plane, args.clusters, warm, len(samples))}
                samples.append(s)
                pair.append(s)
                print(json.dumps(s), file=sys.stderr, flush=True)
    by = {m: [s for s in samples if s["mode"] == m] for m in ("warm", "cold")}
    pairs = {i: {s["mode"]: s for s in samples if s["pair"] == i} for i in range(args.pairs)}
    diff = [p["cold"]["total_s"] - p["warm"]["total_s"] for p in pairs.values()]
    result = {
        **meta,
        "clusters": args.clusters,
        "lease": LEASE,
        "pairs": args.pairs,
        "median": {
            m: {k: _median([s[k] for s in v]) for k in ("takeover_s", "first_s", "total_s", "lists")}
            for m, v in by.items()
        },
        "cold_minus_warm_total_s": {
            "median": _median(diff),
            "min": round(min(diff), 4),
            "max": round(max(diff), 4),
        },
        "samples": samples,
    }
    name = "failover.json" if args.clusters == DEFAULT_CLUSTERS else f"failover_{args.clusters}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
