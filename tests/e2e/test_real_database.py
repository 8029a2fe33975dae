"""The operator on a real database server: rows replicate, replicas refuse writes, and a replica that
lost its first init comes back replicating and read-only — never a writable standalone.

kind only (a kubelet runs the server); the engine is E2E_DATABASE (see dbkit.py).
"""

from __future__ import annotations

import kubernetes
import pytest
from dbkit import (
    ENGINE,
    START,
    STOP,
    Sql,
    kill,
    manifest,
    pod_ready,
    readiness_is,
    wait_all_ready,
    wait_replaced_and_ready,
)
from mysqlkit import MySQLClusters, Timeouts

from envtest import OperatorRunner, eventually

pytestmark = [pytest.mark.real_database, pytest.mark.usefixtures("kind_only")]


def pod_uid_and_restarts(mysql: MySQLClusters, pod: str) -> tuple[str, int]:
    """The pod's uid and its server container's restart count."""
    obj = mysql.api.get(f"api/v1/namespaces/{mysql.namespace}/pods/{pod}")
    assert obj is not None, f"no {pod}"
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    restarts = sum(s.get("restartCount", 0) for s in statuses if s["name"] == "mysql")
    return obj["metadata"]["uid"], restarts


def test_a_row_written_on_the_primary_is_read_on_every_replica_and_replicas_refuse_writes(
    mysql: MySQLClusters, operator: OperatorRunner, core: kubernetes.client.CoreV1Api, timeouts: Timeouts
) -> None:
    mysql.create(manifest("rows", 3))
    wait_all_ready(mysql, "rows", 3, timeouts)
    sql = Sql(core, mysql.namespace, timeouts)
    primary, replicas = "rows-mysql-0", ["rows-mysql-1", "rows-mysql-2"]

    sql.ok(
        primary,
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(32));"
        " INSERT INTO shop.orders VALUES (1, 'first');"
        " CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'; GRANT ALL ON shop.* TO 'app'@'%';",
    )
    assert sql.ok(primary, "SELECT @@read_only") == "0"
    for pod in replicas:
        eventually(
            lambda pod=pod: sql.answers(pod, "SELECT item FROM shop.orders WHERE id = 1", "first"),
            timeout=timeouts(60),
            description=f"the row on {pod}",
        )
        assert sql.ok(pod, "SELECT @@read_only") == "1"
        code, out = sql.run(pod, "INSERT INTO shop.orders VALUES (2, 'stray')", user="app", password="app-pw")
        assert code != 0 and "read-only" in out.lower(), (
            f"{pod} took a write from an application account: {out}"
        )
        if ENGINE == "mysql":  # super_read_only: root too (MariaDB's READ_ONLY ADMIN lets root write)
            code, out = sql.run(pod, "INSERT INTO shop.orders VALUES (3, 'root')")
            assert code != 0 and "super-read-only" in out.lower(), out
    assert sql.ok(primary, "SELECT COUNT(*) FROM shop.orders") == "1"
    # The backup pods' user is the image's own `mysql` user, as pod 0's configure named it (no exec).
    owner = sql.shell(primary, 'printf "%s:%s" "$(id -u mysql)" "$(id -g mysql)"')

    def owner_recorded() -> None:
        recorded = (mysql.must_get("rows").get("status") or {}).get("datadirOwner")
        assert recorded == owner, f"status.datadirOwner is {recorded!r}, the image's mysql user {owner}"

    eventually(owner_recorded, timeout=timeouts(30))
    # Replication runs as its own account, allowed to replicate and nothing else.
    grants = sql.ok(primary, "SHOW GRANTS FOR 'repl'@'%'")
    assert "REPLICATION SLAVE" in grants and "ALL PRIVILEGES" not in grants, grants


def test_a_replica_killed_during_its_init_comes_back_replicating_and_read_only(
    mysql: MySQLClusters, operator: OperatorRunner, core: kubernetes.client.CoreV1Api, timeouts: Timeouts
) -> None:
    mysql.create(manifest("init", 2))
    sql = Sql(core, mysql.namespace, timeouts)
    replica = "init-mysql-1"
    pods = f"api/v1/namespaces/{mysql.namespace}/pods"

    def initialising() -> None:
        pod = mysql.api.get(f"{pods}/{replica}")
        assert pod is not None, f"no {replica} yet"
        states = {
            s["name"]: s.get("state", {}) for s in (pod.get("status") or {}).get("containerStatuses") or []
        }
        assert "running" in states.get("mysql", {}), f"{replica}'s server not started: {states}"

    # The server container starts with its one-time init (networking off, seconds long): kill the
    # pod then, with no grace, as a node failure would.
    eventually(initialising, timeout=timeouts(240), interval=0.2, description=f"{replica} initialising")
    uid = kill(mysql, replica)
    wait_replaced_and_ready(mysql, replica, uid, timeouts)
    assert sql.ok(replica, "SELECT @@read_only") == "1"
    sql.ok(
        "init-mysql-0",
        "CREATE DATABASE after_kill; CREATE TABLE after_kill.t (id INT PRIMARY KEY);"
        " INSERT INTO after_kill.t VALUES (7);",
    )
    eventually(
        lambda: sql.answers(replica, "SELECT id FROM after_kill.t", "7"),
        timeout=timeouts(60),
        description="the row replicated to the replaced replica",
    )

    # Where the kill above landed depends on timing; this one does not. A datadir whose init never
    # reached its end (no marker from the last init script) is what such a kill leaves: the replica
    # must start over from an empty datadir and replicate everything again, not serve what is there.
    sql.shell(replica, "rm /var/lib/mysql/mysql-operator-initialised")
    uid = kill(mysql, replica)
    wait_replaced_and_ready(mysql, replica, uid, timeouts)
    server_log = core.read_namespaced_pod_log(replica, mysql.namespace, container="mysql")
    assert "did not finish" in server_log, server_log
    assert sql.ok(replica, "SELECT @@read_only") == "1"
    sql.answers(replica, "SELECT id FROM after_kill.t", "7")  # replicated anew into the new datadir

    # A server that dies during its init is restarted by the kubelet alone, without the pod's init
    # containers: the server's own start settles the datadir, so the same pod comes back replicating.
    sql.shell(replica, "rm /var/lib/mysql/mysql-operator-initialised")
    uid, restarts = pod_uid_and_restarts(mysql, replica)
    sql.shell(replica, "kill -TERM 1")  # the server is PID 1: a clean stop ends the container

    def restarted_and_ready() -> None:
        now_uid, now_restarts = pod_uid_and_restarts(mysql, replica)
        assert now_uid == uid, "the pod was replaced; this case is about the same pod"
        assert now_restarts > restarts, "the server container has not restarted yet"
        assert pod_ready(mysql, replica), f"{replica} not ready"

    eventually(restarted_and_ready, timeout=timeouts(240), description=f"{replica}'s server restarted, ready")
    server_log = core.read_namespaced_pod_log(replica, mysql.namespace, container="mysql")
    assert "did not finish" in server_log, server_log
    assert sql.ok(replica, "SELECT @@read_only") == "1"
    sql.answers(replica, "SELECT id FROM after_kill.t", "7")

    # Readiness is replication: a stopped replica is unready until it replicates again.
    sql.ok(replica, STOP)
    eventually(lambda: readiness_is(mysql, replica, False), timeout=timeouts(60), description="unready")
    sql.ok(replica, START)
    eventually(lambda: readiness_is(mysql, replica, True), timeout=timeouts(60), description="ready again")
