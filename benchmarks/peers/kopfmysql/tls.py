"""The replication TLS Secret, as the reference makes it (operator/mysql_operator/controller/children/tls.py),
written here without importing the reference: a CA of the cluster's own (ECDSA P-256) signs one server
certificate naming every host a server may be reached by, and its key is then dropped. Made once, never
rewritten; owned by the cluster."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kopfmysql import children as c

Obj = dict[str, Any]
MAX_REPLICAS = 9
"""api/v1.py's: every pod the certificate may have to name."""
VALIDITY = timedelta(days=3650)
CA_USAGE = dict.fromkeys(
    (
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "encipher_only",
        "decipher_only",
    ),
    False,
)


def hosts(name: str, namespace: str) -> list[str]:
    short = [f"{name}-primary.{namespace}.svc"]
    short += [f"{name}-mysql-{i}.{name}-headless.{namespace}.svc" for i in range(MAX_REPLICAS)]
    return short + [f"{h}.cluster.local" for h in short]


def _certificate(subject: str, issuer: str, public: Any, now: datetime) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject[:64])]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[:64])]))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def tls_secret(cluster: Obj) -> Obj:
    meta = cluster["metadata"]
    name, now = meta["name"], datetime.now(UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    issuer = f"{name} replication CA"
    ca = (
        _certificate(issuer, issuer, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, **CA_USAGE),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    cert = (
        _certificate(f"{name} database server", issuer, key.public_key(), now)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts(name, meta["namespace"])]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    files = {
        "ca.crt": ca.public_bytes(pem),
        "tls.crt": cert.public_bytes(pem),
        "tls.key": key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    }
    data = {k: base64.b64encode(v).decode() for k, v in files.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": c.metadata(cluster, f"{name}-tls"),
        "type": "kubernetes.io/tls",
        "data": data,
    }
