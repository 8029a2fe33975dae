"""The operator's webhooks, on one HTTPS server: conversion, validation and defaulting.

    python -m mysql_operator run --cert-dir /tmp/k8s-webhook-server/serving-certs --webhook-port 9443

| path            | review                 | does                                                          |
|-----------------|------------------------|---------------------------------------------------------------|
| `CONVERT_PATH`  | ConversionReview v1    | v1alpha1, v1beta1 ⇄ v1 (`api.conversion`)                     |
| `VALIDATE_PATH` | AdmissionReview v1     | what CEL cannot say well: cron as the CronJob controller parses |
|                 |                        | it, a real IANA time zone, a StorageClass that exists          |
| `MUTATE_PATH`   | AdmissionReview v1     | pins the engine's default version and the default StorageClass |
|                 |                        | into a new cluster                                             |

The admission webhooks see v1 only (`matchPolicy: Equivalent` makes the apiserver convert), and
neither is registered for DELETE: a webhook that is down must never keep a cluster from going away.
The finalizer's removal is an UPDATE, so the configurations also skip objects being deleted
(`matchConditions`; see `manifests.webhooks`).

The server is the runtime's own (`runtime/webhook.py`, standard library only): it re-reads
`tls.crt`/`tls.key` when they change, so a cert-manager renewal or a CA rotation (new key, new CA) is
served from the next connection on, without a restart; it caps bodies, times out handshakes and reads,
and bounds its connections. The operator never imports the test harness: the harness only needs an
endpoint (`url`, `ca_pem`) to install configurations against, which `conversion_endpoint` gives it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pykube
from prometheus_client import CollectorRegistry

from ..api import v1, v1beta1
from ..api.conversion import convert
from ..runtime.webhook import ServerOptions, WebhookServer
from .admission import ApiStorageClasses, default, validate

log = logging.getLogger(__name__)

CONVERT_PATH = "/convert"
VALIDATE_PATH = f"/validate-{v1.GROUP.replace('.', '-')}-{v1.VERSION}-{v1.SINGULAR}"
MUTATE_PATH = f"/mutate-{v1.GROUP.replace('.', '-')}-{v1.VERSION}-{v1.SINGULAR}"
V1BETA1_VALIDATE_PATH = VALIDATE_PATH.replace(f"-{v1.VERSION}-", f"-{v1beta1.VERSION}-")
V1BETA1_MUTATE_PATH = MUTATE_PATH.replace(f"-{v1.VERSION}-", f"-{v1beta1.VERSION}-")
"""Where the configurations of the release that stored v1beta1 call. Served too: during an upgrade the
new server runs before `kubectl apply` has replaced those configurations, and a validating webhook with
`failurePolicy: Fail` answering 404 would refuse every write in that window. They receive v1beta1
objects, which have the hub's shape."""

Obj = dict[str, Any]


class CertDir(Protocol):
    """A serving certificate on disk and where it is dialled: what `server` needs (the harness's
    ServingCerts is one, by shape; nothing here imports it)."""

    @property
    def cert_file(self) -> Path: ...

    @property
    def key_file(self) -> Path: ...

    @property
    def host(self) -> str:
        """The address the certificate names first: URLs are built with it, the socket binds it."""
        ...

    @property
    def ca_pem(self) -> bytes:
        """The issuing CA (the configurations' caBundle); may be empty when someone else knows it."""
        ...


@dataclass(frozen=True)
class _Files:
    cert_file: Path
    key_file: Path
    host: str
    ca_pem: bytes = b""


def server(
    certs: CertDir,
    api_factory: Callable[[], pykube.HTTPClient] | None = None,
    *,
    listen: str | None = None,
    port: int = 0,
    options: ServerOptions | None = None,
    registry: CollectorRegistry | None = None,
) -> WebhookServer:
    """All three webhooks on one (not yet started) server. Without `api_factory` the StorageClass
    checks and defaults are off (a conversion-only endpoint, as the harness runs it per plane).
    ``registry`` takes the webhook metrics (the Manager's, to serve them on its /metrics)."""
    classes = ApiStorageClasses(api_factory) if api_factory else None
    hooks = WebhookServer(
        certs.cert_file,
        certs.key_file,
        listen=listen or certs.host,
        port=port,
        host=certs.host,
        ca_pem=certs.ca_pem,
        options=options,
        registry=registry,
    )
    hooks.conversion(CONVERT_PATH, convert)
    hooks.admission(VALIDATE_PATH, lambda req: validate(req, classes))
    hooks.admission(MUTATE_PATH, lambda req: default(req, classes))
    hooks.admission(V1BETA1_VALIDATE_PATH, lambda req: validate(req, classes))
    hooks.admission(V1BETA1_MUTATE_PATH, lambda req: default(req, classes))
    return hooks


def conversion_endpoint(certs: CertDir) -> WebhookServer:
    """Factory for the harness's per-plane conversion endpoint (ini `envtest_conversion_webhook`): a
    started server on the address the certificate names, with `url`, `ca_pem` and `stop()`."""
    return server(certs).start()


def from_cert_dir(
    cert_dir: Path,
    api_factory: Callable[[], pykube.HTTPClient],
    *,
    bind_address: str,
    port: int,
    options: ServerOptions | None = None,
    registry: CollectorRegistry | None = None,
) -> WebhookServer:
    """The deployed form: certificates some other party writes and renews (cert-manager, a bootstrap
    Secret), served from whatever the files hold when each connection arrives."""
    for name in ("tls.crt", "tls.key"):
        if not (cert_dir / name).is_file():
            raise FileNotFoundError(f"--cert-dir {cert_dir}: no {name}")
    # No CA here: the apiserver learns it from the configurations' caBundle, not from us.
    files = _Files(cert_dir / "tls.crt", cert_dir / "tls.key", host=bind_address)
    return server(files, api_factory, port=port, options=options, registry=registry)
