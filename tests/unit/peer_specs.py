"""The specs the benchmark peers' builders are pinned against the reference's with, and the cluster
around a spec: one table for both peers (tests/unit/test_gomysql_peer.py, test_bench_scale.py), so a
spec added for one builder change checks every peer."""

from __future__ import annotations

import base64
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

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


def assert_tls_secret_like_the_reference(ours: dict[str, Any], spec: dict[str, Any]) -> None:
    """A peer's TLS Secret is the reference's but for its keys: the same metadata, type and files; a
    P-256 CA (path length 0) that signed a server certificate naming the reference's hosts, whose key
    is the one in tls.key."""
    theirs = resources.tls_secret(cluster(spec))
    data = ours.pop("data")
    assert data.keys() == theirs.pop("data").keys() == {"ca.crt", "tls.crt", "tls.key"}
    assert {k: v for k, v in ours.items() if v not in (None, {}, [])} == theirs
    files = {name: base64.b64decode(value) for name, value in data.items()}
    ca, cert = (
        x509.load_pem_x509_certificate(files["ca.crt"]),
        x509.load_pem_x509_certificate(files["tls.crt"]),
    )
    key = serialization.load_pem_private_key(files["tls.key"], password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1)
    assert key.public_key() == cert.public_key()
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value == x509.BasicConstraints(
        True, 0
    )
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    meta = cluster(spec)["metadata"]
    assert names.get_values_for_type(x509.DNSName) == resources.Names(meta["name"]).hosts(meta["namespace"])
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
