"""The go build path: wrapper go.mod generation, and the go commands run (by a fake `go` on PATH)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import tempfile
import textwrap
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envtest import binaries
from envtest.binaries import gobuild
from envtest.errors import InstallError
from envtest.pins import PINNED

# Trimmed from k8s.io/kubernetes v1.37.2's go.mod, plus the shapes the parser must also cope with:
# a godebug block, a one-line staging replace and a replace that is not a staging module.
UPSTREAM_GO_MOD = """\
// This is a generated file. Do not edit directly.

module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

godebug (
\twinsymlink=0
)

require (
\tgithub.com/blang/semver/v4 v4.0.0
\tk8s.io/api v0.0.0
\tk8s.io/apimachinery v0.0.0
\tk8s.io/client-go v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apimachinery => ./staging/src/k8s.io/apimachinery // the real list has 33 of these
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/example/forked => github.com/example/forked v1.2.3
)

replace k8s.io/kube-scheduler => ./staging/src/k8s.io/kube-scheduler
"""
STAGING = ["k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/kube-scheduler"]

FAKE_GO = """\
#!{python}
# A stand-in for the go command: logs each call, answers the queries envtest makes, and writes
# placeholder files where `go build -o` would put binaries.
import json, os, sys
args = sys.argv[1:]
env = os.environ
gomod = open("go.mod").read() if os.path.exists("go.mod") else None
with open(env["FAKE_GO_LOG"], "a") as log:
    keep = ("GOTOOLCHAIN", "CGO_ENABLED", "GOFLAGS")
    main = open("cmd/kwok/main.go").read() if os.path.exists("cmd/kwok/main.go") else None
    log.write(json.dumps({{"args": args, "env": {{k: env.get(k) for k in keep}}, "go.mod": gomod,
                          "kwok_main": main}}) + "\\n")
if env.get("FAKE_GO_FAIL") == args[0]:
    for i in range(40):
        print(f"compile error line {{i}}", file=sys.stderr)
    sys.exit(2)
if args[0] == "env":
    values = {{"GOMODCACHE": env["FAKE_GO_MODCACHE"], "GOPROXY": env.get("FAKE_GO_PROXY", "off"),
              "GOVERSION": env.get("FAKE_GO_VERSION", "go1.99.0")}}
    print("\\n".join(values[a] for a in args[1:]))
elif args[0] == "build":
    out = args[args.index("-o") + 1]
    pkgs = args[args.index("-o") + 2:]
    targets = [os.path.join(out, p.rsplit("/", 1)[1]) for p in pkgs] if out.endswith(os.sep) else [out]
    for t in targets:
        with open(t, "w") as f:
            f.write("#!/bin/sh\\necho fake\\n")
elif args[:2] == ["list", "-m"]:
    print(env["FAKE_GO_KWOK_DIR"])
elif args[:2] == ["mod", "download"]:
    print(json.dumps({{"Path": "sigs.k8s.io/kwok", "Dir": env["FAKE_GO_KWOK_DIR"]}}))
"""

STAGE = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: {}\n"


KWOK_MAIN = "package main\n\n// upstream\nfunc main() {}\n"
KWOK_PATCH = "".join(
    line + "\n"
    for line in (
        "--- a/cmd/kwok/main.go",
        "+++ b/cmd/kwok/main.go",
        "@@ -1,4 +1,4 @@",
        " package main",
        " ",
        "-// upstream",
        "+// patched",
        " func main() {}",
    )
)


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a fake go on PATH; return its call log (one JSON object per call)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO.format(python=sys.executable))
    go.chmod(0o755)
    modcache = tmp_path / "modcache"
    mod = modcache / "cache" / "download" / "k8s.io" / "kubernetes" / "@v" / "v1.37.2.mod"
    mod.parent.mkdir(parents=True)
    mod.write_text(UPSTREAM_GO_MOD)
    kwok = tmp_path / "kwok-module" / "kustomize" / "stage"
    files = {
        "node/fast/node-initialize.yaml": STAGE.format("node-initialize"),
        "node/fast/kustomization.yaml": "resources: [node-initialize.yaml]\n",
        "node/fast/testdata/node.input.yaml": "kind: Node\n",
        "pod/general/pod-ready.yaml": STAGE.format("pod-ready"),
        "volume/fast/storage-class.yaml": "apiVersion: storage.k8s.io/v1\nkind: StorageClass\n",
        "volume/rbac/role.yaml": "kind: ClusterRole\n",
        "other/not-a-stage-dir.yaml": STAGE.format("elsewhere"),
    }
    for rel, text in files.items():
        (kwok / rel).parent.mkdir(parents=True, exist_ok=True)
        (kwok / rel).write_text(text)
    main = tmp_path / "kwok-module" / "cmd" / "kwok" / "main.go"
    main.parent.mkdir(parents=True)
    main.write_text(KWOK_MAIN)
    main.chmod(0o444)  # as in the module cache
    patches = tmp_path / "patches"
    (patches / "kwok-v0.8.0").mkdir(parents=True)
    (patches / "kwok-v0.8.0" / "0001-mark.patch").write_text(KWOK_PATCH)
    monkeypatch.setattr(gobuild, "PATCHES_DIR", patches)
    log = tmp_path / "go-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    monkeypatch.setenv("FAKE_GO_MODCACHE", str(modcache))
    monkeypatch.setenv("FAKE_GO_KWOK_DIR", str(tmp_path / "kwok-module"))
    return log


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_wrapper_go_mod_replaces_every_staging_module_with_its_release():
    wrapper = gobuild.wrapper_go_mod(UPSTREAM_GO_MOD, "1.37.2")
    assert wrapper.startswith("module envtest.local/k8sbuild\n\ngo 1.26.0\n")
    assert "godebug default=go1.26" in wrapper and "godebug (\n\twinsymlink=0\n)" in wrapper
    assert "require k8s.io/kubernetes v1.37.2" in wrapper
    for module in STAGING:
        assert f"\t{module} => {module} v0.37.2\n" in wrapper
    assert gobuild.staging_modules(wrapper) == []  # nothing left pointing at ./staging
    assert "forked" not in wrapper  # not a staging module: k8s.io/kubernetes' own requirement rules


def test_staging_list_comes_from_the_release_go_mod():
    assert gobuild.staging_modules(UPSTREAM_GO_MOD) == STAGING


def test_prerelease_staging_versions_keep_the_suffix():
    assert "k8s.io/api => k8s.io/api v0.38.0-rc.1" in gobuild.wrapper_go_mod(UPSTREAM_GO_MOD, "1.38.0-rc.1")


def test_a_go_mod_without_staging_replaces_is_refused():
    with pytest.raises(InstallError, match="staging"):
        gobuild.wrapper_go_mod("module k8s.io/kubernetes\n\ngo 1.26.0\n", "1.37.2")


def test_ldflags_stamp_the_version_into_component_base_and_client_go():
    flags = gobuild.kube_ldflags("1.37.2", "2026-01-02T03:04:05Z")
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for value in ("gitVersion=v1.37.2", "gitMajor=1", "gitMinor=37", "gitTreeState=clean"):
            assert f"-X {pkg}.{value}" in flags
        assert f"-X {pkg}.buildDate=2026-01-02T03:04:05Z" in flags
        assert f"-X {pkg}.gitCommit=envtest-gobuild" in flags


def test_kube_binaries_come_from_one_go_build_with_version_ldflags(fake_go: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    kube = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    gobuild.build_kube(kube, "1.37.2", out, progress=lambda _: None)
    log = calls(fake_go)
    builds = [c for c in log if c["args"][0] == "build"]
    assert len(builds) == 1
    argv = builds[0]["args"]
    assert argv[-3:] == [f"k8s.io/kubernetes/cmd/{n}" for n in kube]
    assert argv[argv.index("-o") + 1] == f"{out}{os.sep}"
    ldflags = argv[argv.index("-ldflags") + 1]
    assert "-X k8s.io/component-base/version.gitVersion=v1.37.2" in ldflags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=37" in ldflags
    assert builds[0]["env"] == {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    (get,) = [c for c in log if c["args"][0] == "get"]
    assert get["args"][1:] == [f"k8s.io/kubernetes/cmd/{n}@v1.37.2" for n in kube]
    assert "k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.37.2" in get["go.mod"]
    assert sorted(p.name for p in out.iterdir()) == kube


def test_go_failure_reports_exit_code_and_last_30_lines(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FAKE_GO_FAIL", "build")
    with pytest.raises(InstallError, match="exited 2") as info:
        gobuild.build_etcd("3.7.3", tmp_path, progress=lambda _: None)
    message = str(info.value)
    assert "compile error line 39" in message and "compile error line 10" in message
    assert "compile error line 9\n" not in message


def test_go_older_than_the_go_line_is_refused_before_building(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FAKE_GO_VERSION", "go1.25.3")
    with pytest.raises(InstallError, match=r"needs go >= 1\.26\.0.*go1\.25\.3"):
        gobuild.build_kube(["kube-apiserver"], "1.37.2", tmp_path, progress=lambda _: None)
    assert not [c for c in calls(fake_go) if c["args"][0] in ("get", "build")]


def test_go_stderr_reaches_progress_throttled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_go: Path):
    monkeypatch.setenv("FAKE_GO_FAIL", "get")
    lines: list[str] = []
    with pytest.raises(InstallError):
        gobuild.run_go(["get", "x"], cwd=tmp_path, progress=lines.append, throttle=3600)
    assert lines == ["  | compile error line 0"]


def test_kwok_build_copies_the_module_stage_files_and_records_the_source(fake_go: Path, tmp_path: Path):
    out, stages = tmp_path / "out", tmp_path / "out" / "kwok-stages"
    out.mkdir()
    gobuild.build_kwok("0.8.0", out, stages, progress=lambda _: None)
    (build,) = [c for c in calls(fake_go) if c["args"][0] == "build"]
    args = build["args"]
    assert args[-1] == "./cmd/kwok" and args[args.index("-o") + 1] == str(out / "kwok")
    copied = sorted(str(p.relative_to(stages)) for p in stages.rglob("*") if p.is_file())
    assert copied == [
        "SOURCE",
        "node/fast/node-initialize.yaml",
        "pod/general/pod-ready.yaml",
        "volume/fast/storage-class.yaml",
    ]
    assert (stages / "SOURCE").read_text().startswith("sigs.k8s.io/kwok v0.8.0\n")


def test_kwok_is_built_from_a_patched_copy_of_its_module_and_stamped(fake_go: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    gobuild.build_kwok("0.8.0", out, out / "kwok-stages", progress=lambda _: None)
    (build,) = [c for c in calls(fake_go) if c["args"][0] == "build"]
    assert build["kwok_main"] == KWOK_MAIN.replace("upstream", "patched")
    assert (tmp_path / "kwok-module" / "cmd" / "kwok" / "main.go").read_text() == KWOK_MAIN  # cache untouched
    build_id = (out / gobuild.KWOK_STAMP).read_text().strip()
    assert build_id == gobuild.kwok_build_id("0.8.0") and build_id.startswith("v0.8.0+envtest.")


def test_kwok_build_id_changes_with_the_patches(fake_go: Path, tmp_path: Path):
    before = gobuild.kwok_build_id("0.8.0")
    (tmp_path / "patches" / "kwok-v0.8.0" / "0002-more.patch").write_text(KWOK_PATCH)
    assert gobuild.kwok_build_id("0.8.0") != before
    assert gobuild.kwok_build_id("0.7.0") == "v0.7.0"  # no patches: upstream as is


def test_a_patch_that_does_not_apply_fails_the_build_naming_it(fake_go: Path, tmp_path: Path):
    (tmp_path / "patches" / "kwok-v0.8.0" / "0001-mark.patch").write_text(
        KWOK_PATCH.replace("upstream", "other")
    )
    with pytest.raises(InstallError, match=r"0001-mark\.patch does not apply"):
        gobuild.build_kwok("0.8.0", tmp_path, tmp_path / "kwok-stages", progress=lambda _: None)
    assert not [c for c in calls(fake_go) if c["args"][0] == "build"]


def test_the_shipped_kwok_patches_apply_to_the_pinned_kwok_module():
    go = shutil.which("go")
    module = Path(gobuild._go_env("GOMODCACHE")[0], "sigs.k8s.io", f"kwok@v{PINNED.kwok}") if go else None
    if module is None or not module.is_dir():
        pytest.skip(f"sigs.k8s.io/kwok v{PINNED.kwok} is not in the Go module cache")
    patches = gobuild.kwok_patches(PINNED.kwok)
    assert patches, "the pinned kwok is built with envtest's patches"
    copy = Path(tempfile.mkdtemp(prefix="kwok-patch-test-"))
    try:
        shutil.copytree(module, copy / "kwok")
        for path in [copy / "kwok", *(copy / "kwok").rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        gobuild._apply_patches(copy / "kwok", patches, progress=lambda _: None)
    finally:
        shutil.rmtree(copy)


def test_install_with_fake_go_fills_the_cache_and_never_runs_go_again(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    for var in list(os.environ):
        if var.startswith(("TEST_ASSET_", "ENVTEST_")) or var == "KUBEBUILDER_ASSETS":
            monkeypatch.delenv(var)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ENVTEST_OFFLINE", "1")
    lines: list[str] = []
    paths = binaries.install(progress=lines.append)
    assert set(paths) == set(binaries.DEFAULT_INSTALL)
    assert all(os.access(p, os.X_OK) for p in paths.values())
    assert (binaries.kwok_stages_dir(install=False) / "pod" / "general" / "pod-ready.yaml").is_file()
    assert any(
        line.startswith("building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl")
        for line in lines
    )
    n_calls = len(calls(fake_go))
    assert binaries.resolve_all(binaries.DEFAULT_INSTALL) == paths
    assert len(calls(fake_go)) == n_calls


def test_missing_go_is_an_install_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InstallError, match="go is not on PATH"):
        gobuild.find_go()


def test_heartbeat_says_a_silent_go_is_still_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(textwrap.dedent("#!/bin/sh\nsleep 0.4\n"))
    (bin_dir / "go").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    lines: list[str] = []
    gobuild.run_go(["build", "x"], cwd=tmp_path, progress=lines.append, heartbeat=0.1)
    assert lines and all(line.startswith("  still running go build") for line in lines)


def test_upstream_go_mod_comes_from_goproxy_when_not_cached(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    cached = tmp_path / "modcache" / "cache" / "download" / "k8s.io" / "kubernetes" / "@v" / "v1.37.2.mod"
    served = tmp_path / "proxy" / "k8s.io" / "kubernetes" / "@v" / "v1.37.2.mod"
    served.parent.mkdir(parents=True)
    cached.rename(served)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "proxy"))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        # Only GOPROXY's first entry is asked; the rest is go's business.
        monkeypatch.setenv("FAKE_GO_PROXY", f"http://127.0.0.1:{httpd.server_address[1]}/,direct")
        assert gobuild.upstream_go_mod("k8s.io/kubernetes", "1.37.2") == UPSTREAM_GO_MOD
    finally:
        httpd.shutdown()
        httpd.server_close()
