"""The test process's ambient Kubernetes configuration (`envtest.ambient`) during a session.

In a configured project, `KUBECONFIG` and the official client's default
configuration name the session's cluster (its admin) from `pytest_configure` to `pytest_unconfigure`,
so nothing a test or an operator loads from the environment — at import, in a startup handler, in a
`kubectl` subprocess — reaches the developer's own cluster. Until the cluster is up they name a
placeholder whose server cannot resolve (`.invalid`, RFC 2606): a client built from the environment
at collection time fails naming it instead of talking to another cluster. A running operator's
identity is pointed above this (`envtest.plugin.runner`). On the existing backend they name the
kubeconfig and context the run was given (`--envtest-kubeconfig`, `--envtest-context`).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest import ambient, ownedtemp
from envtest.pki import write_private
from envtest.plugin.state import AMBIENT_KEY

PLACEHOLDER_SERVER = "https://envtest-cluster-not-started-yet.invalid"
"""Where the environment points before the session's cluster is up: a name that never resolves."""
KIND = "ambient-"
"""Each session's temporary folder (`envtest.ownedtemp`): `envtest-ambient-<random>`."""


def point_at_placeholder(config: pytest.Config) -> None:
    if AMBIENT_KEY in config.stash or _xdist_controller(config):
        return
    folder = ownedtemp.make(KIND)  # 0700; the folders of sessions SIGKILLed earlier are removed
    path = folder / "placeholder.kubeconfig"
    name = "envtest-not-started"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": PLACEHOLDER_SERVER}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(doc, fh)
    config.stash[AMBIENT_KEY] = (ambient.point(path, label="envtest session (cluster not started)"), folder)


def point_at_cluster(config: pytest.Config, kubeconfig: Path, context: str | None = None) -> None:
    """The session's cluster is up: the environment names its admin from now on, through a private
    copy of `kubeconfig` (see `_private_copy`)."""
    entry = config.stash.get(AMBIENT_KEY, None)
    if entry is None:
        return
    frame, folder = entry
    frame.repoint(_private_copy(kubeconfig, context, folder))


PATH_KEYS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")
"""Fields of a kubeconfig holding file names, relative to the file's own folder."""


def _private_copy(source: Path, context: str | None, folder: Path) -> Path:
    """`source` as the environment names it: a copy in the session's private folder whose current
    context is `context` (`KUBECONFIG` cannot name a context) and whose inline certificates and keys
    (`*-data`) are files beside it. pykube-ng's `KubeConfig.from_env()`, in a test or an operator,
    would otherwise write an inline key to `/tmp/pykube-ng.<md5>.crt`, readable by every local user,
    and leave it there."""
    doc = yaml.safe_load(source.read_text()) or {}
    if context:
        doc["current-context"] = context
    return write_copy(doc, source, folder, "session.kubeconfig")


def write_copy(doc: dict[str, Any], source: Path, folder: Path, name: str) -> Path:
    """`doc` (read from `source`) written as `folder/name`: paths made absolute, inline PEMs made
    private files named for their content (a client that loaded an earlier copy keeps reading the
    files it was given, unchanged)."""
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in doc.get(section) or []:
            fields = entry.get(key) or {}
            for field in PATH_KEYS:
                if isinstance(fields.get(field), str):
                    fields[field] = str((source.parent / Path(fields[field]).expanduser()).resolve())
                if fields.get(f"{field}-data"):
                    data = base64.b64decode(fields.pop(f"{field}-data"))
                    pem = folder / f"{key}-{field}-{hashlib.sha256(data).hexdigest()[:16]}.pem"
                    if not pem.exists():
                        write_private(pem, data)
                    fields[field] = str(pem)
            command = (fields.get("exec") or {}).get("command")
            if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
                # client-go resolves a relative plugin path against the kubeconfig's folder
                fields["exec"]["command"] = str((source.parent / command).resolve())
    # Staged and renamed: a loader reading the file meanwhile sees the old copy or the new one.
    staged = folder / f"{name}.new"
    write_private(staged, yaml.safe_dump(doc).encode())
    dest = folder / name
    os.replace(staged, dest)
    return dest


def release(config: pytest.Config) -> None:
    entry = config.stash.get(AMBIENT_KEY, None)
    if entry is None:
        return
    frame, folder = entry
    del config.stash[AMBIENT_KEY]
    frame.close()
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()


def _xdist_controller(config: pytest.Config) -> bool:
    """The xdist controller runs no test, and its workers inherit its environment: it must hand
    them the user's, which their settings read (the existing backend's KUBECONFIG)."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))
