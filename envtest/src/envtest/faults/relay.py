"""The HTTP side of the fault proxy: TLS per connection, one request in, its fate applied, the reply
relayed (watches line by line, flushed per event). Decisions and counters live in `envtest.faults`."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import urllib3

from envtest.faults.rules import (
    FORWARD,
    CutWatch,
    DropReply,
    ExpireWatch,
    Precondition,
    RequestInfo,
    Respond,
    expired_event,
    status_body,
    with_precondition,
)

if TYPE_CHECKING:
    from envtest.faults import FaultProxy

log = logging.getLogger("envtest.faults")

CLIENT_PREFIX = "/envtest-client/"
# Per connection, never forwarded (RFC 9110 §7.6.1); Accept-Encoding so watch lines stay readable.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)
NOT_FORWARDED = _HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
_UPSTREAM_ERRORS = (urllib3.exceptions.HTTPError, OSError)


def _token_subject(authorization: str) -> str:
    """The `sub` of a bearer JWT, read unverified: a label for counters, never a security decision."""
    token = authorization.removeprefix("Bearer ").strip()
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims["sub"])
    except (IndexError, KeyError, ValueError, TypeError):
        return "anonymous" if not token else "token"


def hard_close(sock: socket.socket) -> None:
    # The plain socket's shutdown, even on an SSLSocket: wakes a reader blocked in another thread
    # and leaves no TLS close_notify, as a crashed peer or a cut cable would.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class RelayServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy

    def finish_request(self, request: Any, client_address: Any) -> None:
        # TLS handshakes happen here, on the connection's own thread, so a slow client blocks no one.
        request.settimeout(10)
        try:
            tls = self.proxy._tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        tls.settimeout(None)
        self.proxy._track(tls, "")
        try:
            RelayHandler(tls, client_address, self)
        finally:
            self.proxy._untrack(tls)
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("fault proxy: connection from %s failed", client_address, exc_info=True)


class RelayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RelayServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the proxy keeps its own request log

    def do_GET(self) -> None:
        try:
            self._serve()
        except (OSError, ssl.SSLError, *_UPSTREAM_ERRORS):
            self._abort()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    # -- one request ----------------------------------------------------------------------------

    def _serve(self) -> None:
        proxy = self.server.proxy
        path, client = self.path, ""
        if path.startswith(CLIENT_PREFIX):
            client, _, rest = path[len(CLIENT_PREFIX) :].partition("/")
            path = "/" + rest
        client = client or _token_subject(self.headers.get("Authorization", ""))
        proxy._track(self.connection, client)
        body = self._read_body()
        if proxy._killed(client):  # a dead process sends nothing: not even counted
            return self._abort()
        route, _, query = path.partition("?")
        info = RequestInfo.parse(self.command, route, query, body)
        received = time.monotonic()
        rule = proxy._decide(client, info)
        self.outcome = ""  # the code the client got; "" when its connection was cut instead
        self.sent: float | None = None  # when it went upstream; None while the proxy alone answers
        self._unrecorded: tuple[str, RequestInfo, Any, float] | None = (client, info, rule, received)
        try:
            self._apply(info, rule, client, path, body)
        finally:
            self._record()

    def _record(self) -> None:
        """Count the exchange, once. Also called before a whole reply's last bytes leave: a client
        holding its reply finds it in `exchanges()` already, never a moment later."""
        if self._unrecorded is not None:
            (client, info, rule, received), self._unrecorded = self._unrecorded, None
            self.server.proxy._answered(client, info, rule, self.outcome, received=received, sent=self.sent)

    def _apply(self, info: RequestInfo, rule: Any, client: str, path: str, body: bytes) -> None:
        proxy = self.server.proxy
        action = rule.action if rule is not None else FORWARD
        if rule is not None and rule.latency and not proxy._pause(rule.latency, client):
            return self._abort()
        if rule is not None and rule.hold is not None and not proxy._hold(rule.hold, client):
            return self._abort()
        if proxy._killed(client):  # died while its request was held: it never reaches the apiserver
            return self._abort()
        if isinstance(action, Respond):
            return self._send_status(action, info)
        if isinstance(action, ExpireWatch) and action.after_events == 0:
            return self._send_expired()
        if self.headers.get("Upgrade"):
            refused = Respond(400, "BadRequest", "the fault proxy does not relay upgrades")
            return self._send_status(refused, info)
        if isinstance(action, Precondition):
            body = with_precondition(body, action.resource_version) or body
        self.sent = time.monotonic()
        upstream = proxy._forward(self.command, path, self.headers, body, watch=info.verb == "watch")
        try:
            if isinstance(action, DropReply):
                upstream.read()  # let the apiserver finish: the write happened, only the reply is lost
                return self._abort()
            self.outcome = str(upstream.status)
            self._relay(upstream, info, action, client)
        finally:
            upstream.release_conn()

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # -- answers --------------------------------------------------------------------------------

    def _send_status(self, respond: Respond, info: RequestInfo) -> None:
        self.outcome = str(respond.code)
        data = json.dumps(status_body(respond, info)).encode()
        self.send_response(respond.code)
        self.send_header("Content-Type", "application/json")
        if respond.retry_after is not None:
            self.send_header("Retry-After", str(respond.retry_after))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self._record()
        self.wfile.write(data)

    def _send_expired(self) -> None:
        self.outcome = "200"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunk(json.dumps(expired_event()).encode() + b"\n")
        self._chunk(b"")

    def _relay(self, upstream: urllib3.BaseHTTPResponse, info: RequestInfo, action: Any, client: str) -> None:
        self.send_response_only(upstream.status, upstream.reason)
        for key, value in upstream.headers.items():
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        streaming = info.verb == "watch" or upstream.headers.get("Transfer-Encoding", "").lower() == "chunked"
        if not streaming:
            data = upstream.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self._record()
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        if info.verb == "watch" and upstream.status == 200:
            self._relay_watch(upstream, info, action, client)  # sends the headers once it is registered
            return
        self.end_headers()
        self.wfile.flush()
        for data in upstream.stream(None):
            self._chunk(data)
        self._chunk(b"")

    def _relay_watch(self, upstream: Any, info: RequestInfo, action: Any, client: str) -> None:
        proxy = self.server.proxy
        limit = action.after_events if isinstance(action, (CutWatch, ExpireWatch)) else None
        cut = threading.Event()

        def sever() -> None:
            cut.set()
            hard_close(self.connection)
            # The upstream may have ended on its own already (its socket released): nothing to cut.
            with contextlib.suppress(ValueError, OSError):
                upstream.shutdown()

        stream = (info, client, sever)
        proxy._watch_opened(stream)
        timer = None
        if isinstance(action, CutWatch) and action.after_seconds is not None:
            timer = threading.Timer(action.after_seconds, sever)
            timer.daemon = True
            timer.start()
        try:
            # Headers only now: a client that has seen the 200 may cut or count this watch at once.
            self.end_headers()
            self.wfile.flush()
            events, pending = 0, b""
            if limit is not None and events >= limit:
                return self._end_watch(action, upstream)
            for data in upstream.stream(None):
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    self._chunk(line + b"\n")  # one flush per event: no buffering of the stream
                    events += 1
                    if limit is not None and events >= limit:
                        return self._end_watch(action, upstream)
            if cut.is_set():
                return self._abort()
            if pending:
                self._chunk(pending)
            self._chunk(b"")
        finally:
            proxy._watch_closed(stream)
            if timer is not None:
                timer.cancel()

    def _end_watch(self, action: Any, upstream: Any) -> None:
        upstream.close()
        if isinstance(action, ExpireWatch):
            self._chunk(json.dumps(expired_event()).encode() + b"\n")
            self._chunk(b"")
        else:
            self._abort()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _abort(self) -> None:
        self.outcome = ""
        self.close_connection = True
        hard_close(self.connection)
