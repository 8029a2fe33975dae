"""Every binary of the offline node image, built with go from the module proxy into the cache, once.

Cache: ``${XDG_CACHE_HOME:-~/.cache}/envtest/kind/nodeimage/bin/<name>-<version>/``; a directory
appears complete or not at all (built in a staging dir, renamed), so an interrupted build is redone.

- ours (package data): capwrap, pause — stdlib only, built in a copy of their dir (`go_program`);
- containerd v2 (ctr, shim): its go.mod has ``replace``/``exclude``, which only apply when it is the
  main module, so it builds inside a copy of its own module dir (as `go mod download` left it);
- crictl, local-path-provisioner: a wrapper module (``go get`` + ``go build``), like etcd and kwok;
- coredns: a wrapper module whose main imports only the plugins kubeadm's Corefile uses;
- kubelet, kubeadm, kube-proxy: one ``gobuild.build_kube`` (the plane's wrapper-module technique);
- kube-apiserver, -controller-manager, -scheduler, kubectl, etcd: the plane's own, via the resolver.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from envtest.binaries import gobuild, resolver
from envtest.binaries.nodespec import GO_SOURCES, NodeImageSpec, data_dir
from envtest.errors import InstallError

Progress = Callable[[str], None]

CONTAINERD_TAGS = "no_btrfs no_devmapper no_zfs no_aufs"
"""Snapshotters the node never uses and that need cgo or kernel headers; overlayfs stays."""
COREDNS_PLUGINS = (
    "errors",
    "health",
    "ready",
    "kubernetes",
    "prometheus",
    "forward",
    "cache",
    "loop",
    "reload",
    "loadbalance",
)
"""Exactly the directives of kubeadm's default Corefile; order comes from coredns' plugin.cfg."""
PLANE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd")
NODE_KUBE = ("kubelet", "kubeadm", "kube-proxy")
GO_BUILD = ["build", "-trimpath", "-ldflags", "-s -w"]


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "envtest" / "kind" / "nodeimage"


def _cached(key: str, outputs: tuple[str, ...], build: Callable[[Path], None], progress: Progress) -> Path:
    """`<cache>/bin/<key>/` holding `outputs`, built by `build(staging_dir)` if absent."""
    dest = cache_dir() / "bin" / key
    if all((dest / o).is_file() for o in outputs):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest.parent / f".{key}.lock")):
        if all((dest / o).is_file() for o in outputs):  # built by another process while we waited
            return dest
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=dest.parent))
        try:
            build(staging)
            missing = [o for o in outputs if not (staging / o).is_file()]
            if missing:
                raise InstallError(f"building {key} produced no {', '.join(missing)}")
            shutil.rmtree(dest, ignore_errors=True)
            staging.rename(dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def _go(args: list[str], cwd: Path, progress: Progress) -> str:
    return gobuild.run_go(args, cwd=cwd, progress=progress)


def _wrapper(
    name: str, pkg: str, version: str, out: Path, progress: Progress, ldflags: str = "-s -w"
) -> None:
    with tempfile.TemporaryDirectory(prefix=f"envtest-{name}-") as wd:
        Path(wd, "go.mod").write_text(f"module envtest.local/{name}build\n")
        _go(["get", f"{pkg}@v{version}"], Path(wd), progress)
        _go(["build", "-trimpath", "-ldflags", ldflags, "-o", str(out), pkg], Path(wd), progress)


# -- ours ------------------------------------------------------------------------------------------


def go_program(src: Path, name: str, progress: Progress) -> Path:
    """`go build` of the stdlib-only main package in `src` (its .go files and go.mod), cached by the
    hash of those sources. Also what a project's test kit uses for its own small programs."""
    sources = sorted(f for f in src.iterdir() if f.suffix in (".go", ".mod"))
    if not sources:
        raise InstallError(f"{src}: no .go or go.mod files to build {name} from")
    # The texts in file-name order, as before this function existed: binaries already cached stay valid.
    digest = hashlib.sha256("".join(f.read_text() for f in sources).encode())
    key = f"{name}-{digest.hexdigest()[:12]}"

    def build(staging: Path) -> None:
        with tempfile.TemporaryDirectory(prefix=f"envtest-{name}-") as wd:
            for f in sources:
                shutil.copyfile(f, Path(wd, f.name))
            _go([*GO_BUILD, "-o", str(staging / name), "."], Path(wd), progress)

    return _cached(key, (name,), build, progress) / name


def ours(name: str, spec: NodeImageSpec, progress: Progress) -> Path:
    """capwrap or pause, from the recipe's package data."""
    if name not in GO_SOURCES:
        raise InstallError(f"{name!r} is not one of the node image's own programs {GO_SOURCES}")
    return go_program(data_dir() / name, name, progress)


# -- upstream modules --------------------------------------------------------------------------------


def module_dir(module: str, version: str, progress: Progress) -> Path:
    """The module's extracted, checksum-verified dir in GOMODCACHE (read-only)."""
    info = json.loads(
        gobuild.run_go(["mod", "download", "-json", f"{module}@v{version}"], cwd=None, progress=progress)
    )
    if info.get("Error"):
        raise InstallError(f"go mod download {module}@v{version}: {info['Error']}")
    return Path(info["Dir"])


def containerd(spec: NodeImageSpec, progress: Progress) -> Path:
    version = spec.versions.containerd
    module = "github.com/containerd/containerd/v2"

    def build(staging: Path) -> None:
        progress(f"building containerd v{version} (cold cache: ~7 min on 2 cores)")
        src = module_dir(module, version, progress)
        with tempfile.TemporaryDirectory(prefix="envtest-containerd-") as wd:
            tree = Path(wd, "containerd")
            shutil.copytree(src, tree)  # writable copy: go may update go.sum; replace/exclude apply here
            for p in tree.rglob("*"):
                p.chmod(p.stat().st_mode | 0o200)
            ldflags = f"-s -w -X {module}/version.Version=v{version} -X {module}/version.Revision=envtest"
            args = ["build", "-trimpath", "-tags", CONTAINERD_TAGS, "-ldflags", ldflags, "-o", f"{staging}/"]
            _go([*args, "./cmd/containerd", "./cmd/ctr", "./cmd/containerd-shim-runc-v2"], tree, progress)

    outputs = ("containerd", "ctr", "containerd-shim-runc-v2")
    return _cached(f"containerd-{version}", outputs, build, progress)


def crictl(spec: NodeImageSpec, progress: Progress) -> Path:
    version = spec.versions.cri_tools
    ld = f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=v{version}"
    return (
        _cached(
            f"crictl-{version}",
            ("crictl",),
            lambda d: _wrapper(
                "crictl", "sigs.k8s.io/cri-tools/cmd/crictl", version, d / "crictl", progress, ld
            ),
            progress,
        )
        / "crictl"
    )


def local_path_provisioner(spec: NodeImageSpec, progress: Progress) -> Path:
    version = spec.versions.local_path_provisioner
    pkg = "github.com/rancher/local-path-provisioner"
    return (
        _cached(
            f"local-path-provisioner-{version}",
            ("local-path-provisioner",),
            lambda d: _wrapper("lpp", pkg, version, d / "local-path-provisioner", progress),
            progress,
        )
        / "local-path-provisioner"
    )


def coredns_main(plugin_cfg: str, plugins: tuple[str, ...] = COREDNS_PLUGINS) -> str:
    """main.go for a CoreDNS with only `plugins`, in plugin.cfg's order (the order is the chain)."""
    entries = []
    for line in plugin_cfg.splitlines():
        m = re.match(r"^\s*([a-z0-9_]+):(\S+)\s*$", line)
        if m and m[1] in plugins:
            entries.append((m[1], m[2]))
    missing = set(plugins) - {n for n, _ in entries}
    if missing:
        raise InstallError(f"coredns plugin.cfg has no {', '.join(sorted(missing))}")
    imports = "\n".join(
        f'\t_ "{p if "/" in p else "github.com/coredns/coredns/plugin/" + p}"' for _, p in entries
    )
    directives = "\n".join(f'\t"{n}",' for n, _ in entries)
    return f"""// Generated by envtest: CoreDNS with the plugins of kubeadm's Corefile only.
package main

import (
\t"github.com/coredns/coredns/core/dnsserver"
\t"github.com/coredns/coredns/coremain"
{imports}
)

var directives = []string{{
{directives}
}}

func init() {{ dnsserver.Directives = directives }}

func main() {{ coremain.Run() }}
"""


def coredns(spec: NodeImageSpec, progress: Progress) -> Path:
    version = spec.versions.coredns
    module = "github.com/coredns/coredns"

    def build(staging: Path) -> None:
        progress(f"building coredns v{version} with {len(COREDNS_PLUGINS)} plugins")
        main = coredns_main((module_dir(module, version, progress) / "plugin.cfg").read_text())
        with tempfile.TemporaryDirectory(prefix="envtest-coredns-") as wd:
            Path(wd, "go.mod").write_text("module envtest.local/corednsbuild\n")
            Path(wd, "main.go").write_text(main)
            _go(["get", f"{module}@v{version}"], Path(wd), progress)
            _go(["mod", "tidy"], Path(wd), progress)
            ld = f"-s -w -X {module}/coremain.GitCommit=envtest"
            _go(
                ["build", "-trimpath", "-ldflags", ld, "-o", str(staging / "coredns"), "."],
                Path(wd),
                progress,
            )

    return _cached(f"coredns-{version}", ("coredns",), build, progress) / "coredns"


def node_kube(spec: NodeImageSpec, progress: Progress) -> Path:
    """kubelet, kubeadm, kube-proxy in one go build (they share most of the compile)."""
    return _cached(
        f"kube-node-{spec.kubernetes}",
        NODE_KUBE,
        lambda d: gobuild.build_kube(NODE_KUBE, spec.kubernetes, d, progress),
        progress,
    )


def plane(spec: NodeImageSpec, progress: Progress) -> dict[str, Path]:
    """The control-plane binaries the local backend uses: one build serves both backends."""
    return resolver.resolve_all(PLANE_BINARIES, version=spec.kubernetes, progress=progress)


def kind(progress: Progress) -> Path:
    from envtest.binaries import kind as kind_binary

    return kind_binary.resolve(progress=progress)


def kind_base_files(spec: NodeImageSpec, progress: Progress) -> Path:
    """kind's images/base/files from its module (the Go proxy), never a copy committed here."""
    root = module_dir("sigs.k8s.io/kind", spec.versions.kind, progress) / "images" / "base" / "files"
    if not (root / "usr" / "local" / "bin" / "entrypoint").is_file():
        raise InstallError(f"kind v{spec.versions.kind}'s module has no images/base/files/…/entrypoint")
    return root


def kind_storage_manifest(spec: NodeImageSpec, progress: Progress) -> str:
    """kind's default-storage manifest (pkg/build/nodeimage/const_storage.go) with our two images."""
    src = module_dir("sigs.k8s.io/kind", spec.versions.kind, progress)
    go = (src / "pkg" / "build" / "nodeimage" / "const_storage.go").read_text()
    return render_storage_manifest(go, spec.local_path_image, spec.busybox_image)


def render_storage_manifest(go_source: str, provisioner: str, helper: str) -> str:
    """Evaluate `const defaultStorageManifest = `…` + storageProvisionerImage + `…`` with our images."""
    m = re.search(r"const defaultStorageManifest = (`.*?`(?:\s*\+\s*\w+\s*\+\s*`.*?`)*)", go_source, re.S)
    if not m:
        raise InstallError("kind's const_storage.go no longer defines defaultStorageManifest")
    names = {"storageProvisionerImage": provisioner, "storageHelperImage": helper}
    out = []
    for token in re.findall(r"`[^`]*`|\w+", m[1]):
        if token.startswith("`"):
            out.append(token[1:-1])
        elif token in names:
            out.append(names[token])
        else:
            raise InstallError(f"kind's storage manifest refers to {token!r}, which envtest does not set")
    return "".join(out).lstrip("\n")
