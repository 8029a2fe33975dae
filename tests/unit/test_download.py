"""Release downloads against a local http.server: checksums, archives, fall-through and timeouts."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import shutil
import socket
import tarfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envtest import binaries
from envtest import pins as binaries_pins
from envtest.binaries import download, gobuild, kwokrelease
from envtest.errors import InstallError

VERSION = binaries.PINNED.kubernetes
OS, ARCH = binaries.platform_tag()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, directory it serves)."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: tuple[str, Path]) -> None:
    for var in list(os.environ):
        if var.startswith(("TEST_ASSET_", "ENVTEST_")) or var == "KUBEBUILDER_ASSETS":
            monkeypatch.delenv(var)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    base, _ = server
    # Every release URL at the local server, so nothing here can reach the network.
    for var in ("K8S_RELEASE_URL", "ETCD_RELEASE_URL", "KWOK_RELEASE_URL", "KWOK_API_URL"):
        monkeypatch.setenv(f"ENVTEST_{var}", f"{base}/{var.lower()}")
    monkeypatch.setattr(download, "DEFAULT_TIMEOUT", (2.0, 2.0))


def put(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def publish_kube(root: Path, name: str, data: bytes, *, digest: str | None = None) -> None:
    where = root / "k8s_release_url" / f"v{VERSION}" / "bin" / OS / ARCH / name
    real = put(where, data)
    put(where.with_name(name + ".sha256"), (digest or real).encode())


def no_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make any go build fail (and record it), so a test sees whether the download sufficed."""
    built: list[str] = []

    def refuse(*args: object) -> None:
        built.append(str(args[0]))
        raise InstallError("`go build` exited 1; last lines:\n    no go in unit tests")

    monkeypatch.setattr(gobuild, "find_go", lambda: "/fake/go")
    for fn in ("build_kube", "build_etcd", "build_kwok", "fetch_kwok_stages"):
        monkeypatch.setattr(gobuild, fn, refuse)
    return built


def test_good_binary_with_matching_checksum_is_installed_executable(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
):
    publish_kube(server[1], "kube-apiserver", b"\x7fELF apiserver")
    built = no_builds(monkeypatch)
    path = binaries.install(["kube-apiserver"], progress=lambda _: None)["kube-apiserver"]
    assert path.read_bytes() == b"\x7fELF apiserver"
    assert os.access(path, os.X_OK)
    # Only kubectl, the plane's companion, was left for go (and its failure is not the caller's).
    assert built == [str(["kubectl"])]


def test_bad_checksum_falls_through_to_go_build_with_the_reason_recorded(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
):
    publish_kube(server[1], "kube-scheduler", b"tampered", digest="0" * 64)
    built = no_builds(monkeypatch)
    lines: list[str] = []
    with pytest.raises(InstallError) as info:
        binaries.install(["kube-scheduler"], progress=lines.append)
    assert built == [str(["kube-scheduler", "kubectl"])]
    assert "sha256 mismatch" in str(info.value) and "no go in unit tests" in str(info.value)
    assert any("sha256 mismatch" in line for line in lines)
    assert not (binaries.cache_dir() / "kube-scheduler").exists()


def test_bad_checksum_then_successful_build_installs_the_build(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
):
    publish_kube(server[1], "kube-apiserver", b"tampered", digest="0" * 64)
    monkeypatch.setattr(gobuild, "find_go", lambda: "/fake/go")
    monkeypatch.setattr(
        gobuild, "build_kube", lambda names, v, out, p: [(out / n).write_bytes(b"built") for n in names]
    )
    path = binaries.install(["kube-apiserver"], progress=lambda _: None)["kube-apiserver"]
    assert path.read_bytes() == b"built"


def test_etcd_comes_out_of_its_tarball_verified_by_sha256sums(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
):
    etcd = binaries.PINNED.etcd
    stem = f"etcd-v{etcd}-{OS}-{ARCH}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for member, data in ((f"{stem}/etcd", b"etcd!"), (f"{stem}/etcdctl", b"ctl")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    rel = server[1] / "etcd_release_url" / f"v{etcd}"
    digest = put(rel / f"{stem}.tar.gz", buf.getvalue())
    put(rel / "SHA256SUMS", f"{'1' * 64}  other.tar.gz\n{digest}  {stem}.tar.gz\n".encode())
    no_builds(monkeypatch)
    assert binaries.install(["etcd"], progress=lambda _: None)["etcd"].read_bytes() == b"etcd!"


def test_kwok_is_verified_by_the_github_release_digest(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
):
    kwok = binaries.PINNED.kwok
    asset = f"kwok-{OS}-{ARCH}"
    digest = put(server[1] / "kwok_release_url" / f"v{kwok}" / asset, b"kwok!")
    release = {"assets": [{"name": asset, "digest": f"sha256:{digest}"}]}
    put(server[1] / "kwok_api_url" / f"v{kwok}", json.dumps(release).encode())
    monkeypatch.setattr(gobuild, "find_go", lambda: "/fake/go")
    # A kwok envtest patches is only ever built (its release is upstream's); one without patches of
    # ours is downloaded like the other binaries, and verified.
    monkeypatch.setattr(gobuild, "kwok_patches", lambda version: [])
    stage_calls: list[str] = []

    def stages(version: str, stages_dir: Path, progress: object) -> None:
        stage_calls.append(version)
        stages_dir.mkdir(parents=True)
        (stages_dir / "SOURCE").write_text(f"sigs.k8s.io/kwok v{version}\n")

    monkeypatch.setattr(gobuild, "fetch_kwok_stages", stages)
    assert binaries.install(["kwok"], progress=lambda _: None)["kwok"].read_bytes() == b"kwok!"
    # A downloaded kwok has no module beside it: its stages come from go mod download.
    assert stage_calls == [kwok]
    assert binaries.kwok_stages_dir(install=False).joinpath("SOURCE").is_file()


def test_a_checksum_list_without_the_file_is_a_failure_not_an_unverified_install(server: tuple[str, Path]):
    art = download.artifact_for("etcd", "3.7.3", OS, ARCH)
    put(server[1] / "etcd_release_url" / "v3.7.3" / "SHA256SUMS", b"")
    with download.Downloader() as dl, pytest.raises(InstallError, match="no sha256 for"):
        dl.expected_sha256(art)


def test_http_error_is_a_reason(server: tuple[str, Path], tmp_path: Path):
    art = download.artifact_for("kube-apiserver", VERSION, OS, ARCH)
    with download.Downloader() as dl, pytest.raises(InstallError, match="HTTP 404"):
        dl.fetch(art, tmp_path / "kube-apiserver")


def test_a_server_that_accepts_but_never_answers_fails_within_the_timeout(tmp_path: Path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes handshakes; nobody ever reads or answers
    failures: list[BaseException] = []

    def fetch() -> None:
        try:
            with download.Downloader(timeout=(0.3, 0.3)) as dl:
                dl.fetch(art, tmp_path / "kube-apiserver")
        except BaseException as exc:
            failures.append(exc)

    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/bin"
        art = download.Artifact("kube-apiserver", url, url + ".sha256", download.Checksum.SINGLE, "x")
        # In a thread, so that a fetch ignoring its timeout fails the test instead of hanging it.
        fetcher = threading.Thread(target=fetch, daemon=True)
        fetcher.start()
        fetcher.join(60)
        assert not fetcher.is_alive(), "the fetch went on waiting for a server that never answers"
        (failure,) = failures
        assert isinstance(failure, InstallError) and "timed out" in str(failure), repr(failure)
    finally:
        silent.close()


def test_an_unreachable_host_is_not_asked_again(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    urls = {n: f"http://127.0.0.1:{port}/{n}" for n in ("a", "b")}
    arts = [download.Artifact(n, u, u + ".sha256", download.Checksum.SINGLE, n) for n, u in urls.items()]
    out = tmp_path / "out"
    out.mkdir()
    fetched, failed = download.download_all(arts, out, progress=lambda _: None, timeout=(0.5, 0.5))
    assert fetched == []
    assert "ConnectionError" in failed["a"]
    assert "skipped" in failed["b"] and "unreachable" in failed["b"]
    assert not list(out.iterdir())


def test_offline_install_never_touches_the_server(server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch):
    publish_kube(server[1], "kube-apiserver", b"from the server")
    monkeypatch.setattr(gobuild, "find_go", lambda: "/fake/go")
    monkeypatch.setattr(
        gobuild, "build_kube", lambda names, v, out, p: [(out / n).write_bytes(b"built") for n in names]
    )
    path = binaries.install(["kube-apiserver"], offline=True, progress=lambda _: None)["kube-apiserver"]
    assert path.read_bytes() == b"built"


# --- kwok without go: the official release, its stages from the module zip -----------------------


def module_zip(path: Path, version: str, files: dict[str, bytes]) -> str:
    """A module zip shaped as the Go module proxy serves it (every name under module@version/);
    returns its go.sum hash."""
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(f"sigs.k8s.io/kwok@v{version}/{name}", data)
    return kwokrelease.module_hash(path)


STAGE = b"apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: pod-ready\n"


def publish_kwok_release(
    root: Path, monkeypatch: pytest.MonkeyPatch, base: str, *, tamper: bool = False
) -> None:
    """kwok's release binary, GitHub's release JSON with its digest, and the module zip on a proxy."""
    kwok = binaries.PINNED.kwok
    asset = f"kwok-{OS}-{ARCH}"
    digest = put(root / "kwok_release_url" / f"v{kwok}" / asset, b"#!/bin/sh\necho release kwok\n")
    release = {"assets": [{"name": asset, "digest": f"sha256:{digest}"}]}
    put(root / "kwok_api_url" / f"v{kwok}", json.dumps(release).encode())
    files = {"go.mod": b"module sigs.k8s.io/kwok\n", "kustomize/stage/pod/fast/pod-ready.yaml": STAGE}
    zip_path = root / "goproxy" / "sigs.k8s.io" / "kwok" / "@v" / f"v{kwok}.zip"
    pinned = module_zip(zip_path, kwok, files)
    if tamper:  # the proxy serves other bytes than the ones go.sum pinned
        module_zip(zip_path, kwok, {**files, "kustomize/stage/pod/fast/extra.yaml": STAGE})
    monkeypatch.setitem(kwokrelease.MODULE_SUMS, kwok, pinned)
    monkeypatch.setenv("GOPROXY", f"{base}/goproxy,direct")


def without_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH on which there is no go at all (nothing else is needed to download)."""
    empty = tmp_path / "path-without-go"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("go") is None


def test_without_go_kwok_is_the_official_release_and_its_stages_come_verified_from_the_module_zip(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    base, root = server
    publish_kwok_release(root, monkeypatch, base)
    without_go(monkeypatch, tmp_path)
    lines: list[str] = []
    path = binaries.install(["kwok"], progress=lines.append)["kwok"]
    assert b"release kwok" in path.read_bytes()
    assert kwokrelease.is_release(path)
    stages = binaries.kwok_stages_dir(install=False)
    assert (stages / "pod" / "fast" / "pod-ready.yaml").read_bytes() == STAGE
    assert "sigs.k8s.io/kwok v" in (stages / "SOURCE").read_text()
    # One line says what this kwok cannot do, naming the exec exit codes.
    (said,) = [line for line in lines if "official release" in line]
    assert kwokrelease.LOST in said and "exit codes" in said
    # Cached while go is missing: a second resolve downloads nothing.
    lines.clear()
    assert binaries.resolve("kwok", progress=lines.append) == path
    assert lines == []


def test_once_go_is_on_path_the_release_kwok_is_replaced_by_the_patched_build(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    base, root = server
    publish_kwok_release(root, monkeypatch, base)
    without_go(monkeypatch, tmp_path)
    binaries.install(["kwok"], progress=lambda _: None)
    built = no_builds(monkeypatch)  # go "appears": the patched build is tried, not the download
    with pytest.raises(InstallError, match="no go in unit tests"):
        binaries.resolve("kwok", progress=lambda _: None)
    assert built == [str(binaries.PINNED.kwok)]


def test_a_module_zip_that_does_not_match_go_sum_is_refused(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    base, root = server
    publish_kwok_release(root, monkeypatch, base, tamper=True)
    without_go(monkeypatch, tmp_path)
    with pytest.raises(InstallError, match=r"kwok stages: module zip: .*module hash mismatch"):
        binaries.install(["kwok"], progress=lambda _: None)
    assert not binaries.cache_dir().joinpath(binaries.KWOK_STAGES).exists()


def test_the_real_kwok_pin_has_a_pinned_module_hash():
    # Without it a machine without go could never verify the stages of the kwok every minor uses.
    assert all(pins.kwok in kwokrelease.MODULE_SUMS for pins in binaries_pins.SUPPORTED)
    assert kwokrelease.release_id("0.8.0") == "v0.8.0"


def test_a_patched_kwok_is_not_taken_for_the_release(tmp_path: Path):
    binary = tmp_path / "kwok"
    binary.write_text("")
    assert not kwokrelease.is_release(binary)  # no stamp: a kwok from elsewhere
    (tmp_path / gobuild.KWOK_STAMP).write_text(gobuild.kwok_build_id(binaries.PINNED.kwok) + "\n")
    assert not kwokrelease.is_release(binary)
    (tmp_path / gobuild.KWOK_STAMP).write_text("v0.8.0\n")
    assert kwokrelease.is_release(binary)


def test_goproxy_without_a_url_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(InstallError, match="GOPROXY='off' names no proxy URL"):
        kwokrelease.proxy_url()
    monkeypatch.delenv("GOPROXY")
    assert kwokrelease.proxy_url() == kwokrelease.DEFAULT_PROXY
