"""Following the audit log as it grows, across rotations, truncations and bad bytes."""

from __future__ import annotations

import os
from pathlib import Path

from envtest.record.follow import LogFollower


def test_starts_at_the_end_and_returns_only_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("old line\n")
    follower = LogFollower(log)
    assert follower.read() == []
    with open(log, "a") as fh:
        fh.write('{"a": 1}\n{"b": ')
    assert follower.read() == ['{"a": 1}']
    with open(log, "a") as fh:
        fh.write("2}\n")
    assert follower.read() == ['{"b": 2}']


def test_a_log_not_written_yet_is_read_from_its_start_once_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    follower = LogFollower(log)
    assert follower.read() == []
    log.write_text("first\n")
    assert follower.read() == ["first"]
    assert follower.problems == []


def test_rotation_finishes_the_old_file_then_reads_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("")
    follower = LogFollower(log)
    with open(log, "a") as fh:
        fh.write("one\n")
    assert follower.read() == ["one"]
    with open(log, "a") as fh:  # written after our read, before the rename: must not be lost
        fh.write("two\n")
    os.rename(log, tmp_path / "audit-2026-01-01T00-00-00.000.log")
    log.write_text("three\n")
    assert follower.read() == ["two", "three"]
    assert follower.rotations == 1


def test_renamed_log_without_a_new_one_yet_keeps_being_read(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("")
    follower = LogFollower(log)
    rotated = tmp_path / "audit-1.log"
    os.rename(log, rotated)
    with open(rotated, "a") as fh:
        fh.write("late\n")
    assert follower.read() == ["late"]


def test_a_truncated_log_is_read_again_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("a long first line\n")
    follower = LogFollower(log, from_start=True)
    assert follower.read() == ["a long first line"]
    log.write_text("x\n")  # same inode, shorter
    assert follower.read() == ["x"]
    assert follower.rotations == 1


def test_bad_bytes_are_replaced_not_raised(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_bytes(b"\xff\xfe garbage\n\n")
    assert LogFollower(log, from_start=True).read() == ["\ufffd\ufffd garbage"]


def test_an_unreadable_log_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.mkdir()  # opening a directory fails on read
    follower = LogFollower(log)
    assert follower.read() == []
    assert follower.problems
