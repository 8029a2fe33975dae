"""The operator's own webhook server (`mysql_operator.runtime.webhook`) over real TLS on 127.0.0.1.

Each production property has its test: body cap, missing/invalid lengths, handshake / read / idle
timeouts, bounded connections, certificate reload (new key, new CA, half-written pair), stop. Timeouts
are small and every wait is on a socket or an event; a wait with a bound only guards against a hang.
"""

from __future__ import annotations

import ast
import http.client
import json
import logging
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envtest import eventually
from envtest.pki import CertificateAuthority
from mysql_operator.runtime import CertLoadError, ServerOptions, WebhookServer, allow, deny
from mysql_operator.runtime.budget import parsed_bound

ROOT = Path(__file__).resolve().parents[2]
HANG = 20.0
"""Seconds after which a client gives up: a guard against a hung test, never the thing asserted."""
# Timeouts under test are short, but each also applies to the well-behaved client served meanwhile,
# so they are long enough (1 s) for its handshake or request on a busy machine.


def issue(cert_dir: Path, name: str = "webhook-ca") -> bytes:
    """A fresh CA and a serving pair for 127.0.0.1 from it in ``cert_dir``; the CA's PEM."""
    ca = CertificateAuthority.create(name)
    ca.issue_serving("webhook", ("127.0.0.1", "localhost")).write(cert_dir, "tls")
    return ca.cert_pem


def admission_review(uid: str = "u-1", **obj: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": "CREATE", "object": obj},
    }


class Served:
    """A started server on a fresh cert dir, with /validate (denies ``bad``) and /convert."""

    def __init__(self, cert_dir: Path, options: ServerOptions) -> None:
        self.cert_dir = cert_dir
        self.ca_pem = issue(cert_dir)
        self.server = WebhookServer(
            cert_dir / "tls.crt", cert_dir / "tls.key", listen="127.0.0.1", options=options
        )
        self.server.admission("/validate", lambda req: deny("bad") if req["object"].get("bad") else allow())
        self.server.conversion("/convert", lambda obj, to: {**obj, "apiVersion": to})
        self.server.start()

    @property
    def port(self) -> int:
        return self.server.port

    def tls(self, ca_pem: bytes | None = None, timeout: float = HANG) -> ssl.SSLSocket:
        """A TLS connection trusting only ``ca_pem`` (default: the CA the server started with)."""
        ctx = ssl.create_default_context(cadata=(ca_pem or self.ca_pem).decode())
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return ctx.wrap_socket(raw, server_hostname="127.0.0.1")

    def post(self, path: str, body: Any, ca_pem: bytes | None = None) -> tuple[int, Any]:
        """One request on a new connection: (status, JSON reply)."""
        ctx = ssl.create_default_context(cadata=(ca_pem or self.ca_pem).decode())
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=HANG)
        try:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        finally:
            conn.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    made: list[Served] = []

    def start(**options: Any) -> Served:
        served = Served(tmp_path / f"certs-{len(made)}", ServerOptions(**options))
        made.append(served)
        return served

    yield start
    for served in made:
        served.server.stop(grace=0)


def raw_request(sock: ssl.SSLSocket, head: str, body: bytes = b"") -> http.client.HTTPResponse:
    sock.sendall(head.encode() + b"\r\n" + body)
    resp = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
    resp.begin()
    return resp


def closed_by_peer(sock: socket.socket) -> bool:
    """Block (up to HANG) until the peer closes; True if it did, False if the guard ran out."""
    sock.settimeout(HANG)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True  # an abortive close (RST, or TLS torn down without close_notify) is closed too
    except TimeoutError:
        return False


def peer_closed_within(sock: ssl.SSLSocket, seconds: float) -> bool:
    """Whether the peer closed within ``seconds``: the drip's pace, not an assertion."""
    readable, _, _ = select.select([sock], [], [], seconds)
    if not readable:
        return False
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except ssl.SSLWantReadError:
        return False  # TLS records without data (a TLS 1.3 session ticket), not a close
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        sock.settimeout(HANG)


# -- dispatch -----------------------------------------------------------------------------------------


def test_admission_and_conversion_reviews_are_answered_by_path(serve: Callable[..., Served]) -> None:
    s = serve()
    status, review = s.post("/validate", admission_review("u-7", bad=True))
    assert status == 200 and review["kind"] == "AdmissionReview"
    assert review["response"] == {"allowed": False, "status": {"code": 403, "message": "bad"}, "uid": "u-7"}

    conversion = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": "g/v2", "objects": [{"apiVersion": "g/v1"}]},
    }
    status, review = s.post("/convert", conversion)
    assert status == 200 and review["response"]["convertedObjects"] == [{"apiVersion": "g/v2"}]
    assert review["response"]["result"] == {"status": "Success"} and review["response"]["uid"] == "c-1"
    assert s.server.served("/validate") == 1 and s.server.served("/convert") == 1


def test_a_body_that_is_not_the_paths_review_gets_400_and_an_unknown_path_404(
    serve: Callable[..., Served],
) -> None:
    s = serve()
    assert s.post("/validate", b"{not json")[0] == 400
    status, reply = s.post("/validate", {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"})
    assert status == 400 and "expected AdmissionReview admission.k8s.io/v1" in reply["message"]
    status, reply = s.post("/nowhere", admission_review())
    assert status == 404 and "/nowhere" in reply["message"]
    # Only registered paths are counted: a client cannot grow the metrics with made-up paths.
    assert s.server.served("/nowhere") == 0


def test_a_handler_that_raises_denies_with_500_and_keeps_serving(serve: Callable[..., Served]) -> None:
    s = serve()

    def broken(request: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("spec")

    s.server.admission("/broken", broken)
    status, review = s.post("/broken", admission_review())
    assert status == 200 and review["response"]["allowed"] is False
    assert (
        review["response"]["status"]["code"] == 500 and "KeyError" in review["response"]["status"]["message"]
    )
    assert s.post("/validate", admission_review())[1]["response"]["allowed"] is True


# -- body cap and lengths -----------------------------------------------------------------------------


def test_an_oversized_body_gets_413_unread_while_other_requests_are_served(
    serve: Callable[..., Served],
) -> None:
    s = serve(max_admission_bytes=1024)
    big = s.tls()
    # A length of 1 GB and no body at all: the 413 can only come from the header, not from reading.
    resp = raw_request(big, "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n")
    assert (
        resp.status == 413 and "over the 1024-byte limit of /validate" in json.loads(resp.read())["message"]
    )
    assert resp.getheader("Connection") == "close" and closed_by_peer(big)

    exactly = json.dumps(admission_review(pad="")).encode()
    exactly = json.dumps(admission_review(pad="x" * (1024 - len(exactly)))).encode()
    assert len(exactly) == 1024
    status, review = s.post("/validate", exactly)  # the cap itself is allowed
    assert status == 200 and review["response"]["allowed"] is True
    assert s.post("/validate", exactly + b" ")[0] == 413


def test_the_413_reaches_a_client_still_sending_its_body(serve: Callable[..., Served]) -> None:
    # Closing with the body unread in the receive buffer sends RST, which can destroy the reply before
    # the client reads it; the server ends its side first and drains, so the 413 arrives every time.
    s = serve(max_admission_bytes=1024)
    for _ in range(5):
        status, reply = s.post("/validate", b"x" * 256 * 1024)
        assert status == 413 and "over the 1024-byte limit" in reply["message"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ("", 411),
        ("Transfer-Encoding: chunked\r\n", 411),
        ("Content-Length: abc\r\n", 400),
        ("Content-Length: -1\r\n", 400),
        ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
    ],
    ids=["missing", "chunked", "not-a-number", "negative", "two-lengths"],
)
def test_a_post_without_one_valid_length_is_refused_before_reading(
    serve: Callable[..., Served], headers: str, status: int
) -> None:
    s = serve()
    sock = s.tls()
    resp = raw_request(sock, f"POST /validate HTTP/1.1\r\nHost: x\r\n{headers}")
    reply = resp.read()
    assert resp.status == status, reply
    assert closed_by_peer(sock)


# -- timeouts -----------------------------------------------------------------------------------------


def test_a_client_that_never_handshakes_does_not_hold_up_others(serve: Callable[..., Served]) -> None:
    # A handshake timeout far beyond the client's guard: if the silent client blocked the accept loop,
    # the good request would wait for it and the guard would fail the test.
    s = serve(handshake_timeout=600)
    silent = socket.create_connection(("127.0.0.1", s.port), timeout=HANG)
    try:
        assert s.post("/validate", admission_review())[0] == 200
    finally:
        silent.close()


def test_a_stalled_client_is_dropped_after_the_handshake_timeout_while_others_are_served(
    serve: Callable[..., Served],
) -> None:
    s = serve(handshake_timeout=1.0, max_connections=2)
    silent = socket.create_connection(("127.0.0.1", s.port), timeout=HANG)
    assert s.post("/validate", admission_review())[0] == 200
    assert closed_by_peer(silent)
    silent.close()


def test_the_slot_of_a_dropped_client_is_given_to_the_next(serve: Callable[..., Served]) -> None:
    # One slot: the good client can only be served once the silent one has been dropped.
    s = serve(handshake_timeout=1.0, max_connections=1)
    silent = socket.create_connection(("127.0.0.1", s.port), timeout=HANG)
    assert s.post("/validate", admission_review())[0] == 200
    assert closed_by_peer(silent)
    silent.close()


def test_a_request_that_stops_midway_is_dropped_after_the_read_timeout(serve: Callable[..., Served]) -> None:
    s = serve(read_timeout=1.0)
    sock = s.tls()
    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")  # 1 of 100 bytes
    assert closed_by_peer(sock)
    assert s.post("/validate", admission_review())[0] == 200


def test_a_slow_drip_does_not_extend_the_read_deadline(serve: Callable[..., Served]) -> None:
    # A byte every 50 ms keeps a per-recv timeout of 300 ms from ever firing; a deadline for the
    # whole request does not care. 400 bytes (20 s) without being dropped fails the test.
    s = serve(read_timeout=0.3)
    sock = s.tls()
    sock.sendall(b"POST /validate HTTP/1.1\r\nX-Drip: ")
    for _ in range(400):
        if peer_closed_within(sock, 0.05):
            break
        sock.sendall(b"a")
    else:
        pytest.fail("a client dripping one byte per 50 ms was never dropped")


def test_a_kept_alive_connection_serves_requests_until_it_idles_out(serve: Callable[..., Served]) -> None:
    s = serve(idle_timeout=1.0)
    sock = s.tls()
    body = json.dumps(admission_review()).encode()
    head = f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    for _ in range(2):  # one connection, two requests
        resp = raw_request(sock, head, body)
        assert resp.status == 200 and json.loads(resp.read())["response"]["allowed"] is True
    assert closed_by_peer(sock)


# -- bounded connections ------------------------------------------------------------------------------


def test_connections_over_the_limit_wait_until_a_slot_frees(serve: Callable[..., Served]) -> None:
    s = serve(max_connections=1)
    holder = s.tls()  # handshaken and kept open: the one slot is taken
    done = threading.Event()
    result: list[int] = []

    def second() -> None:
        result.append(s.post("/validate", admission_review())[0])
        done.set()

    waiter = threading.Thread(target=second, daemon=True)
    waiter.start()
    # Waiting, not refused: it cannot complete while the slot is held (a short look, which can miss
    # a broken limit on a slow machine but never fails a working one) ...
    assert not done.wait(0.3)
    holder.close()
    # ... and is served as soon as the slot frees.
    assert done.wait(HANG) and result == [200]


# -- memory budget ------------------------------------------------------------------------------------

MEMORY = 3 * 1024 * 1024
"""A budget of 3 MiB: 1 MiB for bodies' bytes, 2 MiB for parses."""


def hostile_review(items: int) -> bytes:
    """An AdmissionReview holding `[{},{},…]`: ~25 times its size once parsed."""
    return json.dumps(admission_review(items=[{}] * items)).encode()


def test_a_body_that_could_never_fit_the_memory_budget_gets_413(serve: Callable[..., Served]) -> None:
    s = serve(memory_budget=MEMORY)
    sock = s.tls()
    # Over the pool for bodies by its length alone: refused from the header, nothing read.
    resp = raw_request(sock, "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 1100000\r\n")
    assert resp.status == 413 and "memory for bodies (1.0 MiB)" in json.loads(resp.read())["message"]
    assert closed_by_peer(sock)
    # Under it by length, over the pool for parses once its cost is counted.
    hostile = hostile_review(20_000)
    assert len(hostile) < 1024 * 1024
    status, reply = s.post("/validate", hostile)
    assert status == 413 and "over the webhook server's memory for parses (2.0 MiB)" in reply["message"]
    eventually(lambda: s.server.memory.in_use == 0, timeout=HANG)  # released just after the reply
    assert s.post("/validate", admission_review())[0] == 200


def test_a_request_waits_for_memory_then_is_served(serve: Callable[..., Served]) -> None:
    s = serve(memory_budget=MEMORY)
    bodies = s.server.memory.bodies
    taken = bodies.reserve(bodies.total, deadline=float("inf"))
    assert taken is not None
    result: list[int] = []
    waiter = threading.Thread(target=lambda: result.append(s.post("/validate", admission_review())[0]))
    waiter.start()
    eventually(lambda: bodies.waiting == 1, timeout=HANG)  # its body's bytes wait for room
    assert not result
    taken.release()
    waiter.join(HANG)
    assert result == [200]
    eventually(lambda: s.server.memory.in_use == 0, timeout=HANG)


def test_many_bodies_that_each_need_most_of_the_parse_pool_are_all_served_in_turn(
    serve: Callable[..., Served],
) -> None:
    # Each body is read (its bytes held) before its parse waits; with one pool for both, every
    # request would hold a little and wait for the rest, and none would get it.
    s = serve(memory_budget=MEMORY)
    parses = s.server.memory.parses
    body = hostile_review(1500)
    cost = 2 * parsed_bound(body) - len(body)
    assert parses.total // 2 < cost <= parses.total and 16 * len(body) < s.server.memory.bodies.total
    codes: list[int] = []
    posts = [threading.Thread(target=lambda: codes.append(s.post("/validate", body)[0])) for _ in range(16)]
    for t in posts:
        t.start()
    for t in posts:
        t.join(HANG * 3)
    # Each parse was reserved (one at a time: two never fit), and every reservation was given back.
    assert codes == [200] * 16 and parses.total // 2 < parses.peak <= parses.total
    eventually(lambda: s.server.memory.in_use == 0, timeout=HANG)


def test_a_request_that_finds_no_memory_in_time_gets_503(serve: Callable[..., Served]) -> None:
    s = serve(memory_budget=MEMORY, memory_wait=0.5)
    bodies = s.server.memory.bodies
    taken = bodies.reserve(bodies.total, deadline=float("inf"))
    assert taken is not None
    sock = s.tls()
    body = json.dumps(admission_review()).encode()
    resp = raw_request(sock, f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n", body)
    assert resp.status == 503 and resp.getheader("Retry-After") == "1"
    assert "retry" in json.loads(resp.read())["message"] and closed_by_peer(sock)
    taken.release()
    assert s.post("/validate", admission_review())[0] == 200


# -- certificate reload -------------------------------------------------------------------------------


def test_the_next_handshake_presents_a_rotated_key_and_ca(serve: Callable[..., Served]) -> None:
    s = serve()
    kept = s.tls()  # open before the rotation: keeps what it negotiated
    new_ca = issue(s.cert_dir, "rotated-ca")

    assert s.post("/validate", admission_review(), ca_pem=new_ca)[0] == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        s.tls(ca_pem=s.ca_pem)  # the old CA no longer verifies what is served
    assert s.server.certs.reloads == 1
    body = json.dumps(admission_review()).encode()
    resp = raw_request(kept, f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n", body)
    assert resp.status == 200


def test_a_half_written_pair_keeps_the_previous_certificate_until_both_files_load(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    s = serve()
    staged = tmp_path / "staged"
    new_ca = issue(staged, "rotated-ca")

    (s.cert_dir / "tls.crt").write_bytes((staged / "tls.crt").read_bytes())  # the key is still the old
    assert s.post("/validate", admission_review())[0] == 200  # old pair, old CA
    (s.cert_dir / "tls.key").write_bytes((staged / "tls.key").read_bytes())
    assert s.post("/validate", admission_review(), ca_pem=new_ca)[0] == 200
    assert s.server.certs.reloads == 1


@pytest.mark.parametrize("damage", ["garbage-cert", "empty-key", "missing-key"])
def test_an_unloadable_pair_is_never_served(
    serve: Callable[..., Served], damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = serve()
    caplog.set_level(logging.WARNING, logger="mysql_operator.runtime.certwatcher")
    if damage == "garbage-cert":
        (s.cert_dir / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nnope\n")
    elif damage == "empty-key":
        (s.cert_dir / "tls.key").write_bytes(b"")
    else:
        (s.cert_dir / "tls.key").unlink()
    for _ in range(3):  # nor on later connections, and it is reported once, not once per connection
        assert s.post("/validate", admission_review())[0] == 200
    assert s.server.certs.reloads == 0
    assert [r.getMessage() for r in caplog.records] == [
        "serving certificate not reloaded; still serving the previous one"
    ]
    new_ca = issue(s.cert_dir, "repaired-ca")
    assert s.post("/validate", admission_review(), ca_pem=new_ca)[0] == 200


def test_a_server_whose_pair_does_not_load_fails_naming_the_files(tmp_path: Path) -> None:
    issue(tmp_path)
    (tmp_path / "tls.key").write_bytes(b"")
    with pytest.raises(CertLoadError, match=r"tls\.crt / key .*tls\.key"):
        WebhookServer(tmp_path / "tls.crt", tmp_path / "tls.key", listen="127.0.0.1")
    with pytest.raises(CertLoadError, match=r"no such file: .*missing\.crt"):
        WebhookServer(tmp_path / "missing.crt", tmp_path / "tls.key", listen="127.0.0.1")


# -- lifecycle and options ----------------------------------------------------------------------------


def test_stop_cuts_kept_alive_connections_and_a_restart_keeps_the_port(serve: Callable[..., Served]) -> None:
    s = serve()
    kept = s.tls()
    port = s.port
    s.server.stop()
    assert closed_by_peer(kept)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=HANG).close()
    s.server.start()
    assert s.port == port and s.post("/validate", admission_review())[0] == 200


@pytest.mark.parametrize("field", ["max_admission_bytes", "max_connections", "read_timeout"])
def test_options_out_of_range_are_refused_naming_the_field(field: str) -> None:
    with pytest.raises(ValueError, match=f"ServerOptions.{field}"):
        ServerOptions(**{field: 0})


def test_no_file_of_the_operator_imports_the_harness() -> None:
    # The operator's wheel installs without envtest; a single import would break it at run time.
    offenders = []
    for path in sorted((ROOT / "operator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", ""))
                in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names = [str(node.args[0].value)]
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "envtest"
            ]
    assert offenders == []
    assert list((ROOT / "operator").rglob("*.py")), "the operator's sources moved: update this test"
