"""The kubeconfig the session's environment names: a private copy of the cluster's, which client
libraries read as they would the original — its context, its files, its plugins — and which leaves
pykube-ng no inline key to write into the shared temporary folder."""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from envtest.plugin.pointing import _private_copy, follow_operator
from envtest.plugin.state import AMBIENT_KEY


def test_the_copy_names_the_context_resolves_paths_and_keeps_inline_pems_as_private_files(
    tmp_path: Path,
) -> None:
    source_dir = tmp_path / "cluster"
    source_dir.mkdir()
    (source_dir / "ca.crt").write_text("CA")
    key = b"-----BEGIN PRIVATE KEY-----\nsecret\n"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"}}
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": base64.b64encode(b"CERT").decode(),
                    "client-key-data": base64.b64encode(key).decode(),
                },
            },
            {
                "name": "cloud",
                "user": {
                    "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "bin/get-token"}
                },
            },
        ],
        "contexts": [
            {"name": "a", "context": {"cluster": "c", "user": "admin"}},
            {"name": "b", "context": {"cluster": "c", "user": "cloud"}},
        ],
        "current-context": "a",
    }
    source = source_dir / "kubeconfig"
    source.write_text(yaml.safe_dump(doc))
    private = tmp_path / "private"
    private.mkdir(mode=0o700)

    copy = yaml.safe_load(_private_copy(source, "b", private).read_text())

    assert copy["current-context"] == "b"
    assert copy["clusters"][0]["cluster"]["certificate-authority"] == str(source_dir / "ca.crt")
    admin = copy["users"][0]["user"]
    assert not any(field.endswith("-data") for field in admin), "no PEM left inline"
    key_file = Path(admin["client-key"])
    assert key_file.parent == private and key_file.read_bytes() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert Path(admin["client-certificate"]).read_bytes() == b"CERT"
    assert copy["users"][1]["user"]["exec"]["command"] == str(source_dir / "bin" / "get-token")


def test_without_a_context_the_files_current_one_stays(tmp_path: Path) -> None:
    source = tmp_path / "kubeconfig"
    source.write_text(yaml.safe_dump({"current-context": "x", "contexts": [], "clusters": [], "users": []}))
    private = tmp_path / "private"
    private.mkdir()
    assert yaml.safe_load(_private_copy(source, None, private).read_text())["current-context"] == "x"


def _identity(tmp_path: Path, name: str, token: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "plane",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": base64.b64encode(b"CA").decode(),
                },
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "identity", "context": {"cluster": "plane", "user": "sa", "namespace": name}}],
        "current-context": "identity",
    }
    path = tmp_path / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_client_loaded_from_the_operators_file_acts_as_each_later_operators_token(tmp_path: Path) -> None:
    """What an operator module does at import in the first test (`load_kube_config()` from the file
    `KUBECONFIG` names) still carries the identity of the operator running now, tests later."""
    from kubernetes import client, config

    session = pytest.Stash()
    folder = tmp_path / "ambient"
    folder.mkdir(mode=0o700)
    session[AMBIENT_KEY] = (None, folder)  # type: ignore[assignment]
    holder = SimpleNamespace(stash=session)

    first = follow_operator(holder, _identity(tmp_path, "test-1", "token-one"))  # type: ignore[arg-type]
    assert first is not None
    imported = client.Configuration()
    config.load_kube_config(config_file=str(first), client_configuration=imported)
    assert imported.auth_settings()["BearerToken"]["value"] == "Bearer token-one"

    second = follow_operator(holder, _identity(tmp_path, "test-2", "token-two"))  # type: ignore[arg-type]

    assert second == first, "one file per process: what loaded it once keeps reading it"
    assert imported.auth_settings()["BearerToken"]["value"] == "Bearer token-two"
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "token-two" not in second.read_text(), "the token stays in the credential file"


def test_nothing_follows_a_kubeconfig_without_a_token_or_outside_a_session(tmp_path: Path) -> None:
    certificate = _identity(tmp_path, "admin", "")
    folder = tmp_path / "ambient"
    folder.mkdir(mode=0o700)
    session = pytest.Stash()
    session[AMBIENT_KEY] = (None, folder)  # type: ignore[assignment]
    assert follow_operator(SimpleNamespace(stash=session), certificate) is None  # type: ignore[arg-type]
    token = _identity(tmp_path, "test", "token")
    assert follow_operator(SimpleNamespace(stash=pytest.Stash()), token) is None  # type: ignore[arg-type]
