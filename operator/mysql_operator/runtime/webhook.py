"""The operator's HTTPS webhook server: AdmissionReview v1 and ConversionReview v1, dispatched by path.

    server = WebhookServer(cert_dir / "tls.crt", cert_dir / "tls.key", listen="0.0.0.0", port=9443)
    server.admission("/validate-…", lambda request: allow())
    server.conversion("/convert", convert)
    server.start()

Each property below answers a way a webhook server takes a cluster down (with ``failurePolicy: Fail``
a dead or wedged server refuses every write it is registered for):

| property           | default (`ServerOptions`)           | without it                                    |
|--------------------|-------------------------------------|-----------------------------------------------|
| certificate reload | on every new connection             | a renewal breaks TLS until the pod restarts   |
| body cap           | 7 MiB admission, 32 MiB conversion  | any client makes the process allocate at will |
| handshake timeout  | 10 s                                | a silent TCP client holds a thread forever    |
| read timeout       | 30 s from a request's first byte    | so does a client dripping a byte at a time    |
| idle timeout       | 120 s between requests              | every keep-alive connection stays open        |
| write timeout      | 30 s per reply                      | a client that never reads holds its thread    |
| connections        | 64 at once                          | one thread per connection, unbounded          |
| memory budget      | 96 MiB for bodies and their parses  | 64 hostile bodies parse into gigabytes (OOM)  |

Connections over the limit **wait**: the accept loop does not call accept() without a free slot, so
they queue in the kernel's listen backlog (as Go's netutil.LimitListener does) and are served as slots
free up — the apiserver's own webhook timeout decides how long that may take — instead of being reset
(a refused call is a failed write). A slot is held from accept to close, and the timeouts bound how
long any one client can hold it. Missing or invalid lengths are refused before anything is read: 411
(no Content-Length, or chunked), 400 (not one decimal number), 413 (over the path's cap).

Why the standard library: the runtime is threads (pykube-ng is synchronous), which rules out the
asyncio servers (uvicorn, hypercorn, aiohttp) and gunicorn (it owns the process); waitress speaks no
TLS; cheroot, the threaded one that does, runs the TLS handshake on its accept loop, so one silent
client stalls every other for the whole timeout (cherrypy/cheroot#748). Here the handshake runs
in the connection's own thread, and each property above is pinned by a test
(tests/unit/test_operator_webhook_server.py).

Modules: this one accepts and owns connections; `exchange` reads and answers the requests of one (deadlines,
body cap, memory); `budget` bounds what bodies may cost at once; `reviews` builds the reviews; `certwatcher`
keeps the certificate current.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from . import reviews
from .budget import RequestMemory
from .certwatcher import CertWatcher
from .exchange import Exchange, Timeouts
from .reviews import AdmissionHandler, ConversionHandler, allow, deny

__all__ = ["AdmissionHandler", "ConversionHandler", "ServerOptions", "WebhookServer", "allow", "deny"]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
LINGER_SECONDS = 0.5
"""At most this long after our last reply, a closing connection waits for the client to close."""
LINGER_BYTES = 1 * MiB
"""At most this much of an unread body is read and discarded while closing."""


@dataclass(frozen=True)
class ServerOptions:
    max_admission_bytes: int = 7 * MiB
    """Largest AdmissionReview body: an object and its oldObject (3 MiB each at most, the apiserver's
    own request limit) plus the envelope; controller-runtime's number."""
    max_conversion_bytes: int = 32 * MiB
    """Largest ConversionReview body: a list read at a non-storage version converts all its items in
    one review, so this is sized for many objects, not one."""
    handshake_timeout: float = 10.0
    """Seconds a new connection has to complete its TLS handshake."""
    read_timeout: float = 30.0
    """Seconds from a request's first byte until its headers and body are in (the apiserver gives up
    on a webhook after at most 30 s anyway)."""
    idle_timeout: float = 120.0
    """Seconds a keep-alive connection may wait for its next request: longer than the apiserver's own
    idle timeout (90 s), so normally the client closes first and never sends into a closing socket."""
    write_timeout: float = 30.0
    """Seconds to write one reply."""
    max_connections: int = 64
    """Connections served at once; more wait in the listen backlog (see the module docstring)."""
    memory_budget: int = 96 * MiB
    """Bytes that request bodies and what parsing and answering them can cost may hold at once, over
    all connections (`budget.RequestMemory`: a third for bodies' bytes, the rest for parses); a
    request waits for room for `memory_wait` seconds (503 after it), and one that could never fit gets
    413. Sized for the Deployment's 256 MiB limit: the process's own ~60 MiB, this, and the
    allocator's slack stay under it (measured in benchmarks/bench_webhook_memory.py)."""
    memory_wait: float = 2.0
    """Seconds a request waits for room in the memory budget before its 503: well under the
    apiserver's webhook timeout (5 s in webhook.yaml), so the caller still sees the 503 and retries,
    and no request it already gave up on is parsed for nobody."""

    def __post_init__(self) -> None:
        for name in ("max_admission_bytes", "max_conversion_bytes", "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerOptions.{name}: must be at least 1, got {getattr(self, name)}")
        if self.memory_budget < MiB:
            raise ValueError(
                f"ServerOptions.memory_budget: must be at least 1 MiB, got {self.memory_budget} bytes"
            )
        for name in ("handshake_timeout", "read_timeout", "idle_timeout", "write_timeout", "memory_wait"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ServerOptions.{name}: must be positive seconds, got {getattr(self, name)}")


class WebhookMetrics:
    """controller-runtime's webhook metric families, same names and labels, per registered path."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests_total = Counter(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ["webhook"],
            registry=registry,
        )
        self.latency = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            registry=registry,
        )


@dataclass(frozen=True)
class _Route:
    max_bytes: int
    serve: Callable[[bytes], dict[str, Any]]
    """Body → the review to answer with; BadReview for a body that is not one."""


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    """The raw socket until the handshake, then the TLS socket; what stop() shuts down."""
    busy: bool = False
    """Between a request's first byte and its reply: stop() lets it finish (within its grace)."""


@dataclass(eq=False)
class _Running:
    wake: socket.socket
    """Written to by stop() to wake the accept loop at once."""
    thread: threading.Thread | None = None
    conns: set[_Conn] = field(default_factory=set)
    """Accepted and not yet closed, handshaking included: the slots in use."""


class WebhookServer:
    """HTTPS server dispatching reviews to Python callables by path; start() and stop() may repeat, and
    a restart keeps the port, so configurations pointing at it stay valid."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        listen: str,
        port: int = 0,
        host: str | None = None,
        ca_pem: bytes = b"",
        options: ServerOptions | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.certs = CertWatcher(cert_file, key_file, configure=_http11)
        """The serving pair, re-read when the files change; CertLoadError here if it does not load."""
        self.listen = listen
        """Address the socket binds."""
        self.host = host or listen
        """Address clients dial, for `url` (the certificate must name it)."""
        self.port = port
        """0 until the first start() picks a free port; kept across restarts."""
        self.ca_pem = ca_pem
        """PEM of the CA that issued the serving certificate, when the caller knows it (the
        configurations' caBundle); the server itself never needs it."""
        self.options = options or ServerOptions()
        o = self.options
        self._timeouts = Timeouts(
            idle=o.idle_timeout, read=o.read_timeout, write=o.write_timeout, memory=o.memory_wait
        )
        self.memory = RequestMemory(o.memory_budget)
        """What every connection's bodies and parses hold at once (`budget.RequestMemory`)."""
        self.metrics = WebhookMetrics(registry if registry is not None else CollectorRegistry())
        self._routes: dict[str, _Route] = {}
        self._cond = threading.Condition()  # guards _running.conns, _stopping; notified when they change
        self._stopping = False
        self._running: _Running | None = None

    # -- registration ---------------------------------------------------------------------------------

    def admission(self, path: str, handler: AdmissionHandler) -> None:
        def serve(body: bytes) -> dict[str, Any]:
            return reviews.admit(reviews.parse(body, reviews.ADMISSION), handler, path)

        self._routes[_norm(path)] = _Route(self.options.max_admission_bytes, serve)

    def conversion(self, path: str, handler: ConversionHandler) -> None:
        def serve(body: bytes) -> dict[str, Any]:
            return reviews.convert(reviews.parse(body, reviews.CONVERSION), handler)

        self._routes[_norm(path)] = _Route(self.options.max_conversion_bytes, serve)

    # -- where clients reach it -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``https://HOST:PORT``, no path."""
        if not self.port:
            raise RuntimeError("WebhookServer.url is known only after start()")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def served(self, path: str) -> int:
        """Requests answered on ``path`` so far, any status (from the requests_total metric)."""
        path = _norm(path)
        return int(
            sum(
                s.value
                for metric in self.metrics.requests_total.collect()
                for s in metric.samples
                if s.name.endswith("_total") and s.labels.get("webhook") == path
            )
        )

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> WebhookServer:
        """Bind and serve; OSError naming the address when it cannot bind."""
        if self._running is not None:
            return self
        listener = _listen(self.listen, self.port)
        self.port = listener.getsockname()[1]
        wake_r, wake_w = socket.socketpair()
        running = _Running(wake_w)
        thread = running.thread = threading.Thread(
            target=self._accept_loop,
            args=(listener, wake_r, running),
            name=f"webhooks:{self.port}",
            daemon=True,
        )
        with self._cond:
            self._stopping = False
            self._running = running
        thread.start()
        return self

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, cut idle connections at once, give requests in progress ``grace`` seconds to
        be answered, then cut the rest. A stopped server answers nothing, not even on connections the
        apiserver kept alive."""
        running = self._running
        if running is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            running.wake.send(b"x")
        if running.thread is not None:
            running.thread.join()
        running.wake.close()
        with self._cond:
            self._cut(c for c in running.conns if not c.busy)
            self._cond.wait_for(lambda: not any(c.busy for c in running.conns), timeout=grace)
            self._cut(running.conns)
            self._running = None

    def __enter__(self) -> WebhookServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- accepting (one thread) -----------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket, wake: socket.socket, running: _Running) -> None:
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        try:
            while True:
                with self._cond:
                    # No free slot, no accept(): the next client waits in the backlog, not in a thread.
                    self._cond.wait_for(
                        lambda: self._stopping or len(running.conns) < self.options.max_connections
                    )
                    if self._stopping:
                        return
                if any(key.fileobj is wake for key, _ in selector.select()):
                    return
                try:
                    raw, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:  # out of file descriptors: back off rather than spin
                    log.warning("webhook server cannot accept: %s", exc)
                    with self._cond:
                        self._cond.wait_for(lambda: self._stopping, timeout=0.5)
                    continue
                conn = _Conn(raw)
                with self._cond:
                    running.conns.add(conn)
                threading.Thread(
                    target=self._serve_connection, args=(conn, running), name="webhook-conn", daemon=True
                ).start()
        finally:
            selector.close()
            listener.close()
            wake.close()

    # -- one connection (its own thread) --------------------------------------------------------------

    def _serve_connection(self, conn: _Conn, running: _Running) -> None:
        raw = conn.sock
        peer = _peer(raw)
        try:
            raw.settimeout(self.options.handshake_timeout)  # CPython bounds the whole handshake by it
            try:
                tls = self.certs.context().wrap_socket(raw, server_side=True)
            except (OSError, ValueError) as exc:  # timeout, reset, a client that does not speak TLS
                log.debug("TLS handshake with %s failed: %s", peer, exc)
                raw.close()
                return
            with self._cond:
                conn.sock = tls
                stopping = self._stopping
            if stopping:
                tls.close()
                return
            try:
                Exchange(tls, peer, self, conn, self._timeouts)
            except Exception as exc:  # the peer went away mid-request; nothing to answer
                log.debug("connection from %s ended: %s", peer, exc)
            finally:
                _close_gently(tls)
        finally:
            with self._cond:
                running.conns.discard(conn)
                conn.busy = False
                self._cond.notify_all()

    # -- what an Exchange asks of its server (exchange.Host) ------------------------------------------

    def body_cap(self, path: str) -> int | None:
        route = self._routes.get(path)
        return route.max_bytes if route else None

    def dispatch(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        route = self._routes[path]
        began = time.monotonic()
        with self.metrics.in_flight.labels(webhook=path).track_inprogress():
            try:
                status, payload = 200, route.serve(body)
            except reviews.BadReview as exc:
                status, payload = 400, {"message": str(exc)}
        self.metrics.latency.labels(webhook=path).observe(time.monotonic() - began)
        self.metrics.requests_total.labels(webhook=path, code=str(status)).inc()
        return status, payload

    def request_started(self, conn: object) -> None:
        self._set_busy(conn, True)

    def request_finished(self, conn: object) -> bool:
        return self._set_busy(conn, False)

    def _set_busy(self, conn: object, busy: bool) -> bool:
        """Mark ``conn``; False when the server is stopping (the connection should close)."""
        assert isinstance(conn, _Conn)
        with self._cond:
            conn.busy = busy
            self._cond.notify_all()
            return not self._stopping

    def _cut(self, conns: Iterable[_Conn]) -> None:
        for conn in list(conns):
            with contextlib.suppress(OSError):  # already closed by its peer
                conn.sock.shutdown(socket.SHUT_RDWR)


def _http11(context: ssl.SSLContext) -> None:
    # Go's client offers h2 first; this server speaks HTTP/1.1 only, so say so in ALPN.
    context.set_alpn_protocols(["http/1.1"])


def _close_gently(sock: ssl.SSLSocket) -> None:
    """Close so that the last reply survives. Closing with unread bytes in the receive buffer (the
    body of a request answered 404 or 413 unread) makes the kernel send RST, and an RST can destroy
    the reply before the client has read it. So: end our side, then read and discard what is still
    coming until the client closes too, or for LINGER_SECONDS / LINGER_BYTES at most (as Go's
    closeWriteAndWait)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)  # an SSLSocket drops TLS here: what follows is raw bytes
        deadline = time.monotonic() + LINGER_SECONDS
        budget = LINGER_BYTES
        while budget > 0 and (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            data = sock.recv(min(budget, 64 * 1024))
            if not data:
                break
            budget -= len(data)
    with contextlib.suppress(OSError):
        sock.close()


def _listen(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        listener = socket.create_server((address, port), family=family, backlog=128)
    except OSError as exc:
        raise OSError(exc.errno, f"webhook server cannot listen on {address}:{port}: {exc.strerror}") from exc
    listener.setblocking(False)
    return listener


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


def _norm(path: str) -> str:
    return "/" + path.lstrip("/")
