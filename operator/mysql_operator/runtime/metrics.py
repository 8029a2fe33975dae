"""Prometheus metrics of one Manager, and the small HTTP server for /metrics, /healthz and /readyz.

Every collector is registered on the Manager's own registry: prometheus-client's global registry
raises on duplicate names, and tests run several managers in one process.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from .workqueue import QueueHooks

log = logging.getLogger(__name__)


# Stock dashboards and alerts for controller-runtime read exactly these names; prometheus-client
# would add a `<name>_created` series per counter and histogram, which controller-runtime's Go client
# never exposes (and which doubles the series count). The switch is process-wide in prometheus-client.
disable_created_metrics()

# controller-runtime's reconcile_time_seconds buckets (its ExponentialBuckets(0.001, 2, 10) plus
# the long tail it added for slow reconcilers).
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
                     0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15,
                     20, 25, 30, 40, 50, 60)  # fmt: skip
# client-go workqueue: ExponentialBuckets(10e-9, 10, 10).
QUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(10))


class Metrics:
    """The metric families of controller-runtime (and client-go, which it re-exports), same names,
    same labels. Additions are labelled as such."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller (success, error, requeue, requeue_after).",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors_total = Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller (conflicts included).",
            ["controller"],
            registry=r,
        )
        self.reconcile_panics_total = Counter(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller: reconciles that raised something "
            "other than an API or connection error (a bug); each is logged, requeued, never fatal.",
            ["controller"],
            registry=r,
        )
        self.handler_errors_total = Counter(
            "informer_event_handler_errors",
            "Exceptions raised by informer event handlers per kind, each logged and skipped "
            "(this runtime's addition).",
            ["kind"],
            registry=r,
        )
        self.reconcile_duration_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller.",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller.",
            ["controller"],
            registry=r,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller.",
            ["controller"],
            registry=r,
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Current depth of workqueue.", ["name", "controller"], registry=r
        )
        self.workqueue_adds_total = Counter(
            "workqueue_adds", "Total number of adds handled by workqueue.", ["name", "controller"], registry=r
        )
        self.workqueue_retries_total = Counter(
            "workqueue_retries",
            "Total number of retries handled by workqueue.",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_queue_duration_seconds = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            ["name", "controller"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_work_duration_seconds = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            ["name", "controller"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.api_requests_total = Counter(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host (client-go's labels); "
            "verb and resource (with subresource, as audit logs name them) are this runtime's additions.",
            ["code", "method", "host", "verb", "resource"],
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=r,
        )

    def count_request(self, method: str, host: str, verb: str, resource: str, code: str) -> None:
        self.api_requests_total.labels(
            code=code, method=method, host=host, verb=verb, resource=resource
        ).inc()

    def queue_hooks(self, name: str) -> QueueHooks:
        """Callbacks a WorkQueue named `name` reports to."""
        labels = {"name": name, "controller": name}
        return QueueHooks(
            added=self.workqueue_adds_total.labels(**labels).inc,
            retried=self.workqueue_retries_total.labels(**labels).inc,
            waited=self.workqueue_queue_duration_seconds.labels(**labels).observe,
            worked=self.workqueue_work_duration_seconds.labels(**labels).observe,
        )


Check = Callable[[], "bool | Sequence[str]"]
"""A probe: True/False, or the problems found (none = passing), which the reply lists."""


class ProbeServer:
    """Serves /metrics, /healthz and /readyz on one port (0 = any free port) in a daemon thread.

    A failing probe answers 503 with one `[-] problem` line per problem, so `kubectl describe pod`
    (the kubelet quotes the body) and a curl say *why* a replica is not ready.
    """

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        healthy: Check,
        ready: Check,
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
            # shutdown() alone waits out serve_forever's poll_interval (0.1 s on average, every
            # manager.stop()); shutting the listening socket down wakes its select() at once.
            stopper = threading.Thread(target=self._server.shutdown, name="probe-server-stop", daemon=True)
            stopper.start()
            with contextlib.suppress(OSError):  # already shut: the poll ends it all the same
                self._server.socket.shutdown(socket.SHUT_RDWR)
            stopper.join(timeout=2.0)
        self._server.server_close()
        self._thread.join(timeout=2.0)


def _handler_class(registry: CollectorRegistry, healthy: Check, ready: Check) -> type[BaseHTTPRequestHandler]:
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

        def _probe(self, result: bool | Sequence[str]) -> None:
            problems = [] if isinstance(result, bool) else list(result)
            ok = result if isinstance(result, bool) else not problems
            body = "ok\n" if ok else "not ok\n" + "".join(f"[-] {p}\n" for p in problems)
            self._reply(200 if ok else 503, body.encode(), "text/plain; charset=utf-8")

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
