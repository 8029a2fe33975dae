"""The operator's webhooks, on one HTTPS server: conversion, validation and defaulting.

    python -m mysql_operator run --cert-dir /tmp/k8s-webhook-server/serving-certs --webhook-port 9443

| path            | review                 | does                                                          |
|-----------------|------------------------|---------------------------------------------------------------|
| `CONVERT_PATH`  | ConversionReview v1    | v1alpha1, v1beta1 ⇄ v1 (`conversion.py`)                      |
| `VALIDATE_PATH` | AdmissionReview v1     | what CEL cannot say well: cron as the CronJob controller parses |
|                 |                        | it, a real IANA time zone, a StorageClass that exists          |
| `MUTATE_PATH`   | AdmissionReview v1     | pins the cluster's default StorageClass into a new cluster      |

The admission webhooks see v1 only (`matchPolicy: Equivalent` makes the apiserver convert), and
neither is registered for DELETE: a webhook that is down must never keep a cluster from going away.
The finalizer's removal is an UPDATE, so the configurations also skip objects being deleted
(`matchConditions`; see `webhook_manifests.py`).

The server is the runtime's own (`runtime/webhook.py`, standard library only): it re-reads
`tls.crt`/`tls.key` when they change, so a cert-manager renewal or a CA rotation (new key, new CA) is
served from the next connection on, without a restart; it caps bodies, times out handshakes and reads,
and bounds its connections. The operator never imports the test harness: the harness only needs an
endpoint (`url`, `ca_pem`) to install configurations against, which `conversion_endpoint` gives it.
"""

from __future__ import annotations

import logging
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pykube
from prometheus_client import CollectorRegistry

from . import api, api_v1beta1
from .conversion import convert
from .reconciler import valid_schedule
from .runtime.reviews import allow
from .runtime.webhook import WebhookServer

log = logging.getLogger(__name__)

CONVERT_PATH = "/convert"
VALIDATE_PATH = f"/validate-{api.GROUP.replace('.', '-')}-{api.VERSION}-{api.SINGULAR}"
MUTATE_PATH = f"/mutate-{api.GROUP.replace('.', '-')}-{api.VERSION}-{api.SINGULAR}"
V1BETA1_VALIDATE_PATH = VALIDATE_PATH.replace(f"-{api.VERSION}-", f"-{api_v1beta1.VERSION}-")
V1BETA1_MUTATE_PATH = MUTATE_PATH.replace(f"-{api.VERSION}-", f"-{api_v1beta1.VERSION}-")
"""Where the configurations of the release that stored v1beta1 call. Served too: during an upgrade the
new server runs before `kubectl apply` has replaced those configurations, and a validating webhook with
`failurePolicy: Fail` answering 404 would refuse every write in that window. They receive v1beta1
objects, which have the hub's shape."""
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"

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


class StorageClasses(Protocol):
    """The cross-object facts the webhooks need; None means "could not find out"."""

    def exists(self, name: str) -> bool | None: ...

    def default(self) -> str | None: ...


class ApiStorageClasses:
    """StorageClasses read from the apiserver on every call: admission is rare, staleness is not ok."""

    def __init__(self, api_factory: Callable[[], pykube.HTTPClient]) -> None:
        self._client = api_factory()

    def _get(self, path: str) -> Any:
        return self._client.session.get(f"{self._client.url}/apis/storage.k8s.io/v1/{path}", timeout=5)

    def exists(self, name: str) -> bool | None:
        resp = self._get(f"storageclasses/{name}")
        if resp.status_code in (200, 404):
            return resp.status_code == 200
        log.warning("StorageClass %s: %s %s", name, resp.status_code, resp.text[:200])
        return None

    def default(self) -> str | None:
        resp = self._get("storageclasses")
        if resp.status_code != 200:
            return None
        defaults = [
            sc["metadata"]["name"]
            for sc in resp.json().get("items") or []
            if (sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
        ]
        # Several defaults: the apiserver picks the newest at PVC creation; not ours to guess.
        return defaults[0] if len(defaults) == 1 else None


def invalid(field: str, value: Any, why: str) -> Obj:
    """A denial shaped like the apiserver's own 422, so clients show it the same way."""
    message = f"{field}: Invalid value: {value!r}: {why}"
    return {
        "allowed": False,
        "status": {
            "code": 422,
            "reason": "Invalid",
            "message": message,
            "details": {"causes": [{"reason": "FieldValueInvalid", "field": field, "message": why}]},
        },
    }


def validate(request: Obj, classes: StorageClasses | None) -> Obj:
    obj = request.get("object") or {}
    spec = obj.get("spec") or {}
    schedule = (spec.get("backup") or {}).get("schedule") or {}
    cron, zone = schedule.get("cron"), schedule.get("timeZone")
    if isinstance(cron, str) and not valid_schedule(cron):
        return invalid("spec.backup.schedule.cron", cron, "not a cron schedule (five fields, or a macro)")
    if isinstance(zone, str) and not _known_zone(zone):
        return invalid("spec.backup.schedule.timeZone", zone, "not an IANA time zone")
    name = (spec.get("storage") or {}).get("storageClassName")
    # storage is immutable (CEL): checked at CREATE only, so a class deleted later never blocks an
    # edit of anything else.
    if request.get("operation") == "CREATE" and name and classes is not None:
        found = classes.exists(name)
        if found is False:
            return invalid("spec.storage.storageClassName", name, "no such StorageClass")
        if found is None:
            return invalid("spec.storage.storageClassName", name, "cannot look the StorageClass up now")
    return allow()


def default(request: Obj, classes: StorageClasses | None) -> Obj:
    """Pin the default StorageClass: the backup volume is made later than the data volumes, and a
    default that changed in between would put them on different classes."""
    storage = ((request.get("object") or {}).get("spec") or {}).get("storage")
    if request.get("operation") != "CREATE" or not isinstance(storage, dict) or classes is None:
        return allow()
    if storage.get("storageClassName"):
        return allow()
    name = classes.default()
    if not name:
        return allow()
    return allow(patch=[{"op": "add", "path": "/spec/storage/storageClassName", "value": name}])


def _known_zone(zone: str) -> bool:
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


def server(
    certs: CertDir,
    api_factory: Callable[[], pykube.HTTPClient] | None = None,
    *,
    listen: str | None = None,
    port: int = 0,
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
    registry: CollectorRegistry | None = None,
) -> WebhookServer:
    """The deployed form: certificates some other party writes and renews (cert-manager, a bootstrap
    Secret), served from whatever the files hold when each connection arrives."""
    for name in ("tls.crt", "tls.key"):
        if not (cert_dir / name).is_file():
            raise FileNotFoundError(f"--cert-dir {cert_dir}: no {name}")
    # No CA here: the apiserver learns it from the configurations' caBundle, not from us.
    files = _Files(cert_dir / "tls.crt", cert_dir / "tls.key", host=bind_address)
    return server(files, api_factory, port=port, registry=registry)
