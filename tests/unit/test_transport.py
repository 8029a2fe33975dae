"""Connections shared by the operator clients of a session (envtest.transport), against a real TLS
server on loopback: what is shared, what is kept, and what warming opens."""

from __future__ import annotations

import base64
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from envtest.pki import CertificateAuthority
from envtest.plugin.runner import api_factory_for
from envtest.transport import Transport


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the apiserver

    def do_GET(self) -> None:
        body = b'{"gitVersion": "v0"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    connections = 0

    def get_request(self):  # type: ignore[no-untyped-def]
        sock, addr = super().get_request()
        self.connections += 1
        return sock, addr


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, CertificateAuthority, _Server]]:
    ca = CertificateAuthority.create("test-ca")
    cert, key = ca.issue_serving("server", ["127.0.0.1"]).write(tmp_path, "server")
    httpd = _Server(("127.0.0.1", 0), _Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", ca, httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def transport() -> Iterator[Transport]:
    shared = Transport()
    try:
        yield shared
    finally:
        shared.close()


def _kubeconfig(path: Path, server: str, ca: CertificateAuthority, token: str) -> Path:
    cluster = {"server": server, "certificate-authority-data": base64.b64encode(ca.cert_pem).decode()}
    path.write_text(
        yaml.safe_dump(
            {
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_operators_of_a_session_reuse_the_connections_warmed_for_them(
    server: tuple[str, CertificateAuthority, _Server], transport: Transport, tmp_path: Path
) -> None:
    url, ca, httpd = server
    first = api_factory_for(_kubeconfig(tmp_path / "a", url, ca, "token-a"), transport=transport)
    warmer = first()
    assert transport.warm(warmer.session, f"{url}/version", 3) == 3
    assert httpd.connections == 3, "each warm request held its connection until all were open"
    warmer.session.close()  # closing a client keeps the transport's connections

    # The next test's operator: another identity, other clients, the same connections.
    second = api_factory_for(_kubeconfig(tmp_path / "b", url, ca, "token-b"), transport=transport)
    clients = [second(), second(), second()]
    replies = [c.session.get(f"{url}/version", timeout=5, stream=True) for c in clients]
    assert all(r.json() == {"gitVersion": "v0"} for r in replies)
    assert httpd.connections == 3, "three lists at once on warm connections, no new handshake"
    assert clients[0].session is not clients[1].session, "one session per caller still"


def test_clients_without_the_transport_open_their_own(
    server: tuple[str, CertificateAuthority, _Server], tmp_path: Path
) -> None:
    url, ca, httpd = server
    factory = api_factory_for(_kubeconfig(tmp_path / "a", url, ca, "t"))
    for _ in range(2):
        client = factory()
        assert client.session.get(f"{url}/version", timeout=5).status_code == 200
    assert httpd.connections == 2


def test_one_ca_file_per_content_gone_with_the_transport() -> None:
    transport = Transport()
    a, again, other = transport.ca_file(b"ca-1"), transport.ca_file(b"ca-1"), transport.ca_file(b"ca-2")
    assert a == again != other and a.read_bytes() == b"ca-1"
    transport.close()
    assert not a.exists()


def test_a_warm_up_that_fails_opens_fewer_and_raises_nothing(transport: Transport) -> None:
    session = transport.attach(requests.Session())
    assert transport.warm(session, "https://127.0.0.1:9/version", 3) == 0


def test_a_connection_closed_by_a_cut_watch_does_not_hide_the_warm_ones(
    server: tuple[str, CertificateAuthority, _Server], transport: Transport, tmp_path: Path
) -> None:
    url, ca, httpd = server
    client = api_factory_for(_kubeconfig(tmp_path / "a", url, ca, "t"), transport=transport)()
    transport.warm(client.session, f"{url}/version", 2)
    watch = client.session.get(f"{url}/version", stream=True, timeout=5)
    watch.close()  # what an operator's stop does to its watches: closed, handed back to the pool
    assert client.session.get(f"{url}/version", timeout=5).status_code == 200
    assert httpd.connections == 2, "the warm connection was taken, not the closed one reopened"
