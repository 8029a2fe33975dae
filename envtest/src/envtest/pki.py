"""Throwaway PKI for one control plane: a CA, serving and client certificates, a service-account signer.

Everything here lives for one test run or one kept plane, so keys are never encrypted; validity is a
week unless the caller asks for more (a kept plane asks for a year: `envtest.plane.expiry`). TLS keys are
ECDSA P-256 because generating them is ~100x faster than RSA and every Kubernetes component accepts
them; the service-account signer is RSA 2048 because that is the one algorithm every kube-apiserver
version accepts for ``--service-account-signing-key-file``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertKey",
    "CertificateAuthority",
    "earliest_not_after",
    "private_dir",
    "service_account_key",
    "write_private",
]

CLOCK_SKEW = dt.timedelta(hours=1)
"""notBefore is backdated by this much so a host whose clock lags a little still accepts fresh certs."""

LEAF_VALID_DAYS = 7
"""Days a leaf certificate is valid unless its CA says otherwise (`CertificateAuthority.create` gives
its leaves its own validity); never longer than its CA, which would be rejected anyway."""


@dataclass(frozen=True)
class CertKey:
    """A PEM certificate and its unencrypted PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write ``<name>.crt`` and ``<name>.key`` into ``directory``; return (cert path, key path).

        The key file is created 0600 from the start, so the key is never readable by others, not even
        for the moment between writing and a later chmod.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        cert_path = directory / f"{name}.crt"
        key_path = directory / f"{name}.key"
        cert_path.write_bytes(self.cert_pem)
        write_private(key_path, self.key_pem)
        return cert_path, key_path


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates.

    Users of a control plane are client certificates issued here: Kubernetes' x509 authenticator takes
    the subject CN as the user name and each O as a group (``system:masters`` for an admin).
    """

    def __init__(
        self,
        cert: x509.Certificate,
        key: ec.EllipticCurvePrivateKey,
        *,
        leaf_valid_days: int = LEAF_VALID_DAYS,
    ) -> None:
        self._cert = cert
        self._key = key
        self.leaf_valid_days = leaf_valid_days
        """Days each certificate issued here is valid (clamped to the CA's own notAfter)."""

    @classmethod
    def create(cls, common_name: str, *, valid_days: int = 7) -> CertificateAuthority:
        """Generate a new CA key and self-signed certificate valid for ``valid_days`` days; the
        certificates it issues are valid as long (a plane's CA and leaves then expire together, so
        checking any one of them says when the plane stops working)."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        not_before, not_after = _validity(valid_days)
        public = key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key, leaf_valid_days=valid_days)

    @property
    def certificate(self) -> x509.Certificate:
        return self._cert

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _private_pem(self._key)

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write the CA as ``<name>.crt`` / ``<name>.key`` (key 0600); return both paths."""
        return CertKey(self.cert_pem, self.key_pem).write(directory, name)

    def issue_serving(self, common_name: str, hosts: Sequence[str]) -> CertKey:
        """Issue a TLS server certificate for ``hosts``.

        Each host that parses as an IP address becomes an IP SAN, anything else a DNS SAN: Go's TLS
        stack matches an IP literal only against IP SANs, so ``127.0.0.1`` as a DNS name would fail.
        """
        if not hosts:
            raise ValueError("issue_serving needs at least one host for the subjectAltName")
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        return self._issue(
            subject,
            ExtendedKeyUsageOID.SERVER_AUTH,
            x509.SubjectAlternativeName(sans),
        )

    def issue_client(self, user: str, groups: Sequence[str] = ()) -> CertKey:
        """Issue a client certificate that authenticates as ``user`` in ``groups`` (CN=user, O=group…)."""
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH, None)

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        san: x509.SubjectAlternativeName | None,
    ) -> CertKey:
        key = ec.generate_private_key(ec.SECP256R1())
        public = key.public_key()
        not_before, not_after = _validity(self.leaf_valid_days)
        # A leaf outliving its CA is rejected by strict verifiers; clamp rather than surprise.
        not_after = min(not_after, self._cert.not_valid_after_utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    # Meaningless for ECDSA, but some verifiers insist on it for serving certs.
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(_authority_key_id(self._cert), critical=False)
        )
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return CertKey(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def service_account_key() -> tuple[bytes, bytes]:
    """Return (private PEM, public PEM) of a fresh ECDSA P-256 key for signing service-account tokens.

    kube-apiserver takes the private key as ``--service-account-signing-key-file`` and the public key
    as ``--service-account-key-file``; kube-controller-manager needs the private key too. ES256 is as
    valid a token signature as RS256, and an RSA 2048 key costs 0.1 to 0.3 s of every plane's start.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _private_pem(key), public


def earliest_not_after(pem: bytes) -> dt.datetime:
    """The earliest notAfter (UTC) of the certificates in ``pem`` (a bundle may hold several): the
    moment from which a client verifying against it fails with "x509: certificate has expired"."""
    certs = x509.load_pem_x509_certificates(pem)
    return min(cert.not_valid_after_utc for cert in certs)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) and make it 0700, also when it already existed: a
    directory holding private keys, kubeconfigs or a plane's etcd data is its owner's alone. The
    parents keep their default mode (they are shared caches such as ``~/.cache/envtest``)."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    # mkdir's mode is masked by the umask and ignored for a directory that was already there.
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a file that is 0600 from its creation, never readable by others
    (not even between a write and a later chmod). An existing file is replaced, not truncated: it
    may carry looser permissions we must not inherit."""
    path = Path(path)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    # A umask can strip the owner's own bits too; set the mode explicitly rather than trust it.
    os.chmod(path, 0o600)


def _validity(days: int) -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.UTC)
    return now - CLOCK_SKEW, now + dt.timedelta(days=days)


def _authority_key_id(ca_cert: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    # PKCS#8 because it is the one encoding that Go's loaders (etcd, kube-*) and Python's ssl read for
    # both EC and RSA keys alike.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
