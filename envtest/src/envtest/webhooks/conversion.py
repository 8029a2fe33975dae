"""Conversion webhooks: one endpoint per plane, not per test.

A CRD has exactly one ``spec.conversion.webhook.clientConfig``, and under xdist every worker's tests use
the same plane and therefore the same CRDs. A per-test conversion server would re-point the CRD under the
feet of every other test, so conversion is served by **one endpoint for the run**, and the CRDs are
installed already pointing at it. This module is the library part of that; `install_crds` is what a
backend that installs CRDs itself (kind, existing) calls, `write_crds` what a local plane is given.

How the plugin runs it (`envtest.plugin.session`, `envtest.plane.supervise`, `envtest.plugin.endpoint`):

1. ini ``envtest_conversion_webhook = package.module:factory``. ``factory(certs: ServingCerts)`` returns
   a started server listening on ``certs.host`` (bind what the certificate names: 127.0.0.1 locally, not
   on kind) with ``url`` (``https://HOST:PORT``), ``ca_pem`` and ``stop()`` — e.g. the operator's own
   webhook server, or a `WebhookServer` with its converters registered (one not yet started is started
   by `start_endpoint`). The conversion path is ini ``envtest_conversion_path``
   (default ``/convert``); `start_endpoint` joins them.
2. Local plane, ``-n 0``: the session makes certs for 127.0.0.1, calls the factory, then starts the
   ControlPlane with ``crds=[write_crds(paths, url, ca, dir)]``, so the CRDs never exist without their
   conversion. Stopped after the plane.
3. Local plane under xdist, kept planes and ``envtest up``: the server must live as long as the plane,
   not as long as the worker that happened to start it, so the detached **supervisor** imports the
   factory (the caller hands it its ``sys.path``), runs it in its own process before it starts the
   plane, and writes url + CA into its state file (`PlaneState`).
4. Kept plane reused by a later run: the supervisor still owns the endpoint (so a converter edited
   since the plane started serves the old code until ``envtest down``). A CRD re-apply
   (``crds.install``) replaces ``spec`` wholesale and would drop the conversion: every re-apply goes
   through `install_crds` with the plane's recorded url and CA, never the plain file. `repoint` is
   for an endpoint that moved (a test restarting its own server on a private plane).
5. kind / existing (`envtest.plugin.endpoint`): one endpoint for the run. Certificate, URL and listen
   address are the address the apiserver reaches this host at: the kind network's gateway
   (`docker_network_gateway`), or ini ``envtest_webhook_host`` / ``ENVTEST_WEBHOOK_HOST`` (required on
   existing: without it the key is a usage error). ``-n 0``: the session process runs the factory and
   stops it after the sweep. xdist: the first worker launches `envtest.webhooks.detached` (the
   supervisor's lock and owner watch, without a plane), owned by the controller, which stops it at its
   session end. Every process installs the CRDs with `install_crds`, never ``crds.install``, so a cluster
   that outlives the run (``--envtest-keep``, ``make kind-up``) is re-pointed at the new endpoint when the
   next run starts; the endpoint itself never outlives its run.

Conversion has no failurePolicy: while the endpoint is down, reads at a version other than the stored one
fail (and so do list/watch at that version); tests of that belong on ``private_cluster``.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import requests
import yaml

from envtest import crds, objects
from envtest.errors import ConfigError, CRDError
from envtest.webhooks.certs import ServingCerts, serving_certs
from envtest.webhooks.config import ca_bundle, conversion_crds

__all__ = [
    "ConversionServer",
    "install_crds",
    "load_factory",
    "repoint",
    "start_endpoint",
    "wait_converting",
    "write_crds",
]

DEFAULT_PATH = "/convert"


class ConversionServer(Protocol):
    """What a conversion factory returns: a running HTTPS server serving from the given cert dir."""

    @property
    def url(self) -> str:
        """``https://HOST:PORT`` as the apiserver dials it (no path)."""
        ...

    def stop(self) -> None: ...


ConversionFactory = Callable[[ServingCerts], ConversionServer]


def load_factory(spec: str) -> ConversionFactory:
    """The callable named by ``package.module:factory``; ConfigError saying why it cannot be had."""
    module, sep, attr = spec.partition(":")
    if not module or not sep or not attr:
        raise ConfigError(f"{spec!r} is not package.module:factory")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{spec!r}: cannot import: {exc}") from exc
    if not callable(factory):
        raise ConfigError(f"{spec!r}: {type(factory).__name__} is not callable")
    return factory  # type: ignore[no-any-return]


def start_endpoint(
    factory: ConversionFactory,
    cert_dir: Path,
    *,
    host: str = "127.0.0.1",
    path: str = DEFAULT_PATH,
    valid_days: int = 7,
) -> tuple[ConversionServer, str, bytes]:
    """Certs for ``host`` in ``cert_dir``, the factory's server on them; (server, endpoint URL, CA).

    The CA is the server's ``ca_pem`` if it has one, else the cert dir's: a server that only reads
    ``tls.crt``/``tls.key`` (aiohttp, a Go binary behind a Popen wrapper) need not carry it. A
    `WebhookServer` handed back unstarted is started (its ``start()`` is idempotent): forgetting
    ``.start()`` in a factory is the mistake everyone makes once, and nothing else would say so.
    """
    from envtest.webhooks.server import WebhookServer

    certs = serving_certs(cert_dir, (host,), valid_days=valid_days)
    server = factory(certs)
    if isinstance(server, WebhookServer):
        server.start()
    try:
        base = server.url
        if not isinstance(base, str) or not base.startswith("https://"):
            raise ConfigError(f"conversion factory's server.url must be https://HOST:PORT, not {base!r}")
        if not callable(getattr(server, "stop", None)):
            raise ConfigError(f"conversion factory returned {type(server).__name__} without stop()")
    except BaseException:
        stop = getattr(server, "stop", None)
        if callable(stop):
            stop()
        raise
    ca = getattr(server, "ca_pem", None) or certs.ca_pem
    return server, base.rstrip("/") + "/" + path.lstrip("/"), ca


def write_crds(paths: Sequence[str | Path], url: str, ca_pem: bytes, dest: Path) -> Path:
    """Write the CRDs of ``paths`` with their conversion pointing at ``url`` into ``dest`` (a directory
    to hand a ControlPlane or the supervisor as its CRD path); return ``dest``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    docs = conversion_crds([doc for _, doc in crds.load(paths)], url, ca_pem)
    for doc in docs:
        (dest / f"{doc['metadata']['name']}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def install_crds(
    session: requests.Session,
    server: str,
    crd_docs: Iterable[dict[str, Any]],
    url: str,
    ca_pem: bytes,
    *,
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """Create or replace CRDs with their conversion pointing at ``url``; wait until they are served."""
    installed = []
    for crd in conversion_crds(crd_docs, url, ca_pem):
        installed.append(_apply(session, server, crd))
    for crd in installed:
        crds.wait_ready(session, server, crd, timeout=timeout)
    return installed


def repoint(
    session: requests.Session,
    server: str,
    crd_names: Iterable[str],
    url: str,
    ca_pem: bytes,
    *,
    timeout: float = 30.0,
) -> None:
    """Point the live CRDs' conversion webhook at ``url`` (a kept plane, a restarted endpoint).

    A merge patch of ``spec.conversion`` only: the schema, versions and everything else stay as they
    are. Waits until the CRD reads back with the new URL and is Established again.
    """
    patch = {
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {"url": url, "caBundle": ca_bundle(ca_pem), "service": None},
                },
            }
        }
    }
    for name in crd_names:
        resp = session.patch(
            f"{server}/{crds.CRD_API}/{name}",
            json=patch,
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=30,
        )
        if resp.status_code != 200:
            raise CRDError(f"re-pointing conversion of CRD {name}: {resp.status_code} {resp.text[:300]}")
        crds.wait_ready(session, server, resp.json(), timeout=timeout)


def _apply(session: requests.Session, server: str, crd: dict[str, Any]) -> dict[str, Any]:
    name = crd["metadata"]["name"]
    resp = objects.create_or_replace(session, f"{server}/{crds.CRD_API}", crd)
    if resp.status_code not in (200, 201):
        raise CRDError(f"CRD {name} rejected by the apiserver ({resp.status_code}): {resp.text[:300]}")
    return resp.json()  # type: ignore[no-any-return]


def wait_converting(
    session: requests.Session, url: str, *, timeout: float = 30.0, interval: float = 0.1
) -> dict[str, Any]:
    """GET ``url`` (an object at a non-storage version) until the apiserver converts it; return it.

    Useful after `repoint` or after a conversion endpoint comes back: the CRD handler picks up a new
    clientConfig asynchronously, and a connection to a dead endpoint may be retried for a moment.
    """
    deadline = time.monotonic() + timeout
    while True:
        resp = session.get(url, timeout=10)
        if resp.status_code == 200:
            return resp.json()  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            detail = f"{resp.status_code} {resp.text[:300]}"
            raise CRDError(f"GET {url} still fails after {timeout:.0f}s: {detail}")
        time.sleep(interval)
