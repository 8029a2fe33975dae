"""The pod images preloaded into the node, each built locally by `docker build` (no registry).

Their Dockerfiles are part of the recipe (`envtest.binaries.nodespec.NodeImageSpec.dockerfiles`,
hashed into the node image's tag); this module only builds them. `docker_build` also serves a
project's own images (a test kit's stand-ins) built the same way.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from envtest.binaries.nodeimage.host import Result, Runner, run
from envtest.binaries.nodespec import NodeImageSpec
from envtest.errors import InstallError

Progress = Callable[[str], None]


def docker_build(tag: str, dockerfile: str, files: Mapping[str, Path | str], runner: Runner = run) -> None:
    """`docker build -t tag` of a context holding `files` (name → path to copy, or text to write)."""
    with tempfile.TemporaryDirectory(prefix="envtest-ctx-") as ctx:
        for name, src in files.items():
            dst = Path(ctx, name)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, Path):
                shutil.copyfile(src, dst)
            else:
                dst.write_text(src)
            dst.chmod(0o755)  # every file we add is a program or harmless to make executable
        Path(ctx, "Dockerfile").write_text(dockerfile)
        check(runner(["docker", "build", "-q", "-t", tag, ctx]), f"docker build {tag}")


def check(r: Result, what: str) -> Result:
    if r.rc != 0:
        raise InstallError(f"{what} exited {r.rc}:\n{(r.err or r.out).strip()[-2000:]}")
    return r


def exists(tag: str, runner: Runner = run) -> bool:
    return runner(["docker", "image", "inspect", "--format", "{{.Id}}", tag]).rc == 0


def build_pod_images(
    spec: NodeImageSpec,
    bins: Mapping[str, Path],
    kubeadm_images: list[str],
    progress: Progress,
    runner: Runner = run,
) -> list[str]:
    """Build every image the cluster can ask for; returns their names, as kubeadm and pods use them.

    `bins`: name → binary (kube-apiserver, …, etcd, coredns, kube-proxy, pause, local-path-provisioner);
    `kubeadm_images`: `kubeadm config images list` with our etcd/CoreDNS tags."""
    files = spec.dockerfiles()
    by_component = {img.rsplit("/", 1)[-1].split(":", 1)[0]: img for img in kubeadm_images}
    expected = {
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
        "etcd",
        "coredns",
        "pause",
    }
    if set(by_component) != expected:
        raise InstallError(f"kubeadm lists {sorted(by_component)}; envtest builds {sorted(expected)}")
    if by_component["pause"] != spec.sandbox_image():
        raise InstallError(
            f"kubeadm wants {by_component['pause']} but containerd's config names {spec.sandbox_image()}: "
            "update NodeImageSpec.sandbox_image"
        )

    def one(tag: str, dockerfile: str, context: Mapping[str, Path | str]) -> None:
        progress(f"image {tag}")
        docker_build(tag, dockerfile, context, runner)

    one(spec.busybox_image, files["busybox"], {})
    for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "coredns"):
        one(by_component[c], files["scratch"].format(name=c), {c: bins[c]})
    one(by_component["pause"], files["pause"], {"pause": bins["pause"]})
    one(
        by_component["kube-proxy"],
        files["kube-proxy"],
        {"kube-proxy.real": bins["kube-proxy"], "kube-proxy": files["kube-proxy-wrapper"]},
    )
    one(
        spec.local_path_image,
        files["local-path-provisioner"],
        {"local-path-provisioner": bins["local-path-provisioner"]},
    )
    return [*kubeadm_images, *spec.workload_images()]
