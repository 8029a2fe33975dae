"""watch_lines over real sockets: chunked replies (kube-apiserver's), and replies without chunking read as
they arrive; pin_environment: the variables requests would read per request, read once."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pykube
import pytest
import requests
from runtime_fakes import PATIENCE

from mysql_operator.runtime.client import pin_environment
from mysql_operator.runtime.watchlines import watch_lines

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


@contextmanager
def serving(
    reply: list[bytes], gate: threading.Event | None = None, opened: list[bool] | None = None
) -> Iterator[str]:
    """One connection on a local port: the request is read, then each part of `reply` is sent; with
    a `gate`, the parts after the first wait until it is set, and `opened` gets whether it was (not
    only the patience running out)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for i, part in enumerate(reply):
                if i == 1 and gate is not None:
                    was_set = gate.wait(PATIENCE)
                    if opened is not None:
                        opened.append(was_set)
                conn.sendall(part)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/watch"
    finally:
        thread.join(PATIENCE)
        listener.close()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_chunked_lines_are_joined_across_chunks_and_split_within_one() -> None:
    reply = [
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n",
        chunk(b'{"a":'),
        chunk(b'1}\n{"b":2}\n\n{"c"'),
        chunk(b":3}"),  # the last line has no line end
        b"0\r\n\r\n",
    ]
    with serving(reply) as url, requests.get(url, stream=True, timeout=PATIENCE) as response:
        assert list(watch_lines(response)) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def read_gated(reply: list[bytes]) -> tuple[list[bytes], list[bool]]:
    """The lines `watch_lines` gives for `reply`, whose parts after the first are sent only once the
    first line was given; and whether that happened (a reader waiting to fill its buffer would never
    give it, and the server would send on only when its patience ran out)."""
    gate = threading.Event()
    got: list[bytes] = []
    opened: list[bool] = []
    with serving(reply, gate, opened) as url, requests.get(url, stream=True, timeout=PATIENCE) as response:
        for line in watch_lines(response):
            got.append(line)
            gate.set()
    return got, opened


def test_a_chunked_reply_hands_over_each_line_before_the_next_is_sent() -> None:
    reply = [
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b'{"first":1}\n'),
        chunk(b'{"second":2}\n') + b"0\r\n\r\n",
    ]
    got, opened = read_gated(reply)
    assert got == [b'{"first":1}', b'{"second":2}']
    assert opened == [True], "the first line was given only after the patience ran out"


def test_a_reply_without_chunking_hands_over_each_line_before_the_next_is_sent() -> None:
    # No Content-Length, no chunking: the body ends when the connection closes (as behind a proxy
    # that buffers).
    got, opened = read_gated([HEAD + b"Connection: close\r\n\r\n" + b'{"first":1}\n', b'{"second":2}\n'])
    assert got == [b'{"first":1}', b'{"second":2}']
    assert opened == [True], "the first line was given only after the patience ran out"


def test_the_unsent_rest_of_a_line_waits_and_the_whole_lines_before_it_do_not() -> None:
    got, opened = read_gated([HEAD + b"Connection: close\r\n\r\n" + b'{"a":1}\n{"b"', b":2}\n"])
    assert got == [b'{"a":1}', b'{"b":2}'], "a line is given whole, never its first part"
    assert opened == [True]


# -- pin_environment ---------------------------------------------------------------------------


SERVER = "https://10.0.0.1:6443"
VARIABLES = ("https_proxy", "http_proxy", "all_proxy", "no_proxy", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def clear_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def client(server: str = SERVER) -> pykube.HTTPClient:
    return pykube.HTTPClient(pykube.KubeConfig.from_url(server))


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"HTTPS_PROXY": "http://proxy.example:3128"},
        {"https_proxy": "http://lower.example:3128", "NO_PROXY": "example.org"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "no_proxy": "10.0.0.1"},
        {"ALL_PROXY": "socks5://all.example:1080"},
        {"REQUESTS_CA_BUNDLE": "/etc/ssl/a.pem", "CURL_CA_BUNDLE": "/etc/ssl/b.pem"},
        {"CURL_CA_BUNDLE": "/etc/ssl/b.pem"},
    ],
)
def test_a_pinned_session_settles_a_request_as_requests_did_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    clear_environment(monkeypatch)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    url = f"{SERVER}/api/v1/pods"
    before = client().session.merge_environment_settings(url, {}, None, None, None)
    after = pin_environment(client()).session.merge_environment_settings(url, {}, None, None, None)
    assert {k: after[k] for k in ("proxies", "verify")} == {k: before[k] for k in ("proxies", "verify")}


def test_the_proxy_is_read_once_and_the_session_no_longer_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clear_environment(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    pinned = pin_environment(client())
    assert pinned.session.proxies.get("https") == "http://proxy.example:3128"
    assert pinned.session.trust_env is False
    assert pinned.session.verify is True  # no CA bundle variable: requests' own bundle


def test_no_proxy_naming_the_server_leaves_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_environment(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    assert pin_environment(client()).session.proxies == {}


def test_a_ca_bundle_variable_becomes_the_sessions_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_environment(monkeypatch)
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/ssl/bundle.pem")
    assert pin_environment(client()).session.verify == "/etc/ssl/bundle.pem"


def test_a_session_already_told_not_to_trust_the_environment_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    c = client()
    c.session.trust_env = False
    assert pin_environment(c).session.proxies == {}
