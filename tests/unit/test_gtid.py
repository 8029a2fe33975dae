"""GTID positions of both engines: parsing what the servers print, and which covers which."""

from __future__ import annotations

import pytest

from mysql_operator.database.gtid import GtidError, most_advanced, parse

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "4f22ab58-82db-22f2-af44-d91bb0530673"


def test_a_mysql_set_covers_what_it_contains_and_nothing_more() -> None:
    big = parse("mysql", f"{UUID_A}:1-10:12-20,\n{UUID_B}:1-3")
    assert big.covers(parse("mysql", f"{UUID_A}:1-5:14"))
    assert big.covers(parse("mysql", f"{UUID_B.upper()}:2"))
    assert not big.covers(parse("mysql", f"{UUID_A}:11")), "a gap is a transaction it lacks"
    assert not big.covers(parse("mysql", f"{UUID_A}:1-21"))
    assert big.transactions == 10 + 9 + 3


def test_mysql_intervals_are_merged_so_equal_sets_compare_equal() -> None:
    a, b = parse("mysql", f"{UUID_A}:1-5:6-9"), parse("mysql", f"{UUID_A}:1-9")
    assert a.covers(b) and b.covers(a)
    assert a.union(parse("mysql", f"{UUID_A}:10-12")).text == f"{UUID_A}:1-12"


def test_a_mariadb_position_covers_by_sequence_number_per_domain() -> None:
    pos = parse("mariadb", "0-101-42,1-102-7")
    assert pos.covers(parse("mariadb", "0-102-40"))  # another server wrote 40 in domain 0: still behind
    assert not pos.covers(parse("mariadb", "0-101-43"))
    assert not pos.covers(parse("mariadb", "2-101-1")), "a domain it never saw"
    assert pos.union(parse("mariadb", "0-103-50")).text == "0-103-50,1-102-7"


@pytest.mark.parametrize(
    ("engine", "text"), [("mariadb", "0-1"), ("mysql", "uuid"), ("mysql", f"{UUID_A}:x")]
)
def test_what_is_no_gtid_is_an_error_quoting_it(engine: str, text: str) -> None:
    with pytest.raises(GtidError, match="GTID"):
        parse(engine, text)


def test_empty_or_missing_is_no_gtids() -> None:
    assert parse("mariadb", "").empty and parse("mysql", None).empty


def test_the_most_advanced_covers_all_and_ties_go_to_the_lowest_ordinal() -> None:
    positions = {
        "db-mysql-2": parse("mariadb", "0-100-9"),
        "db-mysql-10": parse("mariadb", "0-100-9"),
        "db-mysql-1": parse("mariadb", "0-100-7"),
    }
    assert most_advanced(positions).best == "db-mysql-2"


def test_positions_that_diverged_have_no_best() -> None:
    ranking = most_advanced(
        {"a-1": parse("mysql", f"{UUID_A}:1-5"), "a-2": parse("mysql", f"{UUID_A}:1-4:6")}
    )
    assert ranking.best is None and ranking.diverged
