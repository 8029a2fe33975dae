"""How fast the local plane itself turns StatefulSets into Ready pods: the floor under any operator.

    python benchmarks/bench_throughput.py [--sizes 100,300,1000] [--default-limits]
    python benchmarks/bench_throughput.py --sizes 1000 --peer-kwok /path/to/kwok --repeat 2
    python benchmarks/bench_throughput.py --sizes 1000 --peer-volume-stages --repeat 3
    python benchmarks/bench_throughput.py --sizes 1000 --peer-env GOGC=100 --repeat 3
    python benchmarks/bench_throughput.py --sizes 1000 --peer-binding-mode WaitForFirstConsumer --repeat 3
    python benchmarks/bench_throughput.py --sizes 1000 --repeat 3 \
        --peer-flag kube-controller-manager:concurrent-statefulset-syncs=20
    python benchmarks/bench_throughput.py --sizes 1000 --peer-record-off --repeat 2
    python benchmarks/bench_throughput.py --workload deployment --sizes 10000
    python benchmarks/bench_throughput.py --workload pods --sizes 1000,10000

For each N a fresh plane with all components (kwok nodes, the default rate limits of this harness)
gets N StatefulSets (1 replica, 1 PVC from a volumeClaimTemplate) created directly, and the time
until every one reports readyReplicas=1 is measured: StatefulSets/s and pods/s. Readiness is followed
with one watch (`--observer list`: a list of all N every 0.5 s, as this script did before 2026-12-06;
at 1,000 each list is a few MB of JSON for kube-apiserver to encode and this process to parse, on the
same two cores as the plane). `--default-limits`
runs the same with kube-controller-manager's and kube-scheduler's upstream client limits (20/50 qps)
for comparison in the same run. `--peer-kwok` runs the same with another kwok binary (another build, a
patch left out; a `kwok.build` file beside it), `--repeat` times, alternating which goes first.
`--peer-volume-stages` runs the same with kwok's own volume stages in full, binding claims beside the
controller-manager's PV binder (the plane before envtest.plane.kwok.as_provisioner). `--peer-env
KEY=VALUE` (repeatable) runs the same with those variables in the planes' environment (`GOGC=100`:
kube-apiserver at Go's default instead of envtest.plane.flags.ENVIRONMENT's). `--peer-binding-mode
WaitForFirstConsumer` runs the same with kwok's default StorageClass made again with that
volumeBindingMode before the StatefulSets are created (kind's default class binds so; kwok's ships
`Immediate`, which has the scheduler reject a pod until its claim is bound). `--peer-flag
COMPONENT:FLAG=VALUE` (repeatable) runs the same with those flags added to the plane's (`extra_args`).
`--peer-record-off` runs the same with the record off (`ControlPlane(record=False)`: no audit log), what
the record costs the plane under load.
Each run records every component's peak resident memory (the kernel's high-water mark). Writes
benchmarks/results/throughput.json (or `--out`) with raw samples.

`--workload deployment`: one Deployment of N replicas instead (ReplicaSet controller, scheduler, kwok;
no volumes), timed until its readyReplicas is N. `--workload pods`: N bare pods bound to the kwok node
by `nodeName` (no controller, no scheduler), timed until all N are Running: what kwok's own CI
benchmark (test/kwokctl/kwokctl_benchmark_test.sh) times, with the same 1 s polls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from unittest import mock

import psutil
from benchmeta import ROOT, apiserver_counts, peak_rss_mb, run_metadata

from envtest import ControlPlane
from envtest.plane import kwok as kwok_plane
from envtest.plane.kwok import NODE_NAME

RESULTS = ROOT / "benchmarks" / "results" / "throughput.json"
PEER_VOLUME_STAGES = "kwok-binds-claims"
RECORD_OFF = "record-off"
STORAGE_CLASS = "kwok-volume"  # the default class kwok's volume stages ship
UPSTREAM_LIMITS = {
    "kube-controller-manager": {"kube-api-qps": "20", "kube-api-burst": "30"},
    "kube-scheduler": {"kube-api-qps": "50", "kube-api-burst": "100"},
}


def statefulset(i: int) -> dict[str, Any]:
    labels = {"app": f"s{i}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": f"s{i}"},
        "spec": {
            "replicas": 1,
            "serviceName": f"s{i}",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/c:1"}]},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }
            ],
        },
    }


def deployment(n: int) -> dict[str, Any]:
    labels = {"app": "d"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": n,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/c:1"}]},
            },
        },
    }


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "labels": {"app": "p"}},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "c", "image": "example.invalid/c:1"}]},
    }


@contextmanager
def kwok_binds_claims() -> Iterator[None]:
    """Planes started inside get kwok's volume stages in full, as before as_provisioner."""
    cut = kwok_plane.as_provisioner
    kwok_plane.as_provisioner = lambda stages: stages
    try:
        yield
    finally:
        kwok_plane.as_provisioner = cut


def set_binding_mode(session: Any, server: str, mode: str) -> None:
    """Make the default StorageClass again with this volumeBindingMode (the field cannot be changed)."""
    url = f"{server}/apis/storage.k8s.io/v1/storageclasses/{STORAGE_CLASS}"
    live = session.get(url, timeout=10).json()
    meta = live["metadata"]
    body = {
        **{k: v for k, v in live.items() if k not in ("metadata", "volumeBindingMode")},
        "metadata": {"name": meta["name"], "annotations": meta.get("annotations", {})},
        "volumeBindingMode": mode,
    }
    assert session.delete(url, timeout=10).status_code == 200, f"deleting {url}"
    created = session.post(url.rsplit("/", 1)[0], json=body, timeout=10)
    assert created.status_code == 201, f"creating the class: {created.status_code} {created.text[:300]}"


def parse_flags(items: Iterable[str]) -> dict[str, dict[str, str | None]]:
    """`COMPONENT:FLAG=VALUE` items as ControlPlane's extra_args; ValueError names a malformed item."""
    flags: dict[str, dict[str, str | None]] = {}
    for item in items:
        component, _, setting = item.partition(":")
        flag, sep, value = setting.partition("=")
        if not (component and flag and sep):
            raise ValueError(f"{item!r} is not COMPONENT:FLAG=VALUE")
        flags.setdefault(component, {})[flag] = value
    return flags


def create_all(session: Any, url: str, bodies: Iterable[dict[str, Any]]) -> None:
    """POST every body, eight at a time; each must be created."""
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda body: session.post(url, json=body, timeout=30).status_code, bodies))
    assert all(code == 201 for code in codes), f"create failed: {sorted(set(codes))}"


def wait_all(done: Callable[[], int], n: int, began: float, interval: float) -> tuple[int, float]:
    """Poll `done` (how many are ready) until it says n or 900 s from `began` have passed: (ready,
    seconds since `began`)."""
    deadline = began + 900
    ready = 0
    while time.monotonic() < deadline:
        ready = done()
        if ready == n:
            break
        time.sleep(interval)
    return ready, time.monotonic() - began


def measure_workload(workload: str, n: int) -> dict[str, Any]:
    """A Deployment of n replicas, or n bare pods on the kwok node: seconds until all are ready/Running."""
    with ControlPlane("all", progress=lambda _m: None) as plane:
        session = plane.admin_session()
        ns = "bench"
        session.post(f"{plane.server}/api/v1/namespaces", json={"metadata": {"name": ns}}, timeout=10)
        began = time.monotonic()
        if workload == "deployment":
            url = f"{plane.server}/apis/apps/v1/namespaces/{ns}/deployments"
            resp = session.post(url, json=deployment(n), timeout=30)
            assert resp.status_code == 201, f"creating the Deployment: {resp.status_code} {resp.text[:300]}"

            def done() -> int:
                resp = session.get(f"{url}/d", timeout=60)
                if resp.status_code != 200:  # a busy apiserver's 429 or 503: look again
                    return -1
                return int((resp.json().get("status") or {}).get("readyReplicas") or 0)
        else:
            url = f"{plane.server}/api/v1/namespaces/{ns}/pods"
            create_all(session, url, (pod(i) for i in range(n)))

            def done() -> int:
                running = {"fieldSelector": "status.phase=Running", "resourceVersion": "0"}
                resp = session.get(url, params=running, timeout=60)
                return len(resp.json()["items"]) if resp.status_code == 200 else -1

        created = time.monotonic() - began
        ready, seconds = wait_all(done, n, began, interval=1.0)
        return {
            "workload": workload,
            "n": n,
            "all_ready": ready == n,
            "ready": ready,
            "create_seconds": round(created, 2),
            "ready_seconds": round(seconds, 2),
            "pods_per_second": round(ready / seconds, 2),
        }


def watch_ready(session: Any, base: str, n: int, began: float) -> tuple[int, float]:
    """Follow the StatefulSets with one watch until n report readyReplicas=1 or 900 s from `began`
    have passed: (ready, seconds since `began`). A list gives the start and is made again if the
    watch's resourceVersion expires."""
    deadline = began + 900
    ready: set[str] = set()
    resource_version = ""
    while len(ready) < n and time.monotonic() < deadline:
        if not resource_version:
            listed = session.get(base, timeout=60).json()
            resource_version = listed["metadata"]["resourceVersion"]
            ready = {s["metadata"]["name"] for s in listed["items"] if _one_ready(s)}
            continue
        params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": "60"}
        with session.get(base, params=params, stream=True, timeout=(10, 90)) as stream:
            for line in stream.iter_lines():
                event = json.loads(line)
                if event["type"] == "ERROR":  # 410 Gone: list again
                    resource_version = ""
                    break
                obj = event["object"]
                resource_version = obj["metadata"]["resourceVersion"]
                name = obj["metadata"]["name"]
                if event["type"] != "DELETED" and _one_ready(obj):
                    ready.add(name)
                else:
                    ready.discard(name)
                if len(ready) == n or time.monotonic() > deadline:
                    break
    return len(ready), time.monotonic() - began


def _one_ready(statefulset: dict[str, Any]) -> bool:
    return (statefulset.get("status") or {}).get("readyReplicas") == 1


class Accounting:
    """Who did what while the StatefulSets came up: kube-apiserver's requests (its
    `apiserver_request_total`, by verb and resource), each component's CPU seconds, the writes the
    plane's audit log kept (by user; its policy keeps every component's writes but Events, Leases,
    namespaces, ServiceAccounts and RBAC, envtest.record.policy), all three from the first create until
    the last StatefulSet is ready; and the namespace's Events by reporter and reason (a series counted
    by its count), read then, so ones still on their way are missed."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane, self.namespace = plane, namespace
        self.session = plane.admin_session()
        self.requests = apiserver_counts(self.session, plane.server)
        self.processes = {
            name: psutil.Process(proc.pid) for name, proc in plane.processes.items() if proc.pid
        }
        self.cpu = {name: _cpu_seconds(p) for name, p in self.processes.items()}
        log = plane.audit_log
        self.audit_offset = log.stat().st_size if log is not None and log.exists() else 0

    def finish(self, n: int) -> dict[str, Any]:
        requests = apiserver_counts(self.session, self.plane.server) - self.requests
        cpu = {name: round(_cpu_seconds(p) - self.cpu[name], 1) for name, p in self.processes.items()}
        audited = self._audited_writes()
        by_request = {" ".join(filter(None, key)): count for key, count in requests.most_common()}
        return {
            "requests_per_statefulset": round(sum(requests.values()) / n, 2),
            "requests": by_request,
            "cpu_seconds": cpu,
            "peak_rss_mb": {name: peak_rss_mb(p.pid) for name, p in self.processes.items()},
            "audited_writes": audited,
            "events": self._events(),
        }

    def _events(self) -> dict[str, int]:
        url = f"{self.plane.server}/apis/events.k8s.io/v1/namespaces/{self.namespace}/events"
        events: Counter[str] = Counter()
        for event in self.session.get(url, timeout=60).json()["items"]:
            seen = (event.get("series") or {}).get("count") or event.get("deprecatedCount") or 1
            events[f"{event.get('reportingController') or '?'} {event['reason']}"] += int(seen)
        return dict(events.most_common())

    def _audited_writes(self) -> dict[str, int]:
        """Writes in the audit log since the first create, by user, verb, resource and response code.
        Read while the plane still writes: a last line not yet whole is left out."""
        writes: Counter[str] = Counter()
        log = self.plane.audit_log
        if log is None or not log.exists():
            return {}
        with log.open("rb") as f:
            f.seek(self.audit_offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                event = json.loads(raw)
                if event.get("stage") != "ResponseComplete" or event["verb"] in ("get", "list", "watch"):
                    continue
                ref = event.get("objectRef") or {}
                resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
                code = (event.get("responseStatus") or {}).get("code")
                writes[f"{event['user']['username']} {event['verb']} {resource} {code}"] += 1
        return dict(writes.most_common())


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def measure(
    n: int,
    extra_args: dict[str, dict[str, str | None]] | None,
    kwok: Path | None = None,
    observer: str = "watch",
    binding_mode: str | None = None,
    record: bool = True,
) -> dict[str, Any]:
    paths = {"kwok": kwok} if kwok else None
    plane = ControlPlane(
        "all", extra_args=extra_args, binary_paths=paths, record=record, progress=lambda _m: None
    )
    with plane:
        session = plane.admin_session()
        ns = "bench"
        session.post(f"{plane.server}/api/v1/namespaces", json={"metadata": {"name": ns}}, timeout=10)
        if binding_mode:
            set_binding_mode(session, plane.server, binding_mode)
        base = f"{plane.server}/apis/apps/v1/namespaces/{ns}/statefulsets"
        accounting = Accounting(plane, ns)
        began = time.monotonic()
        create_all(session, base, (statefulset(i) for i in range(n)))
        created = time.monotonic() - began

        if observer == "watch":
            ready, seconds = watch_ready(session, base, n, began)
        else:

            def done() -> int:
                items = session.get(base, timeout=60).json()["items"]
                return sum(1 for s in items if _one_ready(s))

            ready, seconds = wait_all(done, n, began, interval=0.5)
        return {
            "n": n,
            "observer": observer,
            "all_ready": ready == n,
            "ready": ready,
            "create_seconds": round(created, 2),
            "ready_seconds": round(seconds, 2),
            "statefulsets_per_second": round(ready / seconds, 2),
            "pods_per_second": round(ready / seconds, 2),  # one replica each
            **accounting.finish(n),
        }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,300,1000")
    parser.add_argument("--default-limits", action="store_true", help="also run with upstream client limits")
    parser.add_argument("--peer-kwok", type=Path, help="also run with this kwok binary")
    parser.add_argument(
        "--peer-volume-stages", action="store_true", help="also run with kwok's volume stages in full"
    )
    parser.add_argument(
        "--peer-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also run with these variables in the planes' environment (GOGC=100: Go's default)",
    )
    parser.add_argument(
        "--peer-binding-mode",
        choices=("WaitForFirstConsumer", "Immediate"),
        help="also run with the default StorageClass binding volumes in this mode",
    )
    parser.add_argument(
        "--peer-flag",
        action="append",
        default=[],
        metavar="COMPONENT:FLAG=VALUE",
        help="also run with these component flags (kube-controller-manager:concurrent-statefulset-syncs=20)",
    )
    parser.add_argument(
        "--peer-record-off",
        action="store_true",
        help="also run with the record off (no audit log: what the record costs the plane)",
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--observer",
        choices=("watch", "list"),
        default="watch",
        help="statefulsets: follow readiness with one watch, or list them every 0.5 s (before 2026-12-06)",
    )
    parser.add_argument(
        "--out", type=Path, help=f"default {RESULTS.name}, throughput_<workload>.json for the others"
    )
    parser.add_argument("--workload", choices=("statefulsets", "deployment", "pods"), default="statefulsets")
    args = parser.parse_args()
    # "harness" runs with the planes' defaults only if the shell sets none of what they default.
    result: dict[str, Any] = {**run_metadata(), "environment_gogc": os.environ.get("GOGC"), "runs": []}
    if args.out is None:
        args.out = (
            RESULTS
            if args.workload == "statefulsets"
            else RESULTS.with_name(f"throughput_{args.workload}.json")
        )
    if args.workload != "statefulsets":
        if (
            args.default_limits
            or args.peer_kwok
            or args.peer_volume_stages
            or args.peer_env
            or args.peer_binding_mode
            or args.peer_flag
            or args.peer_record_off
        ):
            parser.error(f"--workload {args.workload}: the peers are for statefulsets")
        for n in (int(x) for x in args.sizes.split(",")):
            for repeat in range(args.repeat):
                sample = {"repeat": repeat, **measure_workload(args.workload, n)}
                print(json.dumps(sample), file=sys.stderr, flush=True)
                result["runs"].append(sample)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        return 0 if all(r["all_ready"] for r in result["runs"]) else 1
    variants: list[tuple[str, Any, Path | None]] = [("harness", None, None)]
    if args.default_limits:
        variants.append(("upstream-limits", UPSTREAM_LIMITS, None))
    if args.peer_kwok:
        variants.append((f"kwok {args.peer_kwok}", None, args.peer_kwok))
    if args.peer_volume_stages:
        variants.append((PEER_VOLUME_STAGES, None, None))
    peer_env: dict[str, str] = {}
    for item in args.peer_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--peer-env: {item!r} is not KEY=VALUE")
        peer_env[key] = value
    env_name = "env " + " ".join(args.peer_env)
    if peer_env:
        variants.append((env_name, None, None))
    try:
        peer_flags = parse_flags(args.peer_flag)
    except ValueError as exc:
        parser.error(f"--peer-flag: {exc}")
    if peer_flags:
        variants.append(("flags " + " ".join(args.peer_flag), peer_flags, None))
    binding_name = f"binding {args.peer_binding_mode}"
    if args.peer_binding_mode:
        variants.append((binding_name, None, None))
    if args.peer_record_off:
        variants.append((RECORD_OFF, None, None))
    for n in (int(x) for x in args.sizes.split(",")):
        for repeat in range(args.repeat):
            for name, extra, kwok in variants if repeat % 2 == 0 else variants[::-1]:
                stages = kwok_binds_claims() if name == PEER_VOLUME_STAGES else nullcontext()
                # Planes started inside see these variables (a component's own defaults yield to them).
                with stages, mock.patch.dict(os.environ, peer_env if name == env_name else {}):
                    mode = args.peer_binding_mode if name == binding_name else None
                    run = measure(n, extra, kwok, args.observer, mode, record=name != RECORD_OFF)
                    sample = {"limits": name, "repeat": repeat, **run}
                print(json.dumps(sample), file=sys.stderr, flush=True)
                result["runs"].append(sample)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["runs"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
