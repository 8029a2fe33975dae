"""The offline kind node image builder: Debian packages and Go modules, no registry.

A tool behind explicit commands only — `envtest kind host-setup`, `envtest kind image build`
(`make kind-image`) — never imported by the pytest plugin or the kind backend, which only read the
recipe (`envtest.binaries.nodespec`) to know the image's tag and use it when docker has it.

Cold, a build takes ~25 min on 2 cores (mostly Go); with a warm Go cache ~3 min; an unchanged recipe
finds its image in seconds. The image preloads Kubernetes' own images (kubeadm's list), kind's
default StorageClass (local-path-provisioner) and its busybox helper — nothing of any project:
a project loads its own images into the cluster (``kind load docker-image``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from envtest.binaries.nodeimage import assemble, builds, host, images
from envtest.binaries.nodespec import NodeImageSpec, kubeadm_patches
from envtest.errors import InstallError

__all__ = ["NodeImageSpec", "build", "host_setup"]

Progress = Callable[[str], None]
BUILD_PACKAGES = ("debootstrap",)
"""Beside docker, what the image build runs on the host (named as the Debian package and command)."""


def _say(message: str) -> None:
    print(f"envtest: {message}", file=sys.stderr, flush=True)


def host_setup(
    spec: NodeImageSpec | None = None,
    *,
    progress: Progress = _say,
    dry_run: bool = False,
    packages: tuple[str, ...] = (),
    system: host.Host | None = None,
) -> list[str]:
    """`envtest kind host-setup`: docker usable for kind (see `host`); returns what was changed."""
    spec = spec or NodeImageSpec()
    return host.setup(
        system or host.Host(),
        capwrap=lambda: builds.ours("capwrap", spec, progress),
        pause=lambda: builds.ours("pause", spec, progress),
        log_dir=builds.cache_dir(),
        progress=progress,
        packages=packages,
        dry_run=dry_run,
    )


def kubeadm_image_list(kubeadm: Path, spec: NodeImageSpec) -> list[str]:
    """`kubeadm config images list` for our version and kind's etcd/CoreDNS tag patches: the exact
    names kubeadm will ask containerd for."""
    doc = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": f"v{spec.kubernetes}",
        **{k: v for p in kubeadm_patches(spec) for k, v in p.items() if k != "kind"},
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="envtest-kubeadm-") as f:
        yaml.safe_dump(doc, f)
        f.flush()
        r = host.run([str(kubeadm), "config", "images", "list", "--config", f.name])
    images.check(r, "kubeadm config images list")
    return [line.strip() for line in r.out.splitlines() if line.strip()]


def build(spec: NodeImageSpec | None = None, *, progress: Progress = _say, force: bool = False) -> str:
    """`envtest kind image build`: host set up, then the offline node image (every part cached on
    its own); returns its tag."""
    spec = spec or NodeImageSpec()
    tag = spec.tag()
    host_setup(spec, progress=progress, packages=BUILD_PACKAGES)
    if not force and images.exists(tag):
        progress(f"node image {tag} is already built")
        return tag
    started = time.monotonic()
    bins: dict[str, Path] = dict(builds.plane(spec, progress))
    kube = builds.node_kube(spec, progress)
    bins.update({n: kube / n for n in builds.NODE_KUBE})
    ctrd = builds.containerd(spec, progress)
    bins.update({n: ctrd / n for n in ("containerd", "ctr", "containerd-shim-runc-v2")})
    bins["crictl"] = builds.crictl(spec, progress)
    bins["coredns"] = builds.coredns(spec, progress)
    bins["local-path-provisioner"] = builds.local_path_provisioner(spec, progress)
    for name in ("capwrap", "pause"):
        bins[name] = builds.ours(name, spec, progress)
    progress(f"binaries ready after {time.monotonic() - started:.0f}s")
    kubeadm_images = kubeadm_image_list(bins["kubeadm"], spec)
    with tempfile.TemporaryDirectory(prefix="envtest-nodeimage-") as work:
        assemble.base_image(spec, Path(work), progress)
    pod_images = images.build_pod_images(spec, bins, kubeadm_images, progress)
    storage = builds.kind_storage_manifest(spec, progress)
    base = assemble.node_base(spec, builds.kind_base_files(spec, progress), bins, storage, progress)
    assemble.preload_and_commit(base, pod_images, tag, progress)
    if not images.exists(tag):
        raise InstallError(f"node image {tag} missing after docker commit")
    progress(f"node image {tag} built in {time.monotonic() - started:.0f}s")
    return tag
