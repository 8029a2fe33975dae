"""API requests and writes per MySQLCluster, counted by kube-apiserver and by the operator itself.

    python benchmarks/bench_requests.py [--clusters 100] [--workers 2]

A local control plane (kwok makes pods Ready), the operator in-process scoped to one namespace,
N one-replica clusters created at once and driven to Running. kube-apiserver's own
`apiserver_request_total` is scraped before and after; the count covers the kinds only the operator
writes - mysqlclusters (minus this script's own creates and polls), secrets, services, statefulsets
(the StatefulSet controller's statefulsets/status writes excluded) and cronjobs - and excludes events.
The operator's `rest_client_requests_total` is reported beside it, events included. Writes:
POST, PUT, PATCH, APPLY, DELETE. Writes results to benchmarks/results/requests.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pykube
from benchmeta import Key, apiserver_counts

from envtest import ControlPlane
from mysql_operator.controller.wiring import build_manager
from mysql_operator.runtime.manager import WRITE_VERBS, Manager

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "requests.json"
NAMESPACE = "bench"
KINDS = {
    ("db.example.com", "mysqlclusters"),
    ("", "secrets"),
    ("", "services"),
    ("apps", "statefulsets"),
    ("batch", "cronjobs"),
}
WRITES = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}


def ours(key: Key) -> bool:
    _verb, group, resource, subresource = key
    if (group, resource) not in KINDS:
        return False
    # The StatefulSet controller writes statefulsets/status; nothing else here writes these kinds.
    return not (resource == "statefulsets" and subresource == "status")


def operator_counts(manager: Manager) -> tuple[float, float, float, float]:
    total = manager.api_requests()
    writes = manager.api_requests(verb=WRITE_VERBS)
    events = manager.api_requests(resource="events")
    event_writes = manager.api_requests(verb=WRITE_VERBS, resource="events")
    return total, writes, events, event_writes


def run(clusters: int, workers: int) -> dict[str, Any]:
    with ControlPlane(crds=[ROOT / "api" / "crd"], job_pods="hold", progress=lambda _m: None) as plane:
        session, server = plane.admin_session(), plane.server
        session.post(
            f"{server}/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}}, timeout=10
        ).raise_for_status()
        config = pykube.KubeConfig.from_file(str(plane.kubeconfig))
        manager = build_manager(lambda: pykube.HTTPClient(config), namespace=NAMESPACE, workers=workers)
        manager.start()
        try:
            op_before = operator_counts(manager)
            before = apiserver_counts(session, server)
            base = f"{server}/apis/db.example.com/v1/namespaces/{NAMESPACE}/mysqlclusters"
            own: Counter[Key] = Counter()
            began = time.monotonic()
            for i in range(clusters):
                body = {
                    "apiVersion": "db.example.com/v1",
                    "kind": "MySQLCluster",
                    "metadata": {"name": f"db{i:03d}"},
                    "spec": {"replicas": 1, "storage": {"size": "1Gi"}},
                }
                session.post(base, json=body, timeout=10).raise_for_status()
                own[("POST", "db.example.com", "mysqlclusters", "")] += 1
            while True:
                items = session.get(base, timeout=30).json()["items"]
                own[("LIST", "db.example.com", "mysqlclusters", "")] += 1
                running = sum((i.get("status") or {}).get("phase") == "Running" for i in items)
                if running == clusters:
                    break
                if time.monotonic() - began > 60 + clusters * 3:
                    raise SystemExit(f"only {running} of {clusters} clusters Running")
                time.sleep(1.0)
            converged = time.monotonic() - began
            time.sleep(3.0)  # anything the last status writes trigger, and a quiet tail
            after = apiserver_counts(session, server)
            op_after = operator_counts(manager)
        finally:
            manager.stop()
    delta = {k: after[k] - before.get(k, 0) - own.get(k, 0) for k in after if ours(k)}
    delta = {k: v for k, v in delta.items() if v}
    requests_ = sum(v for k, v in delta.items() if k[0] != "WATCH")
    writes = sum(v for k, v in delta.items() if k[0] in WRITES)
    op = [a - b for a, b in zip(op_after, op_before, strict=True)]
    return {
        "clusters": clusters,
        "workers": workers,
        "seconds_to_running": round(converged, 2),
        "apiserver": {
            "requests_per_cluster": round(requests_ / clusters, 2),
            "writes_per_cluster": round(writes / clusters, 2),
            "by_verb_and_resource": {
                " ".join(p for p in (k[0], k[2], k[3]) if p): v for k, v in sorted(delta.items())
            },
        },
        "operator": {
            "requests_per_cluster": round(op[0] / clusters, 2),
            "writes_per_cluster": round(op[1] / clusters, 2),
            "requests_per_cluster_without_events": round((op[0] - op[2]) / clusters, 2),
            "writes_per_cluster_without_events": round((op[1] - op[3]) / clusters, 2),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args.clusters, args.workers)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
