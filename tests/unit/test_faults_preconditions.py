"""The fault proxy's precondition rewrites, held requests and exchange record, against a local
upstream that records what reached it (the apiserver's side of the proxy, without a cluster)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from envtest import eventually
from envtest.faults import (
    FaultProxy,
    Respond,
    Rule,
    conflict,
    no_precondition,
    stale_precondition,
)
from envtest.faults.rules import RequestInfo, with_precondition

PATCH = RequestInfo("PATCH", "/apis/example.com/v1/namespaces/ns/widgets/db", "patch")


# -- the rewrite alone ------------------------------------------------------------------------------


def test_a_merge_patch_precondition_is_made_stale_or_removed() -> None:
    body = json.dumps({"metadata": {"resourceVersion": "42", "finalizers": ["f"]}}).encode()
    assert json.loads(with_precondition(body, "1") or b"") == {
        "metadata": {"resourceVersion": "1", "finalizers": ["f"]}
    }
    assert json.loads(with_precondition(body, None) or b"") == {"metadata": {"finalizers": ["f"]}}


def test_a_json_patch_test_of_the_resource_version_is_rewritten_or_dropped() -> None:
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
        {"op": "replace", "path": "/metadata/managedFields", "value": []},
    ]
    stale = json.loads(with_precondition(json.dumps(ops).encode(), "1") or b"")
    assert (
        stale[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "1"} and stale[1] == ops[1]
    )
    assert json.loads(with_precondition(json.dumps(ops).encode(), None) or b"") == [ops[1]]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"metadata: {resourceVersion: '42'}",  # YAML apply: never touched
        json.dumps({"spec": {"replicas": 2}}).encode(),
        json.dumps({"metadata": {"labels": {"a": "b"}}}).encode(),
        json.dumps([{"op": "replace", "path": "/spec/replicas", "value": 2}]).encode(),
    ],
)
def test_a_body_without_a_precondition_is_left_alone(body: bytes) -> None:
    assert with_precondition(body, "1") is None


def test_precondition_rules_apply_to_updates_and_patches_only() -> None:
    with pytest.raises(ValueError, match=r"update and patch only.*create"):
        Rule(stale_precondition(), verb="create")
    rule = Rule(stale_precondition())
    assert rule.matches(PATCH)
    assert not rule.matches(RequestInfo("POST", PATCH.path, "create", resource="widgets"))
    assert "(held)" in Rule(hold=threading.Event()).describe()


def test_exchanges_filter_and_say_what_reached_the_apiserver() -> None:
    proxy = FaultProxy("https://127.0.0.1:1")
    patch = RequestInfo("PATCH", PATCH.path, "patch", "example.com", "widgets", "", "ns", "db")
    status = RequestInfo(
        "PATCH", PATCH.path + "/status", "patch", "example.com", "widgets", "status", "ns", "db"
    )
    proxy._answered("operator", patch, None, "409", received=2.0, sent=2.1)
    proxy._answered("operator", patch, None, "200", received=1.0, sent=1.1)
    proxy._answered("operator", status, Rule(conflict()), "409", received=3.0)
    proxy._answered("other", patch, None, "200", received=4.0, sent=4.1)
    mine = proxy.exchanges("patch", "widgets", name="db", client="operator")
    assert [(e.received, e.code) for e in mine] == [(1.0, "200"), (2.0, "409")]  # in order of arrival
    assert [e.code for e in proxy.exchanges(resource="widgets/status", forwarded=False)] == ["409"]
    assert len(proxy.exchanges(forwarded=True)) == 3 and proxy.exchanges(namespace="elsewhere") == []


# -- through the proxy ------------------------------------------------------------------------------


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Recorder)
        self.bodies: list[Any] = []
        self.arrived = threading.Condition()


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request 200 with the body it got, and keeps the body."""

    protocol_version = "HTTP/1.1"
    server: _Upstream

    def do_PATCH(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.arrived:
            self.server.bodies.append(json.loads(data))
            self.server.arrived.notify_all()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(upstream: _Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(f"http://127.0.0.1:{upstream.server_address[1]}") as proxy:
        yield proxy


@pytest.fixture
def send(proxy: FaultProxy, tmp_path: Path) -> Any:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(proxy.ca.cert_pem)

    def send(body: Any, name: str = "db") -> requests.Response:
        url = f"{proxy.url}/envtest-client/operator{PATCH.path.rsplit('/', 1)[0]}/{name}"
        headers = {"Content-Type": "application/merge-patch+json"}
        return requests.patch(url, data=json.dumps(body), headers=headers, verify=str(ca), timeout=10)

    return send


def test_a_stale_precondition_is_what_the_apiserver_receives(
    proxy: FaultProxy, upstream: _Upstream, send: Any
) -> None:
    proxy.add(Rule(stale_precondition(), verb="patch", name="db", times=1))
    assert send({"metadata": {"resourceVersion": "42"}}).json() == {"metadata": {"resourceVersion": "1"}}
    assert send({"metadata": {"resourceVersion": "43"}}).status_code == 200  # times=1: used up
    proxy.add(Rule(no_precondition(), verb="patch", name="db"))
    send({"metadata": {"resourceVersion": "44", "labels": {"a": "b"}}})
    assert upstream.bodies == [
        {"metadata": {"resourceVersion": "1"}},
        {"metadata": {"resourceVersion": "43"}},
        {"metadata": {"labels": {"a": "b"}}},
    ]
    assert [e.forwarded for e in proxy.exchanges(client="operator")] == [True, True, True]


def test_a_held_request_reaches_the_apiserver_only_once_let_go(
    proxy: FaultProxy, upstream: _Upstream, send: Any
) -> None:
    gate = threading.Event()
    held = proxy.add(Rule(verb="patch", name="held", hold=gate, times=1))
    replies: list[requests.Response] = []
    thread = threading.Thread(target=lambda: replies.append(send({"n": 1}, name="held")), daemon=True)
    thread.start()
    eventually(lambda: held.fired == 1 or _fail("the held request never arrived"), timeout=10)
    # Another request passes meanwhile; the held one is still not upstream after it.
    assert send({"n": 2}).status_code == 200
    assert upstream.bodies == [{"n": 2}] and not replies
    gate.set()
    thread.join(10)
    assert [r.status_code for r in replies] == [200] and upstream.bodies == [{"n": 2}, {"n": 1}]
    (exchange,) = proxy.exchanges(name="held")
    assert exchange.sent is not None and exchange.sent > exchange.received and exchange.rule is held


def test_removing_a_holding_rule_lets_its_requests_go(
    proxy: FaultProxy, upstream: _Upstream, send: Any
) -> None:
    held = proxy.add(Rule(verb="patch", hold=threading.Event()))
    replies: list[requests.Response] = []
    thread = threading.Thread(target=lambda: replies.append(send({"n": 1})), daemon=True)
    thread.start()
    eventually(lambda: held.fired == 1 or _fail("the held request never arrived"), timeout=10)
    proxy.clear()
    thread.join(10)
    assert [r.status_code for r in replies] == [200] and upstream.bodies == [{"n": 1}]


def test_an_answer_of_the_proxy_alone_is_not_forwarded(
    proxy: FaultProxy, upstream: _Upstream, send: Any
) -> None:
    proxy.add(Rule(conflict(), verb="patch"))
    assert send({"metadata": {"resourceVersion": "42"}}).status_code == 409
    (exchange,) = proxy.exchanges()
    assert (exchange.code, exchange.sent, isinstance(exchange.rule.action, Respond)) == ("409", None, True)  # type: ignore[union-attr]
    assert upstream.bodies == []


def _fail(message: str) -> bool:
    raise AssertionError(message)
