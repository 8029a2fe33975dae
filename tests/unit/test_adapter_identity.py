"""Reading an operator identity from one explicit kubeconfig: inline data and files relative to it,
and a clear error naming the file and the field when something is missing."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest.adapters.identity import read_identity
from envtest.errors import ConfigError

CA = b"-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"


def _write(path: Path, cluster: dict[str, Any], user: dict[str, Any], **context: Any) -> Path:
    config = {
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", **context}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_inline_token_and_ca_with_the_servers_path_prefix_kept(tmp_path: Path) -> None:
    cluster = {
        "server": "https://127.0.0.1:7000/__client__/op/",
        "certificate-authority-data": base64.b64encode(CA).decode(),
    }
    identity = read_identity(_write(tmp_path / "k", cluster, {"token": "t0ken"}, namespace="ns"))
    assert identity.server == "https://127.0.0.1:7000/__client__/op"
    assert identity.ca_pem == CA and identity.token == "t0ken" and identity.namespace == "ns"
    assert not identity.insecure and identity.client_cert_pem is None


def test_files_resolve_against_the_kubeconfigs_folder_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "token").write_text("from-file\n")
    (tmp_path / "tls.crt").write_bytes(b"cert")
    (tmp_path / "tls.key").write_bytes(b"key")
    cluster = {"server": "https://h:6443", "certificate-authority": "ca.crt"}
    user = {"tokenFile": "token", "client-certificate": "tls.crt", "client-key": "tls.key"}
    path = _write(tmp_path / "k", cluster, user)
    monkeypatch.chdir("/")
    identity = read_identity(path)
    assert identity.ca_pem == CA and identity.token == "from-file"
    assert identity.client_cert_pem == b"cert" and identity.client_key_pem == b"key"


def test_a_missing_current_context_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text(yaml.safe_dump({"clusters": []}))
    with pytest.raises(ConfigError, match=rf"kubeconfig {path}: no current-context"):
        read_identity(path)


def test_a_context_naming_an_absent_user_names_the_section_and_the_user(tmp_path: Path) -> None:
    path = _write(tmp_path / "k", {"server": "https://h"}, {"token": "t"})
    doc = yaml.safe_load(path.read_text())
    doc["contexts"][0]["context"]["user"] = "ghost"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"users has no entry named 'ghost'"):
        read_identity(path)


def test_bad_base64_and_missing_files_name_the_field(tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad", {"server": "https://h", "certificate-authority-data": "!!"}, {})
    with pytest.raises(ConfigError, match=r"certificate-authority-data is not base64"):
        read_identity(bad)
    gone = _write(tmp_path / "gone", {"server": "https://h"}, {"tokenFile": "nope"})
    with pytest.raises(ConfigError, match=rf"tokenFile {tmp_path / 'nope'}"):
        read_identity(gone)
