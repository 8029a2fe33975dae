"""The operator's identity as a framework needs it: server, CA and credentials, read from the
kubeconfig the harness gives every factory (`kubeconfig=`).

Client libraries read kubeconfig files themselves; a framework with its own HTTP stack (kopf) asks a
login handler for these fields instead. Reading them from one explicit path, never from
KUBECONFIG or ~/.kube/config, is the point: in a test process those name the admin.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envtest.errors import ConfigError


@dataclass(frozen=True)
class Identity:
    """What the current context of one kubeconfig says: where the apiserver is and who calls it."""

    server: str
    """https://host:port, with any path prefix (the fault proxy puts the client's name there)."""
    namespace: str | None = None
    """The context's namespace: the test's, for the harness's identities."""
    ca_pem: bytes | None = None
    """The CA that signed the server's certificate; None: the system's trust store."""
    insecure: bool = False
    """`insecure-skip-tls-verify`: the server's certificate is not checked."""
    token: str | None = None
    """Bearer token (a ServiceAccount's, for the harness's identities)."""
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None


def read_identity(path: Path | str) -> Identity:
    """The identity of `path`'s current context. Relative file paths in it resolve against the
    kubeconfig's folder, as kubectl resolves them. A missing or inconsistent field is a ConfigError
    naming the file and the field."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"kubeconfig {path}: cannot read: {exc}") from exc
    current = doc.get("current-context")
    if not current:
        raise ConfigError(f"kubeconfig {path}: no current-context")
    context = _named(doc, "contexts", current, path).get("context") or {}
    cluster = _named(doc, "clusters", context.get("cluster"), path).get("cluster") or {}
    user = _named(doc, "users", context.get("user"), path).get("user") or {}
    server = cluster.get("server")
    if not server:
        raise ConfigError(f"kubeconfig {path}: cluster {context.get('cluster')!r} has no server")
    base = path.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = _file(base, user["tokenFile"], path, "tokenFile").decode().strip()
    return Identity(
        server=str(server).rstrip("/"),
        namespace=context.get("namespace"),
        ca_pem=_pem(cluster, "certificate-authority", base, path),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=token or None,
        client_cert_pem=_pem(user, "client-certificate", base, path),
        client_key_pem=_pem(user, "client-key", base, path),
    )


def _named(doc: dict[str, Any], section: str, name: Any, path: Path) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if entry.get("name") == name:
            return entry  # type: ignore[no-any-return]
    raise ConfigError(f"kubeconfig {path}: {section} has no entry named {name!r}")


def _pem(entry: dict[str, Any], key: str, base: Path, path: Path) -> bytes | None:
    """`<key>-data` (base64) or `<key>` (a file), as kubeconfig spells every certificate field."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ConfigError(f"kubeconfig {path}: {key}-data is not base64: {exc}") from None
    if entry.get(key):
        return _file(base, entry[key], path, key)
    return None


def _file(base: Path, name: str, path: Path, key: str) -> bytes:
    target = base / Path(name).expanduser()  # an absolute name stays what it is
    try:
        return target.read_bytes()
    except OSError as exc:
        raise ConfigError(f"kubeconfig {path}: {key} {target}: {exc.strerror or exc}") from exc
