"""Binary resolution order and the install orchestration (cache, lock, fall-through), with fake binaries."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from envtest import binaries
from envtest.binaries import download, gobuild
from envtest.errors import BinaryNotFound, ConfigError, InstallError
from envtest.pins import PINNED

KUBE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache, none of the caller's envtest settings, and no release downloads (no network)."""
    for var in list(os.environ):
        if var.startswith(("TEST_ASSET_", "ENVTEST_")) or var == "KUBEBUILDER_ASSETS":
            monkeypatch.delenv(var)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ENVTEST_OFFLINE", "1")
    return tmp_path


def fake_exe(path: Path, text: str = "fake") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {text}\n")
    path.chmod(0o755)
    return path


class FakeBuilds:
    """Stands in for gobuild: writes fake binaries where the real builds would, and counts calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: str | None = None, delay: float = 0.0):
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.fail, self.delay = fail, delay
        monkeypatch.setattr(gobuild, "find_go", lambda: "/fake/go")
        monkeypatch.setattr(gobuild, "build_kube", self.build_kube)
        monkeypatch.setattr(gobuild, "build_etcd", self.build_etcd)
        monkeypatch.setattr(gobuild, "build_kwok", self.build_kwok)
        monkeypatch.setattr(gobuild, "fetch_kwok_stages", self.fetch_stages)

    def _build(self, what: str, names: tuple[str, ...], out_dir: Path) -> None:
        self.calls.append((what, names))
        time.sleep(self.delay)
        if what == self.fail:
            raise InstallError(f"`go build` exited 1; last lines:\n    {what} exploded")
        for name in names:
            fake_exe(out_dir / name, f"built-{name}")

    def build_kube(self, names, version, out_dir, progress):  # type: ignore[no-untyped-def]
        self._build("kube", tuple(names), out_dir)

    def build_etcd(self, version, out_dir, progress):  # type: ignore[no-untyped-def]
        self._build("etcd", ("etcd",), out_dir)

    def build_kwok(self, version, out_dir, stages_dir, progress):  # type: ignore[no-untyped-def]
        self._build("kwok", ("kwok",), out_dir)
        (out_dir / gobuild.KWOK_STAMP).write_text(gobuild.kwok_build_id(version) + "\n")
        self.fetch_stages(version, stages_dir, progress, record=False)

    def fetch_stages(self, version, stages_dir, progress, record=True):  # type: ignore[no-untyped-def]
        if record:
            self.calls.append(("stages", ()))
        (stages_dir / "pod" / "fast").mkdir(parents=True)
        (stages_dir / "pod" / "fast" / "pod-ready.yaml").write_text("kind: Stage\n")
        (stages_dir / "SOURCE").write_text(f"sigs.k8s.io/kwok v{version}\n")


def test_test_asset_beats_kubebuilder_assets_and_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    own = fake_exe(tmp_path / "own" / "apiserver")
    fake_exe(tmp_path / "assets" / "kube-apiserver")
    fake_exe(binaries.cache_dir() / "kube-apiserver")
    monkeypatch.setenv("TEST_ASSET_KUBE_APISERVER", str(own))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    assert binaries.resolve("kube-apiserver", install=False) == own


def test_kubebuilder_assets_beats_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assets = fake_exe(tmp_path / "assets" / "etcd")
    fake_exe(binaries.cache_dir() / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    assert binaries.resolve("etcd", install=False) == assets


def test_cache_is_used_when_nothing_points_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets-without-kwok"))
    cached = fake_exe(binaries.cache_dir() / "kwok")
    (cached.parent / gobuild.KWOK_STAMP).write_text(gobuild.kwok_build_id(PINNED.kwok) + "\n")
    assert binaries.resolve("kwok", install=False) == cached


@pytest.mark.parametrize("stamp", [None, "v0.8.0", "v0.8.0+envtest.000000000000"])
def test_a_cached_kwok_not_built_with_the_current_patches_is_never_reused(
    monkeypatch: pytest.MonkeyPatch, stamp: str | None
):
    cached = fake_exe(binaries.cache_dir() / "kwok", "unpatched")
    if stamp is not None:
        (cached.parent / gobuild.KWOK_STAMP).write_text(stamp + "\n")
    with pytest.raises(BinaryNotFound, match=r"not built as v0\.8\.0\+envtest\."):
        binaries.resolve("kwok", install=False)
    builds = FakeBuilds(monkeypatch)
    assert binaries.resolve("kwok", progress=lambda _: None) == cached
    assert builds.calls == [("kwok", ("kwok",))] and "built-kwok" in cached.read_text()
    assert (cached.parent / gobuild.KWOK_STAMP).read_text().strip() == gobuild.kwok_build_id(PINNED.kwok)


@pytest.mark.parametrize("make", ["missing", "not-executable", "directory"])
def test_bad_test_asset_is_a_config_error_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: str
):
    target = tmp_path / "kcm"
    if make == "not-executable":
        target.write_text("not a program")
    elif make == "directory":
        target.mkdir()
    fake_exe(binaries.cache_dir() / "kube-controller-manager")  # must not be used as a silent fallback
    monkeypatch.setenv("TEST_ASSET_KUBE_CONTROLLER_MANAGER", str(target))
    with pytest.raises(ConfigError, match="TEST_ASSET_KUBE_CONTROLLER_MANAGER"):
        binaries.resolve("kube-controller-manager")


def test_not_found_without_install_lists_every_place_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    with pytest.raises(BinaryNotFound) as info:
        binaries.resolve("kube-scheduler", install=False)
    message = str(info.value)
    assert "TEST_ASSET_KUBE_SCHEDULER (unset)" in message
    assert str(tmp_path / "assets" / "kube-scheduler") in message
    assert str(binaries.cache_dir() / "kube-scheduler") in message
    assert not isinstance(info.value, InstallError)


def test_cache_dir_is_keyed_by_version_os_and_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    os_name, arch = binaries.platform_tag()
    expected = tmp_path / "xdg" / "envtest" / "k8s" / f"{binaries.PINNED.kubernetes}-{os_name}-{arch}"
    assert binaries.cache_dir() == expected
    monkeypatch.setenv("ENVTEST_K8S_VERSION", "v1.36.0")
    assert binaries.cache_dir().name == f"1.36.0-{os_name}-{arch}"
    assert binaries.cache_dir("1.35.1").name == f"1.35.1-{os_name}-{arch}"


def test_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert binaries.cache_root() == Path.home() / ".cache" / "envtest" / "k8s"


def test_bad_version_names_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ENVTEST_K8S_VERSION", "newest")
    with pytest.raises(ConfigError, match="ENVTEST_K8S_VERSION"):
        binaries.cache_dir()


def test_unknown_binary_is_refused_with_the_known_names():
    with pytest.raises(ConfigError, match="kube-apiserver"):
        binaries.install(["kubelet"])


def test_second_resolve_builds_nothing_and_says_nothing(monkeypatch: pytest.MonkeyPatch):
    builds = FakeBuilds(monkeypatch)
    first = binaries.resolve_all(progress=lambda _: None)
    assert sorted(c[0] for c in builds.calls) == ["etcd", "kube", "kwok"]
    said: list[str] = []
    assert binaries.resolve_all(install=True, progress=said.append) == first
    assert binaries.install(progress=said.append) == {**first, "kubectl": binaries.cache_dir() / "kubectl"}
    assert len(builds.calls) == 3, "the cache was not used"
    assert said == [], "nothing to install, so nothing to report"
    assert binaries.kwok_stages_dir(install=False) == binaries.cache_dir() / "kwok-stages"


def test_missing_kube_binaries_share_one_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    builds = FakeBuilds(monkeypatch)
    fake_exe(tmp_path / "assets" / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    found = binaries.resolve_all(["etcd", *KUBE], progress=lambda _: None)
    assert builds.calls == [("kube", (*KUBE, "kubectl"))]  # kubectl shares the plane's one build
    assert found["etcd"] == tmp_path / "assets" / "etcd"
    assert all(found[n].read_text().endswith(f"built-{n}\n") for n in KUBE)


def test_offline_skips_downloads(monkeypatch: pytest.MonkeyPatch):
    def no_downloads(*args: object, **kwargs: object) -> None:
        raise AssertionError("downloaded while offline")

    monkeypatch.setattr(download, "download_all", no_downloads)
    builds = FakeBuilds(monkeypatch)
    monkeypatch.setenv("ENVTEST_OFFLINE", "yes")
    binaries.install(["etcd"], progress=lambda _: None)
    monkeypatch.setenv("ENVTEST_OFFLINE", "0")
    binaries.install(["kube-apiserver"], offline=True, progress=lambda _: None)
    assert [c[0] for c in builds.calls] == ["etcd", "kube"]


def test_bad_offline_value_names_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ENVTEST_OFFLINE", "maybe")
    with pytest.raises(ConfigError, match="ENVTEST_OFFLINE"):
        binaries.install(["etcd"])


def test_concurrent_installs_build_once(monkeypatch: pytest.MonkeyPatch):
    builds = FakeBuilds(monkeypatch, delay=0.3)
    results: list[dict[str, Path]] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(binaries.install(offline=True, progress=lambda _: None))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and results[0] == results[1] == results[2]
    assert sorted(c[0] for c in builds.calls) == ["etcd", "kube", "kwok"]


def test_failed_install_says_what_was_tried_and_what_to_do(monkeypatch: pytest.MonkeyPatch):
    FakeBuilds(monkeypatch, fail="kube")
    with pytest.raises(InstallError) as info:
        binaries.install(offline=True, progress=lambda _: None)
    message = str(info.value)
    assert "kube-apiserver, kube-controller-manager, kube-scheduler" in message
    assert "download: skipped" in message and "kube exploded" in message
    assert "KUBEBUILDER_ASSETS=" in message and "TEST_ASSET_" in message
    cache = binaries.cache_dir()
    # What did build is kept; nothing half-written is left beside it.
    assert sorted(p.name for p in cache.parent.iterdir()) == [cache.name]
    assert (cache / "etcd").is_file() and not (cache / "kube-apiserver").exists()


def test_missing_go_is_said_once(monkeypatch: pytest.MonkeyPatch):
    def no_go() -> str:
        raise InstallError("go is not on PATH")

    monkeypatch.setattr(gobuild, "find_go", no_go)
    with pytest.raises(InstallError, match="go is not on PATH") as info:
        binaries.install(offline=True, progress=lambda _: None)
    assert str(info.value).count("go is not on PATH") == 1


def test_force_rebuilds_what_is_cached(monkeypatch: pytest.MonkeyPatch):
    builds = FakeBuilds(monkeypatch)
    fake_exe(binaries.cache_dir() / "etcd", "stale")
    binaries.install(["etcd"], offline=True)
    assert builds.calls == []
    binaries.install(["etcd"], offline=True, force=True, progress=lambda _: None)
    assert builds.calls == [("etcd", ("etcd",))]
    assert "built-etcd" in (binaries.cache_dir() / "etcd").read_text()


def test_kwok_stages_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(BinaryNotFound, match="kwok stages"):
        binaries.kwok_stages_dir(install=False)
    (binaries.cache_dir() / "kwok-stages").mkdir(parents=True)
    (binaries.cache_dir() / "kwok-stages" / "SOURCE").write_text("sigs.k8s.io/kwok v0.8.0\n")
    assert binaries.kwok_stages_dir(install=False) == binaries.cache_dir() / "kwok-stages"
    (tmp_path / "assets" / "kwok-stages").mkdir(parents=True)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    assert binaries.kwok_stages_dir() == tmp_path / "assets" / "kwok-stages"
    monkeypatch.setenv("ENVTEST_KWOK_STAGES", str(tmp_path / "mine"))
    with pytest.raises(ConfigError, match="ENVTEST_KWOK_STAGES"):
        binaries.kwok_stages_dir()


def test_kubectl_is_installed_with_the_plane_but_is_not_a_component(monkeypatch: pytest.MonkeyPatch):
    assert "kubectl" not in binaries.COMPONENT_BINARIES and "kubectl" in binaries.DEFAULT_INSTALL
    builds = FakeBuilds(monkeypatch)
    assert binaries.resolve("kubectl", progress=lambda _: None).name == "kubectl"
    assert builds.calls == [("kube", ("kubectl",))]  # alone it never drags in the plane's binaries


def test_cli_install_honours_the_names_it_is_given(monkeypatch: pytest.MonkeyPatch, capsys):
    from envtest import cli

    builds = FakeBuilds(monkeypatch)
    assert cli.main(["binaries", "install", "etcd"]) == 0
    assert builds.calls == [("etcd", ("etcd",))]
    assert capsys.readouterr().out.startswith("etcd\t")


def test_list_installed_shows_each_version_dir_and_skips_temp_dirs(monkeypatch: pytest.MonkeyPatch):
    fake_exe(binaries.cache_dir("1.37.2") / "etcd")
    fake_exe(binaries.cache_dir("1.36.0") / "kube-apiserver")
    fake_exe(binaries.cache_root() / ".tmp-1.37.2-xyz" / "kwok")
    listed = binaries.list_installed()
    assert [(d.split("-")[0], p.name) for d, p in listed] == [
        ("1.36.0", "kube-apiserver"),
        ("1.37.2", "etcd"),
    ]
