"""Failover and switchover on a real database server (kind), under a steady writer that records what
was acknowledged (failoverkit.py). The engine is E2E_DATABASE (dbkit.py: MariaDB offline).

What must hold, and the bound documented in operator/docs/failover.md:

* the primary's pod and its volume lost: a replica is promoted within `afterSeconds` (30) + 60 s,
  writes resume through `<name>-primary`, with semi-sync no acknowledged write is missing, and the old
  pod comes back as a replica of the new primary (an empty datadir is never served as primary);
* a planned switchover (the annotation) loses nothing;
* a primary whose volume is emptied in place (same pod, same claim) never serves its empty datadir: it
  stays read-only and out of the Service, a replica is promoted at once (not after `afterSeconds`), and
  the old pod comes back as a replica holding every row again;
* a primary whose network is cut (its pod kept, its replicas cut off) is fenced through its kubelet and
  never takes a write after the promotion; with its network back, it replicates from the new primary.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest
from dbkit import Sql, kill, manifest, pod_ready, wait_all_ready
from failoverkit import Isolation, Writer, empty_datadir_in_place, prepare, present
from mysqlkit import MySQLClusters, Timeouts

from envtest import OperatorRunner, eventually

pytestmark = [pytest.mark.real_database, pytest.mark.usefixtures("kind_only")]

AFTER_SECONDS = 30
BOUND_SECONDS = AFTER_SECONDS + 60
"""The documented bound from losing the primary to a promoted one serving writes (on kind here)."""
ROLE = "db.example.com/role"


def status(mysql: MySQLClusters, name: str) -> dict[str, Any]:
    return mysql.must_get(name).get("status") or {}


def role(mysql: MySQLClusters, pod: str) -> str | None:
    obj = mysql.api.get(f"api/v1/namespaces/{mysql.namespace}/pods/{pod}") or {}
    return ((obj.get("metadata") or {}).get("labels") or {}).get(ROLE)


def primary_is(mysql: MySQLClusters, name: str, pod: str) -> None:
    record = status(mysql, name)
    assert record.get("primary") == pod, record
    assert (record.get("failover") or {}).get("phase") in (None, "Completed"), record.get("failover")


def restarts(mysql: MySQLClusters, pod: str) -> int:
    """How often `pod`'s server container has restarted."""
    obj = mysql.api.get(f"api/v1/namespaces/{mysql.namespace}/pods/{pod}") or {}
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    return sum(int(c.get("restartCount") or 0) for c in statuses if c.get("name") == "mysql")


def replicated(sql: Sql, replica: str, rows: set[int]) -> None:
    missing = rows - present(sql, replica)
    assert not missing, f"{replica} lacks {len(missing)} rows, e.g. {sorted(missing)[:5]}"


def test_a_lost_primary_fails_over_keeping_every_acknowledged_write_and_a_switchover_back_keeps_all(
    mysql: MySQLClusters, operator: OperatorRunner, core: kubernetes.client.CoreV1Api, timeouts: Timeouts
) -> None:
    mysql.create(manifest("fo", 2, replication={"semiSync": True}))
    wait_all_ready(mysql, "fo", 2, timeouts)
    sql = Sql(core, mysql.namespace, timeouts)
    eventually(lambda: primary_is(mysql, "fo", "fo-mysql-0"), timeout=timeouts(60), description="recorded")
    prepare(sql, "fo-mysql-0")
    writer = Writer(core, mysql, "fo", "writer-a")
    writer.wait_acks(20, timeouts, "the writer writing")

    # The primary's pod and its volume go at once, as with a lost node and its local disk.
    claim = f"api/v1/namespaces/{mysql.namespace}/persistentvolumeclaims/data-fo-mysql-0"
    assert mysql.api.delete(claim) == 200
    lost_at = time.monotonic()
    kill(mysql, "fo-mysql-0")
    eventually(
        lambda: primary_is(mysql, "fo", "fo-mysql-1"),
        timeout=timeouts(BOUND_SECONDS),
        interval=1,
        description="fo-mysql-1 promoted",
    )
    promoted_after = time.monotonic() - lost_at
    before = len(writer.acknowledged())
    writer.wait_acks(before + 10, timeouts, "writes resumed through fo-primary")
    served_after = time.monotonic() - lost_at
    assert served_after < timeouts(BOUND_SECONDS), f"writes resumed only {served_after:.0f}s after the loss"
    acked = set(writer.stop())
    replicated(sql, "fo-mysql-1", acked)  # semi-sync: every acknowledged row survived
    record = status(mysql, "fo")["failover"]
    assert (record["reason"], record["from"], record["to"]) == ("PrimaryLost", "fo-mysql-0", "fo-mysql-1")
    reasons = [e["reason"] for e in mysql.events("fo")]
    assert "FailedOver" in reasons, reasons
    print(f"promoted {promoted_after:.0f}s, writes served {served_after:.0f}s after the primary was lost")

    # The old pod, back on an empty volume, is a replica of the new primary: never served as primary.
    eventually(
        lambda: pod_ready(mysql, "fo-mysql-0") or None, timeout=timeouts(240), description="fo-mysql-0 back"
    )
    assert role(mysql, "fo-mysql-0") == "replica"
    assert sql.ok("fo-mysql-0", "SELECT @@read_only") == "1"
    eventually(lambda: replicated(sql, "fo-mysql-0", acked), timeout=timeouts(60), description="caught up")

    # A planned switchover back, under a new writer: nothing acknowledged is lost.
    writer = Writer(core, mysql, "fo", "writer-b")
    writer.wait_acks(10, timeouts, "the second writer writing")
    mysql.patch("fo", {"metadata": {"annotations": {"db.example.com/switchover-to": "fo-mysql-0"}}})
    eventually(
        lambda: primary_is(mysql, "fo", "fo-mysql-0"), timeout=timeouts(120), interval=1, description="back"
    )
    writer.wait_acks(len(writer.acknowledged()) + 10, timeouts, "writes through the switched primary")
    acked_b = set(writer.stop())
    replicated(sql, "fo-mysql-0", acked | acked_b)
    assert status(mysql, "fo")["failover"]["reason"] == "Switchover"
    assert "db.example.com/switchover-to" not in (mysql.must_get("fo")["metadata"].get("annotations") or {})
    assert (role(mysql, "fo-mysql-0"), role(mysql, "fo-mysql-1")) == ("primary", "replica")
    eventually(
        lambda: replicated(sql, "fo-mysql-1", acked | acked_b), timeout=timeouts(60), description="follows"
    )


def test_a_primary_cut_off_from_the_network_is_fenced_and_never_writes_again(
    mysql: MySQLClusters, operator: OperatorRunner, core: kubernetes.client.CoreV1Api, timeouts: Timeouts
) -> None:
    mysql.create(manifest("iso", 2))
    wait_all_ready(mysql, "iso", 2, timeouts)
    sql = Sql(core, mysql.namespace, timeouts)
    eventually(lambda: primary_is(mysql, "iso", "iso-mysql-0"), timeout=timeouts(60), description="recorded")
    prepare(sql, "iso-mysql-0")
    sql.ok("iso-mysql-0", "INSERT INTO shop.writes VALUES (1)")
    eventually(lambda: replicated(sql, "iso-mysql-1", {1}), timeout=timeouts(60), description="replicated")

    cut = Isolation(mysql, "iso-mysql-0")
    cut.cut()
    cut_at = time.monotonic()
    try:
        eventually(
            lambda: primary_is(mysql, "iso", "iso-mysql-1"),
            timeout=timeouts(BOUND_SECONDS),
            interval=1,
            description="iso-mysql-1 promoted",
        )
        print(f"promoted {time.monotonic() - cut_at:.0f}s after the primary's network was cut")
        assert status(mysql, "iso")["failover"]["message"].count("lost its connection") == 1
        # Fenced through its kubelet: read-only, out of the Service; an application write is refused.
        assert role(mysql, "iso-mysql-0") == "replica"
        assert sql.ok("iso-mysql-0", "SELECT @@read_only") == "1"
        code, out = sql.run(
            "iso-mysql-0", "INSERT INTO shop.writes VALUES (2)", user="app", password="app-pw-e2e"
        )
        assert code != 0 and "read-only" in out.lower(), out
        sql.ok("iso-mysql-1", "INSERT INTO shop.writes VALUES (3)")  # the new primary writes
    finally:
        cut.restore()
    # Back on the network it follows the new primary, and still holds no write of its own after the cut.
    eventually(lambda: replicated(sql, "iso-mysql-0", {1, 3}), timeout=timeouts(120), description="follows")
    assert present(sql, "iso-mysql-0") == present(sql, "iso-mysql-1") == {1, 3}
    eventually(
        lambda: pod_ready(mysql, "iso-mysql-0") or None, timeout=timeouts(60), description="ready replica"
    )


def test_a_primary_whose_volume_is_emptied_in_place_is_never_served_and_replaced_at_once(
    mysql: MySQLClusters, operator: OperatorRunner, core: kubernetes.client.CoreV1Api, timeouts: Timeouts
) -> None:
    # A wait far beyond the bound: only the fresh datadir's own verdict can promote within it.
    mysql.create(manifest("wipe", 2, failover={"afterSeconds": 3600}))
    wait_all_ready(mysql, "wipe", 2, timeouts)
    sql = Sql(core, mysql.namespace, timeouts)
    eventually(
        lambda: primary_is(mysql, "wipe", "wipe-mysql-0"), timeout=timeouts(60), description="recorded"
    )
    prepare(sql, "wipe-mysql-0")
    rows = set(range(1, 21))
    sql.ok("wipe-mysql-0", "INSERT INTO shop.writes VALUES " + ", ".join(f"({i})" for i in sorted(rows)))
    eventually(lambda: replicated(sql, "wipe-mysql-1", rows), timeout=timeouts(60), description="replicated")
    claim_uid = status(mysql, "wipe")["primaryClaimUID"]
    killed = restarts(mysql, "wipe-mysql-0")

    empty_datadir_in_place(mysql, "wipe-mysql-0", timeouts)
    emptied_at = time.monotonic()
    served_empty: list[str] = []

    def promoted() -> None:
        # Every look on the way: the server on the emptied datadir (its container restarted) is never a
        # ready primary, so never in the Service. (Until the kubelet reports the kill, the pod still
        # shows the ready condition of the server that was killed.)
        restarted = restarts(mysql, "wipe-mysql-0") > killed
        if restarted and role(mysql, "wipe-mysql-0") == "primary" and pod_ready(mysql, "wipe-mysql-0"):
            served_empty.append(f"{time.monotonic() - emptied_at:.0f}s")
        primary_is(mysql, "wipe", "wipe-mysql-1")

    eventually(promoted, timeout=timeouts(BOUND_SECONDS), interval=1, description="wipe-mysql-1 promoted")
    print(f"promoted {time.monotonic() - emptied_at:.0f}s after pod 0's volume was emptied in place")
    assert not served_empty, f"the empty datadir was a ready primary at {served_empty}"
    record = status(mysql, "wipe")
    assert record["primaryClaimUID"] != claim_uid
    assert "initialised anew after the cluster ran" in record["failover"]["message"], record["failover"]

    # The promoted replica kept every row and takes writes.
    replicated(sql, "wipe-mysql-1", rows)
    eventually(
        lambda: sql.ok("wipe-mysql-1", "INSERT INTO shop.writes VALUES (21)"),
        timeout=timeouts(30),
        description="wipe-mysql-1 writable",
    )
    # The emptied pod is a replica of it and holds every row again.

    def back() -> None:
        assert pod_ready(mysql, "wipe-mysql-0"), "wipe-mysql-0 not Ready"

    eventually(back, timeout=timeouts(240), description="wipe-mysql-0 back")
    assert role(mysql, "wipe-mysql-0") == "replica"
    assert sql.ok("wipe-mysql-0", "SELECT @@read_only") == "1"
    eventually(
        lambda: replicated(sql, "wipe-mysql-0", rows | {21}), timeout=timeouts(60), description="caught up"
    )

    def claimed() -> None:
        code, _ = sql.exec("wipe-mysql-0", "ls /var/lib/mysql/mysql-operator-fresh")
        log = core.read_namespaced_pod_log("wipe-mysql-0", mysql.namespace, container="replication")
        assert code != 0, f"a datadir that replicates the cluster's data is fresh no more; its sidecar: {log}"

    eventually(claimed, timeout=timeouts(30), description="wipe-mysql-0's datadir the cluster's")
