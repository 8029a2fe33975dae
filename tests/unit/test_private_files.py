"""Private keys are 0600 from the moment they exist; directories holding them (a plane's workdir and
pki, a kept plane's state directory) are 0700, also when they existed before with a looser mode.

"From creation" is checked by taking away what could fix a mode afterwards: the umask is 0 (so a
plain write would create 0666) and chmod does nothing. Only a file created 0600 passes.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envtest.pki import private_dir, write_private
from envtest.plane import supervisor
from envtest.plane.controlplane import ControlPlane


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def no_umask_no_chmod(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(os, "chmod", lambda *_a, **_k: None)
    monkeypatch.setattr(Path, "chmod", lambda *_a, **_k: None)
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_every_key_and_kubeconfig_of_a_plane_is_0600_from_creation(
    tmp_path: Path, no_umask_no_chmod: None
) -> None:
    plane = ControlPlane("minimal", version="1.37.2", workdir=tmp_path / "plane")
    plane._write_pki()
    pki = plane.workdir / "pki"
    keys = sorted(pki.glob("*.key"))
    assert {k.name for k in keys} == {"ca.key", "apiserver.key", "admin.key", "sa.key"}
    for private in [*keys, plane.kubeconfig]:
        assert mode(private) == 0o600, f"{private.name} created {oct(mode(private))}"
    assert mode(pki) == 0o700


def test_write_private_replaces_a_loose_file_instead_of_inheriting_its_mode(
    tmp_path: Path, no_umask_no_chmod: None
) -> None:
    loose = tmp_path / "sa.key"
    loose.write_bytes(b"old")
    assert mode(loose) == 0o666
    write_private(loose, b"new")
    assert loose.read_bytes() == b"new" and mode(loose) == 0o600


def test_private_dir_tightens_a_directory_that_existed_with_a_loose_mode(tmp_path: Path) -> None:
    loose = tmp_path / "clusters" / "kept"
    loose.mkdir(parents=True, mode=0o755)
    os.chmod(loose, 0o755)
    assert private_dir(loose) == loose and mode(loose) == 0o700
    fresh = private_dir(tmp_path / "clusters" / "new")
    assert mode(fresh) == 0o700


def test_a_plane_workdir_given_by_the_caller_becomes_0700(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "kept" / "plane"
    workdir.mkdir(parents=True)
    os.chmod(workdir, 0o755)

    class Reached(Exception):
        pass

    def stop_before_any_process(self: ControlPlane) -> dict[str, Path]:
        raise Reached

    monkeypatch.setattr(ControlPlane, "_resolve_binaries", stop_before_any_process)
    plane = ControlPlane("minimal", version="1.37.2", workdir=workdir)
    with pytest.raises(Reached):
        plane.start()
    assert mode(workdir) == 0o700


def test_a_kept_plane_state_directory_is_0700(tmp_path: Path) -> None:
    state_dir = tmp_path / "clusters" / "kept"
    state_dir.mkdir(parents=True)
    os.chmod(state_dir, 0o755)  # as every kept plane before this fix left it
    lock = supervisor.hold_lock(state_dir)
    try:
        assert mode(state_dir) == 0o700
    finally:
        lock.close()


def test_a_pykube_client_of_an_inline_key_never_writes_it_to_the_shared_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pykube-ng writes inline (`*-data`) certificates and keys to `<tmp>/pykube-ng.<md5>.crt` with
    the umask's mode when a request needs them; the harness's clients hand it private files instead."""
    import requests

    from envtest.clusters import Cluster
    from envtest.kubeconfig import kubeconfig_dict, write_kubeconfig
    from envtest.pki import CertificateAuthority

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(shared))
    monkeypatch.setattr("envtest.kubeconfig._pem_folder", None)
    ca = CertificateAuthority.create("test-ca", valid_days=1)
    client = ca.issue_client("admin", ["system:masters"])
    path = write_kubeconfig(
        tmp_path / "admin.kubeconfig",
        kubeconfig_dict(server="https://127.0.0.1:1", ca_pem=ca.cert_pem, client=client, user="admin"),
    )
    api = Cluster.new_pykube_from(path)
    with pytest.raises(requests.ConnectionError):  # nothing listens: pykube-ng got as far as TLS
        api.session.get(f"{api.url}/version", timeout=5)
    assert not list(shared.glob("pykube-ng.*")), "a certificate or key was written to the shared temp dir"
    key = Path(api.config.user["client-key"].filename())
    assert key.read_bytes() == client.key_pem
    assert mode(key) == 0o600 and mode(key.parent) == 0o700


@pytest.mark.skipif(sys.platform != "linux", reason="a process's identity is read from /proc")
def test_the_pem_folder_of_a_killed_process_is_removed_by_the_next_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead_owner: str
) -> None:
    """A SIGKILLed process never runs its exit handlers: its folder of inline keys stays in the shared
    temp dir until the next process of the user writes its own (envtest.ownedtemp)."""
    from envtest import ownedtemp, runs
    from envtest.clusters import Cluster
    from envtest.kubeconfig import PEM_KIND, kubeconfig_dict, write_kubeconfig
    from envtest.pki import CertificateAuthority

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(shared))
    monkeypatch.setattr("envtest.kubeconfig._pem_folder", None)
    left = shared / f"{ownedtemp.PREFIX}{PEM_KIND}killed"
    left.mkdir(mode=0o700)
    (left / "admin.pem").write_text("KEY")
    (left / ownedtemp.OWNER).write_text(dead_owner)
    ca = CertificateAuthority.create("test-ca", valid_days=1)
    path = write_kubeconfig(
        tmp_path / "admin.kubeconfig",
        kubeconfig_dict(
            server="https://127.0.0.1:1", ca_pem=ca.cert_pem, client=ca.issue_client("admin"), user="admin"
        ),
    )
    api = Cluster.new_pykube_from(path)
    key = Path(api.config.user["client-key"].filename())
    assert not left.exists(), "the killed process's keys were left in the shared temp dir"
    assert key.parent.parent == shared and key.parent.name.startswith(f"{ownedtemp.PREFIX}{PEM_KIND}")
    assert (key.parent / ownedtemp.OWNER).read_text() == runs.holder_identity()
