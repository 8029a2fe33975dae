"""Install webhook configurations for one test, prove the apiserver calls them, remove them after.

How do we know a configuration "took effect"? controller-runtime waits until the objects can be read
back, but the apiserver's admission plugin loads configurations through its own informer, a moment
later, and an unreachable server or a wrong CA only shows when a request is made. So each installed
configuration carries one extra **probe webhook**, and install() makes requests until that webhook
demonstrably ran:

- the probe entry uses the same ``https://HOST:PORT`` and ``caBundle`` as the user's webhooks, path
  `PROBE_PATH`, and matches only ConfigMap CREATEs in the test namespace that carry the label
  ``envtest.io/webhook-probe=<token>`` — no real object ever matches it;
- install() sends a **server-side dry-run** create of such a ConfigMap (nothing is stored) and reads the
  answer:

  * created → the apiserver has not loaded the configuration yet: retry;
  * an error naming the probe webhook with a transport failure (``Post "https://…": dial tcp …``,
    ``x509: …``, a timeout) → loaded, but the server is not reachable or not trusted yet: retry, and
    report that message if time runs out — it is exactly what the user needs to fix;
  * any other error naming the probe webhook → the server answered over TLS with the right CA.
    Whatever it said (a 404 because it has no such path, our reference server's denial), the
    configuration is live and the server reachable: done.

This needs nothing from the server (kopf, aiohttp, a Go binary all pass) and no counter. The probe's
``failurePolicy`` is ``Fail`` on purpose — with ``Ignore`` a server's 404 would look just like "not
loaded yet" — and that is harmless because only probe-labelled objects match it. Entries of one
configuration object are loaded together, so one probe per configuration (per distinct server) proves
all of its webhooks. The one server it cannot probe is one that *admits every path*; pass
``probe=False`` for it and wait on its own counter instead.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests

from envtest import objects
from envtest.errors import EnvtestError
from envtest.webhooks import config
from envtest.webhooks.server import PROBE_PATH

__all__ = ["PROBE_LABEL", "Endpoint", "Installed", "WebhookEndpoint", "WebhookNotReady", "install", "sweep"]

PROBE_LABEL = "envtest.io/webhook-probe"
PROBE_TIMEOUT_SECONDS = 5
"""timeoutSeconds of the probe webhook: long enough for a loaded CI machine, short enough to retry."""
# Go's net/http wraps every transport error as `Post "<url>": <cause>`; a reply with an HTTP status
# never looks like that. The others are belts to those braces.
_TRANSPORT_MARKS = ('Post "', "dial tcp", "x509:", "tls:", "deadline exceeded", "connection reset", "EOF")


class WebhookNotReady(EnvtestError):
    """The apiserver did not demonstrably call an installed webhook in time."""


class WebhookEndpoint(Protocol):
    """What install() needs of a server: where the apiserver dials it and the CA it must trust."""

    @property
    def url(self) -> str: ...  # https://HOST:PORT, no path

    @property
    def ca_pem(self) -> bytes: ...


@dataclass(frozen=True)
class Endpoint:
    """A webhook server the harness does not run (aiohttp, kopf, a subprocess): its URL and CA."""

    url: str
    ca_pem: bytes


@dataclass
class Installed:
    """Configurations installed for one test; remove() deletes them (idempotent)."""

    session: requests.Session
    server: str
    configs: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time of install(), creation through proof."""

    @property
    def names(self) -> list[str]:
        return [c["metadata"]["name"] for c in self.configs]

    def remove(self) -> None:
        errors = []
        for doc in self.configs:
            resp = self.session.delete(_url(self.server, doc), timeout=10)
            if resp.status_code not in (200, 202, 404):
                name = f"{doc['kind']}/{doc['metadata']['name']}"
                errors.append(f"{name}: {resp.status_code} {resp.text[:200]}")
        self.configs = []
        if errors:
            raise EnvtestError("removing webhook configurations failed: " + "; ".join(errors))


def install(
    session: requests.Session,
    server: str,
    sources: Iterable[config.Source],
    *,
    endpoint: WebhookEndpoint,
    namespace: str,
    run_id: str,
    labels: Mapping[str, str] | None = None,
    suffix: str | None = None,
    probe: bool = True,
    timeout: float = 30.0,
) -> Installed:
    """Install ``sources`` (files, dirs, dicts) rewritten for ``namespace`` and pointing at ``endpoint``;
    with ``probe``, return only once the apiserver has demonstrably called each configuration's server.

    On failure the configurations created so far are removed before the error propagates.
    """
    began = time.monotonic()
    docs = config.load(sources)
    if not docs:
        raise EnvtestError("webhooks.install: no Validating/MutatingWebhookConfiguration in the sources")
    suffix = suffix or namespace
    installed = Installed(session, server)
    probes: list[tuple[str, str, str]] = []  # (kind/name, probe webhook name, its token)
    try:
        for doc in docs:
            rewritten = config.for_test(
                doc,
                base_url=endpoint.url,
                ca_pem=endpoint.ca_pem,
                namespace=namespace,
                suffix=suffix,
                run_id=run_id,
                labels=labels,
            )
            what = f"{rewritten['kind']}/{rewritten['metadata']['name']}"
            if probe:
                probes += [(what, name, token) for name, token in _add_probes(rewritten, namespace)]
            installed.configs.append(_create(session, server, rewritten))
        deadline = began + timeout
        for what, name, token in probes:
            _prove(session, server, namespace, name, token, deadline, what)
    except BaseException:
        installed.remove()
        raise
    installed.seconds = time.monotonic() - began
    return installed


def sweep(session: requests.Session, server: str, label_selector: str) -> list[str]:
    """Delete every webhook configuration matching ``label_selector`` (e.g. ``envtest.io/run=<id>``):
    what tests killed before their teardown left behind. Returns ``Kind/name`` of each."""
    gone = []
    for kind in config.WEBHOOK_KINDS:
        base = f"{server}/apis/{config.ADMISSION_API}/{_plural(kind)}"
        resp = session.get(base, params={"labelSelector": label_selector}, timeout=10)
        for item in resp.json().get("items", []) if resp.ok else []:
            session.delete(f"{base}/{item['metadata']['name']}", timeout=10)
            gone.append(f"{kind}/{item['metadata']['name']}")
    return gone


# -- probe ------------------------------------------------------------------------------------------------


def _add_probes(doc: dict[str, Any], namespace: str) -> list[tuple[str, str]]:
    """Append one probe webhook per distinct server of ``doc``; return (name, token) of each.

    A token per probe, not per configuration: mutating webhooks run in order and stop at the first
    failure, so with a shared token the second server's probe would never be reached.
    """
    origins: dict[str, str] = {}  # https://host:port → caBundle, in order of first use
    for hook in doc.get("webhooks") or []:
        cc = hook["clientConfig"]
        parts = urlsplit(cc["url"])
        origins.setdefault(f"{parts.scheme}://{parts.netloc}", cc.get("caBundle", ""))
    probes = []
    for origin, bundle in origins.items():
        token = secrets.token_hex(6)
        name = f"{token}.webhook-probe.envtest.io"
        hook: dict[str, Any] = {
            "name": name,
            "clientConfig": {"url": origin + PROBE_PATH, "caBundle": bundle},
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["configmaps"],
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": config.scope_to_namespace(None, namespace),
            "objectSelector": {"matchLabels": {PROBE_LABEL: token}},
            "failurePolicy": "Fail",
            "sideEffects": "None",  # required for the dry-run probe to be sent at all
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
        }
        if doc["kind"] == "MutatingWebhookConfiguration":
            hook["reinvocationPolicy"] = "Never"
        doc.setdefault("webhooks", []).append(hook)
        probes.append((name, token))
    return probes


def _prove(
    session: requests.Session,
    server: str,
    namespace: str,
    name: str,
    token: str,
    deadline: float,
    what: str,
) -> None:
    url = f"{server}/api/v1/namespaces/{namespace}/configmaps"
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"generateName": "envtest-webhook-probe-", "labels": {PROBE_LABEL: token}},
    }
    not_loaded = "the apiserver has not called it yet (configuration not loaded)"
    last = not_loaded
    pause = 0.02
    while True:
        resp = session.post(url, json=body, params={"dryRun": "All"}, timeout=PROBE_TIMEOUT_SECONDS + 10)
        if resp.status_code in (200, 201):
            last = not_loaded
        else:
            message = _message(resp)
            if f'"{name}"' not in message:
                # Not our probe: something else in this namespace refused the ConfigMap.
                raise WebhookNotReady(f"{what}: the probe request was refused by something else: {message}")
            if not any(mark in message for mark in _TRANSPORT_MARKS):
                return  # the server answered over TLS, trusted through caBundle: proven
            last = message
        if time.monotonic() > deadline:
            raise WebhookNotReady(
                f"{what}: the apiserver did not reach the webhook server in time; last answer: {last}. "
                f"(A server that admits every path, {PROBE_PATH} included, cannot be probed: probe=False.)"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


# -- plumbing ---------------------------------------------------------------------------------------------


def _plural(kind: str) -> str:
    return kind.lower() + "s"


def _url(server: str, doc: dict[str, Any]) -> str:
    return f"{server}/apis/{config.ADMISSION_API}/{_plural(doc['kind'])}/{doc['metadata']['name']}"


def _create(session: requests.Session, server: str, doc: dict[str, Any]) -> dict[str, Any]:
    base = f"{server}/apis/{config.ADMISSION_API}/{_plural(doc['kind'])}"
    # One left by an earlier attempt with the same suffix (a rerun in a kept namespace) is replaced.
    resp = objects.create_or_replace(session, base, doc)
    if resp.status_code not in (200, 201):
        raise EnvtestError(
            f"creating {doc['kind']}/{doc['metadata']['name']} failed ({resp.status_code}): {_message(resp)}"
        )
    return doc


def _message(resp: requests.Response) -> str:
    try:
        return str(resp.json().get("message", resp.text))
    except ValueError:
        return resp.text[:500]
