"""A small HTTPS webhook server on the standard library: AdmissionReview v1 and ConversionReview v1.

For tests and the reference operator. The harness does not need it — any server that serves HTTPS from a
cert dir fits (`envtest.webhooks.certs`) — but it gives tests what a real server cannot: a request
counter per path, and switches to make it slow, failing or unreachable on purpose.

    server = WebhookServer(serving_certs(tmp_path / "certs"))
    server.admission("/validate", lambda req: allow() if ok(req["object"]) else deny("bad size"))
    server.conversion("/convert", lambda obj, to: {**obj, "apiVersion": to})
    with server:
        webhooks.install(..., endpoint=server)

Threads, not asyncio: each connection gets its own thread (the apiserver keeps connections alive and
calls several webhooks concurrently), and the TLS handshake happens in that thread, never in the accept
loop, so one slow client cannot stall the others.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from envtest.errors import EnvtestError
from envtest.webhooks.certs import ServingCerts

__all__ = ["PROBE_PATH", "AdmissionHandler", "ConversionHandler", "WebhookServer", "allow", "deny"]

log = logging.getLogger(__name__)

AdmissionHandler = Callable[[dict[str, Any]], dict[str, Any]]
"""AdmissionReview ``request`` → response fields (``allow()``/``deny()``); the server sets ``uid``."""
ConversionHandler = Callable[[dict[str, Any], str], dict[str, Any]]
"""(object, desired apiVersion) → the object at that version; an exception fails the whole review."""

PROBE_PATH = "/envtest-webhook-probe"
"""Path of the harness's install probe (see `envtest.webhooks.install`); answered with a denial here."""


def allow(patch: list[dict[str, Any]] | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
    """An admitting response; ``patch`` is a JSON Patch (mutating webhooks only)."""
    resp: dict[str, Any] = {"allowed": True}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        resp["warnings"] = warnings
    return resp


def deny(message: str, code: int = 403) -> dict[str, Any]:
    """A denial; the apiserver shows ``message`` to the client verbatim."""
    return {"allowed": False, "status": {"code": code, "message": message}}


class WebhookServer:
    """HTTPS server dispatching reviews to Python callables by path; start()/stop() may repeat, and a
    restart keeps the port, so configurations pointing at it stay valid (a webhook that comes back)."""

    def __init__(self, certs: ServingCerts, *, listen: str | None = None, port: int = 0) -> None:
        self.certs = certs
        self.listen = listen or certs.host
        """Address the socket binds; the certificate's first host unless told otherwise."""
        self.port = port
        """0 until the first start() picks a free port; kept across restarts."""
        self.delay = 0.0
        """Seconds every request waits before it is answered (a slow webhook)."""
        self.fail_status: int | None = None
        """When set, every request is answered with this HTTP status and no review (a failing webhook)."""
        self.requests: Counter[str] = Counter()
        """Requests received per path, counted on arrival (before `delay` and `fail_status`)."""
        self.reviews: deque[tuple[str, dict[str, Any]]] = deque(maxlen=200)
        """(path, review body) of the latest requests, newest last."""
        self._admission: dict[str, AdmissionHandler] = {}
        self._conversion: dict[str, ConversionHandler] = {}
        self._httpd: _HTTPSServer | None = None
        self._thread: threading.Thread | None = None
        self._arrived = threading.Condition()

    # -- registration ---------------------------------------------------------------------------------

    def admission(self, path: str, handler: AdmissionHandler) -> None:
        self._admission[_norm(path)] = handler

    def conversion(self, path: str, handler: ConversionHandler) -> None:
        self._conversion[_norm(path)] = handler

    # -- what configurations point at -----------------------------------------------------------------

    @property
    def url(self) -> str:
        """``https://HOST:PORT`` as the apiserver dials it (the certificate's first host)."""
        if not self.port:
            raise EnvtestError("WebhookServer.url is known only after start()")
        host = self.certs.host
        return f"https://[{host}]:{self.port}" if ":" in host else f"https://{host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        return self.certs.ca_pem

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> WebhookServer:
        if self._httpd is not None:
            return self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certs.cert_file, self.certs.key_file)
        # Go's client offers h2 first; this server speaks HTTP/1.1 only, so say so in ALPN.
        context.set_alpn_protocols(["http/1.1"])
        httpd = _HTTPSServer((self.listen, self.port), _Handler, context=context, owner=self)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"webhooks:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection: the apiserver keeps connections alive, and a
        "down" server that still answers on old connections would make outage tests lie."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        httpd.cut_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> WebhookServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation ----------------------------------------------------------------------------------

    def wait_for_request(self, path: str, *, count: int = 1, timeout: float = 10.0) -> int:
        """Block until ``path`` has seen at least ``count`` requests; return the count."""
        path = _norm(path)
        with self._arrived:
            if not self._arrived.wait_for(lambda: self.requests[path] >= count, timeout=timeout):
                raise EnvtestError(
                    f"{path}: {self.requests[path]} requests after {timeout:.0f}s, expected {count}"
                )
            return self.requests[path]

    # -- dispatch (handler threads) -------------------------------------------------------------------

    def _arrive(self, path: str, body: dict[str, Any]) -> None:
        with self._arrived:
            self.requests[path] += 1
            self.reviews.append((path, body))
            self._arrived.notify_all()

    def _answer(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        if path == PROBE_PATH:
            return _admission_review(body, deny("envtest webhook probe", code=418))
        if path in self._admission:
            try:
                verdict = self._admission[path](body.get("request") or {})
            except Exception as exc:  # a handler bug is the test's news, not a dead connection
                log.exception("admission handler %s failed", path)
                verdict = deny(f"webhook handler {path} raised {type(exc).__name__}: {exc}", code=500)
            return _admission_review(body, verdict)
        if path in self._conversion:
            return _conversion_review(body, self._conversion[path])
        return None


def _admission_review(body: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    uid = (body.get("request") or {}).get("uid", "")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {**verdict, "uid": uid},
    }


def _conversion_review(body: dict[str, Any], convert: ConversionHandler) -> dict[str, Any]:
    request = body.get("request") or {}
    desired = request.get("desiredAPIVersion", "")
    response: dict[str, Any] = {"uid": request.get("uid", "")}
    try:
        converted = [convert(obj, desired) for obj in request.get("objects") or []]
    except Exception as exc:
        log.exception("conversion to %s failed", desired)
        response["result"] = {"status": "Failure", "message": f"converting to {desired}: {exc}"}
    else:
        # The apiserver rejects a response whose objects do not carry the desired apiVersion, so a
        # handler that forgets it fails loudly there rather than subtly here.
        response["convertedObjects"] = converted
        response["result"] = {"status": "Success"}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response}


class _HTTPSServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck in `delay` must not keep the test process alive

    def __init__(
        self, address: tuple[str, int], handler: type, *, context: ssl.SSLContext, owner: WebhookServer
    ) -> None:
        self.context = context
        self.owner = owner
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs in the connection's own thread: do the TLS handshake here, not in accept().
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        with self._open_lock:
            self._open.add(tls)
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            with self._open_lock:
                self._open.discard(tls)

    def cut_connections(self) -> None:
        with self._open_lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):  # already closed by its peer
                    sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the apiserver expects; every reply has a length
    server: _HTTPSServer

    def do_POST(self) -> None:
        owner = self.server.owner
        path = _norm(self.path.split("?", 1)[0])
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            self._reply(400, {"message": "body is not JSON"})
            return
        owner._arrive(path, body)
        if owner.delay:
            time.sleep(owner.delay)
        if owner.fail_status is not None:
            self._reply(owner.fail_status, {"message": "failing on purpose (WebhookServer.fail_status)"})
            return
        answer = owner._answer(path, body)
        if answer is None:
            self._reply(404, {"message": f"no webhook registered at {path}"})
        else:
            self._reply(200, answer)

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the apiserver gave up (its timeout) or the server was stopped: nobody to tell

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _norm(path: str) -> str:
    return "/" + path.lstrip("/")
