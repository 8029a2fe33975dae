"""The operator identity that clients made in an earlier test follow.

An operator's modules are imported once per process (see `envtest.adapters.kopf`), while each test's
operator is a ServiceAccount of that test's namespace: a client the operator's code makes at import —
`load_kube_config()` then a module-level `CoreV1Api()`, `pykube.KubeConfig.from_env()` — would keep the
first test's token, refused from the second test on. In production such a client outlives token
rotation; here it outlives tests. So while an operator runs, the environment names files that hold
no token of their own:

- `operator-<server>.kubeconfig`, one per server (the cluster's apiserver, or a test's fault proxy),
  whose user is an exec credential plugin: `cat` of `operator-<cluster>.credential.json`, a private
  ExecCredential rewritten at each operator start and marked already expired. The official sync
  client, pykube-ng and client-go run the plugin again before each request (one `cat` process);
- the client libraries' default configurations (`envtest.ambient`) read the same file in-process
  before each request, so a `CoreV1Api()` made at import from the default follows it as well.

While two operators overlap on one cluster, clients follow the one whose frame is in effect: the one
started last, then again the earlier one once the later one stops. A client keeps the server it was
loaded with: one loaded in a test with a fault proxy keeps that proxy's address (refused once the
test is over); one loaded on the cluster itself bypasses a later test's proxy. An async client loaded
from the file into a configuration of its own (`await load_kube_config()` of `kubernetes.aio` or
`kubernetes_asyncio`, which run a plugin again only under their `config.refresh_token`) keeps its
token; one loaded at each operator start is each test's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest.pki import write_private
from envtest.plugin.pointing import write_copy
from envtest.plugin.state import AMBIENT_KEY

CREDENTIAL_VERSION = "client.authentication.k8s.io/v1beta1"
"""The exec credential version every client library here reads (pykube-ng knows no v1)."""
ALWAYS_EXPIRED = "1970-01-01T00:00:00Z"
"""Makes the official client and client-go run the plugin again before each request (pykube-ng always
does) instead of keeping a token."""


@dataclass(frozen=True)
class Following:
    kubeconfig: Path
    """What `KUBECONFIG` names while the operator runs."""
    credential: Path
    """The ExecCredential its plugin prints, which the default configurations read too."""
    body: bytes
    """What `credential` holds for this operator: the ambient frame writes it back whenever this
    operator's frame is in effect again (another operator on the cluster started and stopped)."""


def follow_operator(config: pytest.Config, identity: Path, served: Path | None = None) -> Following | None:
    """Files that follow the operator of `identity` (its ServiceAccount's kubeconfig on the cluster),
    served through `served` when a fault proxy stands in front of it (a kubeconfig with the same
    token). None where nothing follows: outside a configured session, a kubeconfig without a token,
    or no `cat`."""
    entry = config.stash.get(AMBIENT_KEY, None)
    cat = shutil.which("cat")
    if entry is None or cat is None:
        return None
    folder: Path = entry[1]
    doc = yaml.safe_load(identity.read_text()) or {}
    user = _current(doc, "users", "user")
    token = user.get("token")
    if not token:
        return None
    cluster = _key(_current(doc, "clusters", "cluster").get("server"))
    credential = folder / f"operator-{cluster}.credential.json"
    body = {
        "apiVersion": CREDENTIAL_VERSION,
        "kind": "ExecCredential",
        "status": {"token": token, "expirationTimestamp": ALWAYS_EXPIRED},
    }
    data = json.dumps(body).encode()
    # Replaced, not rewritten in place: a plugin run reads either the old token or the new one.
    staged = credential.with_name(credential.name + ".new")
    write_private(staged, data)
    os.replace(staged, credential)
    plugin = {
        "apiVersion": CREDENTIAL_VERSION,
        "command": os.path.abspath(cat),
        "args": [str(credential)],
        "interactiveMode": "Never",
    }
    named = identity
    for source in (identity, served) if served is not None else (identity,):
        doc = yaml.safe_load(source.read_text()) or {}
        _current(doc, "users", "user").clear()
        _current(doc, "users", "user")["exec"] = dict(plugin)
        server = _current(doc, "clusters", "cluster").get("server")
        named = write_copy(doc, source, folder, f"operator-{_key(server)}.kubeconfig")
    return Following(named, credential, data)


def _current(doc: dict[str, Any], section: str, key: str) -> dict[str, Any]:
    """The `section` entry (users, clusters) the current context names; {} when there is none."""
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or []}
    wanted = contexts.get(doc.get("current-context"), {}).get(key)
    for entry in doc.get(section) or []:
        if entry.get("name") == wanted:
            entry.setdefault(key, {})
            return entry[key]  # type: ignore[no-any-return]
    return {}


def _key(server: Any) -> str:
    """A file name part for a server: one set of files per cluster and per proxy."""
    return hashlib.sha256(str(server).encode()).hexdigest()[:12]
