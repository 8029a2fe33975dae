"""The failover decisions (database/failover.py) and how the operator reads a server's answer
(database/actions.py): pure functions, time passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mysql_operator.database.actions import Observed, parse_observed
from mysql_operator.database.engines import MARIADB, MYSQL
from mysql_operator.database.failover import Member, assess, choose, cut_off, due
from mysql_operator.database.gtid import parse

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def member(name: str, **state: object) -> Member:
    return Member(name=name, **{"ready": True, "running": True, "claim_uid": "claim-1", **state})  # type: ignore[arg-type]


def observed(
    gtid: str, *, replicating: bool = True, io: str = "Yes", errno: str = "0", error: str = ""
) -> Observed:
    position = parse("mariadb", gtid)
    return Observed(
        read_only=True,
        executed=position,
        received=position,
        relay=gtid,
        replicating=replicating,
        io_running=io,
        sql_running="Yes",
        io_error=error,
        io_errno=errno,
        source="db-primary.ns.svc",
    )


# -- assess ---------------------------------------------------------------------------------------


def test_a_ready_primary_on_its_volume_is_available() -> None:
    found = assess(member("db-mysql-0"), "db-mysql-0", [member("db-mysql-1")], "claim-1")
    assert found.state == "available"


@pytest.mark.parametrize(
    ("primary", "reason"),
    [
        (None, "PrimaryGone"),
        (member("db-mysql-0", terminating=True), "PrimaryTerminating"),
        (member("db-mysql-0", ready=False), "PrimaryNotReady"),
    ],
)
def test_a_primary_gone_terminating_or_unready_is_lost_after_the_wait(
    primary: Member | None, reason: str
) -> None:
    found = assess(primary, "db-mysql-0", [member("db-mysql-1")], "claim-1")
    assert (found.state, found.reason, found.immediate) == ("lost", reason, False)
    assert "db-mysql-0" in found.message


def test_a_primary_on_a_new_volume_is_lost_at_once_ready_or_not() -> None:
    """Pod 0 back on an empty claim over a cluster that ran: never served as primary."""
    found = assess(member("db-mysql-0", claim_uid="claim-2"), "db-mysql-0", [], "claim-1")
    assert (found.state, found.reason, found.immediate) == ("lost", "PrimaryDataReplaced", True)
    assert "claim-2" in found.message and "claim-1" in found.message


def test_a_ready_primary_whose_replicas_are_all_unready_is_suspect_only_while_they_run() -> None:
    unready = [member("db-mysql-1", ready=False), member("db-mysql-2", ready=False)]
    assert assess(member("db-mysql-0"), "db-mysql-0", unready, "claim-1").state == "suspect"
    starting = [member("db-mysql-1", ready=False, running=False)]
    assert assess(member("db-mysql-0"), "db-mysql-0", starting, "claim-1").state == "available"
    assert assess(member("db-mysql-0"), "db-mysql-0", [], "claim-1").state == "available"


def test_the_wait_runs_from_when_it_was_first_lost() -> None:
    since = NOW - timedelta(seconds=10)
    assert due(since, NOW, 30) == NOW + timedelta(seconds=20)
    assert due(None, NOW, 30) == NOW + timedelta(seconds=30)
    assert due(since, NOW, 30, immediate=True) == since


def test_replicas_are_cut_off_only_when_all_lost_their_connection() -> None:
    lost = observed("0-100-5", io="Connecting", errno="2003", error="Can't connect to server")
    assert "Can't connect" in (cut_off({"a": lost, "b": lost}) or "")
    assert cut_off({"a": lost, "b": observed("0-100-5")}) is None
    assert cut_off({}) is None
    assert cut_off({"a": observed("0-100-5", replicating=False, io="")}) is None


# -- choose ---------------------------------------------------------------------------------------


def test_the_replica_that_received_most_is_promoted() -> None:
    choice = choose({"db-mysql-1": observed("0-100-7"), "db-mysql-2": observed("0-100-9")})
    assert choice.candidate == "db-mysql-2"


def test_diverged_replicas_are_never_promoted_silently() -> None:
    a, b = observed("0-100-7,1-101-3"), observed("0-100-9")
    choice = choose({"db-mysql-1": a, "db-mysql-2": b})
    assert (choice.candidate, choice.reason) == (None, "ReplicasDiverged")
    assert "db-mysql-1: 0-100-7,1-101-3" in choice.message


def test_replicas_without_any_transaction_are_not_promoted() -> None:
    choice = choose({"db-mysql-1": observed(""), "db-mysql-2": observed("")})
    assert (choice.candidate, choice.reason) == (None, "NoCandidateWithData")
    assert choose({}).reason == "NoCandidate"


def test_an_empty_replica_beside_one_with_data_is_not_a_tie() -> None:
    assert choose({"db-mysql-1": observed(""), "db-mysql-2": observed("0-100-1")}).candidate == "db-mysql-2"


# -- what the servers print -------------------------------------------------------------------------


def test_a_mariadb_replicas_answer_is_read_with_what_it_received() -> None:
    out = (
        "== variables\n"
        "read_only\t1\n"
        "gtid_current_pos\t0-100-40\n"
        "gtid_slave_pos\t0-100-40\n"
        "gtid_binlog_pos\t0-100-40\n"
        "== replica\n"
        "*************************** 1. row ***************************\n"
        "                Slave_IO_State: Reconnecting after a failed master event read\n"
        "                   Master_Host: db-primary.ns.svc\n"
        "              Slave_IO_Running: Connecting\n"
        "             Slave_SQL_Running: Yes\n"
        "                 Last_IO_Errno: 2003\n"
        "                 Last_IO_Error: error reconnecting to master 'repl@db-primary.ns.svc:3306'\n"
        "                   Gtid_IO_Pos: 0-100-42\n"
        "== end\n"
    )
    seen = parse_observed(MARIADB, out)
    assert seen.read_only and seen.replicating
    assert (seen.io_running, seen.sql_running, seen.io_errno) == ("Connecting", "Yes", "2003")
    assert seen.relay == "0-100-42" and seen.received.text == "0-100-42"
    assert seen.received.covers(seen.executed) and not seen.executed.covers(seen.received)


def test_a_mysql_primarys_answer_spans_lines_and_has_no_replica_status() -> None:
    out = (
        "== variables\nread_only\t0\ngtid_executed\t3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77\n"
        "== replica\n== end\n"
    )
    seen = parse_observed(MYSQL, out)
    assert not seen.read_only and not seen.replicating and seen.relay == ""
    assert seen.received.transactions == 77


def test_an_answer_cut_short_is_no_answer() -> None:
    with pytest.raises(ValueError, match="incomplete"):
        parse_observed(MARIADB, "== variables\nread_only\t1\n")
