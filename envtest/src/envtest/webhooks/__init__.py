"""Webhooks in tests, envtest-style: serving certs, configurations rewritten to reach a local server,
installed per test (admission) or per plane (conversion), proven live, removed afterwards.

    certs = serving_certs(tmp_path / "certs")          # tls.crt, tls.key, ca.crt for 127.0.0.1
    with WebhookServer(certs) as server:                # or any HTTPS server on that cert dir
        server.admission("/validate-v1-widget", check)
        handle = install(session, api, ["config/webhook"], endpoint=server, namespace=ns, run_id=run)
        ...
        handle.remove()

Modules: `certs` (cert dir), `config` (rewriting), `install` (create + probe + remove + sweep),
`conversion` (per-plane conversion endpoint), `server` (a reference server for tests).
"""

from __future__ import annotations

from envtest.webhooks.certs import ServingCerts, docker_network_gateway, serving_certs
from envtest.webhooks.config import conversion_crds, for_test, load, scope_to_namespace
from envtest.webhooks.conversion import install_crds, repoint, wait_converting, write_crds
from envtest.webhooks.install import (
    PROBE_LABEL,
    Endpoint,
    Installed,
    WebhookEndpoint,
    WebhookNotReady,
    install,
    sweep,
)
from envtest.webhooks.server import PROBE_PATH, WebhookServer, allow, deny

__all__ = [
    "PROBE_LABEL",
    "PROBE_PATH",
    "Endpoint",
    "Installed",
    "ServingCerts",
    "WebhookEndpoint",
    "WebhookNotReady",
    "WebhookServer",
    "allow",
    "conversion_crds",
    "deny",
    "docker_network_gateway",
    "for_test",
    "install",
    "install_crds",
    "load",
    "repoint",
    "scope_to_namespace",
    "serving_certs",
    "sweep",
    "wait_converting",
    "write_crds",
]
