"""Shared shape of the reliability scenarios: MySQLClusters in the test's namespace, the checks every
scenario ends with, and the measurements `benchmarks/bench_reliability.py` collects.

Every scenario ends the same way (`Scenario.finish`): each cluster Running at its latest generation,
exactly one StatefulSet, Service and Secret per cluster, all controlled by it and nothing else in the
namespace, then every cluster deleted and gone (its finalizer removed by the operator).

With $RELIABILITY_RESULTS set, `Scenario.record` appends one JSON line per fault: seconds
from the fault to convergence, the API requests the operator sent meanwhile, and which fault-free
run of `test_baseline_converges_without_faults` it compares with.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any, Protocol

from envtest import eventually
from envtest.faults import WRITE_VERBS

GROUP_VERSION = "db.example.com/v1"
CHILDREN = {
    "statefulsets": ("apis/apps/v1", ("{}-mysql",)),
    "services": ("api/v1", ("{}-headless", "{}-primary")),
}
"""Children each cluster controls: exactly these, each with the cluster as its one controller."""
RETAINED_SECRET = "{}-credentials"
"""The credentials Secret outlives its cluster like the data does: our labels and the retained
annotation instead of an ownerReference."""
CONVERGE_TIMEOUT = 90.0
"""Seconds a cluster may take to be Running again after a fault (a clean one takes a few), on the
local plane; stretched for the backend (Scenario.timeouts)."""


class RequestCounter(Protocol):
    """Where a scenario counts API requests: the fault proxy, or an operator's own metrics."""

    def requests(self) -> float: ...

    def writes(self) -> float: ...


class ManagerCounter:
    """The operator's api_requests_total, for scenarios without the proxy (apiserver restart)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    def requests(self) -> float:
        return float(self.manager.api_requests())

    def writes(self) -> float:
        return float(self.manager.api_requests(verb=WRITE_VERBS))


class Scenario:
    """MySQLClusters in one namespace, as one reliability scenario sees them (admin access)."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        counter: RequestCounter | None,
        nodeid: str,
        *,
        scale: float | None = None,
    ) -> None:
        self.api, self.namespace, self.counter, self.nodeid = api, namespace, counter, nodeid
        self.timeout_scale = api.timeouts.scale if scale is None else scale
        """Timeouts are written for the local plane (kwok: pods Ready at once); on kind a kubelet starts
        real containers, so every wait is stretched by the backend's factor (mysqlkit.Timeouts), by
        default the one of the cluster `api` talks to."""
        self.names: list[str] = []
        self.mark()

    def timeouts(self, seconds: float) -> float:
        """`seconds` written for the local plane, stretched for the backend. The `timeout` every
        method here takes is stretched already: pass `scenario.timeouts(30)`, not 30."""
        return seconds * self.timeout_scale

    def path(self, name: str | None = None, sub: str | None = None) -> str:
        base = f"apis/{GROUP_VERSION}/namespaces/{self.namespace}/mysqlclusters"
        return "/".join(p for p in (base, name, sub) if p)

    # -- writes -----------------------------------------------------------------------------------

    def create(self, name: str, replicas: int = 1) -> dict[str, Any]:
        body = {
            "apiVersion": GROUP_VERSION,
            "kind": "MySQLCluster",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "storage": {"size": "1Gi"}},
        }
        self.names.append(name)
        return self.api.create(self.path(), body)

    def scale(self, name: str, replicas: int) -> dict[str, Any]:
        return self.api.patch(self.path(name), {"spec": {"replicas": replicas}})

    def get(self, name: str) -> dict[str, Any] | None:
        return self.api.get(self.path(name))

    # -- checks -----------------------------------------------------------------------------------

    def running(self, name: str) -> dict[str, Any]:
        """The cluster, asserted Running at its latest generation with its StatefulSet in step."""
        obj = self.get(name)
        assert obj is not None, f"{name} is gone"
        status, meta = obj.get("status") or {}, obj["metadata"]
        assert status.get("phase") == "Running", f"{name}: {status}"
        assert status.get("observedGeneration") == meta["generation"], f"{name}: stale status {status}"
        replicas = obj["spec"]["replicas"]
        assert status.get("readyReplicas") == replicas, f"{name}: {status}"
        sts = self.api.get(f"apis/apps/v1/namespaces/{self.namespace}/statefulsets/{name}-mysql")
        assert sts is not None and sts["spec"]["replicas"] == replicas, f"{name}: StatefulSet {sts}"
        return obj

    def wait_running(self, names: Iterable[str] | None = None, timeout: float | None = None) -> float:
        """Wait until every cluster is Running; the seconds since the scenario (or `mark()`) began."""
        wanted = list(names or self.names)
        eventually(
            lambda: [self.running(n) for n in wanted],
            timeout=self.timeouts(CONVERGE_TIMEOUT) if timeout is None else timeout,
            interval=0.1,
            description=f"{', '.join(wanted)} Running",
        )
        return self.began_ago()

    def assert_children(self) -> None:
        """Exactly one StatefulSet and its two Services per cluster, each controlled by it, no others;
        and one retained credentials Secret per cluster, labelled as ours and owned by nobody."""
        uids = {n: self.get(n)["metadata"]["uid"] for n in self.names}  # type: ignore[index]
        for resource, (prefix, patterns) in CHILDREN.items():
            items = self.api.items(f"{prefix}/namespaces/{self.namespace}/{resource}")
            expected = {p.format(n): uid for n, uid in uids.items() for p in patterns}
            found = sorted(i["metadata"]["name"] for i in items)
            assert found == sorted(expected), f"{resource}: want {sorted(expected)}, found {found}"
            for item in items:
                refs = [r for r in item["metadata"].get("ownerReferences") or [] if r.get("controller")]
                want = expected[item["metadata"]["name"]]
                assert [r["uid"] for r in refs] == [want], f"{resource}/{item['metadata']['name']}: {refs}"
        secrets = self.api.items(f"api/v1/namespaces/{self.namespace}/secrets")
        by_name = {s["metadata"]["name"]: s for s in secrets}
        for name in self.names:
            secret = by_name.get(RETAINED_SECRET.format(name))
            assert secret is not None, f"no credentials Secret for {name}"
            meta = secret["metadata"]
            assert not meta.get("ownerReferences"), f"{meta['name']}: {meta.get('ownerReferences')}"
            assert meta.get("labels", {}).get("app.kubernetes.io/instance") == name, meta.get("labels")
            assert meta.get("labels", {}).get("app.kubernetes.io/managed-by") == "mysql-operator"
            assert meta.get("annotations", {}).get("db.example.com/retained") == "true"

    def delete_all(
        self, names: Iterable[str] | None = None, *, wait: bool = True, timeout: float | None = None
    ) -> None:
        """Delete the clusters (default: all); with `wait`, until each is gone (finalizer removed)."""
        doomed = list(self.names if names is None else names)
        for name in doomed:
            self.api.delete(self.path(name))
        if wait:
            self.wait_gone(doomed, timeout=timeout)

    def wait_gone(self, names: Iterable[str] | None = None, timeout: float | None = None) -> None:
        doomed = list(self.names if names is None else names)

        def gone() -> None:
            left = [n for n in doomed if self.get(n) is not None]
            assert not left, f"still present (finalizer not removed?): {left}"

        wait = self.timeouts(60.0) if timeout is None else timeout
        eventually(gone, timeout=wait, interval=0.1, description="clusters deleted")
        self.names = [n for n in self.names if n not in doomed]

    def settle(self, quiet: float = 0.5, timeout: float | None = None) -> None:
        """Wait until the operator has sent no request for `quiet` seconds (before a measurement)."""
        assert self.counter is not None, "settle() needs a request counter"
        deadline = time.monotonic() + (self.timeouts(15.0) if timeout is None else timeout)
        last, since = self.counter.requests(), time.monotonic()
        while time.monotonic() - since < quiet:
            assert time.monotonic() < deadline, f"the operator never went quiet for {quiet}s"
            time.sleep(0.05)
            now = self.counter.requests()
            if now != last:
                last, since = now, time.monotonic()

    def finish(self) -> None:
        """The common ending: converged, children exact, then deleted with finalizers processed."""
        self.wait_running()
        self.assert_children()
        self.delete_all()

    # -- measurements -----------------------------------------------------------------------------

    def mark(self) -> None:
        """Start the measured window here (the moment the fault begins)."""
        self.began = time.monotonic()
        self._before = (self.counter.requests(), self.counter.writes()) if self.counter else (0.0, 0.0)

    def began_ago(self) -> float:
        return time.monotonic() - self.began

    def record(self, fault: str, seconds: float, compare: str, **extra: Any) -> None:
        """One JSON line: `fault`, seconds to converge, requests and writes since `mark()`.
        `compare` names the fault-free run it is set against: "create" (a new cluster → Running),
        "change" (a spec change → Running) or "delete" (delete → gone)."""
        target = os.environ.get("RELIABILITY_RESULTS")
        if not target:
            return
        counter = self.counter
        line = {
            "fault": fault,
            "compare": compare,
            "test": self.nodeid.rsplit("::", 1)[-1],
            "seconds": round(seconds, 3),
            "requests": int(counter.requests() - self._before[0]) if counter else None,
            "writes": int(counter.writes() - self._before[1]) if counter else None,
            **extra,
        }
        with open(target, "a") as fh:
            fh.write(json.dumps(line) + "\n")
