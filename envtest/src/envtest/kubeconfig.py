"""Self-contained kubeconfig files (certificates embedded) for the users of a control plane."""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from envtest import ownedtemp
from envtest.pki import CertKey, write_private

if TYPE_CHECKING:
    import pykube


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def kubeconfig_dict(
    *, server: str, ca_pem: bytes, client: CertKey, user: str, cluster: str = "envtest"
) -> dict[str, Any]:
    """A kubeconfig with one cluster, one user and one current context named after `cluster`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert_pem),
                    "client-key-data": _b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    """Write `config` to `path` with mode 0600 from the first byte: it holds a private key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(config, fh, sort_keys=False)
    os.replace(tmp, path)
    return path


def with_server(config: dict[str, Any], server: str) -> dict[str, Any]:
    """A copy of `config` whose clusters all point at `server` (e.g. a fault proxy)."""
    copy = yaml.safe_load(yaml.safe_dump(config))
    for entry in copy["clusters"]:
        entry["cluster"]["server"] = server
    return copy


PYKUBE_PEMS = (
    ("cluster", "clusters", "certificate-authority"),
    ("user", "users", "client-certificate"),
    ("user", "users", "client-key"),
)
"""pykube-ng's certificate fields: (context key, kubeconfig section, field)."""

PEM_KIND = "pems-"
"""The temporary folder (`envtest.ownedtemp`) of a process's inline certificates and keys written
out for pykube-ng."""

_pem_folder: Path | None = None
_pem_lock = threading.Lock()


def _forget_pem_folder() -> None:
    # A forked child makes a folder of its own: the parent's names the parent, and goes with it.
    global _pem_folder, _pem_lock
    _pem_folder, _pem_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pem_folder)


def keep_pykube_pems_private(config: pykube.KubeConfig) -> None:
    """Hand pykube-ng the inline (`*-data`) certificates and key of `config`'s current context as
    files of this process's own: 0600, in a 0700 folder removed at exit (after a SIGKILL, by the
    next process that writes its own: `envtest.ownedtemp`).

    Given inline data, pykube-ng writes it to `<tmp>/pykube-ng.<md5>.crt` with the umask's mode — a
    private key any local user can read — and never removes it."""
    from pykube.config import BytesOrFile

    context = config.contexts[config.current_context]
    for context_key, section, field in PYKUBE_PEMS:
        raw = _named_entry(config.doc, section, context.get(context_key))
        data = raw.get(f"{field}-data") if raw else None
        if not data:
            continue
        pem = base64.b64decode(data)
        entries = config.cluster if context_key == "cluster" else config.user
        entries[field] = BytesOrFile(filename=str(_private_pem(pem)))


def _named_entry(doc: dict[str, Any], section: str, name: Any) -> dict[str, Any] | None:
    for entry in doc.get(section) or []:
        if entry.get("name") == name:
            return entry.get(section[:-1]) or {}
    return None


def _private_pem(pem: bytes) -> Path:
    global _pem_folder
    with _pem_lock:
        if _pem_folder is None:
            _pem_folder = ownedtemp.make(PEM_KIND)  # 0700; those of killed processes are removed
            atexit.register(ownedtemp.remove_own, _pem_folder)
        path = _pem_folder / f"{hashlib.sha256(pem).hexdigest()[:32]}.pem"
        if not path.exists():
            write_private(path, pem)
        return path
