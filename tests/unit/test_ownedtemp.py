"""Temporary folders that name their owning process: the next process of the same user removes those
a SIGKILLed one left, whatever they held, and nothing else (a live owner's, another machine's, another
user's, a link, a folder naming no owner)."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from envtest import ownedtemp, runs

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a process's identity is read from /proc")

PREFIX = ownedtemp.PREFIX


def _folder(where: Path, name: str, owner: str | None) -> Path:
    folder = where / name
    folder.mkdir()
    (folder / "admin.key").write_text("KEY")
    if owner is not None:
        (folder / ownedtemp.OWNER).write_text(owner)
    return folder


def test_a_killed_processs_folder_is_removed_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead_owner: str
) -> None:
    owners = {
        "dead": dead_owner,
        "alive": runs.holder_identity(),
        "elsewhere": "other-host:1:2/7/99",
        "unowned": None,
    }
    for name, owner in owners.items():
        _folder(tmp_path, f"{PREFIX}{name}", owner)
    (tmp_path / "someone-elses-dir").mkdir()
    # A link named like an owned folder, to a folder with a dead owner: neither is removed.
    target = _folder(tmp_path, "target", dead_owner)
    (tmp_path / f"{PREFIX}link").symlink_to(target)
    with monkeypatch.context() as other_user:
        other_user.setattr("os.getuid", lambda: 12345)
        ownedtemp.sweep(tmp_path)
        assert (tmp_path / f"{PREFIX}dead").is_dir(), "another user's folder was removed"
    ownedtemp.sweep(tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [f"{PREFIX}{n}" for n in ("alive", "elsewhere", "link", "unowned")] + [
        "someone-elses-dir",
        "target",
    ]
    assert (target / ownedtemp.OWNER).read_text() == dead_owner


def test_make_names_this_process_and_sweeps_every_kind_of_folder_a_dead_process_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead_owner: str
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for kind in (
        "pems-a",
        "exec-b",
        "ambient-c",
        "d",
    ):  # pykube's keys, exec certificates, a session, a plane
        _folder(tmp_path, f"{PREFIX}{kind}", dead_owner)
    kept = [_folder(tmp_path, "pytest-of-someone", dead_owner), _folder(tmp_path, f"{PREFIX}unowned", None)]
    made = ownedtemp.make("pems-")
    assert made.parent == tmp_path and made.name.startswith(f"{PREFIX}pems-")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert (made / ownedtemp.OWNER).read_text() == runs.holder_identity()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([made.name, *(k.name for k in kept)])


def test_remove_own_takes_this_processs_folder_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead_owner: str
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    own = ownedtemp.make("x-")
    parents = _folder(tmp_path, f"{PREFIX}parents", dead_owner)  # as a forked child sees its parent's
    ownedtemp.remove_own(parents)
    ownedtemp.remove_own(tmp_path / f"{PREFIX}never-made")
    assert parents.is_dir()
    ownedtemp.remove_own(own)
    assert not own.exists()


def test_a_forked_child_writes_its_keys_to_a_folder_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envtest import kubeconfig

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(kubeconfig, "_pem_folder", None)
    parents = kubeconfig._private_pem(b"PEM").parent
    pid = os.fork()
    if pid == 0:  # the child: report by exit status only, and skip every exit handler
        ok = False
        try:
            mine = kubeconfig._private_pem(b"PEM").parent
            ok = mine != parents and (mine / ownedtemp.OWNER).read_text() == runs.holder_identity()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child wrote into its parent's folder"
