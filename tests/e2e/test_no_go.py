"""No Go where downloads work: with `go` absent from PATH and release downloads reachable, the default
plane starts (kwok from its official release, without pod streams, said in one line) and the minimal
plane never asks for kwok at all.

The "official hosts" are a local HTTP server on 127.0.0.1 serving release-shaped files made from the
binaries this run already has: dl.k8s.io's `<name>` + `<name>.sha256`, etcd's tarball + SHA256SUMS,
kwok's bare binary + GitHub's release JSON with its digest, and kwok's module zip on a Go proxy. The
served kwok is this machine's build standing in for upstream's file (what matters here is what the
harness does with a release kwok, and the file's origin is only its checksum).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from envtest import ControlPlane, binaries, eventually
from envtest.binaries import kwokrelease
from envtest.pins import for_minor
from envtest.timeouts import Timeouts

pytestmark = pytest.mark.envtest_local  # serves the local binaries; starts private planes
timeouts = Timeouts("local")  # not the fixture: that one starts the session's plane, unused here

VERSION = binaries.k8s_version()
PINS = for_minor(VERSION)
OS, ARCH = binaries.platform_tag()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _sha(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _publish(root: Path, cached: Path) -> None:
    """The release-shaped tree: each file where its official host keeps it."""
    kube = root / "k8s" / f"v{VERSION}" / "bin" / OS / ARCH
    kube.mkdir(parents=True)
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"):
        (kube / name).symlink_to(cached / name)
        (kube / f"{name}.sha256").write_text(_sha(cached / name))
    etcd = root / "etcd" / f"v{PINS.etcd}"
    etcd.mkdir(parents=True)
    stem = f"etcd-v{PINS.etcd}-{OS}-{ARCH}"
    with tarfile.open(etcd / f"{stem}.tar.gz", "w:gz", compresslevel=1) as tf:
        tf.add(cached / "etcd", arcname=f"{stem}/etcd")
    (etcd / "SHA256SUMS").write_text(f"{_sha(etcd / f'{stem}.tar.gz')}  {stem}.tar.gz\n")
    kwok = root / "kwok" / f"v{PINS.kwok}"
    kwok.mkdir(parents=True)
    asset = f"kwok-{OS}-{ARCH}"
    (kwok / asset).symlink_to(cached / "kwok")
    api = root / "kwok-api"
    api.mkdir()
    (api / f"v{PINS.kwok}").write_text(
        json.dumps({"assets": [{"name": asset, "digest": f"sha256:{_sha(cached / 'kwok')}"}]})
    )


def _module_zip(root: Path, stages: Path) -> str:
    """kwok's module zip as the proxy serves it, holding the stage sets this machine has; its hash."""
    zip_path = root / "goproxy" / "sigs.k8s.io" / "kwok" / "@v" / f"v{PINS.kwok}.zip"
    zip_path.parent.mkdir(parents=True)
    with zipfile.ZipFile(zip_path, "w") as zf:
        zf.writestr(f"sigs.k8s.io/kwok@v{PINS.kwok}/go.mod", "module sigs.k8s.io/kwok\n")
        for path in sorted(stages.rglob("*.yaml")):
            zf.write(path, f"sigs.k8s.io/kwok@v{PINS.kwok}/kustomize/stage/{path.relative_to(stages)}")
    return kwokrelease.module_hash(zip_path)


@pytest.fixture
def release_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Release downloads from 127.0.0.1, an empty binary cache, and a PATH without go."""
    cached = binaries.cache_dir(VERSION)
    stages = binaries.kwok_stages_dir(VERSION, install=False)
    root = tmp_path / "www"
    root.mkdir()
    _publish(root, cached)
    monkeypatch.setitem(kwokrelease.MODULE_SUMS, PINS.kwok, _module_zip(root, stages))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    for var in list(os.environ):
        if var.startswith("TEST_ASSET_") or var in (
            "KUBEBUILDER_ASSETS",
            "ENVTEST_KWOK_STAGES",
            "ENVTEST_OFFLINE",
        ):
            monkeypatch.delenv(var)
    monkeypatch.setenv("ENVTEST_K8S_RELEASE_URL", f"{base}/k8s")
    monkeypatch.setenv("ENVTEST_ETCD_RELEASE_URL", f"{base}/etcd")
    monkeypatch.setenv("ENVTEST_KWOK_RELEASE_URL", f"{base}/kwok")
    monkeypatch.setenv("ENVTEST_KWOK_API_URL", f"{base}/kwok-api")
    monkeypatch.setenv("GOPROXY", f"{base}/goproxy")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # Every PATH entry that holds a go goes; what is left still runs the plane (it needs nothing there).
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not Path(d, "go").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    assert shutil.which("go") is None
    try:
        yield tmp_path / "cache" / "envtest" / "k8s" / f"{VERSION}-{OS}-{ARCH}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _pod(name: str) -> dict[str, Any]:
    container = {"name": "app", "image": "example.invalid/app:1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }


def test_the_default_plane_starts_without_go_on_the_official_kwok(release_hosts: Path) -> None:
    lines: list[str] = []
    with ControlPlane(progress=lines.append, start_timeout=timeouts(90)) as cp:
        assert (release_hosts / "kwok").is_file() and kwokrelease.is_release(release_hosts / "kwok")
        # kwok runs the fake Node: a pod is scheduled and made Running as on any default plane.
        api = cp.admin_session()
        url = f"{cp.server}/api/v1/namespaces/default/pods"
        resp = api.post(url, json=_pod("no-go"), timeout=timeouts(10))
        assert resp.status_code == 201, resp.text

        def running() -> None:
            phase = api.get(f"{url}/no-go", timeout=timeouts(10)).json().get("status", {}).get("phase")
            assert phase == "Running", phase

        eventually(running, timeout=timeouts(60))
        # What is lost is said once, and the plane serves no pod streams rather than failing to start.
        said = [line for line in lines if kwokrelease.LOST in line]
        assert len(said) == 2, lines  # at install, then at the plane's start
        assert "official release" in said[1]
        assert cp.pod_streams is False and not cp.pods_dir.exists()
    installed = sorted(p.name for p in release_hosts.iterdir())
    assert "kwok-stages" in installed and "kube-apiserver" in installed


def test_the_minimal_plane_needs_neither_go_nor_kwok(release_hosts: Path) -> None:
    lines: list[str] = []
    with ControlPlane("minimal", progress=lines.append, start_timeout=timeouts(90)) as cp:
        resp = cp.admin_session().get(f"{cp.server}/api/v1/namespaces/default", timeout=timeouts(10))
        assert resp.status_code == 200
    assert not (release_hosts / "kwok").exists()
    assert not any("go build" in line or "building" in line for line in lines), lines
