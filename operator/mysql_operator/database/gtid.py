"""GTID positions of both engines, and which of several servers holds the most.

* MySQL: a GTID set, `uuid:1-5:7,uuid2:1-3` — every transaction by its origin server's uuid and number.
  One set covers another when it contains it.
* MariaDB: a GTID position, `0-101-42,1-102-7` — per replication domain the last transaction
  (domain-server-sequence). With gtid_strict_mode sequence numbers only grow within a domain, so one
  position covers another when, domain by domain, its sequence number is at least the other's.

A failover promotes a server whose position covers every other's: nothing any replica received is
lost. When none covers all (a transaction only one replica has: someone wrote there), the positions
have diverged and promoting any of them would discard something silently; the operator refuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_MYSQL_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


class GtidError(ValueError):
    """Text that is no GTID set or position; the message quotes it."""


@dataclass(frozen=True)
class Position:
    """A server's GTIDs, comparable with another of the same engine."""

    engine: str
    mysql: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    """uuid → sorted, merged, inclusive intervals (MySQL)."""
    mariadb: dict[int, tuple[int, int]] = field(default_factory=dict)
    """domain → (server id, last sequence number) (MariaDB)."""
    text: str = ""
    """As the server printed it, for messages."""

    @property
    def empty(self) -> bool:
        return not self.mysql and not self.mariadb

    @property
    def transactions(self) -> int:
        """How many transactions (MySQL), or the sum of the domains' sequence numbers (MariaDB): a size
        to order positions that do not cover one another, never to decide that one covers another."""
        if self.engine == "mysql":
            return sum(b - a + 1 for intervals in self.mysql.values() for a, b in intervals)
        return sum(seq for _, seq in self.mariadb.values())

    def covers(self, other: Position) -> bool:
        """Every transaction in `other` is in this one."""
        if self.engine != other.engine:
            raise GtidError(f"cannot compare a {self.engine} position with a {other.engine} one")
        if self.engine == "mariadb":
            return all(self.mariadb.get(d, (0, -1))[1] >= seq for d, (_, seq) in other.mariadb.items())
        return all(_contains(self.mysql.get(uuid, ()), intervals) for uuid, intervals in other.mysql.items())

    def union(self, other: Position) -> Position:
        """What either holds: a replica's received GTIDs together with those it applied."""
        if self.engine == "mariadb":
            merged = dict(self.mariadb)
            for domain, gtid in other.mariadb.items():
                if gtid[1] > merged.get(domain, (0, -1))[1]:
                    merged[domain] = gtid
            return Position("mariadb", mariadb=merged, text=_mariadb_text(merged))
        uuids = set(self.mysql) | set(other.mysql)
        sets = {u: _merge([*self.mysql.get(u, ()), *other.mysql.get(u, ())]) for u in uuids}
        return Position("mysql", mysql=sets, text=_mysql_text(sets))


def parse(engine: str, text: str | None) -> Position:
    """`text` as the server prints it (whitespace and line breaks allowed); empty or None: no GTIDs."""
    text = "".join((text or "").split())
    if engine == "mariadb":
        positions: dict[int, tuple[int, int]] = {}
        for part in filter(None, text.split(",")):
            m = _MARIADB_GTID.match(part)
            if not m:
                raise GtidError(f"not a MariaDB GTID position: {text!r}")
            domain, server, seq = (int(g) for g in m.groups())
            if seq > positions.get(domain, (0, -1))[1]:
                positions[domain] = (server, seq)
        return Position("mariadb", mariadb=positions, text=text)
    sets: dict[str, list[tuple[int, int]]] = {}
    for part in filter(None, text.split(",")):
        uuid, *intervals = part.split(":")
        if not uuid or not intervals:
            raise GtidError(f"not a MySQL GTID set: {text!r}")
        for interval in intervals:
            m = _MYSQL_INTERVAL.match(interval)
            if not m:
                raise GtidError(f"not a MySQL GTID set: {text!r}")
            a = int(m.group(1))
            sets.setdefault(uuid.lower(), []).append((a, int(m.group(2) or a)))
    merged = {u: _merge(iv) for u, iv in sets.items()}
    return Position("mysql", mysql=merged, text=text)


@dataclass(frozen=True)
class Ranking:
    """The outcome of comparing servers' positions."""

    best: str | None
    """The server to promote: its position covers every other's (the lowest name among equals)."""
    diverged: bool = False
    """No position covers all the others."""


def most_advanced(positions: dict[str, Position]) -> Ranking:
    """The server whose position covers every other's; ties go to the first name in sort order (names
    carry the ordinal, so the lowest ordinal)."""
    if not positions:
        return Ranking(None)
    covering = [n for n, p in positions.items() if all(p.covers(q) for q in positions.values())]
    if covering:
        return Ranking(min(covering, key=_ordinal_order))
    return Ranking(None, diverged=True)


def _ordinal_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def _merge(intervals: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _contains(have: tuple[tuple[int, int], ...], want: tuple[tuple[int, int], ...]) -> bool:
    return all(any(a <= x and y <= b for a, b in have) for x, y in want)


def _mariadb_text(positions: dict[int, tuple[int, int]]) -> str:
    return ",".join(f"{d}-{server}-{seq}" for d, (server, seq) in sorted(positions.items()))


def _mysql_text(sets: dict[str, tuple[tuple[int, int], ...]]) -> str:
    def interval(a: int, b: int) -> str:
        return str(a) if a == b else f"{a}-{b}"

    return ",".join(f"{u}:" + ":".join(interval(a, b) for a, b in iv) for u, iv in sorted(sets.items()))
