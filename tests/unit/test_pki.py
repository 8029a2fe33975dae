from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from envtest.pki import CertificateAuthority, CertKey, service_account_key


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("envtest-ca")


def _load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_ca_is_a_self_signed_critical_ca(ca: CertificateAuthority) -> None:
    cert = _load(ca.cert_pem)
    cert.verify_directly_issued_by(cert)
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.key_cert_sign and ku.crl_sign
    ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski.digest


def test_not_before_is_backdated_for_clock_skew(ca: CertificateAuthority) -> None:
    leaf = _load(ca.issue_client("alice").cert_pem)
    now = dt.datetime.now(dt.UTC)
    for cert in (_load(ca.cert_pem), leaf):
        assert cert.not_valid_before_utc <= now - dt.timedelta(minutes=59)
    assert leaf.not_valid_after_utc <= _load(ca.cert_pem).not_valid_after_utc


def test_serving_cert_chains_to_ca_with_ip_and_dns_sans(ca: CertificateAuthority) -> None:
    pair = ca.issue_serving("kube-apiserver", ["127.0.0.1", "::1", "localhost", "kubernetes.default"])
    cert = _load(pair.cert_pem)
    cert.verify_directly_issued_by(_load(ca.cert_pem))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "kubernetes.default"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.digital_signature and ku.key_encipherment and not ku.key_cert_sign
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = _load(ca.cert_pem).extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest


def test_serving_cert_needs_a_host(ca: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="at least one host"):
        ca.issue_serving("nobody", [])


def test_client_cert_carries_user_as_cn_and_groups_as_o(ca: CertificateAuthority) -> None:
    cert = _load(ca.issue_client("admin", ["system:masters", "devs"]).cert_pem)
    cert.verify_directly_issued_by(_load(ca.cert_pem))
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [a.value for a in cn] == ["admin"]
    assert [a.value for a in orgs] == ["system:masters", "devs"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_client_cert_without_groups_has_no_organization(ca: CertificateAuthority) -> None:
    cert = _load(ca.issue_client("system:kube-scheduler").cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) == []


def test_cert_from_another_ca_does_not_verify(ca: CertificateAuthority) -> None:
    other = CertificateAuthority.create("other")
    cert = _load(other.issue_client("mallory").cert_pem)
    with pytest.raises(ValueError):  # issuer name mismatch is reported before the signature check
        cert.verify_directly_issued_by(_load(ca.cert_pem))


def test_write_creates_cert_and_private_key_0600(ca: CertificateAuthority, tmp_path: Path) -> None:
    pair = ca.issue_serving("etcd", ["127.0.0.1"])
    crt, key = pair.write(tmp_path / "pki", "etcd")
    assert (crt.name, key.name) == ("etcd.crt", "etcd.key")
    assert crt.read_bytes() == pair.cert_pem and key.read_bytes() == pair.key_pem
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    # Python's ssl (OpenSSL) must accept the pair as written; Go components read the same PEMs.
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(crt, key)


def test_write_tightens_an_existing_loose_key_file(tmp_path: Path) -> None:
    loose = tmp_path / "ca.key"
    loose.write_bytes(b"old")
    loose.chmod(0o644)
    CertificateAuthority.create("ca").write(tmp_path, "ca")
    assert stat.S_IMODE(loose.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in loose.read_bytes()


def test_ca_write_round_trips(ca: CertificateAuthority, tmp_path: Path) -> None:
    crt, key = ca.write(tmp_path, "ca")
    assert _load(crt.read_bytes()).subject == _load(ca.cert_pem).subject
    assert CertKey(crt.read_bytes(), key.read_bytes()) == CertKey(ca.cert_pem, ca.key_pem)


def test_service_account_key_is_a_matching_p256_pair() -> None:
    private_pem, public_pem = service_account_key()
    private = serialization.load_pem_private_key(private_pem, password=None)
    public = serialization.load_pem_public_key(public_pem)
    assert isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name == "secp256r1"
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.public_numbers() == private.public_key().public_numbers()
