"""The cluster's replication TLS (controller/children/tls.py): a CA of its own, one server certificate
that every name of the cluster verifies against it, for the longest cluster and namespace names."""

from __future__ import annotations

import base64
import ssl
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from mysql_operator.api.v1 import MAX_NAME_LENGTH
from mysql_operator.controller.children import resources

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def secret_for(name: str, namespace: str) -> dict[str, bytes]:
    cluster = {"metadata": {"name": name, "namespace": namespace, "uid": "u"}, "spec": {}}
    secret = resources.tls_secret(cluster, NOW)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u", "a new cluster of the name gets a new CA"
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def test_every_name_of_the_longest_cluster_verifies_against_the_ca() -> None:
    name, namespace = "d" * MAX_NAME_LENGTH, "n" * 63
    files = secret_for(name, namespace)
    cert = x509.load_pem_x509_certificate(files["tls.crt"])
    ca = x509.load_pem_x509_certificate(files["ca.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    assert set(resources.Names(name).hosts(namespace)) == set(names)
    assert (
        f"{name}-primary.{namespace}.svc" in names
        and f"{name}-mysql-8.{name}-headless.{namespace}.svc" in names
    )
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert cert.not_valid_after_utc - NOW > timedelta(days=3000)


def test_the_server_key_matches_and_a_tls_library_accepts_the_pair(tmp_path) -> None:  # type: ignore[no-untyped-def]
    files = secret_for("db", "ns")
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")  # raises on a mismatch
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    assert client.cert_store_stats()["x509_ca"] == 1


def test_two_clusters_never_share_a_ca() -> None:
    assert secret_for("db", "ns")["ca.crt"] != secret_for("db", "ns")["ca.crt"]
