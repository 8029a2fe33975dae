"""kind's node image where none can be pulled: built locally from Debian packages and Go modules.

Lookup order of `resolve()` (first hit wins), the way the control-plane binaries are chosen:

1. ``ENVTEST_KIND_IMAGE`` (or an explicit image): used as given;
2. the pinned published image (``envtest.pins``: kind_node_image), when docker already has it;
3. unless ``ENVTEST_OFFLINE=1``: ``docker pull`` of it, given ``PULL_TIMEOUT`` seconds — no registry
   (a sandbox, an air gap) fails in well under that;
4. the offline image ``envtest.local/kind-node:v<k8s>-<content hash>`` when docker has it (seconds);
5. `build()` it (cold: ~25 min on 2 cores, mostly Go; warm Go cache: ~3 min).

Before any of that, with ``manage_host`` (``envtest kind up``, ``make kind-up``/``kind-image``),
`host.ensure` makes docker usable (dockerd started, capwrap where needed).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from envtest.binaries.nodeimage import assemble, builds, host, images
from envtest.binaries.nodeimage.spec import (
    NodeImageSpec,
    StandIn,
    is_offline_image,
    kind_config,
    kubeadm_patches,
)
from envtest.errors import InstallError
from envtest.pins import PINNED

__all__ = ["NodeImageSpec", "StandIn", "build", "ensure_host", "is_offline_image", "kind_config", "resolve"]

Progress = Callable[[str], None]
PULL_TIMEOUT = 90.0
"""Seconds for `docker pull` of the published node image (~400 MB) before building instead."""


def _say(message: str) -> None:
    print(f"envtest: {message}", file=sys.stderr, flush=True)


def ensure_host(spec: NodeImageSpec | None = None, progress: Progress = _say) -> None:
    spec = spec or NodeImageSpec()
    host.ensure(
        capwrap=lambda: builds.ours("capwrap", spec, progress),
        pause=lambda: builds.ours("pause", spec, progress),
        log_dir=builds.cache_dir(),
        progress=progress,
    )


def _offline() -> bool:
    return os.environ.get("ENVTEST_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve(
    explicit: str | None = None,
    *,
    spec: NodeImageSpec | None = None,
    runner: host.Runner = host.run,
    pull_timeout: float = PULL_TIMEOUT,
    manage_host: bool = False,
    progress: Progress = _say,
) -> str:
    """The node image to create kind clusters from (see the module docstring for the order).

    `manage_host`: may install packages, start dockerd and register capwrap (`envtest kind up`,
    `make kind-up`). Without it (a pytest run) a docker that does not answer gets the published
    image, and kind reports what is wrong: a test run never starts daemons or edits /etc/docker."""
    chosen = explicit or os.environ.get("ENVTEST_KIND_IMAGE")
    if chosen:
        return chosen
    spec = spec or NodeImageSpec()
    if manage_host:
        ensure_host(spec, progress)
    elif not host.docker_running(runner):
        return PINNED.kind_node_image
    published = PINNED.kind_node_image
    if images.exists(published, runner):
        return published
    if not _offline():
        progress(f"docker pull {published} (up to {pull_timeout:.0f}s)")
        pulled = host.run(["docker", "pull", published], timeout=pull_timeout)
        if pulled.rc == 0:
            return published
        reason = (pulled.err.strip().splitlines() or ["?"])[-1]
        progress(f"cannot pull it ({reason[:200]}); using the offline node image")
    tag = spec.tag()
    if images.exists(tag, runner):
        return tag
    return build(spec, progress=progress)


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
    """Build the offline node image (every part cached on its own); returns its tag."""
    spec = spec or NodeImageSpec()
    tag = spec.tag()
    ensure_host(spec, progress)
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
    for name in ("capwrap", "pause", "mysqlstandin"):
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


def stand_in_env(node_image: str, spec: NodeImageSpec | None = None) -> dict[str, str]:
    """Variables that point workloads at the preloaded stand-ins; empty on a published node image."""
    if not is_offline_image(node_image):
        return {}
    return {s.env: s.image for s in (spec or NodeImageSpec()).stand_ins()}
