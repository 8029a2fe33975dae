"""One process's share of the record: which test namespaces it watches, on which audit logs, and the
requests read so far for each.

Attribution is by identity: an operator's request belongs to the namespace in its user name
(`events.operator_namespace`), wherever it went (a cluster-wide list included); another user's write
belongs to the namespace of the object written. Every process following one shared log (xdist
workers on one plane) reads all of it but keeps only its own tests' lines: a line that names none
of its namespaces is skipped before it is parsed.

The apiserver writes an event before the request's answer leaves it (blocking mode), but a reader
cannot tell "nothing more" from "not written yet". So `sync` asks the apiserver for a marker path
(`policy.SYNC_PATH`, an audited 404) and reads until the marker's line arrives: everything answered
before it is then in the book.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envtest.record import events, policy
from envtest.record.events import Request
from envtest.record.follow import LogFollower

SYNC_TIMEOUT = 5.0
"""Seconds `sync` waits for its marker (it arrives within milliseconds on a local plane)."""


class RecordBook:
    def __init__(
        self,
        account: str = events.OPERATOR_ACCOUNT,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.account = account
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._followers: dict[Path, LogFollower] = {}
        self._namespaces: dict[str, Path] = {}  # every key also has a list in _requests
        self._requests: dict[str, list[Request]] = {}
        self._markers: set[str] = set()  # sync markers asked for and not seen yet
        self.malformed = 0
        """Lines of a watched namespace (or not JSON at all) that were no audit event: skipped."""

    def watch(self, log: Path, namespace: str) -> None:
        """Keep `namespace`'s requests from `log`, from now on (call it before anything happens
        there). The first namespace on a log starts following it at its current end."""
        with self._lock:
            if log not in self._followers:
                self._followers[log] = LogFollower(log)
            self._namespaces[namespace] = log
            self._requests.setdefault(namespace, [])

    def sync(self, log: Path, ping: Callable[[str], object], timeout: float = SYNC_TIMEOUT) -> bool:
        """Read `log` until it holds everything the apiserver answered before now: `ping(path)` GETs
        the marker path; False when the marker did not show within `timeout` (or the ping failed)."""
        marker = uuid.uuid4().hex
        with self._lock:
            if log not in self._followers:
                return False
            self._markers.add(marker)
        try:
            ping(f"{policy.SYNC_PATH}/{marker}")
        except Exception:
            with self._lock:
                self._markers.discard(marker)
            return False
        deadline = self._clock() + timeout
        while True:
            with self._lock:
                self._pump(log)
                if marker not in self._markers:
                    return True
                if self._clock() >= deadline:
                    self._markers.discard(marker)
                    return False
            self._sleep(0.01)

    def requests(self, namespace: str) -> list[Request]:
        """What was read so far for `namespace` (a copy)."""
        with self._lock:
            return list(self._requests.get(namespace, ()))

    def take(self, namespace: str) -> list[Request]:
        """What was read for `namespace`, which is no longer watched."""
        with self._lock:
            self._namespaces.pop(namespace, None)
            return self._requests.pop(namespace, [])

    def forget(self, log: Path) -> None:
        """Stop following `log` (its plane is going); its namespaces are no longer watched."""
        with self._lock:
            follower = self._followers.pop(log, None)
            if follower is not None:
                follower.close()
            for namespace in [n for n, path in self._namespaces.items() if path == log]:
                del self._namespaces[namespace]

    def problems(self) -> list[str]:
        with self._lock:
            return [p for f in self._followers.values() for p in f.problems]

    def rotations(self) -> int:
        with self._lock:
            return sum(f.rotations for f in self._followers.values())

    def _pump(self, log: Path) -> None:
        follower = self._followers[log]
        mine = [n for n, path in self._namespaces.items() if path == log]
        tokens = [*mine, *self._markers]
        for line in follower.read():
            if not line.startswith("{"):
                self.malformed += 1
                continue
            if not any(token in line for token in tokens):
                continue
            try:
                event: Any = json.loads(line)
            except ValueError:
                self.malformed += 1
                continue
            self._file(event)

    def _file(self, event: Any) -> None:
        request = events.from_event(event)
        if request is None:
            self.malformed += 1
            return
        if request.uri.startswith(policy.SYNC_PATH + "/"):
            self._markers.discard(request.uri.rsplit("/", 1)[-1])
            return
        own = events.operator_namespace(request.user, self.account)
        if own is not None and own in self._requests:
            self._requests[own].append(request)
        elif request.is_write and request.namespace in self._requests:
            self._requests[request.namespace].append(request)
