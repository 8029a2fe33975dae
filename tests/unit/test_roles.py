"""Who is primary, and how it moves: the role pass of the reconciler (controller/roles.py, failover.py)
on the in-memory apiserver, with the database servers as a fake executor and the clock stepped by hand.

The servers answer the operator's exec scripts (database/actions.py) from a small model: each knows
whether it is read-only, what GTIDs it applied and received, and whether it replicates. A server listed
in `unreachable` cannot be exec'd into.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from operator_fakes import Clock, FakeKube, RecordingEvents, cluster, database_pod, rollout_completed

from mysql_operator.api.v1 import SWITCHOVER_ANNOTATION
from mysql_operator.controller.kinds import MySQLCluster, PersistentVolumeClaim, Pod, Secret
from mysql_operator.controller.reconciler import MySQLClusterReconciler
from mysql_operator.controller.status import DEGRADED, condition
from mysql_operator.runtime.podexec import ExecError, ExecResult
from mysql_operator.runtime.types import Key

KEY = Key("ns/db")
ROLE = "db.example.com/role"
RAN = "db.example.com/cluster-has-run"
ASKED_FRESH = ("db-mysql-0", "datadir")
"""An unready primary, observed: is its datadir fresh?"""
Obj = dict[str, Any]


@dataclass
class Server:
    gtid: str = "0-100-10"
    received: str = ""
    replicating: bool = True
    read_only: bool = True
    io: str = "Yes"
    errno: str = "0"
    fresh: bool = False
    """Its datadir was initialised and holds nothing of the cluster (replication.FRESH_MARKER)."""


@dataclass
class Servers:
    """The fake executor: the model of every server, and what the operator ran where."""

    servers: dict[str, Server] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    ran: list[tuple[str, str]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    """Every script the operator ran, whatever it was."""

    def run(self, namespace: str, pod: str, script: str, *, timeout: float) -> ExecResult:
        self.scripts.append(script)
        if pod in self.unreachable:
            raise ExecError(f"exec in {namespace}/{pod}: 500 container not found")
        s = self.servers[pod]
        if "datadir-claimed" in script:
            self.ran.append((pod, "claimed"))
            s.fresh = False
            return ExecResult(0, "datadir-claimed\n", "")
        if "datadir-fresh" in script:
            self.ran.append((pod, "datadir"))
            return ExecResult(0, "datadir-fresh\n" if s.fresh else "datadir-kept\n", "")
        action = next(
            a for a in ("variables", "fenced", "applied", "replication-ended", "repointed") if a in script
        )
        self.ran.append((pod, action))
        if action == "variables":
            replica = ""
            if s.replicating:
                replica = (
                    "*************************** 1. row ***************************\n"
                    f"  Slave_IO_Running: {s.io}\n  Slave_SQL_Running: Yes\n  Last_IO_Errno: {s.errno}\n"
                    f"  Last_IO_Error: {'cannot connect' if s.errno != '0' else ''}\n"
                    f"  Gtid_IO_Pos: {s.received}\n"
                )
            out = (
                f"== variables\nread_only\t{int(s.read_only)}\ngtid_current_pos\t{s.gtid}\n"
                f"== replica\n{replica}== datadir\n{'fresh' if s.fresh else ''}\n== end\n"
            )
            return ExecResult(0, out, "")
        if action == "fenced":
            s.read_only = True
        if action == "applied":
            s.gtid = s.received or s.gtid
        if action == "replication-ended":
            s.replicating = s.fresh = False
        return ExecResult(0, action + "\n", "")


@pytest.fixture
def servers() -> Servers:
    return Servers()


@pytest.fixture
def reconciler(
    kube: FakeKube, events: RecordingEvents, clock: Clock, servers: Servers
) -> MySQLClusterReconciler:
    return MySQLClusterReconciler(kube, recorder=events, now=clock, executor=servers)  # type: ignore[arg-type]


def pod_body(*, ready: bool = True, running: bool = True, said: str | None = "server-user=105:107\n") -> Obj:
    """A database pod's status; `said`: its `configure` container's termination message."""
    state = {"running": {}} if running else {"waiting": {"reason": "ContainerCreating"}}
    configure = {"exitCode": 0, "reason": "Completed", **({"message": said} if said is not None else {})}
    return {
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "initContainerStatuses": [{"name": "configure", "state": {"terminated": configure}}],
            "containerStatuses": [{"name": "mysql", "state": state}],
        }
    }


def set_pod(kube: FakeKube, ordinal: int, **state: Any) -> None:
    """Pod `ordinal` in the state given, its labels as they are (the operator's)."""
    current = kube.peek(Pod, "ns", f"db-mysql-{ordinal}")
    body = database_pod(ordinal, **pod_body(**state))
    if current is not None:
        body["metadata"]["labels"] = current["metadata"]["labels"]
        if "annotations" in current["metadata"]:
            body["metadata"]["annotations"] = current["metadata"]["annotations"]
        body["metadata"]["uid"] = current["metadata"]["uid"]
    kube.put(Pod, body)


def claim(kube: FakeKube, ordinal: int, uid: str) -> None:
    kube.put(
        PersistentVolumeClaim,
        {"metadata": {"name": f"data-db-mysql-{ordinal}", "namespace": "ns", "uid": uid}},
    )


def told_ran(kube: FakeKube, ordinal: int) -> bool:
    pod = kube.peek(Pod, "ns", f"db-mysql-{ordinal}")
    return ((pod or {}).get("metadata", {}).get("annotations") or {}).get(RAN) == "true"


def role(kube: FakeKube, ordinal: int) -> str | None:
    pod = kube.peek(Pod, "ns", f"db-mysql-{ordinal}")
    return ((pod or {}).get("metadata", {}).get("labels") or {}).get(ROLE)


def status(kube: FakeKube) -> Obj:
    return (kube.peek(MySQLCluster, "ns", "db") or {}).get("status") or {}


@pytest.fixture
def running(kube: FakeKube, reconciler: MySQLClusterReconciler, servers: Servers) -> MySQLClusterReconciler:
    """A three-pod cluster that has run: pod 0 labelled primary, recorded, the others replicas."""
    kube.put(MySQLCluster, cluster(replicas=3, engine="mariadb"))
    reconciler.reconcile(KEY)
    rollout_completed(kube, replicas=3)
    for ordinal in range(3):
        claim(kube, ordinal, f"claim-{ordinal}")
        set_pod(kube, ordinal, ready=ordinal != 0)  # pod 0: ready once labelled primary
        servers.servers[f"db-mysql-{ordinal}"] = Server(replicating=ordinal != 0)
    reconciler.reconcile(KEY)
    assert [role(kube, i) for i in range(3)] == ["primary", "replica", "replica"]
    assert "primary" not in status(kube), "recorded once it serves, not before"
    assert not any(told_ran(kube, i) for i in range(3)), "a new cluster's first datadir is fresh"
    set_pod(kube, 0, ready=True)
    reconciler.reconcile(KEY)
    assert (status(kube)["primary"], status(kube)["primaryClaimUID"]) == ("db-mysql-0", "claim-0")
    assert not any(told_ran(kube, i) for i in range(3)), "no write only to tell: their sidecars know"
    assert status(kube)["datadirOwner"] == "105:107", "the backup pods' user, as configure said it"
    servers.ran.clear()
    reconciler.reconcile(KEY)
    assert servers.ran == [], "a healthy cluster is never exec'd into"
    return reconciler


def test_a_primary_that_never_served_is_starting_not_lost(
    kube: FakeKube, reconciler: MySQLClusterReconciler, clock: Clock
) -> None:
    kube.put(MySQLCluster, cluster(replicas=2))
    reconciler.reconcile(KEY)
    set_pod(kube, 0, ready=False, running=False)  # a slow image pull, a long restore
    clock.advance(3600)
    result = reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and "primary" not in status(kube)
    assert condition(status(kube), DEGRADED)["status"] == "False" and result.requeue_after is None


def test_a_first_pod_ready_before_its_label_is_recorded_in_the_pass_that_labels_it(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    """kwok's pods are Ready as soon as they run, which a new cluster's pod 0 on a real server is not
    before its label (its probe needs the label or replication): the pass that labels pod 0 records
    it too, in the one status write that says Running, and does not tell it the cluster ran (a new
    cluster's first datadir is fresh, and must be made writable)."""
    kube.put(MySQLCluster, cluster(replicas=1, engine="mariadb"))
    reconciler.reconcile(KEY)
    rollout_completed(kube, replicas=1)
    claim(kube, 0, "claim-0")
    set_pod(kube, 0, ready=True)
    kube.writes.clear()
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and not told_ran(kube, 0)
    assert (status(kube)["phase"], status(kube)["primary"]) == ("Running", "db-mysql-0")
    assert status(kube)["primaryClaimUID"] == "claim-0"
    assert status(kube)["datadirOwner"] == "105:107"
    assert kube.writes == [
        ("patch", "pods", "db-mysql-0"),
        ("patch", "mysqlclusters/status", "db"),
    ]
    kube.writes.clear()
    reconciler.reconcile(KEY)
    assert kube.writes == [], "nothing left to write, and pod 0 is never told afterwards"


def test_a_first_pod_ready_before_its_label_beside_a_kept_claim_is_recorded_only_once_labelled(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    """Re-created over kept claims (pod 0's the oldest): the cluster ran, so pod 0 is told so with its
    label, and recorded only once it is ready with that label, never in the pass that labels it."""
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)
    made_at(kube, 0, "2026-01-05T10:00:00Z")
    made_at(kube, 1, "2026-01-05T10:01:00Z")
    set_pod(kube, 0, ready=True)
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and told_ran(kube, 0) and "primary" not in status(kube)
    reconciler.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-0"


def test_a_first_pod_ready_before_its_label_and_its_claim_is_recorded_once_the_claim_is_seen(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    """The record names the volume the primary was made on: not recorded before its claim is cached."""
    kube.put(MySQLCluster, cluster(replicas=1, engine="mariadb"))
    reconciler.reconcile(KEY)
    set_pod(kube, 0, ready=True)
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and "primary" not in status(kube) and not told_ran(kube, 0)
    claim(kube, 0, "claim-0")
    reconciler.reconcile(KEY)
    assert (status(kube)["primary"], status(kube)["primaryClaimUID"]) == ("db-mysql-0", "claim-0")


def test_a_first_pod_ready_before_its_label_but_going_away_is_not_recorded(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    """A terminating pod 0 is never labelled: recorded, its successor would be labelled as the primary
    of a cluster that ran, and its fresh datadir never made writable."""
    kube.put(MySQLCluster, cluster(replicas=1, engine="mariadb"))
    reconciler.reconcile(KEY)
    claim(kube, 0, "claim-0")
    going = database_pod(0, **pod_body(ready=True))
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    kube.put(Pod, going)
    reconciler.reconcile(KEY)
    assert role(kube, 0) is None and "primary" not in status(kube)


def test_a_lost_primary_is_replaced_after_the_wait_by_the_replica_that_received_most(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers, events: RecordingEvents
) -> None:
    servers.servers["db-mysql-1"].received = "0-100-12"
    servers.servers["db-mysql-2"].received = "0-100-15"
    set_pod(kube, 0, ready=False)
    result = running.reconcile(KEY)
    degraded = condition(status(kube), DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "PrimaryNotReady")
    assert "failing over at 2026-01-01T00:00:30Z" in degraded["message"]
    # Only the primary is asked anything: whether its datadir is fresh (then it would not come back),
    # again every 10 s (its init ending is no pod change), and the wait runs from when it was lost.
    assert result.requeue_after == 10 and servers.ran == [ASKED_FRESH]
    assert role(kube, 0) == "primary", "not fenced while it may come back"

    clock.advance(29)
    running.reconcile(KEY)
    assert servers.ran == [ASKED_FRESH] * 2 and "failover" not in status(kube)
    set_pod(kube, 0, ready=False)  # still not ready a second later
    clock.advance(1)
    running.reconcile(KEY)
    record = status(kube)["failover"]
    assert (record["reason"], record["from"], record["to"], record["phase"]) == (
        "PrimaryLost",
        "db-mysql-0",
        "db-mysql-2",
        "Repointing",
    )
    assert "0-100-15" in record["message"]
    ran = servers.ran
    assert ran.index(("db-mysql-0", "fenced")) < ran.index(("db-mysql-2", "applied"))
    assert ran.index(("db-mysql-2", "applied")) < ran.index(("db-mysql-2", "replication-ended"))
    assert servers.servers["db-mysql-0"].read_only and not servers.servers["db-mysql-2"].replicating
    assert (status(kube)["primary"], status(kube)["primaryClaimUID"]) == ("db-mysql-2", "claim-2")
    assert [role(kube, i) for i in range(3)] == ["replica", "replica", "primary"]

    assert running.reconcile(KEY).requeue_after == 2, "until its sidecar has made it writable"
    assert (
        status(kube)["failover"]["phase"] == "Repointing" and ("db-mysql-1", "repointed") not in servers.ran
    )
    servers.servers["db-mysql-2"].read_only = False  # its sidecar saw the label
    running.reconcile(KEY)
    assert status(kube)["failover"]["phase"] == "Completed"
    assert ("db-mysql-1", "repointed") in servers.ran
    assert ("Warning", "FailedOver") in [(t, r) for t, r, _ in events.events]
    assert condition(status(kube), DEGRADED)["status"] == "False"


def test_a_primary_on_a_replaced_volume_is_replaced_at_once_and_never_labelled_primary(
    kube: FakeKube, running: MySQLClusterReconciler, servers: Servers
) -> None:
    claim(kube, 0, "claim-new")  # pod 0 and its claim deleted: the StatefulSet made both anew
    set_pod(kube, 0, ready=False)
    servers.servers["db-mysql-0"] = Server(gtid="", replicating=False)
    servers.servers["db-mysql-1"].received = "0-100-11"
    running.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-1"
    assert role(kube, 0) == "replica", "an empty datadir is never served as primary"


@pytest.mark.parametrize("fresh", [True, False], ids=["emptied-in-place", "restarting"])
def test_a_primary_whose_datadir_was_emptied_in_place_is_replaced_at_once(
    kube: FakeKube, running: MySQLClusterReconciler, servers: Servers, fresh: bool
) -> None:
    """Same claim, but its server initialised an empty datadir (its sidecar keeps it read-only, so it is
    unready): nothing comes back by waiting. A primary merely restarting is waited for."""
    set_pod(kube, 0, ready=False)
    servers.servers["db-mysql-0"] = Server(gtid="", replicating=False, fresh=fresh)
    servers.servers["db-mysql-1"].received = "0-100-11"
    running.reconcile(KEY)
    if not fresh:
        assert status(kube)["primary"] == "db-mysql-0" and "failing over at" in str(status(kube))
        return
    assert status(kube)["primary"] == "db-mysql-1"
    record = status(kube)["failover"]
    assert "initialised anew after the cluster ran" in record["message"], record
    assert role(kube, 0) == "replica", "an empty datadir is never served as primary"
    assert told_ran(kube, 0) and told_ran(kube, 1), "each pod labelled since is told in the same patch"


def test_a_candidate_that_replicates_from_nobody_is_promoted_with_its_datadir_claimed(
    kube: FakeKube, running: MySQLClusterReconciler, servers: Servers
) -> None:
    """Chosen for what it holds, its datadir is the cluster's even if its sidecar never saw it connected
    (still marked fresh): else its sidecar would refuse the primary label it is about to get."""
    claim(kube, 0, "claim-new")
    set_pod(kube, 0, ready=False)
    servers.servers["db-mysql-0"] = Server(gtid="", replicating=False)
    servers.servers["db-mysql-1"] = Server(gtid="0-100-11", replicating=False, fresh=True)
    servers.servers["db-mysql-2"].received = "0-100-10"
    running.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-1"
    assert ("db-mysql-1", "claimed") in servers.ran and not servers.servers["db-mysql-1"].fresh


def made_at(kube: FakeKube, ordinal: int, when: str) -> None:
    """Pod `ordinal`'s data claim, made at `when` (RFC 3339)."""
    meta = {"name": f"data-db-mysql-{ordinal}", "namespace": "ns", "creationTimestamp": when}
    kube.put(PersistentVolumeClaim, {"metadata": meta})


def test_a_first_primary_on_a_volume_younger_than_a_kept_one_is_never_labelled_primary(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    """A cluster re-created over its kept claims, but pod 0's made anew: no status says it ran, but
    pod 1's older claim does; pod 0's empty datadir is not served, and the cluster says why."""
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)  # its credentials Secret (a re-created cluster's is the retained one)
    made_at(kube, 1, "2026-01-05T10:00:00Z")
    made_at(kube, 0, "2026-03-01T09:00:00Z")
    set_pod(kube, 0, ready=True)  # ready before any label, as fake pods are
    set_pod(kube, 1, ready=False)
    reconciler.reconcile(KEY)
    # No role: out of the Service, read-only, and not made a replica (it could not be primary after).
    assert (role(kube, 0), role(kube, 1)) == (None, "replica") and "primary" not in status(kube)
    degraded = condition(status(kube), DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "PrimaryDataReplaced")
    for named in ("data-db-mysql-0", "data-db-mysql-1", "2026-01-05T10:00:00Z", "never served as primary"):
        assert named in degraded["message"]

    # The way out the message names: the older claim deleted, pod 0 is the first primary after all.
    # Ready here before its label, it is recorded in the pass that labels it, and not told it ran.
    del kube.objects[(PersistentVolumeClaim.endpoint, "ns", "data-db-mysql-1")]
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and not told_ran(kube, 0)
    assert status(kube)["primary"] == "db-mysql-0"
    assert condition(status(kube), DEGRADED)["status"] == "False"


def test_pod_0s_own_claim_is_read_fresh_only_beside_another_pods_claim(
    kube: FakeKube, reconciler: MySQLClusterReconciler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict compares pod 0's claim with the others': with none of theirs, it is not read."""
    fresh_reads: list[str] = []
    get = kube.get

    def recording_get(kind: Any, namespace: str | None, name: str, *, fresh: bool = False) -> Any:
        if kind is PersistentVolumeClaim and fresh:
            fresh_reads.append(name)
        return get(kind, namespace, name, fresh=fresh)

    monkeypatch.setattr(kube, "get", recording_get)
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)
    made_at(kube, 0, "2026-03-01T09:00:00Z")
    set_pod(kube, 0, ready=False)
    reconciler.reconcile(KEY)
    assert "data-db-mysql-0" not in fresh_reads and "data-db-mysql-1" in fresh_reads
    assert role(kube, 0) == "primary"

    made_at(kube, 1, "2026-01-05T10:00:00Z")  # older than pod 0's: now pod 0's is read, and refused
    reconciler.reconcile(KEY)
    assert "data-db-mysql-0" in fresh_reads
    assert condition(status(kube), DEGRADED)["reason"] == "PrimaryDataReplaced"


def test_a_first_primary_with_no_claim_beside_a_kept_one_is_never_labelled_primary(
    kube: FakeKube, reconciler: MySQLClusterReconciler
) -> None:
    """Pod 0 made while the StatefulSet controller's cache still held its deleted claim has no claim at
    all; pod 1's kept claim says the cluster ran, so pod 0 is held back exactly as on a new, empty one."""
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)
    made_at(kube, 1, "2026-01-05T10:00:00Z")
    set_pod(kube, 0, ready=True)
    reconciler.reconcile(KEY)
    reconciler.reconcile(KEY)
    assert role(kube, 0) is None and "primary" not in status(kube)
    degraded = condition(status(kube), DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "PrimaryDataReplaced")
    for named in ("data-db-mysql-0) does not exist", "data-db-mysql-1", "2026-01-05T10:00:00Z"):
        assert named in degraded["message"]


def recreated_over_claims_with_pod_0s_emptied(
    kube: FakeKube, reconciler: MySQLClusterReconciler, servers: Servers
) -> None:
    """A cluster re-created over both its kept claims, pod 0's emptied in place; one pass made."""
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)
    made_at(kube, 0, "2026-01-05T10:00:00Z")
    made_at(kube, 1, "2026-01-05T10:01:00Z")
    servers.servers["db-mysql-0"] = Server(gtid="", replicating=False, fresh=True)
    set_pod(kube, 0, ready=False)
    reconciler.reconcile(KEY)


def test_a_first_primary_whose_kept_volume_was_emptied_is_reported_and_never_recorded(
    kube: FakeKube, reconciler: MySQLClusterReconciler, servers: Servers
) -> None:
    """Re-created over its kept claims, pod 0's emptied in place (not made anew: the claim is the oldest).
    Pod 1's claim says the cluster ran, so pod 0 is told (its sidecar never makes the fresh datadir
    writable) and the cluster says why."""
    recreated_over_claims_with_pod_0s_emptied(kube, reconciler, servers)
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and told_ran(kube, 0) and "primary" not in status(kube)
    degraded = condition(status(kube), DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "PrimaryDataReplaced")
    assert "initialised anew" in degraded["message"] and "data-db-mysql-1" in degraded["message"]


def test_a_pod_told_the_cluster_ran_is_untold_once_the_kept_claims_are_deleted_to_start_afresh(
    kube: FakeKube, reconciler: MySQLClusterReconciler, servers: Servers
) -> None:
    recreated_over_claims_with_pod_0s_emptied(kube, reconciler, servers)
    assert role(kube, 0) == "primary" and told_ran(kube, 0)

    # As the message says: the older claims deleted, pod 0's fresh datadir is a new cluster's first.
    del kube.objects[(PersistentVolumeClaim.endpoint, "ns", "data-db-mysql-1")]
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and not told_ran(kube, 0)
    assert condition(status(kube), DEGRADED)["status"] == "False"


@pytest.mark.parametrize(
    ("pod_0", "pod_1", "cached", "first_role"),
    [
        # Pod 0's claim made anew: a cached namesake as old as pod 1's would let the empty datadir in.
        ("2026-03-01T09:00:00Z", "2026-01-05T10:00:00Z", (0, "2026-01-05T09:59:00Z"), None),
        # Pod 1's claim made anew: a cached namesake older than pod 0's would hold a sound one back.
        ("2026-03-01T09:00:00Z", "2026-03-01T09:01:00Z", (1, "2026-01-05T10:00:00Z"), "primary"),
    ],
    ids=["first-claim-cached-stale", "other-claim-cached-stale"],
)
def test_the_first_primary_guard_reads_claims_fresh_not_from_a_cache(
    kube: FakeKube,
    reconciler: MySQLClusterReconciler,
    pod_0: str,
    pod_1: str,
    cached: tuple[int, str],
    first_role: str | None,
) -> None:
    """A claim deleted and made anew may still be the old one in a cache: the guard asks the
    apiserver for every claim it compares."""
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)
    made_at(kube, 0, pod_0)
    made_at(kube, 1, pod_1)
    ordinal, when = cached
    stale = {"name": f"data-db-mysql-{ordinal}", "namespace": "ns", "creationTimestamp": when}
    kube.stale[(PersistentVolumeClaim.endpoint, "ns", stale["name"])] = {"metadata": stale}
    set_pod(kube, 0, ready=True)
    set_pod(kube, 1, ready=False)
    reconciler.reconcile(KEY)
    assert role(kube, 0) == first_role
    replaced = condition(status(kube), DEGRADED)
    assert (replaced is not None and replaced["reason"] == "PrimaryDataReplaced") == (first_role is None)


@pytest.mark.parametrize(
    ("first", "second", "restore"),
    [
        ("2026-01-05T10:00:00Z", "2026-01-05T10:01:00Z", None),  # made in ordinal order: a new cluster
        ("2026-01-05T10:00:00Z", "2026-01-05T10:00:00Z", None),  # the same second: no evidence
        ("2026-03-01T09:00:00Z", "2026-01-05T10:00:00Z", {"fromCluster": "old"}),  # a restore fills it
    ],
    ids=["ordinal-order", "same-second", "restoring"],
)
def test_a_first_primary_whose_volume_is_not_younger_or_is_restored_is_labelled_primary(
    kube: FakeKube, reconciler: MySQLClusterReconciler, first: str, second: str, restore: Obj | None
) -> None:
    spec: Obj = {"replicas": 2, "engine": "mariadb"}
    if restore:
        spec["restore"] = restore
        kube.put(PersistentVolumeClaim, {"metadata": {"name": "old-backup", "namespace": "ns"}})
        password = {"root-password": "cm9vdA==", "replication-password": "cmVwbA=="}
        kube.put(Secret, {"metadata": {"name": "old-credentials", "namespace": "ns"}, "data": password})
    kube.put(MySQLCluster, cluster(**spec))
    reconciler.reconcile(KEY)
    made_at(kube, 0, first)
    made_at(kube, 1, second)
    set_pod(kube, 0, ready=True)
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary"
    reconciler.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-0"


def test_a_first_primary_whose_datadir_still_replicates_is_reported_not_promoted(
    kube: FakeKube, reconciler: MySQLClusterReconciler, servers: Servers
) -> None:
    """A cluster re-created over the kept claims of one that failed over: pod 0 was a replica, its
    datadir still names a source, and no record says which pod was the primary. Its sidecar keeps it
    read-only; the cluster says why and what a human can do, and promotes nothing by itself."""
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)
    servers.servers["db-mysql-0"] = Server(replicating=True, io="Connecting", errno="2005")
    set_pod(kube, 0, ready=False)
    reconciler.reconcile(KEY)  # labelled primary
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary" and "primary" not in status(kube)
    degraded = condition(status(kube), DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "FirstPrimaryReplicates")
    assert "STOP SLAVE; RESET SLAVE ALL" in degraded["message"], degraded["message"]
    assert {a for _, a in servers.ran} == {"variables"}, f"observed only, nothing ended: {servers.ran}"

    # Someone decided: its replication ended, its sidecar made it writable; it is the first primary.
    servers.servers["db-mysql-0"].replicating = False
    set_pod(kube, 0, ready=True)
    reconciler.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-0"
    assert condition(status(kube), DEGRADED)["status"] == "False"


def test_a_first_primary_still_starting_is_not_reported(
    kube: FakeKube, reconciler: MySQLClusterReconciler, servers: Servers
) -> None:
    kube.put(MySQLCluster, cluster(replicas=2, engine="mariadb"))
    reconciler.reconcile(KEY)
    servers.unreachable.add("db-mysql-0")  # its server not up yet: the observation fails
    set_pod(kube, 0, ready=False)
    reconciler.reconcile(KEY)
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary"
    assert condition(status(kube), DEGRADED)["status"] == "False"
    servers.unreachable.clear()
    servers.servers["db-mysql-0"] = Server(replicating=False)  # a new datadir: no source
    reconciler.reconcile(KEY)
    assert condition(status(kube), DEGRADED)["status"] == "False"


def test_a_primary_that_cannot_be_fenced_blocks_the_promotion(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers
) -> None:
    set_pod(kube, 0, ready=False)  # its server still runs: it could still take writes
    servers.unreachable.add("db-mysql-0")
    running.reconcile(KEY)
    clock.advance(30)
    result = running.reconcile(KEY)
    degraded = condition(status(kube), DEGRADED)
    assert degraded["reason"] == "FenceFailed" and "db-mysql-0" in degraded["message"]
    assert status(kube)["primary"] == "db-mysql-0" and status(kube)["failover"]["phase"] == "Fencing"
    assert not any(a in ("applied", "replication-ended") for _, a in servers.ran)
    assert role(kube, 0) == "replica" and "primary" not in [role(kube, 1), role(kube, 2)]
    assert result.requeue_after == 10

    set_pod(kube, 0, ready=False, running=False)  # its server stopped: it restarts read-only
    running.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-1"


def test_replicas_that_diverged_are_reported_not_promoted(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers
) -> None:
    servers.servers["db-mysql-1"].received = "0-100-12,1-101-1"
    servers.servers["db-mysql-2"].received = "0-100-15"
    set_pod(kube, 0, ready=False)
    running.reconcile(KEY)
    clock.advance(30)
    running.reconcile(KEY)
    degraded = condition(status(kube), DEGRADED)
    assert degraded["reason"] == "ReplicasDiverged" and "0-100-15" in degraded["message"]
    assert status(kube)["primary"] == "db-mysql-0" and "failover" not in status(kube)


def test_with_failover_off_a_lost_primary_is_only_reported(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers
) -> None:
    live = kube.peek(MySQLCluster, "ns", "db")
    assert live is not None
    live["spec"]["failover"] = {"enabled": False}
    kube.put(MySQLCluster, live)
    set_pod(kube, 0, ready=False)
    clock.advance(3600)
    running.reconcile(KEY)
    degraded = condition(status(kube), DEGRADED)
    assert degraded["reason"] == "PrimaryNotReady" and "spec.failover.enabled is false" in degraded["message"]
    assert servers.ran == [ASKED_FRESH]


def test_replicas_cut_off_from_a_ready_primary_fail_it_over(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers
) -> None:
    """The primary's pod network is gone, its kubelet is not: it stays ready."""
    for ordinal in (1, 2):
        set_pod(kube, ordinal, ready=False)
        servers.servers[f"db-mysql-{ordinal}"].io, servers.servers[f"db-mysql-{ordinal}"].errno = (
            "Connecting",
            "2003",
        )
    running.reconcile(KEY)
    degraded = condition(status(kube), DEGRADED)
    assert degraded["reason"] == "ReplicasCutOff" and "lost its connection" in degraded["message"]
    clock.advance(30)
    running.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-1"
    assert ("db-mysql-0", "fenced") in servers.ran, "fenced through its kubelet, not its network"


def test_replicas_unready_for_another_reason_do_not_fail_a_primary_over(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers
) -> None:
    for ordinal in (1, 2):
        set_pod(kube, ordinal, ready=False)  # e.g. a SQL thread error; the IO threads are fine
    running.reconcile(KEY)
    clock.advance(300)
    running.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-0" and "failover" not in status(kube)


def test_a_switchover_fences_catches_up_promotes_and_forgets_the_annotation(
    kube: FakeKube, running: MySQLClusterReconciler, servers: Servers, events: RecordingEvents
) -> None:
    servers.servers["db-mysql-0"] = Server(gtid="0-100-20", replicating=False, read_only=False)
    live = kube.peek(MySQLCluster, "ns", "db")
    assert live is not None
    live["metadata"]["annotations"] = {SWITCHOVER_ANNOTATION: "1"}
    kube.put(MySQLCluster, live)
    running.reconcile(KEY)
    record = status(kube)["failover"]
    assert (record["reason"], record["to"], record["position"]) == ("Switchover", "db-mysql-1", "0-100-20")
    assert servers.servers["db-mysql-0"].read_only, "no write after the catch-up point"
    assert (
        status(kube)["primary"] == "db-mysql-1" and role(kube, 1) == "primary" and role(kube, 0) == "replica"
    )
    servers.servers["db-mysql-1"].read_only = False  # its sidecar saw the label
    running.reconcile(KEY)
    assert status(kube)["failover"]["phase"] == "Completed"
    assert SWITCHOVER_ANNOTATION not in (kube.peek(MySQLCluster, "ns", "db") or {})["metadata"].get(
        "annotations", {}
    )
    assert ("Normal", "SwitchedOver") in [(t, r) for t, r, _ in events.events]


def test_a_switchover_to_a_pod_that_is_not_a_ready_replica_is_refused(
    kube: FakeKube, running: MySQLClusterReconciler, servers: Servers
) -> None:
    live = kube.peek(MySQLCluster, "ns", "db")
    assert live is not None
    live["metadata"]["annotations"] = {SWITCHOVER_ANNOTATION: "db-mysql-7"}
    kube.put(MySQLCluster, live)
    running.reconcile(KEY)
    degraded = condition(status(kube), DEGRADED)
    assert degraded["reason"] == "SwitchoverRefused" and "db-mysql-7" in degraded["message"]
    assert servers.ran == [] and status(kube)["primary"] == "db-mysql-0"


def test_a_running_replica_that_does_not_answer_holds_the_failover(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers
) -> None:
    """It may have received more than any that answers: promoting another could lose that."""
    set_pod(kube, 0, ready=False)
    running.reconcile(KEY)
    clock.advance(30)
    servers.unreachable.add("db-mysql-1")
    servers.servers["db-mysql-1"].received = "0-100-20"
    running.reconcile(KEY)
    degraded = condition(status(kube), DEGRADED)
    assert degraded["reason"] == "FailoverWaiting" and "db-mysql-1" in degraded["message"]
    assert "failover" not in status(kube) and status(kube)["primary"] == "db-mysql-0"
    servers.unreachable.clear()
    running.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-1"


def test_a_failover_interrupted_after_fencing_goes_on_from_its_record(
    kube: FakeKube, running: MySQLClusterReconciler, clock: Clock, servers: Servers
) -> None:
    set_pod(kube, 0, ready=False)
    running.reconcile(KEY)
    clock.advance(30)
    servers.servers["db-mysql-2"].received = "0-100-20"
    # The operator dies after the fence is recorded: the next record (Promoting) is refused.
    original = running.writer.record
    calls: list[dict[str, Any]] = []

    def record_then_crash(cluster_obj: Obj, fields: Obj) -> Obj:
        calls.append(fields)
        if len(calls) == 2:
            raise RuntimeError("operator killed")
        return original(cluster_obj, fields)

    running.writer.record = record_then_crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        running.reconcile(KEY)
    assert status(kube)["failover"]["phase"] == "Fencing"
    running.writer.record = original  # type: ignore[method-assign]
    running.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-2" and status(kube)["failover"]["phase"] == "Repointing"
    assert servers.ran.count(("db-mysql-0", "fenced")) == 2, "the step taken again: idempotent"


def test_the_datadir_owner_is_what_configure_said_and_waits_for_a_pod_that_says_it(
    kube: FakeKube, reconciler: MySQLClusterReconciler, servers: Servers
) -> None:
    kube.put(MySQLCluster, cluster(replicas=1, engine="mariadb"))
    reconciler.reconcile(KEY)
    rollout_completed(kube, replicas=1)
    claim(kube, 0, "claim-0")
    set_pod(kube, 0, ready=False)
    servers.servers["db-mysql-0"] = Server(replicating=False)
    reconciler.reconcile(KEY)
    assert role(kube, 0) == "primary"
    # A pod made before configure named the user (or a fake pod): the primary is recorded, the owner not.
    set_pod(kube, 0, ready=True, said=None)
    reconciler.reconcile(KEY)
    assert status(kube)["primary"] == "db-mysql-0"
    assert "datadirOwner" not in status(kube)
    # Root is never taken for the owner.
    set_pod(kube, 0, ready=True, said="server-user=0:0\n")
    reconciler.reconcile(KEY)
    assert "datadirOwner" not in status(kube)
    set_pod(kube, 0, ready=True, said="configure: done\nserver-user=105:107\n")
    reconciler.reconcile(KEY)
    assert status(kube)["datadirOwner"] == "105:107"
    assert not any("id -u" in script for script in servers.scripts), "no exec asks for it"
