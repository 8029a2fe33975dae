"""Plane templates: made once per identity, never half-made, copied for each plane."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock, Timeout

from envtest.plane import template


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _binaries(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("etcd", "kube-apiserver"):
        out[name] = tmp_path / name
        out[name].write_text(name)
    return out


def _ident(tmp_path: Path, **flags: str | None) -> dict[str, object]:
    return template.identity("1.37.2", _binaries(tmp_path), {"kube-apiserver": dict(flags)})


def _make(data_dir: Path) -> None:
    (data_dir / "member").mkdir(parents=True)
    (data_dir / "member" / "db").write_text("bootstrapped")


def test_made_once_then_reused(tmp_path: Path) -> None:
    made = []

    def make(data_dir: Path) -> None:
        made.append(data_dir)
        _make(data_dir)

    ident = _ident(tmp_path)
    first, was_made = template.ensure(ident, make)
    again, made_again = template.ensure(ident, make)
    assert (was_made, made_again) == (True, False)
    assert first == again and len(made) == 1
    assert json.loads((first / template.COMPLETE).read_text())["version"] == "1.37.2"


def test_parallel_callers_make_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ident = _ident(tmp_path)
    inside, release, second_waits = threading.Event(), threading.Event(), threading.Event()
    made = []

    class SeenLock(FileLock):  # tells when the second caller asks for the lock the first one holds
        def acquire(self, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == "second":
                second_waits.set()
            return super().acquire(*args, **kwargs)

    monkeypatch.setattr(template, "FileLock", SeenLock)

    def slow_make(data_dir: Path) -> None:
        made.append(data_dir)
        inside.set()
        release.wait(30)
        _make(data_dir)

    results: list[tuple[Path, bool]] = []
    first = threading.Thread(target=lambda: results.append(template.ensure(ident, slow_make)))
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=lambda: results.append(template.ensure(ident, slow_make)), name="second")
    second.start()
    assert second_waits.wait(30), "the second caller never asked for the lock"
    release.set()
    first.join(30)
    second.join(30)
    assert len(made) == 1
    assert sorted(was_made for _, was_made in results) == [False, True]


def test_a_failed_make_leaves_nothing_and_a_half_made_one_is_replaced(tmp_path: Path) -> None:
    ident = _ident(tmp_path)

    def broken(data_dir: Path) -> None:
        data_dir.mkdir()
        raise RuntimeError("kube-apiserver did not start")

    with pytest.raises(RuntimeError):
        template.ensure(ident, broken)
    assert [p.name for p in template.root().iterdir() if not p.name.endswith(".lock")] == []
    half = template.directory(ident)
    (half / "etcd").mkdir(parents=True)  # as a killed process could leave it: no COMPLETE
    found, was_made = template.ensure(ident, _make)
    assert was_made and (found / "etcd" / "member" / "db").read_text() == "bootstrapped"


def test_other_binaries_or_flags_get_another_template(tmp_path: Path) -> None:
    base = _ident(tmp_path)
    assert template.directory(_ident(tmp_path, **{"service-cluster-ip-range": "10.0.0.0/16"})) != (
        template.directory(base)
    )
    (tmp_path / "kube-apiserver").write_text("a rebuilt kube-apiserver")
    assert template.directory(_ident(tmp_path)) != template.directory(base)


def test_each_plane_gets_its_own_private_copy(tmp_path: Path) -> None:
    found, _ = template.ensure(_ident(tmp_path), _make)
    data_dir = tmp_path / "plane" / "etcd"
    data_dir.parent.mkdir()
    template.copy_into(found, data_dir)
    (data_dir / "member" / "db").write_text("written by the plane")
    assert (found / "etcd" / "member" / "db").read_text() == "bootstrapped"
    assert data_dir.stat().st_mode & 0o777 == 0o700


def test_readiness_skips_only_the_hooks_whose_work_the_template_holds() -> None:
    assert template.readyz_path(False) == "/readyz"
    query = template.readyz_path(True).removeprefix("/readyz?")
    assert sorted(query.split("&")) == sorted(f"exclude={hook}" for hook in template.SKIPPED_HOOKS)


@pytest.mark.parametrize(("value", "wanted"), [("", True), ("1", True), ("0", False), ("False", False)])
def test_the_environment_turns_templates_off(
    value: str, wanted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(template.ENV, value)
    assert template.wanted() is wanted


def test_binaries_of_an_envtest_cache_keep_their_templates_beside_it(tmp_path: Path) -> None:
    release = tmp_path / "elsewhere" / "envtest" / "k8s" / "1.37.2-linux-amd64"
    release.mkdir(parents=True)
    assert template.root(release / "kube-apiserver") == tmp_path / "elsewhere" / "envtest" / "templates"
    assert template.root(tmp_path / "kube-apiserver") == template.root()


def test_the_copy_holds_the_same_bytes_and_leaves_zeros_as_holes(tmp_path: Path) -> None:
    source = tmp_path / "etcd"
    (source / "member" / "wal").mkdir(parents=True)
    wal = source / "member" / "wal" / "0.wal"
    with wal.open("wb") as f:  # records, then the zeros a preallocated log ends in
        f.write(b"record" * 1000)
        f.write(bytes(8 * template.CHUNK))
        f.write(b"tail")
        f.write(bytes(template.CHUNK + 7))
    copied = tmp_path / "copy"
    template.copy_data(source, copied)
    again = tmp_path / "again"
    template.copy_data(copied, again)  # from a sparse template, as every plane copies it
    for target in (copied, again):
        out = target / "member" / "wal" / "0.wal"
        assert out.read_bytes() == wal.read_bytes()
        assert out.stat().st_blocks * 512 <= 2 * template.CHUNK < out.stat().st_size  # two chunks hold data
    assert copied.stat().st_mode & 0o777 == 0o700


def test_templates_of_binaries_rebuilt_or_gone_are_stale(tmp_path: Path) -> None:
    kept, _ = template.ensure(_ident(tmp_path), _make)
    assert template.stale() == []
    (tmp_path / "kube-apiserver").write_text("a rebuilt kube-apiserver")
    rebuilt, _ = template.ensure(_ident(tmp_path), _make)
    assert template.stale() == [kept]
    (tmp_path / "etcd").unlink()
    assert sorted(template.stale()) == sorted([kept, rebuilt])


def test_an_interrupted_copy_leaves_no_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found, _ = template.ensure(_ident(tmp_path), _make)
    plane = tmp_path / "plane"
    plane.mkdir()

    def interrupted(source: Path, target: Path) -> None:
        target.mkdir()
        raise KeyboardInterrupt

    monkeypatch.setattr(template, "copy_data", interrupted)
    with pytest.raises(KeyboardInterrupt):
        template.copy_into(found, plane / "etcd")
    assert list(plane.iterdir()) == []  # a later start would take a partial etcd/ for the plane's own


def test_without_seek_data_the_copy_reads_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "f"
    source.write_bytes(b"data" + bytes(template.CHUNK) + b"end")

    def unsupported(fd: int, offset: int, whence: int) -> int:
        if whence in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(errno.EINVAL, "not supported")
        return real_lseek(fd, offset, whence)

    real_lseek = os.lseek
    monkeypatch.setattr(template.os, "lseek", unsupported)
    template.sparse_copy(source, tmp_path / "g")
    assert (tmp_path / "g").read_bytes() == source.read_bytes()


def test_abandoned_staging_folders_and_other_formats_are_stale(tmp_path: Path) -> None:
    found, _ = template.ensure(_ident(tmp_path), _make)
    record = json.loads((found / template.COMPLETE).read_text())
    (found / template.COMPLETE).write_text(json.dumps({**record, "format": template.FORMAT - 1}))
    fresh_staging = template.root() / ".1.37.2-abc-making"
    old_staging = template.root() / ".1.37.2-def-killed"
    fresh_staging.mkdir()
    old_staging.mkdir()
    long_ago = time.time() - template.STAGING_ABANDONED_AFTER - 60
    os.utime(old_staging, (long_ago, long_ago))
    assert sorted(template.stale()) == sorted([found, old_staging])


def test_waiting_for_another_maker_is_bounded(tmp_path: Path) -> None:
    ident = _ident(tmp_path)
    template.root().mkdir(parents=True)
    with FileLock(str(template.directory(ident)) + ".lock"), pytest.raises(Timeout):
        template.ensure(ident, _make, lock_timeout=0.01)
