"""Following kube-apiserver's audit log as it grows, the way `tail -F` does: from where it stood when
the follower started, across rotations, without ever failing.

The apiserver rotates its log by renaming it (`audit-<time>.log`) and opening a new `audit.log`.
The follower keeps the old file open, so it finishes the lines written there before the rename,
then moves to the new one from its start. A log truncated in place is read again from its start.
A missing or unreadable file yields nothing (and `problems` says why): the record is then
incomplete, which its report says; no test fails for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

CHUNK = 4 * 1024 * 1024


class LogFollower:
    """Complete lines appended to `path` since the follower was made (`from_start`: since the file
    began). Not thread-safe: one reader at a time (`envtest.record.book` holds a lock around it)."""

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = Path(path)
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self._partial = b""  # bytes after the last newline: a line still being written
        self.rotations = 0
        """Times the log was renamed away (or truncated) under the follower."""
        self.problems: list[str] = []
        """What kept the follower from reading (opening, reading); the record's report lists them."""
        self._open(at_end=not from_start)

    def _open(self, *, at_end: bool) -> bool:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - kept open across calls, closed in close()
        except FileNotFoundError:
            return False  # not written yet: the apiserver creates it with its first event
        except OSError as exc:
            self._problem(f"cannot open {self.path}: {exc}")
            return False
        if at_end:
            fh.seek(0, os.SEEK_END)
        self._fh, self._inode = fh, os.fstat(fh.fileno()).st_ino
        return True

    def _problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def read(self) -> list[str]:
        """Every complete line written since the last call (possibly none)."""
        if self._fh is None and not self._open(at_end=False):
            return []
        lines = self._drain()
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return lines  # renamed, the new file not made yet: the old one may still grow
        except OSError as exc:
            self._problem(f"cannot stat {self.path}: {exc}")
            return lines
        assert self._fh is not None
        if current.st_ino != self._inode:
            lines += self._drain()  # what reached the old file between the read and the rename
            if self._partial:
                self._problem(f"{self.path}: a line cut off at rotation was dropped")
                self._partial = b""
            self._fh.close()
            self.rotations += 1
            if self._open(at_end=False):
                lines += self._drain()
        elif current.st_size < self._fh.tell():
            self.rotations += 1
            self._partial = b""
            self._fh.seek(0)
            lines += self._drain()
        return lines

    def _drain(self) -> list[str]:
        assert self._fh is not None
        data = bytearray(self._partial)
        try:
            while chunk := self._fh.read(CHUNK):
                data += chunk
        except OSError as exc:
            self._problem(f"cannot read {self.path}: {exc}")
        complete, newline, self._partial = bytes(data).rpartition(b"\n")
        if not newline:
            return []
        return [line for line in complete.decode("utf-8", errors="replace").split("\n") if line]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
