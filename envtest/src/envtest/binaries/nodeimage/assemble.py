"""The node image, assembled the way `kind build node-image` does it, from local parts only.

1. base: ``debootstrap --variant=minbase <suite>`` → ``docker import`` (Debian's default mirror, or
   ENVTEST_DEBIAN_MIRROR);
2. node base: kind's own images/base recipe (its ``files/`` taken from the kind module at build
   time) on that base, with our containerd, capwrap, CNI conflist and kubelet/kubeadm/kubectl/crictl;
3. preload: run it, start containerd, ``ctr images import`` every pod image (pinned, not unpacked,
   as kind's imageimporter does), stop, ``docker commit`` with kind's entrypoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from envtest.binaries.nodeimage.host import Runner, run
from envtest.binaries.nodeimage.images import check, exists
from envtest.binaries.nodespec import (
    CAPWRAP_DROPIN,
    NODE_BASE_DOCKERFILE,
    NodeImageSpec,
    cni_conflist,
    containerd_config,
)
from envtest.errors import InstallError

Progress = Callable[[str], None]


def base_image(spec: NodeImageSpec, work: Path, progress: Progress, runner: Runner = run) -> str:
    tag = spec.base_image
    if exists(tag, runner):
        return tag
    suite = spec.versions.debian_suite
    progress(f"debootstrap --variant=minbase {suite} (~1 min)")
    rootfs = work / "rootfs"
    argv = ["debootstrap", "--variant=minbase", suite, str(rootfs)]
    if os.environ.get("ENVTEST_DEBIAN_MIRROR"):
        argv.append(os.environ["ENVTEST_DEBIAN_MIRROR"])
    check(runner(argv), "debootstrap")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(["docker", "import", "-", tag], stdin=tar.stdout, capture_output=True, text=True)
    tar.wait()
    if imp.returncode != 0 or tar.returncode != 0:
        raise InstallError(f"docker import of the {suite} rootfs failed: {imp.stderr.strip()}")
    shutil.rmtree(rootfs, ignore_errors=True)
    return tag


def node_base_context(
    spec: NodeImageSpec, kind_files: Path, bins: Mapping[str, Path], storage_manifest: str, ctx: Path
) -> None:
    """Lay out `files/` as the node's filesystem: kind's files, then ours on top."""
    files = ctx / "files"
    shutil.copytree(kind_files, files)
    for p in [files, *files.rglob("*")]:  # the module cache is read-only; docker keeps modes
        p.chmod(0o755 if p.is_dir() or "bin" in p.parts else 0o644)
    (files / "etc" / "containerd" / "config.toml").write_text(containerd_config(spec.sandbox_image()))
    dropin = files / "etc" / "systemd" / "system" / "containerd.service.d"
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "10-capwrap.conf").write_text(CAPWRAP_DROPIN)
    cni = files / "etc" / "cni" / "net.d"
    cni.mkdir(parents=True, exist_ok=True)
    (cni / "10-envtest-bridge.conflist").write_text(cni_conflist())
    manifests = files / "kind" / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "default-storage.yaml").write_text(storage_manifest)
    (files / "kind" / "version").write_text(f"v{spec.kubernetes}")
    placed = {
        "usr/local/bin": ("containerd", "ctr", "containerd-shim-runc-v2", "capwrap", "crictl"),
        "usr/bin": ("kubelet", "kubeadm", "kubectl"),
    }
    for where, names in placed.items():
        for name in names:
            dst = files / where / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(bins[name], dst)
            dst.chmod(0o755)


def node_base(
    spec: NodeImageSpec,
    kind_files: Path,
    bins: Mapping[str, Path],
    storage: str,
    progress: Progress,
    runner: Runner = run,
) -> str:
    tag = f"envtest.local/kind-node-base:{spec.content_hash()}"
    if exists(tag, runner):
        return tag
    progress(f"node base image {tag}")
    with tempfile.TemporaryDirectory(prefix="envtest-nodebase-") as ctx:
        node_base_context(spec, kind_files, bins, storage, Path(ctx))
        dockerfile = NODE_BASE_DOCKERFILE.format(
            kind=f"v{spec.versions.kind}", suite=spec.versions.debian_suite, base=spec.base_image
        )
        Path(ctx, "Dockerfile").write_text(dockerfile)
        check(runner(["docker", "build", "-q", "-t", tag, ctx]), f"docker build {tag}")
    return tag


def preload_and_commit(
    base: str, images: list[str], tag: str, progress: Progress, runner: Runner = run
) -> None:
    """Import `images` into the node's containerd (k8s.io namespace) and commit the node image."""
    name = f"envtest-nodeimage-{os.getpid()}"
    check(
        runner(
            [
                "docker",
                "run",
                "-d",
                "--name",
                name,
                "--entrypoint",
                "sleep",
                "--security-opt",
                "seccomp=unconfined",
                base,
                "infinity",
            ]
        ),
        "docker run (node base)",
    )
    try:
        check(
            runner(
                [
                    "docker",
                    "exec",
                    name,
                    "bash",
                    "-c",
                    "nohup containerd >/var/log/containerd-build.log 2>&1 &",
                ]
            ),
            "start containerd",
        )
        for _ in range(30):
            if runner(["docker", "exec", name, "ctr", "version"]).rc == 0:
                break
            time.sleep(1)
        progress(f"preloading {len(images)} images")
        save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
        imp = subprocess.run(
            [
                "docker",
                "exec",
                "-i",
                name,
                "ctr",
                "--namespace=k8s.io",
                "images",
                "import",
                "--label=io.cri-containerd.pinned=pinned",
                "--all-platforms",
                "--no-unpack",
                "--digests",
                "-",
            ],
            stdin=save.stdout,
            capture_output=True,
            text=True,
        )
        save.wait()
        if imp.returncode != 0 or save.returncode != 0:
            raise InstallError(f"importing images into the node failed: {imp.stderr.strip()[-1500:]}")
        listed = check(
            runner(["docker", "exec", name, "ctr", "--namespace=k8s.io", "images", "list", "-q"]),
            "ctr images list",
        ).out.split()
        absent = [i for i in images if not any(line.endswith(i.split("/", 1)[-1]) for line in listed)]
        if absent:
            raise InstallError(f"not in the node's containerd after import: {absent}")
        runner(["docker", "exec", name, "pkill", "containerd"])
        time.sleep(2)
        check(
            runner(
                [
                    "docker",
                    "commit",
                    "--change",
                    'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]',
                    "--change",
                    'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""',
                    name,
                    tag,
                ]
            ),
            "docker commit",
        )
    finally:
        runner(["docker", "rm", "-f", "-v", name])
