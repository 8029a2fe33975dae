"""Run a command in a pod's container through the apiserver, as `kubectl exec` does (no stdin, no tty).

The apiserver upgrades `GET …/pods/NAME/exec?command=…` to a WebSocket and relays the kubelet's streams,
one channel per frame (its first byte): 1 stdout, 2 stderr, 3 the outcome as a metav1.Status (exit
code under `details.causes[reason=ExitCode]`). Subprotocol v5.channel.k8s.io, else v4 (the same
framing; v5 adds a close signal we do not need).

The connection is made with the same identity and trust as the pykube client it is given: its server
URL, CA (or insecure-skip-tls-verify), client certificate, and the Authorization header pykube adds to
a request of that client (a bearer token, a rotated ServiceAccount token, an exec plugin's token), read
off one GET /version. Whatever runs here must carry no secret in `command`: the kubelet logs it, and
it is the argv of the process in the container.
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import pykube
import websocket

STDOUT, STDERR, STATUS = 1, 2, 3
SUBPROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
CLOSE = 255
"""v5's close-stream frame: a channel the client closes; never sent by the server to us."""


class ExecError(Exception):
    """The command could not be run: no such pod or container, refused, or the connection failed."""


@dataclass(frozen=True)
class ExecResult:
    code: int
    """The command's exit code (0: success)."""
    stdout: str
    stderr: str


def exec_in_pod(
    api: pykube.HTTPClient,
    namespace: str,
    pod: str,
    container: str,
    command: list[str],
    *,
    timeout: float = 30.0,
) -> ExecResult:
    """`command` in `pod`'s `container`; its exit code and output. ExecError when it cannot run, or
    when it has not finished within `timeout` seconds."""
    query = [("container", container), ("stdout", "true"), ("stderr", "true")]
    query += [("command", part) for part in command]
    base = urlsplit(api.url)
    scheme = "wss" if base.scheme == "https" else "ws"
    url = f"{scheme}://{base.netloc}{base.path.rstrip('/')}/api/v1/namespaces/{namespace}/pods/{pod}/exec"
    url += "?" + urlencode(query)
    where = f"exec in {namespace}/{pod} ({container})"
    try:
        ws = websocket.create_connection(
            url,
            header=_auth_header(api),
            subprotocols=SUBPROTOCOLS,
            sslopt=_ssl_options(api),
            timeout=timeout,
        )
    except websocket.WebSocketBadStatusException as exc:
        raise ExecError(f"{where}: {exc.status_code} {_reason(exc)}") from exc
    except (OSError, websocket.WebSocketException) as exc:
        raise ExecError(f"{where}: {exc}") from exc
    out: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray(), STATUS: bytearray()}
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ExecError(f"{where}: no outcome within {timeout:.0f}s")
            ws.settimeout(left)
            try:
                opcode, data = ws.recv_data()
            except websocket.WebSocketConnectionClosedException:
                break
            except websocket.WebSocketTimeoutException as exc:
                raise ExecError(f"{where}: no outcome within {timeout:.0f}s") from exc
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            if data and data[0] in out:
                out[data[0]] += data[1:]
    except (OSError, websocket.WebSocketException) as exc:
        raise ExecError(f"{where}: {exc}") from exc
    finally:
        ws.close()
    stdout, stderr = (out[c].decode(errors="replace") for c in (STDOUT, STDERR))
    return ExecResult(_exit_code(where, bytes(out[STATUS]), stderr), stdout, stderr)


def _exit_code(where: str, raw: bytes, stderr: str) -> int:
    if not raw:
        raise ExecError(f"{where}: the stream ended without an outcome; stderr: {stderr.strip()[-300:]}")
    try:
        status: dict[str, Any] = json.loads(raw)
    except ValueError as exc:
        raise ExecError(f"{where}: an outcome that is not a Status: {raw[:200]!r}") from exc
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    code = next((c.get("message") for c in causes if c.get("reason") == "ExitCode"), None)
    if code is None or not str(code).isdigit():
        # Not the command's failure: it never ran (no such executable, container not running).
        raise ExecError(f"{where}: {status.get('message') or status}")
    return int(code)


def _auth_header(api: pykube.HTTPClient) -> list[str]:
    """The Authorization header pykube sets on this client's requests (none for certificate auth)."""
    resp = api.session.get(f"{api.url.rstrip('/')}/version", timeout=10)
    if resp.status_code in (401, 403):
        raise ExecError(f"exec: the apiserver refuses this identity ({resp.status_code})")
    value = resp.request.headers.get("Authorization")
    return [f"Authorization: {value}"] if value else []


def _ssl_options(api: pykube.HTTPClient) -> dict[str, Any]:
    cluster, user = api.config.cluster, api.config.user
    options: dict[str, Any] = {}
    if "certificate-authority" in cluster:
        options["ca_certs"] = cluster["certificate-authority"].filename()
    elif cluster.get("insecure-skip-tls-verify"):
        options.update(cert_reqs=ssl.CERT_NONE, check_hostname=False)
    if "client-certificate" in user:
        options["certfile"] = user["client-certificate"].filename()
        options["keyfile"] = user["client-key"].filename()
    if "tls-server-name" in cluster:
        options["server_hostname"] = cluster["tls-server-name"]
    return options


def _reason(exc: websocket.WebSocketBadStatusException) -> str:
    body = getattr(exc, "resp_body", None) or b""
    try:
        return str(json.loads(body).get("message") or body[:200])
    except (ValueError, AttributeError):
        return str(body[:200])
