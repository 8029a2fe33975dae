"""Connections to a cluster's apiserver, kept across the operator instances a session starts.

An operator's start waits for its informers' first lists, and each informer has a client of its own
(a long watch holds its connection). With fresh connections, every list first pays a TLS handshake,
and five of them at once share two cores with the apiserver: the larger part of the start. So the
clients the harness makes for operators share one `PoolManager` per cluster and session, and while
a test runs the harness opens a few connections for the next operator start (`warm`).

Sharing a connection shares no identity: a ServiceAccount token rides in a header on every request,
and where a client authenticates with a certificate, urllib3 keys its pools by that certificate, so
no request ever goes out on a connection made for another. The pool key also holds the CA file,
which is why `ca_file` gives every client of a cluster the same path for the same CA (pykube-ng
writes inline CA data to a new temporary file per client).
"""

from __future__ import annotations

import hashlib
import queue
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import requests
from urllib3 import HTTPSConnectionPool, PoolManager

MAX_IDLE = 16
"""Idle connections kept per apiserver (more may be open: watches; the surplus is closed on return)."""


class _LiveFirst(queue.LifoQueue):  # type: ignore[type-arg]
    """A pool's idle stack with live connections on top. A connection comes back closed when its
    watch was cut (every watch, when an operator stops), and urllib3 stacks it like any other: the
    next operator's first requests would take those and reconnect while warm ones wait beneath."""

    def _put(self, item: Any) -> None:
        if item is None or item.is_closed:  # None: a free slot, as urllib3 fills a new pool
            self.queue.insert(0, item)
        else:
            self.queue.append(item)


class _LiveFirstPool(HTTPSConnectionPool):
    QueueCls = _LiveFirst


class _SharedPools(PoolManager):
    """A PoolManager no session can clear: closing one operator's client (requests' adapter calls
    `clear()`) must not close the connections kept for the next one."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool_classes_by_scheme = {**self.pool_classes_by_scheme, "https": _LiveFirstPool}

    def clear(self) -> None:
        pass

    def close(self) -> None:
        super().clear()


class Transport:
    def __init__(self) -> None:
        self._pools = _SharedPools(num_pools=4, maxsize=MAX_IDLE, block=False)
        self._dir: Path | None = None
        self._lock = threading.Lock()

    def attach(self, session: requests.Session) -> requests.Session:
        """Route `session`'s HTTPS requests through the shared pools."""
        adapter: Any = session.get_adapter("https://")
        own, adapter.poolmanager = adapter.poolmanager, self._pools
        own.clear()
        return session

    def attach_client(self, client: Any) -> Any:
        """`attach` a pykube-ng client's session, unless its kubeconfig sets tls-server-name (which
        pykube-ng writes into its own pool manager's settings: those must stay its own)."""
        if "tls-server-name" not in client.config.cluster:
            self.attach(client.session)
        return client

    def ca_file(self, data: bytes) -> Path:
        """One file per CA content for the session, so that clients share a pool key."""
        with self._lock:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="envtest-ca-"))
            path = self._dir / f"{hashlib.sha256(data).hexdigest()[:16]}.crt"
            if not path.exists():
                path.write_bytes(data)
            return path

    def warm(self, session: requests.Session, url: str, count: int) -> int:
        """Open up to `count` connections with `session` (attached) and leave them idle in the pool;
        how many answered. Each response is held until all are open, so none reuses another's."""
        responses: list[requests.Response] = []
        try:
            for _ in range(count):
                responses.append(session.get(url, stream=True, timeout=5))
        except requests.RequestException:
            pass  # fewer warm connections: the start makes the rest itself
        for response in responses:
            response.content  # noqa: B018 - read to the end: the connection returns to the pool
        return len(responses)

    def close(self) -> None:
        self._pools.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
