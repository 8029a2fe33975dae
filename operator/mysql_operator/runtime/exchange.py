"""The HTTP/1.1 requests of one webhook connection, read and written against deadlines.

http.server parses the request line and headers (each line and the header count are bounded there); what it
leaves open is added here: a body is read only when its Content-Length is present, one decimal number and
under the path's cap (else 411, 400 or 413, and the connection closes, since the body is still in it), and
only once the server's memory pool for bodies holds its bytes; it is parsed only once its pool for parses
holds what parsing and answering it can cost (`budget.RequestMemory`: 413 when that is over the whole pool,
503 with Retry-After when no room comes within `Timeouts.memory`); every timeout is a deadline for a whole
phase, not for each recv(): a socket timeout alone restarts with every byte, which is exactly what a
slow-drip client exploits.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from .budget import Hold, MemoryBudget, RequestMemory, request_cost

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timeouts:
    idle: float
    """Seconds for the next request to begin on a kept-alive connection."""
    read: float
    """Seconds from a request's first byte until its body is in."""
    write: float
    """Seconds to write one reply."""
    memory: float = math.inf
    """Seconds a request waits for room in the memory budget (never past its read deadline)."""


class Host(Protocol):
    """What an exchange needs of its server."""

    memory: RequestMemory
    """Shared by every connection: what bodies and their parses may hold at once."""

    def body_cap(self, path: str) -> int | None:
        """Largest body ``path`` accepts; None when nothing is served there (404)."""
        ...

    def dispatch(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON reply) for a complete body."""
        ...

    def request_started(self, conn: object) -> None: ...

    def request_finished(self, conn: object) -> bool:
        """False when the connection must close (the server is stopping)."""
        ...


class Exchange(BaseHTTPRequestHandler):
    """Serves the requests of one TLS connection until it closes; construction runs it all."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the apiserver expects; every reply has a length
    server_version = "mysql-operator-webhooks"
    sys_version = ""  # no Python version in the Server header

    def __init__(self, tls: ssl.SSLSocket, peer: str, host: Host, conn: object, timeouts: Timeouts) -> None:
        self.host, self.conn = host, conn
        self.deadlines = Deadlines(tls, timeouts, on_request=lambda: host.request_started(conn))
        super().__init__(tls, peer, host)  # type: ignore[arg-type]  # runs setup(), handle(), finish()

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BufferedReader(self.deadlines, 64 * 1024)  # type: ignore[assignment]
        self.wfile = self.deadlines  # type: ignore[assignment]

    def finish(self) -> None:
        pass  # nothing buffered on the write side; the connection's thread closes the socket

    def handle_one_request(self) -> None:
        self.deadlines.await_request()
        super().handle_one_request()
        if not self.host.request_finished(self.conn):
            self.close_connection = True

    def do_POST(self) -> None:
        path = "/" + self.path.split("?", 1)[0].lstrip("/")
        cap = self.host.body_cap(path)
        if cap is None:
            self._fail(404, f"no webhook at {path}")
            return
        length = self._length(path, cap)
        if length is None:
            return
        held: list[Hold] = []
        try:
            if not self._reserve(held, self.host.memory.bodies, length, "bodies"):
                return
            body = self.rfile.read(length)
            if len(body) < length:  # the peer closed mid-body
                self.close_connection = True
                return
            cost = request_cost(body) - len(body)
            if not self._reserve(held, self.host.memory.parses, cost, "parses", body_bytes=len(body)):
                return
            self.deadlines.request_read()
            self._reply(*self.host.dispatch(path, body))
        finally:
            for hold in held:
                hold.release()

    def _reserve(
        self, held: list[Hold], pool: MemoryBudget, n: int, name: str, *, body_bytes: int | None = None
    ) -> bool:
        """Hold `n` bytes of `pool` (into `held`); else reply (413: never fits, 503: no room in time)."""
        if n > pool.total:
            what = (
                f"body of {n} bytes"
                if body_bytes is None
                else f"body of {body_bytes} bytes could take {_size(n)} once parsed,"
            )
            message = f"{what} over the webhook server's memory for {name} ({_size(pool.total)})"
            self._reply(413, {"message": message}, close=body_bytes is None)
            return False
        hold = pool.reserve(n, self.deadlines.memory_deadline())
        if hold is None:
            self._busy()
            return False
        held.append(hold)
        return True

    def _busy(self) -> None:
        self._reply(
            503,
            {"message": "the webhook server's memory budget stayed taken; retry"},
            close=True,
            retry_after=1,
        )

    def _length(self, path: str, cap: int) -> int | None:
        """The body's length if it may be read; otherwise reply (411, 400, 413) and return None."""
        if self.headers.get("Transfer-Encoding"):
            self._fail(411, "send the body with a Content-Length; chunked bodies are not read")
            return None
        values = self.headers.get_all("Content-Length") or []
        if not values:
            self._fail(411, "Content-Length is required")
            return None
        if len(set(values)) != 1 or not re.fullmatch(r"[0-9]{1,19}", values[0].strip()):
            self._fail(400, f"Content-Length: not one decimal length: {', '.join(values)[:60]!r}")
            return None
        length = int(values[0])
        if length > cap:
            self._fail(413, f"body of {length} bytes is over the {cap}-byte limit of {path}")
            return None
        return length

    def _fail(self, status: int, message: str) -> None:
        """Reply and close: the body, if any, was not read, so the connection cannot carry another."""
        self._reply(status, {"message": message}, close=True)

    def _reply(
        self, status: int, payload: dict[str, Any], *, close: bool = False, retry_after: int | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class Deadlines(io.RawIOBase):
    """One connection's socket, read and written against deadlines for whole phases.

    Reading: `await_request` gives the next request ``idle`` seconds to begin; its first byte starts
    ``read`` seconds for the request line, headers and body. Writing: a reply's first write starts
    ``write`` seconds. Each recv/send gets only the time left, so a byte now and then does not help.
    """

    def __init__(self, sock: ssl.SSLSocket, timeouts: Timeouts, *, on_request: Callable[[], Any]) -> None:
        super().__init__()
        self._sock, self._timeouts, self._on_request = sock, timeouts, on_request
        self._read_deadline = math.inf
        self._waiting = False  # between await_request and the request's first byte
        self._write_deadline: float | None = None

    def await_request(self) -> None:
        self._read_deadline = time.monotonic() + self._timeouts.idle
        self._waiting = True
        self._write_deadline = None

    def memory_deadline(self) -> float:
        """Until when a request may wait for memory: `memory` seconds from now, within its read deadline."""
        return min(self._read_deadline, time.monotonic() + self._timeouts.memory)

    def request_read(self) -> None:
        """The body is in; the handler runs without a read deadline (it reads nothing)."""
        self._read_deadline = math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(_left(self._read_deadline, "reading the request"))
        n = self._sock.recv_into(buffer)
        if self._waiting and n:
            self._waiting = False
            self._read_deadline = time.monotonic() + self._timeouts.read
            self._on_request()
        return n

    def write(self, data: Any) -> int:  # type: ignore[override]
        if self._write_deadline is None:
            self._write_deadline = time.monotonic() + self._timeouts.write
        view = memoryview(data).cast("B")
        while view:
            self._sock.settimeout(_left(self._write_deadline, "writing the reply"))
            view = view[self._sock.send(view) :]
        return len(data)

    def flush(self) -> None:
        pass


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KiB"


def _left(deadline: float, doing: str) -> float | None:
    """Seconds until ``deadline`` (None: no deadline); TimeoutError, which http.server turns into a
    closed connection, once it has passed."""
    if deadline == math.inf:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"timed out {doing}")
    return left
