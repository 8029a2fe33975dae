"""MySQLCluster E2E helpers: the custom resource, its children and the operator's counters.

Names of children are written out here rather than imported from the operator: they are the
operator's public contract (users find their Secret by it), so a rename must break these tests.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from envtest import assert_matches, eventually
from envtest.timeouts import Timeouts, scaled  # noqa: F401 - the harness's scaling, re-exported for the suite
from mysql_operator.runtime.manager import WRITE_VERBS

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "api" / "samples"
API = "apis/db.example.com/v1"
"""The storage version: the shared plane has no conversion webhook, so tests there use only it."""
FINALIZER = "db.example.com/final-backup"
SKIP_FINAL_BACKUP = "db.example.com/skip-final-backup"
CONTROLLER = "mysqlcluster"

# kind → (API path prefix, plural, child name from the cluster name)
CHILDREN: dict[str, tuple[str, str, str]] = {
    "secret": ("api/v1", "secrets", "{}-credentials"),
    "service": ("api/v1", "services", "{}-headless"),
    "primary-service": ("api/v1", "services", "{}-primary"),
    "statefulset": ("apis/apps/v1", "statefulsets", "{}-mysql"),
    "cronjob": ("apis/batch/v1", "cronjobs", "{}-backup"),
    "backup-pvc": ("api/v1", "persistentvolumeclaims", "{}-backup"),
    "job": ("apis/batch/v1", "jobs", "{}-final-backup"),
}
OWNED = ("service", "primary-service", "statefulset", "cronjob")
"""Children with a controller ownerReference to the cluster (the garbage collector's to delete)."""
RETAINED = "db.example.com/retained"
"""On the credentials Secret, which has no ownerReference: it outlives the cluster like the data."""

Obj = dict[str, Any]

"""How much longer than on the local plane things take per backend: kwok makes a pod Ready at once,
a kubelet pulls mysql and waits for it to start (tens of seconds on a 2-CPU runner)."""


def kind_profile(manifest: Obj) -> Obj:
    """`manifest` as it runs on a small kind node: no CPU request (5 x 500m never schedules on 2
    CPUs); memory and everything else as shipped."""
    body = copy.deepcopy(manifest)
    resources = body.get("spec", {}).get("resources")
    if resources:
        resources.pop("cpu", None)
    return body


def sample(file: str) -> Obj:
    """A manifest from api/samples, as shipped."""
    doc: Obj = yaml.safe_load((SAMPLES / file).read_text())
    return doc


def writes(manager: Any) -> float:
    """Every write the operator has sent to the apiserver (children, status, finalizers, events)."""
    return float(manager.api_requests(verb=WRITE_VERBS))


def settled_writes(manager: Any, timeout: float) -> float:
    """The operator's write count once it held over a whole 1 s poll. The pass that wrote a state a test
    waited for may still have writes on their way (Events leave on the recorder's own thread): a hold that
    starts from this count sees only writes made after it. A write loop never lets the count hold."""
    seen: list[float | None] = [None]  # the first look only counts: a hold needs two, a poll apart

    def held() -> None:
        now = writes(manager)
        previous, seen[0] = seen[0], now
        assert now == previous, "the last pass's writes are still landing"

    eventually(held, timeout=timeout, interval=1.0, description="the operator's writes settled")
    assert seen[0] is not None
    return seen[0]


def reconciles(manager: Any) -> float:
    """Reconciles the operator has finished, whatever their outcome."""
    total = 0.0
    for family in manager.metrics.reconcile_total.collect():
        for s in family.samples:
            if s.name.endswith("_total") and s.labels.get("controller") == CONTROLLER:
                total += s.value
    return total


class MySQLClusters:
    """The MySQLClusters of one namespace and their children, as plain dicts over the admin client."""

    def __init__(self, api: Any, namespace: str, timeouts: Timeouts | None = None) -> None:
        self.api, self.namespace = api, namespace
        self.timeouts = timeouts or Timeouts("local")

    # -- the custom resource --------------------------------------------------------------------

    def path(self, name: str = "") -> str:
        base = f"{API}/namespaces/{self.namespace}/mysqlclusters"
        return f"{base}/{name}" if name else base

    def create(self, manifest: Obj, *, name: str | None = None, skip_final_backup: bool = False) -> Obj:
        """Create `manifest` here (optionally renamed). `skip_final_backup` keeps a backup-enabled
        cluster from holding its deletion for a Job that nobody completes (kwok runs no container)."""
        body = kind_profile(manifest) if self.timeouts.backend == "kind" else copy.deepcopy(manifest)
        meta = body.setdefault("metadata", {})
        meta.pop("namespace", None)
        if name:
            meta["name"] = name
        if skip_final_backup:
            meta.setdefault("annotations", {})[SKIP_FINAL_BACKUP] = "true"
        return self.api.create(self.path(), body)

    def get(self, name: str) -> Obj | None:
        return self.api.get(self.path(name))  # type: ignore[no-any-return]

    def must_get(self, name: str) -> Obj:
        cr = self.get(name)
        assert cr is not None, f"MySQLCluster {self.namespace}/{name} does not exist"
        return cr

    def patch(self, name: str, body: Obj) -> Obj:
        return self.api.patch(self.path(name), body)  # type: ignore[no-any-return]

    def delete(self, name: str, **options: Any) -> int:
        return self.api.delete(self.path(name), **options)  # type: ignore[no-any-return]

    def wait_running(self, name: str, *, timeout: float | None = None) -> Obj:
        """Until status says Running for the current generation; returns the cluster then.
        `timeout`: seconds, already scaled (default: 90 on the local plane, scaled)."""

        def running() -> Obj:
            cr = self.must_get(name)
            generation = cr["metadata"]["generation"]
            assert_matches(cr, {"status": {"phase": "Running", "observedGeneration": generation}})
            return cr

        wait = self.timeouts(90.0) if timeout is None else timeout
        return eventually(running, timeout=wait, description=f"{name} Running")

    def wait_gone(self, name: str, *, timeout: float | None = None) -> None:
        """Until the cluster is gone; `timeout` as for wait_running (default: 60 on the local plane)."""

        def gone() -> None:
            cr = self.get(name)
            assert cr is None, f"{name} still there: {_deletion_state(cr)}"

        wait = self.timeouts(60.0) if timeout is None else timeout
        eventually(gone, timeout=wait, description=f"{name} gone")

    # -- children -------------------------------------------------------------------------------

    def child_path(self, kind: str, cluster: str) -> str:
        prefix, plural, pattern = CHILDREN[kind]
        return f"{prefix}/namespaces/{self.namespace}/{plural}/{pattern.format(cluster)}"

    def child(self, kind: str, cluster: str) -> Obj | None:
        return self.api.get(self.child_path(kind, cluster))  # type: ignore[no-any-return]

    def data_pvcs(self, cluster: str) -> list[str]:
        claims = self.api.items(f"api/v1/namespaces/{self.namespace}/persistentvolumeclaims")
        return sorted(
            c["metadata"]["name"]
            for c in claims
            if c["metadata"]["name"].startswith(f"data-{cluster}-mysql-")
        )

    def database_pods(self, cluster: str) -> list[Obj]:
        selector = f"app.kubernetes.io/instance={cluster},app.kubernetes.io/component=database"
        return self.api.items(f"api/v1/namespaces/{self.namespace}/pods", selector)  # type: ignore[no-any-return]

    def events(self, cluster: str) -> list[Obj]:
        return [
            e
            for e in self.api.items(f"api/v1/namespaces/{self.namespace}/events")
            if e["involvedObject"].get("kind") == "MySQLCluster" and e["involvedObject"]["name"] == cluster
        ]

    # -- the final-backup Job's pod (kwok holds Job pods Running; the test decides how they end) ----

    def final_backup_pod(self, cluster: str, *, timeout: float | None = None) -> Obj:
        """The Running pod of the current final-backup Job (not one of an earlier, failed Job);
        `timeout` as for wait_running (default: 60 on the local plane)."""

        def running_pod() -> Obj:
            job = self.child("job", cluster)
            assert job is not None, f"no Job {cluster}-final-backup"
            assert not job["metadata"].get("deletionTimestamp"), "the Job is being deleted"
            selector = f"batch.kubernetes.io/controller-uid={job['metadata']['uid']}"
            pods = self.api.items(f"api/v1/namespaces/{self.namespace}/pods", selector)
            live = [
                p
                for p in pods
                if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
            ]
            assert len(live) == 1, f"Running pods of the Job: {[p['metadata']['name'] for p in live]}"
            return live[0]

        wait = self.timeouts(60.0) if timeout is None else timeout
        return eventually(running_pod, timeout=wait, description=f"{cluster} final backup pod Running")

    def finish_pod(self, pod: Obj, *, succeeded: bool, said: str = "") -> None:
        """What a kubelet would report when the pod's only container exits 0 (or 1); `said`: the
        termination message (with FallbackToLogsOnError, the tail of the failed container's log)."""
        container = pod["spec"]["containers"][0]
        if succeeded:
            phase, terminated = "Succeeded", {"exitCode": 0, "reason": "Completed"}
        else:
            phase, terminated = "Failed", {"exitCode": 1, "reason": "Error"}
        if said:
            terminated["message"] = said
        status = {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
        self.api.patch(
            f"api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status", {"status": status}
        )


def controller_ref(obj: Obj) -> Obj | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def _deletion_state(cr: Obj | None) -> str:
    if cr is None:
        return "gone"
    meta = cr["metadata"]
    return (
        f"deletionTimestamp={meta.get('deletionTimestamp')} finalizers={meta.get('finalizers')} "
        f"phase={(cr.get('status') or {}).get('phase')}"
    )
