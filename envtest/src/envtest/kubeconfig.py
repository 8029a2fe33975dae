"""Self-contained kubeconfig files (certificates embedded) for the users of a control plane."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

from envtest.pki import CertKey


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
