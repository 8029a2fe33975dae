"""What a test tells kwok's fake pods: a container's log lines, and what a pod port forwards to.

On the local plane kwok stands in for the kubelet (envtest.plane.streams has the semantics): `kubectl
logs` reads a per-container file, `kubectl exec` runs on this host in a per-pod sandbox directory,
and `kubectl port-forward` reaches whatever the test registered for that pod port. ``FakePods`` is
the test's side of it (the plugin's ``fake_pods`` fixture):

    fake_pods.write_log("web-0", "listening on :8080")
    fake_pods.serve_port("web-0", 8080, lambda conn: conn.sendall(b"hello"))
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path

import requests

from envtest.errors import ConfigError
from envtest.plane import streams

Handler = Callable[[socket.socket], None]
"""Serves one forwarded connection; the connection is closed when it returns."""


class FakePods:
    """The fake pods of one local plane (``root``: its pods directory), in ``namespace`` by default."""

    def __init__(
        self, root: Path, *, namespace: str, session: requests.Session | None = None, server: str = ""
    ) -> None:
        self.root = Path(root)
        self.namespace = namespace
        self._session = session
        self._server = server
        self._servers: list[socketserver.ThreadingTCPServer] = []

    # -- logs -----------------------------------------------------------------------------------------

    def log_path(
        self, pod: str, container: str | None = None, *, namespace: str | None = None, previous: bool = False
    ) -> Path:
        """The file `kubectl logs` (``--previous``: of the last terminated run) reads for the container."""
        ns = namespace or self.namespace
        name = container or self._default_container(ns, pod)
        return streams.log_path(self.root, ns, pod, name, previous=previous)

    def write_log(
        self,
        pod: str,
        text: str,
        *,
        container: str | None = None,
        namespace: str | None = None,
        stream: str = "stdout",
        previous: bool = False,
    ) -> Path:
        """Append ``text`` (one or more lines) to the container's log; a follower (`logs -f`, attach)
        sees it at once. ``container`` defaults to the pod's first, as kubectl's does."""
        path = self.log_path(pod, container, namespace=namespace, previous=previous)
        streams.append_log(path, text, stream=stream)
        return path

    # -- exec -----------------------------------------------------------------------------------------

    def allow_exec(self, namespace: str | None = None) -> None:
        """Let `kubectl exec` into the namespace's fake pods run commands — on this host, as this
        user, in the pod's sandbox folder (not a chroot). Off unless allowed: an operator under test
        that execs into its pods must not run commands on the developer's machine unasked."""
        streams.allow_exec(self.root, namespace or self.namespace)

    def forbid_exec(self, namespace: str | None = None) -> None:
        streams.forbid_exec(self.root, namespace or self.namespace)

    def sandbox(self, pod: str, *, namespace: str | None = None) -> Path:
        """The directory `kubectl exec` runs the pod's commands in (created)."""
        path = streams.sandbox_path(self.root, namespace or self.namespace, pod)
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- port-forward ---------------------------------------------------------------------------------

    def register_port(
        self, pod: str, port: int, address: tuple[str, int], *, namespace: str | None = None
    ) -> None:
        """Make `kubectl port-forward` to ``port`` of the pod connect to ``address`` (host, port)."""
        host, target = address
        streams.register_port(
            streams.port_path(self.root, namespace or self.namespace, pod, port), host, target
        )

    def serve_port(
        self, pod: str, port: int, handler: Handler, *, namespace: str | None = None
    ) -> tuple[str, int]:
        """Serve the pod port with ``handler`` (one call per connection, in its own thread) on a fresh
        loopback port, until close(); returns that address."""
        if not callable(handler):
            raise ConfigError(f"serve_port: handler must be callable, not {type(handler).__name__}")

        class _Request(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                handler(self.request)

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Request)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name=f"fake-pod-port-{pod}-{port}", daemon=True).start()
        self._servers.append(server)
        address = server.server_address
        self.register_port(pod, port, (str(address[0]), int(address[1])), namespace=namespace)
        return str(address[0]), int(address[1])

    def close(self) -> None:
        """Stop every handler serve_port started."""
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def _default_container(self, namespace: str, pod: str) -> str:
        if self._session is None:
            raise ConfigError(f"container of pod {namespace}/{pod}: name it (no API session to look it up)")
        resp = self._session.get(f"{self._server}/api/v1/namespaces/{namespace}/pods/{pod}", timeout=10)
        if resp.status_code != 200:
            raise ConfigError(f"pod {namespace}/{pod}: {resp.status_code} {resp.text[:200]}")
        containers = resp.json()["spec"]["containers"]
        return str(containers[0]["name"])
