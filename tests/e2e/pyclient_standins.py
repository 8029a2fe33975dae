"""Stand-ins for the two programs the official Python client's E2E suite port-forwards to.

kwok's pods run nothing, so `port-forward` reaches only what a test registered for a pod port
(envtest.fakepods). The suite (kubernetes-client/python `kubernetes/e2e_test`) cannot register
anything: this pytest plugin does it for it, the way its pods would have served:

- a pod running its ``port-server.py`` (image ``python``): an echo server on each port it names;
- a pod of image ``nginx``: an HTTP server answering nginx's welcome page on port 80.

Load it beside the suite, against a plane of `envtest up` (docs/fake-pods.md, "The Python client's E2E
suite"):
``PYTHONPATH=tests/e2e pytest -p pyclient_standins …/kubernetes/e2e_test``. The plane is the one
KUBECONFIG points at (its pods directory sits beside its admin kubeconfig).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from envtest.fakepods import FakePods

NGINX_PAGE = b"<html><body><h1>Welcome to nginx!</h1></body></html>\n"


def echo(conn: socket.socket) -> None:
    conn.settimeout(300)  # an idle client frees the handler's thread in the end
    while data := conn.recv(65536):
        conn.sendall(data)


def nginx(conn: socket.socket) -> None:
    request = b""
    conn.settimeout(60)
    while b"\r\n\r\n" not in request and (chunk := conn.recv(65536)):
        request += chunk
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(NGINX_PAGE)}\r\n"
    conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + NGINX_PAGE)


def standins(pod: Any) -> list[tuple[int, Any]]:
    """(pod port, handler) for what this pod's container would have served."""
    found: list[tuple[int, Any]] = []
    for container in pod.spec.containers:
        argv = [*(container.command or []), *(container.args or [])]
        if any(arg.endswith("port-server.py") for arg in argv):
            found += [(int(arg), echo) for arg in argv if arg.isdigit()]
        elif container.image.split(":")[0].split("/")[-1] == "nginx":
            found.append((80, nginx))
    return found


def _serve(stop: threading.Event, pods_dir: Path, api: client.CoreV1Api) -> None:
    registered: dict[str, FakePods] = {}
    while not stop.is_set():
        for event in watch.Watch().stream(api.list_pod_for_all_namespaces, timeout_seconds=5):
            pod = event["object"]
            key = f"{pod.metadata.namespace}/{pod.metadata.name}/{pod.metadata.uid}"
            if event["type"] == "DELETED" or key in registered:
                continue
            fake = FakePods(pods_dir, namespace=pod.metadata.namespace)
            for port, handler in standins(pod):
                fake.serve_port(pod.metadata.name, port, handler)
            registered[key] = fake
    for fake in registered.values():
        fake.close()


@pytest.fixture(scope="session", autouse=True)
def pyclient_standins() -> Iterator[None]:
    kubeconfig = Path(os.environ["KUBECONFIG"])
    pods_dir = kubeconfig.parent / "pods"
    if not pods_dir.is_dir():
        pytest.exit(f"{pods_dir}: not a plane of `envtest up` with fake pods (KUBECONFIG={kubeconfig})")
    config.load_kube_config(str(kubeconfig))
    stop = threading.Event()
    thread = threading.Thread(target=_serve, args=(stop, pods_dir, client.CoreV1Api()), daemon=True)
    thread.start()
    yield
    stop.set()
