"""Serving certificates for a webhook server the apiserver calls, written as a cert dir.

The layout is controller-runtime's ``CertDir``: ``tls.crt`` and ``tls.key`` (plus ``ca.crt``, the PEM the
apiserver must trust, i.e. every ``caBundle`` the harness writes). Any server that takes a certificate
and key file — our reference server, aiohttp, kopf, a Go binary — can serve from it unchanged.

The certificate must name the address the *apiserver* dials, not the one the test dials:

- local plane: the apiserver is a process on this host → ``127.0.0.1``;
- kind: the apiserver runs in a node container → this host as seen from the node, which is the docker
  network's gateway (`docker_network_gateway("kind")`); the server must listen on that address too;
- existing cluster: only the user knows which address reaches this host; they must say so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envtest.errors import ConfigError
from envtest.pki import CertificateAuthority, CertKey

__all__ = ["ServingCerts", "docker_network_gateway", "serving_certs"]

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"


@dataclass(frozen=True)
class ServingCerts:
    """A cert dir for one webhook server, and the CA that the apiserver must trust to call it."""

    cert_dir: Path
    """Directory holding ``tls.crt``, ``tls.key`` (0600) and ``ca.crt``."""
    hosts: tuple[str, ...]
    """Addresses in the certificate's subjectAltName; the first is the one URLs are built with."""
    ca_pem: bytes
    """PEM of the issuing CA: the ``caBundle`` of every clientConfig pointing at this server."""

    @property
    def host(self) -> str:
        return self.hosts[0]

    @property
    def cert_file(self) -> Path:
        return self.cert_dir / CERT_FILE

    @property
    def key_file(self) -> Path:
        return self.cert_dir / KEY_FILE

    @property
    def ca_file(self) -> Path:
        return self.cert_dir / CA_FILE


def serving_certs(
    cert_dir: Path,
    hosts: Sequence[str] = ("127.0.0.1",),
    *,
    ca: CertificateAuthority | None = None,
    valid_days: int = 7,
) -> ServingCerts:
    """Issue a serving certificate for ``hosts`` and write it into ``cert_dir``.

    A fresh CA per call unless ``ca`` is given: a test's webhooks then trust nothing another test
    issued, so a configuration left pointing at the wrong server fails TLS instead of silently
    reaching it. ``localhost`` is always added, because people curl their server by that name.
    ``valid_days`` is the fresh CA's validity and its certificate's (a given ``ca`` keeps its own):
    a server beside a kept plane is called for as long as that plane lives.
    """
    if not hosts:
        raise ConfigError("serving_certs needs the host the apiserver dials (e.g. 127.0.0.1)")
    names = tuple(dict.fromkeys([*hosts, "localhost"]))  # ordered, without duplicates
    ca = ca or CertificateAuthority.create("envtest-webhook-ca", valid_days=valid_days)
    leaf: CertKey = ca.issue_serving("envtest-webhook", names)
    cert_dir = Path(cert_dir)
    leaf.write(cert_dir, "tls")  # → tls.crt, tls.key (0600)
    (cert_dir / CA_FILE).write_bytes(ca.cert_pem)
    return ServingCerts(cert_dir=cert_dir, hosts=names, ca_pem=ca.cert_pem)


def docker_network_gateway(network: str = "kind", *, docker: str = "docker") -> str:
    """The IPv4 gateway of a docker network: this host's address as seen from a kind node.

    Raises ConfigError (with the reason) when docker or the network is missing, so a fixture can turn
    it into a skip that says why.
    """
    exe = shutil.which(docker)
    if exe is None:
        raise ConfigError(f"{docker!r} not found: cannot find the host address kind nodes reach")
    proc = subprocess.run(
        [exe, "network", "inspect", network, "--format", "{{json .IPAM.Config}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0:
        raise ConfigError(f"docker network inspect {network}: {proc.stderr.strip() or proc.returncode}")
    for entry in json.loads(proc.stdout or "[]") or []:
        gateway = entry.get("Gateway", "")
        # kind networks are dual-stack; the apiserver dials the IPv4 one just as well and it needs no
        # brackets in URLs.
        if gateway and ":" not in gateway:
            return str(gateway)
    raise ConfigError(f"docker network {network} has no IPv4 gateway: {proc.stdout.strip()}")
