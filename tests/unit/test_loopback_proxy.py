"""With HTTP(S)_PROXY pointing at a dead proxy and no NO_PROXY, the harness's clients still reach a
server on 127.0.0.1 directly. A control request through a plain requests session shows the proxy
variables really are in force, so the test cannot pass for the wrong reason."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import yaml
from kubernetes.client import VersionApi

from envtest.clusters import Cluster
from envtest.loopback import is_loopback
from envtest.plane import controlplane

VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.2",
    "gitCommit": "0",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.26",
    "compiler": "gc",
    "platform": "linux/amd64",
}


class _Version(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(VERSION).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Version)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def dead_proxy(monkeypatch: pytest.MonkeyPatch) -> str:
    with socket.socket() as sock:  # a port nobody listens on: any use of the proxy fails at once
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, url)
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    return url


@pytest.fixture
def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_the_proxy_variables_are_in_force_for_a_plain_session(dead_proxy: str, server: str) -> None:
    with pytest.raises(requests.exceptions.ProxyError), requests.Session() as plain:
        plain.get(f"{server}/version", timeout=2)


def test_pykube_clients_reach_a_loopback_server_directly(dead_proxy: str, kubeconfig: Path) -> None:
    client = Cluster.new_pykube_from(kubeconfig)
    assert client.session.get(f"{client.url}/version", timeout=2).json() == VERSION


def test_kubernetes_clients_reach_a_loopback_server_directly(dead_proxy: str, kubeconfig: Path) -> None:
    cluster = Cluster(kubeconfig, name="loopback")
    try:
        assert VersionApi(cluster.k8s).get_code().git_version == "v1.37.2"
    finally:
        cluster.close()


def test_readiness_probes_reach_a_loopback_server_directly(dead_proxy: str, server: str) -> None:
    assert controlplane._http_ok(f"{server}/health")


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("https://127.0.0.1:6443", True),
        ("https://127.8.0.1", True),
        ("https://[::1]:6443", True),
        ("https://localhost:6443", True),
        ("https://10.0.0.1:6443", False),
        ("https://kubernetes.example.com", False),
    ],
)
def test_is_loopback(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback
