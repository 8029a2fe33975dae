"""Several Kubernetes minors side by side in one binary cache: each installs with its own etcd and kwok
pins, keeps its own kubectl, `envtest binaries list|cleanup` see and prune them, and a kept plane is
reused only by a selector that resolves to its release. Fake builds and a temporary XDG_CACHE_HOME:
nothing is downloaded or compiled."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock
from supervisor_fakes import lock_holder, reap, write_state

from envtest import binaries, cli, commands
from envtest.binaries import cache, download, gobuild
from envtest.errors import UsageProblem
from envtest.pins import SUPPORTED
from envtest.plane import supervisor

NEWEST, MIDDLE, OLDEST = SUPPORTED[-1], SUPPORTED[-2], SUPPORTED[0]
HERE = "-".join(binaries.platform_tag())
UNPINNED = f"{MIDDLE.minor}.0-rc.0"  # a release of a supported minor that no pin names


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache and clusters root, none of the caller's envtest settings, no downloads."""
    for var in list(os.environ):
        if var.startswith(("TEST_ASSET_", "ENVTEST_")) or var == "KUBEBUILDER_ASSETS":
            monkeypatch.delenv(var)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ENVTEST_OFFLINE", "1")
    return tmp_path / "xdg"


def install_fake(version: str, *names: str, platform: str = HERE) -> Path:
    directory = binaries.cache_root() / f"{version}-{platform}"
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


class RecordingBuilds:
    """Stands in for gobuild: records (what, version) of each build and writes fake binaries."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str]] = []
        monkeypatch.setattr(gobuild, "find_go", lambda: "/fake/go")
        monkeypatch.setattr(gobuild, "build_kube", self.build_kube)
        monkeypatch.setattr(gobuild, "build_etcd", self.build_etcd)
        monkeypatch.setattr(gobuild, "build_kwok", self.build_kwok)
        monkeypatch.setattr(gobuild, "fetch_kwok_stages", self.fetch_stages)

    @staticmethod
    def _write(out_dir: Path, name: str) -> None:
        (out_dir / name).write_text("#!/bin/sh\n")

    def build_kube(self, names, version, out_dir, progress):  # type: ignore[no-untyped-def]
        self.calls.append(("kube", version))
        for name in names:
            self._write(out_dir, name)

    def build_etcd(self, version, out_dir, progress):  # type: ignore[no-untyped-def]
        self.calls.append(("etcd", version))
        self._write(out_dir, "etcd")

    def build_kwok(self, version, out_dir, stages_dir, progress):  # type: ignore[no-untyped-def]
        self.calls.append(("kwok", version))
        self._write(out_dir, "kwok")
        (out_dir / gobuild.KWOK_STAMP).write_text(gobuild.kwok_build_id(version) + "\n")
        self.fetch_stages(version, stages_dir, progress)

    def fetch_stages(self, version, stages_dir, progress):  # type: ignore[no-untyped-def]
        stages_dir.mkdir(parents=True, exist_ok=True)
        (stages_dir / "SOURCE").write_text(f"sigs.k8s.io/kwok v{version}\n")


# -- per-minor installs --------------------------------------------------------------------------------


@pytest.mark.parametrize("pins", [OLDEST, MIDDLE], ids=lambda p: p.minor)
def test_an_older_minor_builds_with_its_own_etcd_and_kwok_into_its_own_directory(
    monkeypatch: pytest.MonkeyPatch, pins
) -> None:  # type: ignore[no-untyped-def]
    builds = RecordingBuilds(monkeypatch)
    paths = binaries.install(version=f"{pins.minor}.x", progress=lambda _: None)
    assert sorted(builds.calls) == [("etcd", pins.etcd), ("kube", pins.kubernetes), ("kwok", pins.kwok)]
    assert {p.parent for p in paths.values()} == {binaries.cache_root() / f"{pins.kubernetes}-{HERE}"}


def test_an_unpinned_patch_takes_its_minor_s_etcd(monkeypatch: pytest.MonkeyPatch) -> None:
    builds = RecordingBuilds(monkeypatch)
    binaries.install(["etcd"], version=UNPINNED, progress=lambda _: None)
    assert builds.calls == [("etcd", MIDDLE.etcd)]
    assert binaries.resolve("etcd", version=UNPINNED, install=False).parent.name == f"{UNPINNED}-{HERE}"


def test_release_downloads_ask_for_the_minor_s_etcd_and_kwok(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    def no_network(arts, staging, *, progress):  # type: ignore[no-untyped-def]
        asked.extend((a.name, a.url) for a in arts)
        return [], {a.name: "offline test" for a in arts}

    monkeypatch.setattr(download, "download_all", no_network)
    RecordingBuilds(monkeypatch)
    binaries.install(["etcd", "kwok", "kube-apiserver"], version=OLDEST.minor, offline=False, progress=print)
    urls = dict(asked)
    assert f"/v{OLDEST.etcd}/" in urls["etcd"] and f"/v{OLDEST.kubernetes}/" in urls["kube-apiserver"]
    # kwok's release is upstream's: with envtest's patches for that version it is built, never downloaded.
    assert ("kwok" in urls) == (not gobuild.kwok_patches(OLDEST.kwok))


def test_minors_sit_side_by_side_and_each_resolves_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    RecordingBuilds(monkeypatch)
    for pins in (MIDDLE, NEWEST):
        binaries.install(["kube-apiserver"], version=pins.minor, progress=lambda _: None)
    for pins in (MIDDLE, NEWEST):
        path = binaries.resolve("kube-apiserver", version=f"{pins.minor}.x", install=False)
        assert path == binaries.cache_root() / f"{pins.kubernetes}-{HERE}" / "kube-apiserver"


def test_the_printed_kubectl_is_the_plane_s_own_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    middle = install_fake(MIDDLE.kubernetes, "kubectl")
    newest = install_fake(NEWEST.kubernetes, "kubectl")
    assert commands.kubectl(MIDDLE.kubernetes) == shlex.quote(str(middle / "kubectl"))
    assert commands.kubectl(NEWEST.kubernetes) == shlex.quote(str(newest / "kubectl"))
    # A release without its own kubectl gets plain `kubectl`, never another minor's.
    assert commands.kubectl(OLDEST.kubernetes) == "kubectl"


# -- envtest binaries list | cleanup -------------------------------------------------------------------


def test_binaries_list_shows_each_release_its_binaries_and_whether_a_pin_names_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    newest = install_fake(NEWEST.kubernetes, "etcd", "kube-apiserver", "kubectl")
    install_fake(f"{MIDDLE.minor}.10", "kube-apiserver")
    install_fake(UNPINNED, "etcd")
    (binaries.cache_root() / f".tmp-{NEWEST.kubernetes}-{HERE}-x1").mkdir()
    assert cli.main(["binaries", "list"]) == 0
    out, err = capsys.readouterr()
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[0] for r in rows] == [
        f"{UNPINNED}-{HERE}",
        f"{MIDDLE.minor}.10-{HERE}",
        f"{NEWEST.kubernetes}-{HERE}",
    ]
    assert rows[2] == [newest.name, "pinned", "etcd,kube-apiserver,kubectl", str(newest)]
    assert [r[1] for r in rows[:2]] == ["unpinned", "unpinned"]
    assert "-m envtest.cli binaries cleanup` removes the unpinned ones" in err
    assert f"pinned {OLDEST.kubernetes} is not installed" in err


def test_binaries_list_of_an_empty_cache_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["binaries", "list"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"nothing installed in {binaries.cache_root()}" in err


def _cache_with_leftovers() -> dict[str, Path]:
    root = binaries.cache_root()
    made = {
        "pinned": install_fake(NEWEST.kubernetes, "kube-apiserver"),
        "pinned elsewhere": install_fake(MIDDLE.kubernetes, "kube-apiserver", platform="darwin-arm64"),
        "unpinned": install_fake(UNPINNED, "kube-apiserver"),
        "unpinned elsewhere": install_fake(UNPINNED, "etcd", platform="darwin-arm64"),
        "dead staging": root / f".tmp-{UNPINNED}-{HERE}-dead1",
        "not ours": root / "notes",
    }
    made["dead staging"].mkdir()
    made["not ours"].mkdir()
    return made


def test_cleanup_dry_run_names_what_would_go_and_deletes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    made = _cache_with_leftovers()
    assert cli.main(["binaries", "cleanup", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert sorted(out.splitlines()) == sorted(
        f"would remove {made[k]}" for k in ("unpinned", "unpinned elsewhere", "dead staging")
    )
    assert all(p.exists() for p in made.values())


def test_cleanup_removes_releases_no_pin_names_and_keeps_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    made = _cache_with_leftovers()
    assert cli.main(["binaries", "cleanup"]) == 0
    gone = {k for k, p in made.items() if not p.exists()}
    assert gone == {"unpinned", "unpinned elsewhere", "dead staging"}
    assert sorted(os.listdir(binaries.cache_root())) == sorted(
        p.name for k, p in made.items() if k not in gone
    )  # nothing half-deleted left behind
    assert f"removed {made['unpinned']}" in capsys.readouterr().out


def test_cleanup_never_touches_a_release_while_an_install_holds_its_lock(
    capsys: pytest.CaptureFixture[str],
) -> None:
    busy = install_fake(UNPINNED, "etcd")
    staging = binaries.cache_root() / f".tmp-{busy.name}-live1"  # that install's own staging
    staging.mkdir()
    with FileLock(busy / cache.INSTALL_LOCK):
        assert cli.main(["binaries", "cleanup"]) == 1
    assert busy.exists() and staging.exists()
    assert f"kept {busy}: an install into it is running" in capsys.readouterr().err
    assert cli.main(["binaries", "cleanup"]) == 0  # the install has finished (or died)
    assert not busy.exists() and not staging.exists()


def test_cleanup_keeps_what_a_running_plane_or_envtest_k8s_version_uses(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    in_use = install_fake(UNPINNED, "kube-apiserver")
    selected = install_fake(f"{OLDEST.minor}.0", "kube-apiserver")
    spare = install_fake(f"{MIDDLE.minor}.1", "kube-apiserver")
    plane_dir = isolated / "envtest" / "clusters" / "kept"
    holder = lock_holder(plane_dir)
    try:
        write_state(plane_dir, holder.pid, version=UNPINNED)
        monkeypatch.setenv("ENVTEST_K8S_VERSION", f"{OLDEST.minor}.0")
        assert cli.main(["binaries", "cleanup"]) == 0
    finally:
        reap(holder)
    assert in_use.exists() and selected.exists() and not spare.exists()
    err = capsys.readouterr().err
    assert f"kept {in_use}: used by running plane 'kept'" in err
    assert f"kept {selected}: selected by ENVTEST_K8S_VERSION" in err


def test_binaries_k8s_version_errors_name_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["binaries", "path", "--k8s-version", "1.2.x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("envtest: --k8s-version='1.2.x': Kubernetes 1.2 is not supported")
    assert all(p.minor in err for p in SUPPORTED)


# -- a kept plane and selectors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "reused"),
    [
        ("latest", True),
        (NEWEST.minor, True),
        (f"{NEWEST.minor}.x", True),
        (f"v{NEWEST.kubernetes}", True),
        (f"~{NEWEST.minor}.0", True),
        ("latest-on-disk", True),
        (MIDDLE.minor, False),
        (f"{MIDDLE.minor}.x", False),
        (MIDDLE.kubernetes, False),
        (f"{NEWEST.minor}.0", False),  # same minor, other patch: another release
    ],
)
def test_a_kept_plane_is_reused_only_by_a_selector_naming_its_release(
    tmp_path: Path, selector: str, reused: bool
) -> None:
    install_fake(NEWEST.kubernetes, "kube-apiserver")  # for latest-on-disk
    state = write_state(tmp_path / "kept", os.getpid(), version=NEWEST.kubernetes)
    settings = {"components": ["etcd", "kube-apiserver"], "job_pods": "complete"}
    version = binaries.k8s_version(selector)
    if reused:
        supervisor.check_reusable(state, version=version, **settings)  # type: ignore[arg-type]
        return
    with pytest.raises(UsageProblem) as info:
        supervisor.check_reusable(state, version=version, **settings)  # type: ignore[arg-type]
    message = str(info.value)
    assert f"k8s version: running {NEWEST.kubernetes}, asked for {version}" in message
    assert f"{sys.executable} -m envtest.cli down --name kept" in message


def test_envtest_up_refuses_a_kept_plane_of_another_minor_with_the_command_to_replace_it(
    isolated: Path,
) -> None:
    plane_dir = isolated / "envtest" / "clusters" / "kept"
    holder = lock_holder(plane_dir)

    def up(selector: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "envtest.cli", "up", "--name", "kept", "--components", "minimal"]
        return subprocess.run(
            [*argv, "--k8s-version", selector], capture_output=True, text=True, timeout=60, env=os.environ
        )

    try:
        write_state(plane_dir, holder.pid, version=NEWEST.kubernetes)
        other, same = up(f"{MIDDLE.minor}.x"), up(NEWEST.minor)
        assert holder.poll() is None, "a refused `up` must leave the running plane alone"
    finally:
        reap(holder)
    assert other.returncode == 1
    assert f"k8s version: running {NEWEST.kubernetes}, asked for {MIDDLE.kubernetes}" in other.stderr
    assert f"{sys.executable} -m envtest.cli down --name kept" in other.stderr
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("export KUBECONFIG=")
