"""Prometheus metrics of one Manager, and the small HTTP server for /metrics, /healthz and /readyz.

Every collector is registered on the Manager's own registry: prometheus-client's global registry
raises on duplicate names, and tests run several managers in one process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger(__name__)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.reconcile_total = Counter(
            "reconcile",
            "Reconciles by outcome: success, requeue, requeue_after, conflict, error.",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors_total = Counter(
            "reconcile_errors", "Reconciles that raised (conflicts included).", ["controller"], registry=r
        )
        self.reconcile_duration_seconds = Histogram(
            "reconcile_duration_seconds", "Time spent in one reconcile.", ["controller"], registry=r
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Keys ready and waiting for a worker.", ["name"], registry=r
        )
        self.api_requests_total = Counter(
            "api_requests",
            "Requests to the Kubernetes API by verb (get/list/watch/create/update/patch/delete), "
            "resource (with subresource) and HTTP status code.",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status", "1 while this manager holds the lease.", ["name"], registry=r
        )

    def count_request(self, verb: str, resource: str, code: str) -> None:
        self.api_requests_total.labels(verb=verb, resource=resource, code=code).inc()


class ProbeServer:
    """Serves /metrics, /healthz and /readyz on one port (0 = any free port) in a daemon thread."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
    ) -> None:
        handler = _handler_class(registry, healthy, ready)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.address: tuple[str, int] = self._server.server_address[:2]  # type: ignore[assignment]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"probe-server-{self.address[1]}",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)


def _handler_class(
    registry: CollectorRegistry, healthy: Callable[[], bool], ready: Callable[[], bool]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/livez"):
                self._probe(healthy())
            elif path == "/readyz":
                self._probe(ready())
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _probe(self, ok: bool) -> None:
            self._reply(200 if ok else 503, b"ok\n" if ok else b"not ok\n", "text/plain")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            # Probes arrive every few seconds; stderr lines per request would drown the operator log.
            log.debug("probe server: " + format, *args)

    return Handler
