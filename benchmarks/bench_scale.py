"""N one-replica MySQLClusters to Running on one local plane: the floor, the reference operator, and
its kopf and controller-runtime peers, in the same run.

    python benchmarks/bench_scale.py [--sizes 100,300,1000] [--peers kopf,go] [--repeat 1] [--workers 2]
    python benchmarks/bench_scale.py --sizes 300 --peers '' --against-src <another checkout> --out <file>

One plane with every component (kwok makes pods Ready). For each N and each repeat, in an order that
rotates with the repeat, each in a fresh namespace that is removed afterwards:

* floor: the children the operator would make for N clusters (credentials and TLS Secrets, headless and
  primary Services, StatefulSet - built by the reference's own builders, the pod template labelled
  primary as a converged cluster's pod is) created directly; seconds until every StatefulSet is Ready.
  It is the plane's own pace: no operator makes the plane do less (one sample can still lose to an
  operator's when the plane stalls, as the first floor of results/scale_300_peers_with_features.json).
* reference, kopf, go: the implementation started as its own process scoped to the namespace and
  ready, then N clusters created at once; seconds until every one is Running (timed with a watch),
  that time over the floor's, kube-apiserver's `apiserver_request_total` delta for the kinds the
  operator writes (counted as bench_requests.py counts: WATCH and events excluded, this script's own
  creates and lists subtracted) per cluster, the process's peak RSS (VmHWM) at the end, and the CPU
  seconds it used from the first create to the end of the quiet tail (the plane shares the machine's
  cores with it, so an implementation's CPU is taken from the plane's). For the reference (and
  base) and the Go peer, also what its own /metrics says at the end of the quiet tail: passes per
  cluster, the seconds its passes took together (`reconcile_seconds`: with W workers busy all the
  time, W x (the time to Running + the quiet tail)) and a cluster's mean wait in the work queue.
* every sample, the floor's too: the CPU seconds the plane's processes used (`plane_cpu_seconds`) and
  the share of the machine's cores that were busy (`machine_busy`, whatever used them), from the first
  create to the last one Ready or Running: whether the plane had cores to spare, and what an
  implementation's objects cost it beside the floor's. And every write request kube-apiserver counted,
  failed ones too, whoever made it (`plane_writes`, `plane_writes_per_cluster`; for an implementation,
  to the end of the quiet tail).

`--against-src DIR` adds "base": the reference operator from another checkout (DIR/operator first on
PYTHONPATH; the result records where it was imported from), in the same rotation, to measure a change
of the reference against the commit before it.

Before any scale number, each implementation passes benchmarks/peers/conformance.py in a namespace of
its own; a failing one is still measured (if it converges at all) but reported as not counted.
Writes benchmarks/results/scale.json: every raw sample, the checks, a summary, machine, date, commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psutil
import requests
from bench_requests import WRITES, ours
from benchmeta import ROOT, Key, apiserver_counts, run_metadata
from peers import conformance, launch

from envtest import ControlPlane, binaries
from mysql_operator.controller.children import resources
from mysql_operator.database.replication import PRIMARY, ROLE_LABEL

RESULTS = ROOT / "benchmarks" / "results" / "scale.json"
RSS_GOAL_MB = 100.0
"""The reference operator's peak RSS goal at 1000 clusters."""
CREATE_THREADS = 8
QUIET_TAIL = 3.0
"""Seconds counted after the last cluster is Running: writes its last status write triggers."""
CLUSTERS = "/apis/db.example.com/v1/namespaces/{ns}/mysqlclusters"
STATEFULSETS = "/apis/apps/v1/namespaces/{ns}/statefulsets"
CHILD_PATHS = {
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "Service": "/api/v1/namespaces/{ns}/services",
    "StatefulSet": STATEFULSETS,
}
Obj = dict[str, Any]
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")
"""psutil's system-wide CPU times spent working (guest time is already counted in user and nice; steal
is the host's, not this machine's work)."""


def cluster_body(i: int) -> Obj:
    spec = {"replicas": 1, "storage": {"size": "1Gi"}}
    return {
        "apiVersion": "db.example.com/v1",
        "kind": "MySQLCluster",
        "metadata": {"name": f"db{i:04d}"},
        "spec": spec,
    }


def floor_children(i: int, namespace: str) -> list[Obj]:
    """What the operator makes for cluster i, without the owner (there is none to collect them), as a
    converged cluster has it: its pod labelled primary (here by the StatefulSet's template, so no write
    labels it), so the primary Service selects it and kube-controller-manager gives that Service an
    endpoint, as it does for the reference's clusters."""
    cluster = {**cluster_body(i), "metadata": {"name": f"db{i:04d}", "namespace": namespace, "uid": "none"}}
    sts = resources.statefulset(cluster)
    sts["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] = PRIMARY
    children = [
        resources.credentials_secret(cluster),
        resources.tls_secret(cluster),
        resources.headless_service(cluster),
        resources.primary_service(cluster),
        sts,
    ]
    for child in children:
        child["metadata"].pop("ownerReferences", None)
    return children


def running(obj: Obj) -> bool:
    return (obj.get("status") or {}).get("phase") == "Running"


def sts_ready(obj: Obj) -> bool:
    return (obj.get("status") or {}).get("readyReplicas") == 1


def wait_all(
    session: requests.Session,
    url: str,
    done: Callable[[Obj], bool],
    n: int,
    timeout: float,
    alive: Callable[[], bool],
) -> Counter[str]:
    """Block until `n` objects at `url` are `done`, by a list then a watch (exact, and no polling load
    that grows with N); returns how many LISTs and WATCHes it made, to subtract from the apiserver's
    counts. Raises TimeoutError, or RuntimeError when `alive()` turns false."""
    deadline = time.monotonic() + timeout
    state: dict[str, bool] = {}
    rv, made = "", Counter[str]()
    while True:
        if not rv:
            listing = session.get(url, timeout=120).json()
            made["LIST"] += 1
            state = {o["metadata"]["name"]: done(o) for o in listing["items"]}
            rv = listing["metadata"]["resourceVersion"]
        count = sum(state.values())
        if count >= n:
            return made
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{count} of {n} done after {timeout:.0f}s")
        if not alive():
            raise RuntimeError(f"the implementation exited; {count} of {n} done")
        # Short watches, so a dead operator or the deadline is noticed within seconds.
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "10"}
        made["WATCH"] += 1
        with session.get(url, params=params, stream=True, timeout=(10, 60)) as response:
            for line in response.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":  # 410 Gone: relist
                    rv = ""
                    break
                rv = obj["metadata"]["resourceVersion"]
                if event["type"] == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                was = state.get(name, False)
                now = event["type"] != "DELETED" and done(obj)
                state[name] = now
                count += int(now) - int(was)
                if count >= n:
                    return made


def post_all(session: requests.Session, bodies: list[tuple[str, Obj]]) -> None:
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        codes = list(pool.map(lambda pb: session.post(pb[0], json=pb[1], timeout=60).status_code, bodies))
    bad = sorted({c for c in codes if c != 201})
    if bad:
        raise RuntimeError(f"{len([c for c in codes if c != 201])} creates failed: HTTP {bad}")


CpuReading = tuple[dict[int, float] | None, float]
"""What `Plane.cpu` reads: each plane process's CPU seconds by pid (None if one was gone), and the
machine's busy CPU seconds."""


class Plane:
    """The plane's admin session plus namespace set-up and clean-up."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane, self.session, self.server = plane, plane.admin_session(), plane.server

    def cpu(self) -> CpuReading:
        """(CPU seconds each of the plane's processes has used so far, by pid, the machine's busy CPU
        seconds so far): read at both ends of a window, they say how much of the machine the plane took,
        and whether the machine had any left. The plane's is None when one of its processes is gone."""
        machine = psutil.cpu_times()._asdict()
        busy = sum(machine.get(field, 0.0) for field in BUSY_FIELDS)
        used: dict[int, float] = {}
        for proc in self.plane.processes.values():
            pid = proc.pid
            try:
                times = psutil.Process(pid).cpu_times() if pid is not None else None
            except psutil.Error:
                times = None
            if pid is None or times is None:
                return None, busy
            used[pid] = times.user + times.system
        return used, busy

    def create_namespace(self, name: str) -> None:
        body = {"metadata": {"name": name}}
        self.session.post(f"{self.server}/api/v1/namespaces", json=body, timeout=30).raise_for_status()

    def remove_namespace(self, name: str, timeout: float) -> bool:
        """Strip finalizers no operator will remove (it is stopped by now), delete, wait until gone."""
        base = self.server + CLUSTERS.format(ns=name)
        items = self.session.get(base, timeout=120).json().get("items", [])
        patch = {"metadata": {"finalizers": None}}
        headers = {"Content-Type": "application/merge-patch+json"}
        stuck = [o["metadata"]["name"] for o in items if o["metadata"].get("finalizers")]
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(
                pool.map(
                    lambda n: self.session.patch(f"{base}/{n}", json=patch, headers=headers, timeout=60),
                    stuck,
                )
            )
        self.session.delete(f"{self.server}/api/v1/namespaces/{name}", timeout=60)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.session.get(f"{self.server}/api/v1/namespaces/{name}", timeout=30).status_code == 404:
                return True
            time.sleep(1.0)
        print(
            f"warning: namespace {name} still terminating after {timeout:.0f}s", file=sys.stderr, flush=True
        )
        return False


def cpu_fields(before: CpuReading, after: CpuReading, seconds: float) -> Obj:
    """`plane_cpu_seconds` and `machine_busy` (the share of all cores busy) over a window. The plane's
    is None unless the same processes ran at both ends (one gone or restarted took its CPU with it)."""
    was, now = before[0], after[0]
    plane = None
    if was is not None and now is not None and was.keys() == now.keys():
        plane = round(sum(now.values()) - sum(was.values()), 2)
    return {
        "plane_cpu_seconds": plane,
        "machine_busy": round((after[1] - before[1]) / ((psutil.cpu_count() or 1) * seconds), 3),
    }


def measure_floor(p: Plane, n: int, namespace: str) -> Obj:
    p.create_namespace(namespace)
    try:
        bodies = [
            (p.server + CHILD_PATHS[c["kind"]].format(ns=namespace), c)
            for i in range(n)
            for c in floor_children(i, namespace)
        ]
        before = apiserver_counts(p.session, p.server)
        cpu_before, began = p.cpu(), time.monotonic()
        post_all(p.session, bodies)
        url = p.server + STATEFULSETS.format(ns=namespace)
        wait_all(p.session, url, sts_ready, n, timeout=120 + n, alive=lambda: True)
        seconds = time.monotonic() - began
        window = cpu_fields(cpu_before, p.cpu(), seconds)
        after = apiserver_counts(p.session, p.server)
        return {"seconds": round(seconds, 2), **window, **plane_writes(before, after, n)}
    finally:
        p.remove_namespace(namespace, timeout=300 + n)


def measure_operator(p: Plane, n: int, namespace: str, start: Callable[[str], launch.Operator]) -> Obj:
    p.create_namespace(namespace)
    op = start(namespace)
    try:
        ready = op.wait_ready()
        cpu_before = op.cpu_seconds()
        before = apiserver_counts(p.session, p.server)
        url = p.server + CLUSTERS.format(ns=namespace)
        plane_before, began = p.cpu(), time.monotonic()
        post_all(p.session, [(url, cluster_body(i)) for i in range(n)])
        made = wait_all(p.session, url, running, n, timeout=120 + 2 * n, alive=op.alive)
        seconds = time.monotonic() - began
        plane_window = cpu_fields(plane_before, p.cpu(), seconds)
        time.sleep(QUIET_TAIL)
        after = apiserver_counts(p.session, p.server)
        rss = op.peak_rss_mb()
        cpu_after = op.cpu_seconds()
        queue = op.work_queue()
    finally:
        code = op.stop()
        p.remove_namespace(namespace, timeout=300 + n)
    own: Counter[Key] = Counter()
    own[("POST", "db.example.com", "mysqlclusters", "")] += n
    for verb, count in made.items():
        own[(verb, "db.example.com", "mysqlclusters", "")] += count
    delta = {k: after[k] - before.get(k, 0) - own.get(k, 0) for k in after if ours(k)}
    # Our last watch may be counted only after the snapshot: a WATCH count can come out one short.
    delta = {k: v for k, v in delta.items() if v > 0 or (v and k[0] != "WATCH")}
    total = sum(v for k, v in delta.items() if k[0] != "WATCH")
    writes = sum(v for k, v in delta.items() if k[0] in WRITES)
    return {
        "seconds": round(seconds, 2),
        **plane_window,
        "operator_ready_seconds": round(ready, 2),
        "requests_per_cluster": round(total / n, 2),
        "writes_per_cluster": round(writes / n, 2),
        "peak_rss_mb": rss,
        "cpu_seconds": None if cpu_before is None or cpu_after is None else round(cpu_after - cpu_before, 2),
        **passes(queue, n),
        "exit_code": code,
        "by_verb_and_resource": {
            " ".join(x for x in (k[0], k[2], k[3]) if x): v for k, v in sorted(delta.items())
        },
        **plane_writes(before, after, n),
    }


def written(key: Key) -> str:
    """The key `VERB resource[.group] [subresource]`: the group kept, since the plane writes Events of
    two groups (core and events.k8s.io), which would otherwise share a name."""
    verb, group, resource, subresource = key
    return " ".join(x for x in (verb, f"{resource}.{group}" if group else resource, subresource) if x)


def plane_writes(before: Counter[Key], after: Counter[Key], n: int) -> Obj:
    """Every write request kube-apiserver counted between two counts (failed ones too), whoever made it
    (this script, the implementation, the controllers, the scheduler, kwok): per cluster, and by verb
    and resource."""
    delta = {k: after[k] - before.get(k, 0) for k in after if k[0] in WRITES}
    delta = {k: v for k, v in delta.items() if v > 0}
    return {
        "plane_writes_per_cluster": round(sum(delta.values()) / n, 2),
        "plane_writes": {written(k): v for k, v in sorted(delta.items())},
    }


PASS_FIELDS = ("reconciles_per_cluster", "reconcile_seconds", "queue_wait_seconds_mean")


def passes(queue: dict[str, float] | None, n: int) -> Obj:
    """The sample's fields from the operator's own work-queue metrics (none for kopf, which has none):
    passes per cluster, the seconds all passes took together (its workers' busy time, from its start
    to the end of the quiet tail) and a cluster's mean wait in the queue (None when not exposed)."""
    if not queue or not queue.get("reconciles"):
        return {}
    waits, waited = queue.get("queued"), queue.get("queue_seconds")
    return {
        "reconciles_per_cluster": round(queue["reconciles"] / n, 2),
        "reconcile_seconds": round(queue.get("reconcile_seconds", 0.0), 2),
        "queue_wait_seconds_mean": round(waited / waits, 3) if waits and waited is not None else None,
    }


def check(p: Plane, impl: str, start: Callable[[str], launch.Operator]) -> Obj:
    namespace = f"check-{impl}"
    p.create_namespace(namespace)
    op = start(namespace)
    try:
        op.wait_ready()
        result = conformance.run(p.session, p.server, namespace)
    except Exception as exc:  # an implementation that cannot even start fails its checks
        result = {"passed": False, "checks": {"start": f"fail: {' '.join(str(exc).split())[:1500]}"}}
    finally:
        op.stop()
        p.remove_namespace(namespace, timeout=300)
    if not result["passed"]:
        print(f"{impl} failed its checks; log tail:\n{op.tail()}", file=sys.stderr, flush=True)
    return result


def summarize(samples: list[Obj], impls: list[str], counted: dict[str, bool]) -> list[Obj]:
    """Per N: medians over repeats, ratios against the floor and against the reference."""
    rows = []
    for n in sorted({s["n"] for s in samples}):
        of = {
            i: [s for s in samples if s["n"] == n and s["implementation"] == i and "error" not in s]
            for i in impls
        }
        med = {i: statistics.median(s["seconds"] for s in of[i]) if of[i] else None for i in impls}
        row: Obj = {"n": n, "floor_seconds": med.get("floor")}
        if "floor" in of:
            row["floor_plane"] = plane_medians(of["floor"])
        for impl in impls:
            if impl == "floor" or not of[impl]:
                continue
            entry: Obj = {"seconds": med[impl], "counted": counted.get(impl, False)}
            for key in ("requests_per_cluster", "writes_per_cluster"):
                entry[key] = statistics.median(s[key] for s in of[impl])
            rss = [s["peak_rss_mb"] for s in of[impl] if s["peak_rss_mb"] is not None]
            entry["peak_rss_mb"] = max(rss) if rss else None
            for key in ("cpu_seconds", *PASS_FIELDS):  # None for a peer that does not report it
                values = [s[key] for s in of[impl] if s.get(key) is not None]
                entry[key] = statistics.median(values) if values else None
            entry.update(plane_medians(of[impl]))
            entry["over_floor"] = ratio(med[impl], med.get("floor"))
            row[impl] = entry
        ref = row.get("reference")
        for impl in impls:
            if impl in ("floor", "reference") or impl not in row or not ref:
                continue
            row[impl]["vs_reference"] = {
                k: ratio(row[impl][k], ref[k])
                for k in ("seconds", "requests_per_cluster", "writes_per_cluster", "peak_rss_mb")
            }
        rows.append(row)
    return rows


PLANE_FIELDS = ("plane_cpu_seconds", "machine_busy", "plane_writes_per_cluster")


def plane_medians(samples: list[Obj]) -> Obj:
    """Medians of the plane's CPU, the machine's busy share and the plane's writes per cluster
    (None for what no sample recorded: samples from before they were)."""
    out: Obj = {}
    for key in PLANE_FIELDS:
        values = [s[key] for s in samples if s.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


COLUMNS = (  # heading, width, format, what
    ("seconds", 8, ".2f", lambda row, e: e["seconds"]),
    ("x floor", 8, ".2f", lambda row, e: e["over_floor"]),
    ("x ref", 6, ".2f", lambda row, e: (e.get("vs_reference") or {}).get("seconds", 1.0)),
    ("req/cl", 7, ".2f", lambda row, e: e["requests_per_cluster"]),
    ("wr/cl", 6, ".2f", lambda row, e: e["writes_per_cluster"]),
    ("peak MB", 8, ".1f", lambda row, e: e["peak_rss_mb"]),
    ("CPU s", 6, ".1f", lambda row, e: e.get("cpu_seconds")),
    ("passes/cl", 9, ".2f", lambda row, e: e.get("reconciles_per_cluster")),
    ("pass s", 7, ".1f", lambda row, e: e.get("reconcile_seconds")),
    ("plane CPU", 9, ".1f", lambda row, e: e.get("plane_cpu_seconds")),
    ("busy", 5, ".2f", lambda row, e: e.get("machine_busy")),
    ("plane wr/cl", 11, ".1f", lambda row, e: e.get("plane_writes_per_cluster")),
)
FLOOR_COLUMNS = ("seconds", "x floor", "plane CPU", "busy", "plane wr/cl")


def table(rows: list[Obj], impls: list[str]) -> str:
    """The summary as text: one line per N and implementation, the floor first."""
    head = f"{'N':>5}  {'':<10}" + "".join(f" {h:>{w}}" for h, w, _f, _g in COLUMNS) + "  counted"
    lines = [head, "-" * len(head)]
    for row in rows:
        floor = {
            "seconds": row["floor_seconds"],
            "over_floor": 1.0,
            "vs_reference": {"seconds": None},
            **(row.get("floor_plane") or {}),
        }
        for impl in impls:
            e = floor if impl == "floor" else row.get(impl)
            if e is None:
                continue
            cells = []
            for _h, width, spec, get in COLUMNS:
                value = get(row, e) if impl != "floor" or _h in FLOOR_COLUMNS else None
                cells.append(f" {'-' if value is None else format(value, spec):>{width}}")
            counted = "" if impl == "floor" else "  yes" if e["counted"] else "  NO (failed its checks)"
            lines.append(f"{row['n']:>5}  {impl:<10}" + "".join(cells) + counted)
    return "\n".join(lines)


def go_module_version(module: str) -> str | None:
    """The version gomysql's go.mod requires (`require` blocks and one-line requires alike)."""
    for line in (launch.PEERS / "gomysql" / "go.mod").read_text().splitlines():
        parts = line.split()
        if module in parts:
            return parts[parts.index(module) + 1]
    return None


def write(
    result: Obj, impls: list[str], counted: dict[str, bool], *, complete: bool, out: Path = RESULTS
) -> list[Obj]:
    """Summary and goal from the samples so far, written to `out`; the summary rows."""
    rows = summarize(result["samples"], ["floor", *impls], counted)
    result["summary"] = rows
    at_1000 = next((r.get("reference") for r in rows if r["n"] == 1000), None)
    result["goal"] = {
        "reference_peak_rss_mb_at_1000": {
            "goal": RSS_GOAL_MB,
            "measured": (at_1000 or {}).get("peak_rss_mb"),
            "met": None
            if not at_1000 or at_1000["peak_rss_mb"] is None
            else at_1000["peak_rss_mb"] <= RSS_GOAL_MB,
        },
    }
    result["complete"] = complete
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,300,1000", help="comma-separated cluster counts")
    parser.add_argument("--peers", default="kopf,go", help="subset of kopf,go; '' for the reference alone")
    parser.add_argument("--repeat", type=int, default=1, help="runs per N and implementation")
    parser.add_argument("--workers", type=int, default=2, help="concurrent reconciles, every implementation")
    parser.add_argument("--out", type=Path, default=RESULTS, help="result file (default: results/scale.json)")
    parser.add_argument(
        "--against-src", type=Path, metavar="DIR", help="also run the reference from DIR (as 'base')"
    )
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    peers = [x.strip() for x in args.peers.split(",") if x.strip()]
    unknown = set(peers) - {"kopf", "go"}
    if unknown or not sizes or args.repeat < 1:
        parser.error(
            f"--peers: unknown {sorted(unknown)} (valid: kopf, go)"
            if unknown
            else "--sizes/--repeat must be positive"
        )
    impls = ["reference", *(["base"] if args.against_src else []), *peers]
    operator_src = (args.against_src / "operator").resolve() if args.against_src else None
    if operator_src is not None and not (operator_src / "mysql_operator").is_dir():
        parser.error(f"--against-src: {operator_src} holds no mysql_operator package")
    origin = launch.operator_origin(operator_src) if operator_src is not None else None
    if operator_src is not None and not str(origin).startswith(str(operator_src)):
        parser.error(f"--against-src: mysql_operator is not imported from {operator_src} (cd elsewhere)")
    go_binary = launch.build_go("gomysql") if "go" in peers else None
    result: Obj = {
        **run_metadata(),
        "kubernetes": binaries.k8s_version(),
        "settings": {
            "sizes": sizes,
            "repeat": args.repeat,
            "workers": args.workers,
            "create_threads": CREATE_THREADS,
        },
        "implementations": implementations(impls, operator_src, origin),
        "samples": [],
    }
    log_dir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    print(f"operator logs: {log_dir}", file=sys.stderr, flush=True)
    with ControlPlane(crds=[ROOT / "api" / "crd"], progress=lambda _m: None) as cp:
        p = Plane(cp)

        def starter(impl: str) -> Callable[[str], launch.Operator]:
            return lambda ns: launch.start(
                impl,
                kubeconfig=cp.kubeconfig,
                namespace=ns,
                workers=args.workers,
                log_dir=log_dir,
                go_binary=go_binary,
                operator_src=operator_src,
            )

        for impl in impls:
            outcome = check(p, impl, starter(impl))
            result["implementations"][impl]["checks"] = outcome
            print(f"checks {impl}: {json.dumps(outcome['checks'])}", file=sys.stderr, flush=True)
        counted = {i: result["implementations"][i]["checks"]["passed"] for i in impls}
        measurable = ["floor"] + [
            i for i in impls if result["implementations"][i]["checks"]["checks"].get("converges") == "pass"
        ]
        for n in sizes:
            for r in range(args.repeat):
                # The order rotates with the repeat, so no implementation always runs first.
                for impl in measurable[r % len(measurable) :] + measurable[: r % len(measurable)]:
                    sample = measure(p, impl, n, r, starter(impl))
                    if impl != "floor":
                        sample["counted"] = counted[impl]
                    print(json.dumps(sample), file=sys.stderr, flush=True)
                    result["samples"].append(sample)
            # After each size: a long run stopped later keeps what it measured.
            write(result, impls, counted, complete=False, out=args.out)
    rows = write(result, impls, counted, complete=True, out=args.out)
    print(table(rows, ["floor", *impls]))
    measured = result["goal"]["reference_peak_rss_mb_at_1000"]["measured"]
    print(
        f"reference peak RSS at 1000 clusters: {measured} MB (goal <= {RSS_GOAL_MB:.0f} MB)"
        if measured is not None
        else "reference peak RSS at 1000 clusters: not measured in this run (add 1000 to --sizes)"
    )
    return 0


def measure(p: Plane, impl: str, n: int, repeat: int, start: Callable[[str], launch.Operator]) -> Obj:
    """One sample; a run that times out or whose operator dies is recorded with its error."""
    namespace = f"scale-{impl}-{n}-{repeat}"
    sample: Obj = {"implementation": impl, "n": n, "repeat": repeat}
    try:
        if impl == "floor":
            sample.update(measure_floor(p, n, namespace))
        else:
            sample.update(measure_operator(p, n, namespace, start))
    except (TimeoutError, RuntimeError, requests.RequestException) as exc:
        sample["error"] = " ".join(str(exc).split())[:1000]
    return sample


def implementations(impls: list[str], operator_src: Path | None = None, origin: str | None = None) -> Obj:
    described = {
        "reference": lambda: {"runs": "python -m mysql_operator run", "framework": "pykube-ng"},
        "base": lambda: {
            "runs": f"python -m mysql_operator run, PYTHONPATH={operator_src}",
            "imported_from": origin,
            "commit": _commit_of(operator_src) if operator_src else None,
            "framework": "pykube-ng",
        },
        "kopf": lambda: {
            "runs": "python -m kopf run -m kopfmysql.handlers",
            "framework": f"kopf {version('kopf')}",
        },
        "go": lambda: {
            "runs": "benchmarks/peers/gomysql (go build)",
            "framework": f"controller-runtime {go_module_version('sigs.k8s.io/controller-runtime')}",
        },
    }
    return {i: described[i]() for i in impls}


def _commit_of(operator_src: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(operator_src), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:  # no git
        return None
    return done.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main())
