"""The kubeconfig the session's environment names: a private copy of the cluster's, which client
libraries read as they would the original — its context, its files, its plugins — and which leaves
pykube-ng no inline key to write into the shared temporary folder."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import yaml

from envtest.plugin.pointing import _private_copy


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
