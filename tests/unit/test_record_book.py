"""Attributing audit lines to the tests that watch them, and reading up to a sync marker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from record_fakes import NS, OPERATOR, event, line
from stepclock import StepClock

from envtest.record.book import RecordBook
from envtest.record.events import operator_user


def _book() -> tuple[RecordBook, StepClock]:
    steps = StepClock()
    return RecordBook(clock=steps, sleep=steps.sleep), steps


def _append(log: Path, *lines: str) -> None:
    with open(log, "a") as fh:
        fh.writelines(lines)


def _marker_ping(log: Path):
    def ping(path: str) -> None:  # the apiserver writes the marker's event before it answers
        _append(log, json.dumps(event("get", user="envtest-admin", uri=path, name="", resource="")) + "\n")

    return ping


def test_each_namespace_keeps_its_operators_requests_and_others_writes(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(line(at=-1))  # before the book watched: not ours
    book, _ = _book()
    book.watch(log, NS)
    other_ns = "test-b-4d5e6f"
    book.watch(log, other_ns)
    _append(
        log,
        line(verb="list", name="", at=1),
        line(verb="list", name="", namespace="", resource="nodes", group="", at=1.5),  # cluster-wide, ours
        line(verb="patch", user="envtest-admin", at=2),  # another user's write in our namespace
        line(verb="get", user="envtest-admin", at=2.5),  # another user's read: not the record's
        line(verb="get", user=operator_user(other_ns), namespace=other_ns, at=3),
        line(verb="get", user=operator_user("nobody-watches"), namespace="nobody-watches", at=4),
    )
    assert book.sync(log, _marker_ping(log))
    mine = book.take(NS)
    assert [(r.user, r.verb, r.resource) for r in mine] == [
        (OPERATOR, "list", "widgets"),
        (OPERATOR, "list", "nodes"),
        ("envtest-admin", "patch", "widgets"),
    ]
    assert [r.namespace for r in book.requests(other_ns)] == [other_ns]
    assert book.take(NS) == []  # taken: no longer watched


def test_malformed_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("")
    book, _ = _book()
    book.watch(log, NS)
    _append(log, "garbage\n", '{"kind": "Event", "user": "' + NS + '"}\n', f'{{"cut off {NS}\n', line(at=1))
    assert book.sync(log, _marker_ping(log))
    assert len(book.take(NS)) == 1
    assert book.malformed == 3


def test_sync_gives_up_after_its_timeout_when_the_marker_never_shows(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("")
    book, steps = _book()
    book.watch(log, NS)
    assert not book.sync(log, lambda path: None, timeout=1.0)
    assert steps.now == pytest.approx(1.0)


def test_a_failed_ping_is_an_unsynced_record_not_an_exception(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    book, _ = _book()
    book.watch(log, NS)

    def refused(path: str) -> None:
        raise ConnectionError("refused")

    assert not book.sync(log, refused)
    assert not book.sync(tmp_path / "never-watched.log", refused)


def test_forgetting_a_log_keeps_what_was_read(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("")
    book, _ = _book()
    book.watch(log, NS)
    _append(log, line(at=1))
    assert book.sync(log, _marker_ping(log))
    book.forget(log)
    assert len(book.take(NS)) == 1
