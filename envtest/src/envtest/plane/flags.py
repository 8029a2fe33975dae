"""Default command-line flags of each control-plane component, each with its reason.

Paths and ports are filled in by ControlPlane; users override or add flags with
`ControlPlane(extra_args={"kube-apiserver": {"v": "4"}})` (a value of None removes a flag).
"""

from __future__ import annotations

from collections.abc import Mapping

Flags = dict[str, str | None]

ENVIRONMENT: Mapping[str, Mapping[str, str]] = {
    # kube-apiserver's start is CPU-bound on a small machine, and about a quarter of its CPU there is
    # the garbage collector (benchmarks/results/profile_apiserver_start.txt). At GOGC=400 it starts
    # faster, and serves a heavy load faster too, for more memory (some 100 MB idle, twice the peak
    # under 1,000 StatefulSets): benchmarks/results/start_gogc.json and throughput_gogc.json
    # (docs/measurements.md).
    "kube-apiserver": {"GOGC": "400"},
}
"""Environment variables a component starts with unless the environment sets them already (then
that value wins, as the Go runtime reads it): `GOGC=100` restores Go's default."""

ETCD_FLAGS: Flags = {
    "name": "envtest",
    # Throwaway data: durability buys nothing and fsync dominates start-up and write latency.
    "unsafe-no-fsync": "true",
    # One member: nobody to lose heartbeats to, so the election timer only delays the first
    # election, and with it kube-apiserver's storage (defaults 100/1000 ms: up to 1 s of start).
    "heartbeat-interval": "10",
    "election-timeout": "50",
    # A snapshot on disk every 100 entries (default 10,000). etcd restarts (a plane's copy of its
    # template, `restart("etcd")`, a kept plane) from its newest snapshot, and raft counts that much as
    # applied. With none, raft starts from 0, and the compaction etcd runs on its in-memory log (every
    # 100 applied entries, a fixed step; down to index 1, or to 5,000 below the applied one) can come
    # before raft counts the replay as applied: an election tick then panics ("requested index is
    # unavailable due to compaction"). With a snapshot fewer than 5,000 entries back, which this count
    # keeps, that compaction never reaches past it.
    "snapshot-count": "100",
    "log-level": "warn",
    "quota-backend-bytes": str(2 * 1024**3),
}

APISERVER_FLAGS: Flags = {
    "advertise-address": "127.0.0.1",  # no default route in containers and offline CI
    "bind-address": "127.0.0.1",  # never listen beyond this machine
    # The endpoint reconciler refuses loopback addresses; nothing in a test plane dials the
    # `kubernetes` Service (kwok runs no containers), so no reconciler is needed.
    "endpoint-reconciler-type": "none",
    "authorization-mode": "RBAC",  # so the operator's ClusterRole is really exercised
    "allow-privileged": "true",
    "service-cluster-ip-range": "10.96.0.0/16",
    "profiling": "false",
    "enable-priority-and-fairness": "false",  # one tenant; APF only adds queueing to tests
    # Every namespaced request of the tests is small; the default 60 s hides hangs.
    "request-timeout": "30s",
    "v": "1",
}

CONTROLLER_MANAGER_FLAGS: Flags = {
    "bind-address": "127.0.0.1",
    "leader-elect": "false",  # one instance; election only delays start-up by a lease period
    "controllers": "*",  # GC, namespace, serviceaccount, statefulset, job, PV binder and protection, ...
    "use-service-account-credentials": "false",
    "allocate-node-cidrs": "false",
    # Default 5 m: a deleted test namespace would keep its finished pods around for a whole suite.
    "terminated-pod-gc-threshold": "100",
    "concurrent-gc-syncs": "10",
    # kwok renews the Node's Lease; a renewal delayed on a loaded 2-core machine must not mark the
    # node NotReady, because kwok never makes Running pods Ready again afterwards.
    "node-monitor-grace-period": "5m",
    # Client-side rate limits default to 20 qps / 30 burst: made for sharing a production apiserver,
    # they throttle a test plane for nothing (100 StatefulSets: 28.8 s to Ready, 7.4 s without them).
    "kube-api-qps": "1000",
    "kube-api-burst": "2000",
    "v": "1",
}

SCHEDULER_FLAGS: Flags = {
    "bind-address": "127.0.0.1",
    "leader-elect": "false",
    # Default 50 qps / 100 burst: binding pods is the scheduler's whole job, don't meter it.
    "kube-api-qps": "1000",
    "kube-api-burst": "2000",
    "v": "1",
}

DEFAULT_FLAGS: Mapping[str, Flags] = {
    "etcd": ETCD_FLAGS,
    "kube-apiserver": APISERVER_FLAGS,
    "kube-controller-manager": CONTROLLER_MANAGER_FLAGS,
    "kube-scheduler": SCHEDULER_FLAGS,
    "kwok": {},
}


PV_BINDER_NAMES = ("persistentvolume-binder-controller", "persistentvolume-binder")
"""kube-controller-manager's PV binder, by its name and its alias in `--controllers`."""


def runs_pv_binder(*layers: Mapping[str, str | None]) -> bool:
    """Whether kube-controller-manager started with these flag layers hands claims to provisioners:
    its PV binder runs (`--controllers` read as kube-controller-manager reads it: the first entry naming
    the binder, `name` or `-name`, decides; else `*` turns it on, as it is on by default; an empty value
    runs no controller) and dynamic provisioning is not turned off."""
    merged = _merge(layers)
    if merged.get("enable-dynamic-provisioning") == "false":
        return False
    value = merged.get("controllers")
    entries = ["*"] if value is None else [e for e in value.split(",") if e]
    for entry in entries:
        if entry in PV_BINDER_NAMES:
            return True
        if entry.startswith("-") and entry[1:] in PV_BINDER_NAMES:
            return False
    return "*" in entries


def environment(component: str, inherited: Mapping[str, str]) -> dict[str, str] | None:
    """The complete environment `component` starts with: `inherited` plus the ENVIRONMENT defaults it
    does not set itself; None when it sets them all (the child inherits as it is)."""
    missing = {k: v for k, v in ENVIRONMENT.get(component, {}).items() if k not in inherited}
    return {**inherited, **missing} if missing else None


def render(*layers: Mapping[str, str | None]) -> list[str]:
    """`--name=value` arguments; later layers win and a None value removes the flag."""
    merged = _merge(layers)
    return [f"--{name}={value}" for name, value in merged.items() if value is not None]


def _merge(layers: tuple[Mapping[str, str | None], ...]) -> Flags:
    """One mapping of the layers' flags; later layers win."""
    merged: Flags = {}
    for layer in layers:
        merged.update(layer)
    return merged
