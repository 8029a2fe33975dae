"""A fault-injecting TLS reverse proxy between an operator under test and kube-apiserver.

    with FaultProxy.for_cluster(cluster) as proxy:
        kubeconfig = proxy.kubeconfig_for(operator_kubeconfig, tmp / "proxied", client="a")
        rule = proxy.add(Rule(conflict(), verb="patch", resource="widgets/status", times=3))
        ...
        assert rule.fired == 3 and proxy.requests(verb=WRITE_VERBS, client="a") == 0

Authentication: the proxy terminates TLS with a CA of its own (the one in the kubeconfigs it writes)
and forwards each request's own `Authorization: Bearer` header unchanged, so the apiserver
authenticates and authorizes the operator's real ServiceAccount: RBAC applies with no impersonation
rights anywhere, and the proxy works alike on every backend (it needs no admin credentials).
Client certificates cannot pass a TLS-terminating proxy, so proxied identities must use tokens.

A kubeconfig may carry a client label (a `/envtest-client/<label>` server path prefix): requests
are counted per label, rules can select one, and `kill_client` makes one client look dead.
Upstream, every request is sent exactly once (no retries: a retried write would hide the very faults
we inject), and watches are relayed line by line as they arrive.

Every request is also kept as an `Exchange` once answered: when it came, when it was forwarded (None:
the proxy answered it alone) and the code the client got. With no rule in the way the proxy only
forwards, so `exchanges(...)` is what the apiserver saw and answered - its own 409s included:

    writes = proxy.exchanges(verb="patch", resource="widgets", name="db", client="operator")
    gaps = [b.sent - a.sent for a, b in zip(writes, writes[1:])]
"""

from __future__ import annotations

import base64
import socket
import ssl
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import urllib3
import yaml

from envtest.errors import ConfigError
from envtest.faults.relay import CLIENT_PREFIX, NOT_FORWARDED, RelayHandler, RelayServer, hard_close
from envtest.faults.rules import (
    WRITE_VERBS,
    RequestInfo,
    Rule,
)
from envtest.kubeconfig import with_server, write_kubeconfig
from envtest.pki import CertificateAuthority

if TYPE_CHECKING:
    from envtest.clusters import Cluster


def _describe(info: RequestInfo) -> str:
    where = f"{info.namespace}/{info.name}".strip("/")
    return f"{info.verb} {info.full_resource or info.path} {where}".rstrip()


def _as_set(value: str | Iterable[str] | None) -> set[str] | None:
    return None if value is None else {value} if isinstance(value, str) else set(value)


@dataclass(frozen=True)
class Exchange:
    """One request and its answer, as the proxy saw them (times are `time.monotonic()`)."""

    client: str
    info: RequestInfo
    received: float
    """When the request arrived, before any rule held it."""
    sent: float | None
    """When it was forwarded to the apiserver; None when the proxy answered (or cut) it alone."""
    code: str
    """The HTTP code the client got ("" = its connection was cut): the apiserver's when `sent`."""
    rule: Rule | None
    """The rule that acted on it, if any."""

    @property
    def forwarded(self) -> bool:
        return self.sent is not None


class FaultProxy:
    """A local TLS reverse proxy in front of `upstream` with rules, counters and kill switches."""

    def __init__(
        self,
        upstream: str,
        *,
        ca_pem: bytes | None = None,
        insecure: bool = False,
        log_path: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.ca = CertificateAuthority.create("envtest-fault-proxy-ca", valid_days=1)
        """The proxy's own CA: kubeconfigs written by kubeconfig_for() trust this, not the cluster's."""
        self.host = host
        self.log_path = log_path
        self.injected: list[tuple[float, str, str, Rule]] = []
        """(monotonic time, client, "verb resource ns/name", rule) of every injection, in order."""
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._counts: Counter[tuple[str, str, str]] = Counter()  # (client, verb, resource[/sub])
        self._codes: Counter[tuple[str, str, str, str]] = Counter()  # the same + the code answered
        self._exchanges: list[Exchange] = []  # every request once answered, in the order answered
        self._sockets: dict[socket.socket, str] = {}  # open downstream connection → its client
        self._streams: set[tuple[RequestInfo, str, Any]] = set()  # live watches: (info, client, sever)
        self._dead: set[str] = set()
        self._stopping = threading.Event()
        self._log_file: Any = None
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        pool_tls = {"ca_cert_data": ca_pem.decode()} if ca_pem else {}
        self._pool = urllib3.PoolManager(
            maxsize=32,
            cert_reqs="CERT_NONE" if insecure else "CERT_REQUIRED",
            retries=False,
            **pool_tls,
        )
        self._server: RelayServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_cluster(cls, cluster: Cluster, *, log_path: Path | None = None) -> FaultProxy:
        """A proxy in front of `cluster`'s apiserver, trusting the CA its kubeconfig trusts."""
        config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        context_name = cluster.context or config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        entry = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        ca_pem: bytes | None = None
        if "certificate-authority-data" in entry:
            ca_pem = base64.b64decode(entry["certificate-authority-data"])
        elif "certificate-authority" in entry:
            ca_pem = (Path(cluster.kubeconfig).parent / entry["certificate-authority"]).read_bytes()
        insecure = bool(entry.get("insecure-skip-tls-verify"))
        return cls(entry["server"], ca_pem=ca_pem, insecure=insecure, log_path=log_path)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        # ssl loads a certificate chain from files only; they live just long enough to be read.
        with tempfile.TemporaryDirectory(prefix="envtest-faults-") as tmp:
            serving = self.ca.issue_serving("envtest-fault-proxy", [self.host, "localhost"])
            self._tls.load_cert_chain(*serving.write(Path(tmp), "serving"))
        self._server = RelayServer((self.host, 0), RelayHandler)
        self._server.proxy = self
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "a", buffering=1)  # noqa: SIM115 - closed in stop()
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            sockets = list(self._sockets)
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
        for sock in sockets:
            hard_close(sock)
        self._pool.clear()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"https://{self.host}:{self._server.server_address[1]}"

    def fronts(self, cluster: Cluster) -> bool:
        """Whether this proxy forwards to `cluster`'s apiserver."""
        return self.upstream == cluster.server.rstrip("/")

    def kubeconfig_for(self, source: Path, dest: Path, *, client: str | None = None) -> Path:
        """`source` (a token identity) rewritten to go through the proxy, labelled `client`."""
        config = yaml.safe_load(Path(source).read_text())
        for user in config.get("users", []):
            creds = user.get("user") or {}
            if ("client-certificate-data" in creds or "client-certificate" in creds) and not (
                "token" in creds or "tokenFile" in creds
            ):
                raise ConfigError(
                    f"{source}: user {user.get('name')!r} authenticates with a client certificate, which "
                    "cannot pass the TLS-terminating fault proxy; use a token (e.g. a ServiceAccount's)"
                )
        server = self.url + (f"{CLIENT_PREFIX}{client}" if client else "")
        config = with_server(config, server)
        for entry in config["clusters"]:
            entry["cluster"].pop("certificate-authority", None)
            entry["cluster"].pop("insecure-skip-tls-verify", None)
            entry["cluster"]["certificate-authority-data"] = base64.b64encode(self.ca.cert_pem).decode()
        return write_kubeconfig(dest, config)

    # -- rules ----------------------------------------------------------------------------------

    def add(self, rule: Rule) -> Rule:
        """Append `rule` (rules added earlier take precedence) and return it, to read its counters."""
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        """Take `rule` out; requests it holds (`Rule.hold`) go on."""
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)
        if rule.hold is not None:
            rule.hold.set()

    def clear(self) -> None:
        """Remove every rule: from now on requests pass through (counters are kept); held ones go on."""
        with self._lock:
            rules, self._rules = self._rules, []
        for rule in rules:
            if rule.hold is not None:
                rule.hold.set()

    # -- counters -------------------------------------------------------------------------------

    def requests(
        self,
        verb: str | Iterable[str] | None = None,
        resource: str | Iterable[str] | None = None,
        client: str | None = None,
        code: str | int | None = None,
    ) -> int:
        """Requests received (faulted or not) matching every filter; resource as "widgets/status".
        With `code`, only those answered with it ("" = cut off unanswered); a request counts for its
        code once it is over (a watch when it ends)."""
        verbs, resources = _as_set(verb), _as_set(resource)
        with self._lock:
            if code is None:
                items = list(self._counts.items())
            else:
                items = [(key[:3], n) for key, n in self._codes.items() if key[3] == str(code)]
        return sum(
            n
            for (c, v, r), n in items
            if (verbs is None or v in verbs)
            and (resources is None or r in resources)
            and (client is None or c == client)
        )

    def writes(self, client: str | None = None, resource: str | Iterable[str] | None = None) -> int:
        return self.requests(WRITE_VERBS, resource, client)

    def counts(self) -> Counter[tuple[str, str, str]]:
        """A snapshot of all counters keyed (client, verb, resource[/subresource])."""
        with self._lock:
            return Counter(self._counts)

    def exchanges(
        self,
        verb: str | Iterable[str] | None = None,
        resource: str | Iterable[str] | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
        client: str | None = None,
        forwarded: bool | None = None,
    ) -> list[Exchange]:
        """Answered requests matching every filter, in the order they arrived; resource as
        "widgets/status"; `forwarded=True` keeps those that reached the apiserver."""
        verbs, resources = _as_set(verb), _as_set(resource)
        with self._lock:
            found = [
                e
                for e in self._exchanges
                if (verbs is None or e.info.verb in verbs)
                and (resources is None or e.info.full_resource in resources)
                and (name is None or e.info.name == name)
                and (namespace is None or e.info.namespace == namespace)
                and (client is None or e.client == client)
                and (forwarded is None or e.forwarded == forwarded)
            ]
        return sorted(found, key=lambda e: e.received)

    def injections(self, action: type | None = None) -> int:
        with self._lock:
            return sum(1 for *_, rule in self.injected if action is None or isinstance(rule.action, action))

    # -- kill switches --------------------------------------------------------------------------

    def kill_client(self, client: str) -> None:
        """Make `client` look like a process that died: its open connections drop, requests held by
        latency are never forwarded, and every later request is cut off unanswered."""
        with self._lock:
            self._dead.add(client)
            sockets = [s for s, c in self._sockets.items() if c == client]
        for sock in sockets:
            hard_close(sock)

    def open_watches(self, resource: str | None = None, client: str | None = None) -> int:
        """Watches being relayed right now (optionally of one resource or client)."""
        return len(self._select_streams(resource, client))

    def disconnect_watches(self, resource: str | None = None, client: str | None = None) -> int:
        """Cut the watches open right now (optionally of one resource or client); how many were cut."""
        streams = self._select_streams(resource, client)
        for _, _, sever in streams:
            sever()
        return len(streams)

    def _select_streams(self, resource: str | None, client: str | None) -> list[tuple[RequestInfo, str, Any]]:
        with self._lock:
            return [
                s
                for s in self._streams
                if (resource is None or s[0].resource == resource) and (client is None or s[1] == client)
            ]

    # -- used by the handler --------------------------------------------------------------------

    def _decide(self, client: str, info: RequestInfo) -> Rule | None:
        with self._lock:
            self._counts[(client, info.verb, info.full_resource)] += 1
            rule = next((r for r in self._rules if r.take(info, client)), None)
            if rule is not None:
                self.injected.append((time.monotonic(), client, _describe(info), rule))
        return rule

    def _answered(
        self,
        client: str,
        info: RequestInfo,
        rule: Rule | None,
        code: str,
        *,
        received: float | None = None,
        sent: float | None = None,
    ) -> None:
        """Count what the client got: an HTTP code, or "" for a connection cut without an answer;
        `received` and `sent` (monotonic) say when the request came and when it went upstream."""
        now = time.monotonic()
        with self._lock:
            self._codes[(client, info.verb, info.full_resource, code)] += 1
            self._exchanges.append(
                Exchange(client, info, now if received is None else received, sent, code, rule)
            )
            if self._log_file is not None:
                note = f" [{rule.describe()}]" if rule else ""
                answer = code or "cut"
                stamp = time.strftime("%H:%M:%S")
                self._log_file.write(f"{stamp} {client} {_describe(info)} -> {answer}{note}\n")

    def _pause(self, seconds: float, client: str) -> bool:
        """Hold a request; False when the proxy stops or the client is killed meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._stopping.wait(min(left, 0.05)) or self._killed(client):
                return False
        return True

    def _hold(self, gate: threading.Event, client: str) -> bool:
        """Hold a request until `gate` is set; False when the proxy stops or the client is killed first."""
        while not gate.wait(0.05):
            if self._stopping.is_set() or self._killed(client):
                return False
        return not self._killed(client)

    def _killed(self, client: str) -> bool:
        with self._lock:
            return client in self._dead

    def _track(self, sock: socket.socket, client: str) -> None:
        with self._lock:
            self._sockets[sock] = client
        if client and self._killed(client):
            hard_close(sock)

    def _watch_opened(self, stream: tuple[RequestInfo, str, Any]) -> None:
        with self._lock:
            self._streams.add(stream)

    def _watch_closed(self, stream: tuple[RequestInfo, str, Any]) -> None:
        with self._lock:
            self._streams.discard(stream)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.pop(sock, None)

    def _forward(self, method: str, path: str, headers: Any, body: bytes, *, watch: bool) -> Any:
        forwarded = {k: v for k, v in headers.items() if k.lower() not in NOT_FORWARDED}
        forwarded["Accept-Encoding"] = "identity"
        return self._pool.urlopen(
            method,
            self.upstream + path,
            body=body or None,
            headers=forwarded,
            preload_content=False,
            decode_content=False,
            redirect=False,
            retries=False,
            # A watch ends by its server-side timeoutSeconds (or by us); other calls must not hang.
            timeout=urllib3.Timeout(connect=5.0, read=None if watch else 60.0),
        )
