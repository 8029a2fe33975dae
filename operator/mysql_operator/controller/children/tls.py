"""The cluster's replication TLS: a CA of its own and one server certificate every pod presents.

Made once, when the cluster has no `<name>-tls` Secret, and never rewritten (the pods read it when they
start). Replicas verify the primary's certificate against `ca.crt` and its name (the primary Service's,
which they connect to); every name a server can be reached by is in it, pod names included, so a
switchover or a client of one pod verifies too. The CA's key signs this one certificate and is then
dropped: no one, the operator included, can issue another under it. To renew, delete the Secret: the
operator makes a new pair, and pods use it from their next start.

ECDSA P-256 (what both engines' TLS libraries accept), valid for `VALIDITY_DAYS`.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Obj = dict[str, Any]

VALIDITY_DAYS = 3650
"""Ten years: long enough to outlive the cluster, since nothing renews it on its own."""


def _name(common_name: str) -> x509.Name:
    # X.509 caps a common name at 64 characters; verifiers read the names from the SAN anyway.
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def issue(cluster: str, hosts: list[str], now: datetime | None = None) -> dict[str, bytes]:
    """`ca.crt`, `tls.crt`, `tls.key` (PEM) for cluster `cluster`'s servers, named by `hosts`."""
    now = now or datetime.now(UTC)
    start, end = now - timedelta(minutes=5), now + timedelta(days=VALIDITY_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{cluster} replication CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{cluster} database server"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return {"ca.crt": _pem(ca), "tls.crt": _pem(cert), "tls.key": key_pem}


def secret_data(files: dict[str, bytes]) -> dict[str, str]:
    return {name: base64.b64encode(content).decode() for name, content in files.items()}
