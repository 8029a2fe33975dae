"""The specs the benchmark peers' builders are pinned against the reference's with, and the cluster
around a spec: one table for both peers (tests/unit/test_gomysql_peer.py, test_bench_scale.py), so a
spec added for one builder change checks every peer."""

from __future__ import annotations

import base64
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from mysql_operator.controller.children import backups, resources

SPECS: dict[str, dict[str, Any]] = {
    "minimal": {"replicas": 1, "storage": {"size": "1Gi"}},
    "full": {
        "replicas": 3,
        "version": "8.4.3",
        "storage": {"size": "20Gi", "storageClassName": "fast"},
        "resources": {"cpu": "500m", "memory": "1Gi"},
        "backup": {
            "enabled": True,
            "schedule": {"cron": "@daily", "timeZone": "Europe/Berlin"},
            "retentionDays": 3,
        },
    },
    "mariadb": {"replicas": 2, "engine": "mariadb", "storage": {"size": "1Gi"}, "backup": {"enabled": True}},
    "mariadb-versioned": {"replicas": 1, "engine": "mariadb", "version": "11.4", "storage": {"size": "2Gi"}},
    # No whole MiB multiple (and in canonical form, as Go and the apiserver write it): the backup size
    # and the final backup's deadline round up.
    "restored": {"replicas": 2, "storage": {"size": "1500M"}, "restore": {"fromCluster": "old-db"}},
}


def reference(builder: str) -> Any:
    """The reference's builder of that name (the children in `resources`, the backup ones in `backups`)."""
    return getattr(resources, builder, None) or getattr(backups, builder)


BUILDERS = [
    "headless_service",
    "primary_service",
    "statefulset",
    "backup_pvc",
    "backup_cronjob",
    "final_backup_job",
]


def cluster(spec: dict[str, Any]) -> dict[str, Any]:
    """A MySQLCluster as the apiserver returns it, with `spec`."""
    meta = {"name": "db", "namespace": "ns", "uid": "u-1", "generation": 1}
    return {"apiVersion": resources.API_VERSION, "kind": "MySQLCluster", "metadata": meta, "spec": spec}


KEY_IDS = (x509.SubjectKeyIdentifier.oid, x509.AuthorityKeyIdentifier.oid)
"""Derived from the keys (Go's x509 adds them, the reference does not): not compared."""


def _certificate_shape(cert: x509.Certificate) -> Any:
    """What a certificate says but for its keys, serial and dates: names, extensions, curve, hash,
    validity period."""
    extensions = sorted(
        (e.oid.dotted_string, e.critical, repr(e.value)) for e in cert.extensions if e.oid not in KEY_IDS
    )
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    period = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.subject, cert.issuer, extensions, key.curve.name, cert.signature_hash_algorithm.name, period


def assert_tls_secret_like_the_reference(ours: dict[str, Any], spec: dict[str, Any]) -> None:
    """A peer's TLS Secret is the reference's but for its keys: the same metadata, type and files; the
    same certificates (names, extensions, curve, hash, validity), the server's signed by the CA and
    its key the one in tls.key."""
    theirs = resources.tls_secret(cluster(spec))
    data, their_data = ours.pop("data"), theirs.pop("data")
    assert data.keys() == their_data.keys() == {"ca.crt", "tls.crt", "tls.key"}
    assert {k: v for k, v in ours.items() if v not in (None, {}, [])} == theirs
    files = {name: base64.b64decode(value) for name, value in data.items()}
    reference = {name: base64.b64decode(value) for name, value in their_data.items()}
    for name in ("ca.crt", "tls.crt"):
        mine, its = (x509.load_pem_x509_certificate(f[name]) for f in (files, reference))
        assert _certificate_shape(mine) == _certificate_shape(its), name
    ca, cert = (
        x509.load_pem_x509_certificate(files["ca.crt"]),
        x509.load_pem_x509_certificate(files["tls.crt"]),
    )
    cert.verify_directly_issued_by(ca)
    assert files["tls.key"].startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS #8, as the reference's
    key = serialization.load_pem_private_key(files["tls.key"], password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.public_key() == cert.public_key()
