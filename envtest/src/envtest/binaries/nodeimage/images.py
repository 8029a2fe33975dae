"""The pod images preloaded into the node, each built locally by `docker build` (no registry).

Built with the legacy builder (Debian's docker.io 20.10 has no BuildKit, so no ``COPY --chmod``:
files get their mode in the build context). Images "FROM scratch" hold one static binary; those
that need a userland (kube-proxy: iptables; the busybox family) start from the debootstrapped base.
Debian's busybox-static is copied out of a throwaway stage, so the host needs no busybox package.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from envtest.binaries.nodeimage.host import Result, Runner, run
from envtest.binaries.nodeimage.spec import NodeImageSpec, data_dir
from envtest.errors import InstallError

Progress = Callable[[str], None]

SCRATCH_ONE_BINARY = """FROM scratch
COPY {name} /usr/local/bin/{name}
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENTRYPOINT ["/usr/local/bin/{name}"]
"""


def dockerfiles(spec: NodeImageSpec) -> dict[str, str]:
    """Every Dockerfile by image role (hashed into the node image tag by spec.texts)."""
    base = spec.base_image
    wrapper = (data_dir() / "kube-proxy" / "kube-proxy-wrapper").read_text()
    return {
        "busybox": f"""FROM {base} AS debian
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
      busybox-static && /bin/busybox | head -1 | grep -q 'v{spec.busybox}'
FROM scratch
COPY --from=debian /bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/usr/local/bin:/bin
CMD ["/bin/sh"]
""",
        "mysql": f"""FROM {spec.busybox_image}
COPY mysqlstandin /usr/local/bin/mysqlstandin
RUN mkdir -p /var/lib/mysql /etc/mysql/conf.d /docker-entrypoint-initdb.d \\
 && for c in mysqld mysqladmin mysqldump mysql; do ln -s mysqlstandin /usr/local/bin/$c; done
EXPOSE 3306
CMD ["mysqld"]
""",
        "pause": """FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
""",
        "scratch": SCRATCH_ONE_BINARY,
        "local-path-provisioner": f"""FROM {spec.busybox_image}
COPY local-path-provisioner /usr/local/bin/local-path-provisioner
ENTRYPOINT ["local-path-provisioner"]
""",
        "kube-proxy": f"""FROM {base}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
      iptables conntrack kmod && rm -rf /var/lib/apt/lists/*
COPY kube-proxy.real kube-proxy /usr/local/bin/
""",
        "kube-proxy-wrapper": wrapper,  # not a Dockerfile: hashed with them since it goes in the image
    }


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

    `bins`: name → binary (kube-apiserver, …, etcd, coredns, kube-proxy, pause, local-path-provisioner,
    mysqlstandin); `kubeadm_images`: `kubeadm config images list` with our etcd/CoreDNS tags."""
    files = dockerfiles(spec)
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
    first, *others = [f"{spec.mysql_repository}:{v}" for v in spec.mysql_versions]
    one(first, files["mysql"], {"mysqlstandin": bins["mysqlstandin"]})
    for tag in others:  # the same stand-in under every version tag the operator may ask for
        check(runner(["docker", "tag", first, tag]), f"docker tag {first} {tag}")
    return [*kubeadm_images, *spec.workload_images()]
