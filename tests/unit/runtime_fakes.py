"""Fakes for the controller-runtime unit tests: a scripted pykube client, and a tiny HTTP apiserver.

Unit tests only: E2E tests always talk to a real kube-apiserver.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pykube
import urllib3.exceptions

PATIENCE = 30.0
"""Seconds a wait for something that must happen gives up after. Only a failing test waits that long,
so it can be generous: a loaded machine makes these waits longer, never the test wrong."""


def wait_for(predicate: Callable[[], Any], timeout: float = PATIENCE, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.005)


def obj(name: str, rv: str, namespace: str = "ns", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv}, **extra}


def event(event_type: str, o: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "object": o}


def expired() -> dict[str, Any]:
    """The ERROR event an apiserver sends, after HTTP 200, for a too old resourceVersion."""
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired"}
    return event("ERROR", {**status, "message": "too old resource version: 1 (99)"})


# -- scripted client --------------------------------------------------------------------------------


class FakeResponse:
    """A streamed reply: `lines` (dicts) are sent, then the stream ends, drops or blocks until closed."""

    def __init__(
        self,
        status: int = 200,
        body: dict[str, Any] | None = None,
        lines: list[dict[str, Any]] = (),  # type: ignore[assignment]
        then: str = "block",  # "end" | "drop" | "block"
    ) -> None:
        self.status_code = status
        self.reason = "fake"
        self.headers: dict[str, str] = {"Content-Type": "application/json"}
        self._body = body
        self._lines = list(lines)
        self._then = then
        self.closed = threading.Event()

    def json(self) -> Any:
        if self._body is None:
            raise ValueError("no JSON body")
        return self._body

    @property
    def raw(self) -> FakeResponse:
        return self  # read as urllib3's response is, by `watchlines`

    chunked = True

    def supports_chunked_reads(self) -> bool:
        return True

    def read_chunked(self, amt: int | None = None, decode_content: bool = True) -> Iterator[bytes]:
        for line in self._lines:
            yield json.dumps(line).encode() + b"\n"
        if self._then == "drop":
            raise urllib3.exceptions.ProtocolError("connection reset by peer")
        if self._then == "block":
            self.closed.wait()
            raise urllib3.exceptions.ProtocolError("response closed")

    def close(self) -> None:
        self.closed.set()


def list_response(items: list[dict[str, Any]], rv: str) -> FakeResponse:
    return FakeResponse(body={"kind": "List", "metadata": {"resourceVersion": rv}, "items": items})


class FakeApi:
    """Hands out scripted responses in order; once the script runs out, watches just block."""

    def __init__(self, script: list[FakeResponse]) -> None:
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []
        self.responses: list[FakeResponse] = []
        self.session = self  # the informer closes api.session when it drops a client
        self.lock = threading.Lock()

    def get(self, **kwargs: Any) -> FakeResponse:
        with self.lock:
            self.calls.append(kwargs)
            response = self.script.pop(0) if self.script else FakeResponse()
            self.responses.append(response)
            return response

    def close(self) -> None:
        pass

    def watch_calls(self) -> list[dict[str, str]]:
        with self.lock:
            return [c["params"] for c in self.calls if c["params"].get("watch") == "true"]


# -- a tiny apiserver over real HTTP ----------------------------------------------------------------


class FakeApiServer:
    """ConfigMaps (list, watch with replay from a resourceVersion) and Leases (get/create/replace)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rv = 100
        self.log: list[tuple[int, str, dict[str, Any]]] = []  # (rv, namespace, watch event)
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.lease_status: int | None = None
        """Answer every Lease request with this HTTP status (e.g. 403, a Role in another namespace)."""
        self.closing = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def client(self) -> pykube.HTTPClient:
        return pykube.HTTPClient(pykube.KubeConfig.from_url(self.url))

    def put_configmap(self, namespace: str, name: str, data: dict[str, str] | None = None) -> None:
        with self.cond:
            self.rv += 1
            key = (namespace, name)
            event_type = "MODIFIED" if key in self.configmaps else "ADDED"
            meta = {"name": name, "namespace": namespace, "resourceVersion": str(self.rv)}
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}
            self.configmaps[key] = cm
            self.log.append((self.rv, namespace, {"type": event_type, "object": cm}))
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _route(self) -> tuple[list[str], dict[str, str]]:
            parts = urlsplit(self.path)
            api.requests.append((self.command, self.path))
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            return [p for p in parts.path.split("/") if p], query

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str) -> None:
            self._send(code, {"kind": "Status", "code": code, "reason": reason, "message": reason})

        def _body(self) -> dict[str, Any]:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def do_GET(self) -> None:
            path, query = self._route()
            if path[-1] == "configmaps":
                namespace = path[3] if path[2:3] == ["namespaces"] else None
                if query.get("watch") == "true":
                    return self._watch(namespace, int(query.get("resourceVersion") or 0), query)
                with api.cond:
                    items = [c for (ns, _), c in api.configmaps.items() if namespace in (None, ns)]
                    return self._send(200, {"metadata": {"resourceVersion": str(api.rv)}, "items": items})
            if "leases" in path:
                if api.lease_status is not None:
                    return self._status(api.lease_status, "Forbidden")
                lease = api.leases.get((path[-3], path[-1]))
                return self._send(200, lease) if lease else self._status(404, "NotFound")
            self._status(404, "NotFound")

        def do_POST(self) -> None:
            path, _ = self._route()
            body = self._body()
            key = (path[-2], body["metadata"]["name"])
            with api.cond:
                if key in api.leases:
                    return self._status(409, "AlreadyExists")
                api.rv += 1
                body["metadata"]["resourceVersion"] = str(api.rv)
                api.leases[key] = body
            self._send(201, body)

        def do_PUT(self) -> None:
            path, _ = self._route()
            body = self._body()
            key = (path[-3], path[-1])
            with api.cond:
                current = api.leases.get(key)
                if current is None:
                    return self._status(404, "NotFound")
                if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return self._status(409, "Conflict")
                api.rv += 1
                body["metadata"]["resourceVersion"] = str(api.rv)
                api.leases[key] = body
            self._send(200, body)

        def _watch(self, namespace: str | None, since: int, query: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + float(query.get("timeoutSeconds") or 60)
            sent = since
            try:
                while time.monotonic() < deadline:
                    with api.cond:
                        if api.closing:
                            break
                        pending = [(rv, e) for rv, ns, e in api.log if rv > sent and namespace in (None, ns)]
                        if not pending:
                            api.cond.wait(0.1)
                            continue
                    for rv, e in pending:
                        line = json.dumps(e).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        sent = rv
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the client went away
            self.close_connection = True

    return Handler
