"""What the offline kind node image contains, named and hashed before anything is built.

The tag is a hash of the pins and of every text that goes into the image (our Go sources, the
rendered containerd config, CNI conflist, Dockerfiles), so an unchanged recipe finds its image in
seconds and any change to it builds a new one. Python code that only moves things around does not
change the tag.

This module is the recipe only: plain data and text, no subprocess, no docker. The kind backend
imports it to know the offline image's tag and the kind config that image needs; the builder
(`envtest.binaries.nodeimage`, behind `envtest kind image build`) imports it to build exactly that.
The node preloads Kubernetes' own images and what kind's default storage needs, nothing of any
project's workloads: a project loads its own images (``kind load docker-image``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from envtest.errors import ConfigError
from envtest.pins import PINNED, SUPPORTED, Versions, for_minor

REPOSITORY = "envtest.local/kind-node"
"""Never a registry: `envtest.local` cannot resolve, so nothing ever tries to pull these."""
LOCAL_PREFIX = "envtest.local/"
GO_SOURCES = ("capwrap", "pause")
"""Our own small Go programs, shipped as package data (envtest/binaries/nodeimage/data/<name>)."""

POD_SUBNET = "10.244.0.0/16"
NODE_POD_CIDR = "10.244.0.0/24"
"""kube-controller-manager gives the only node the first /24 of the pod subnet; the static CNI
config must hand out addresses from that same range."""


def data_dir() -> Path:
    """The builder's package data, found by path: `importlib.resources` would import the builder
    package, which the kind backend must never load (it only needs this recipe's hash)."""
    return Path(__file__).resolve().parent / "nodeimage" / "data"


@dataclass(frozen=True)
class NodeImageSpec:
    """The newest minor's recipe by default; `for_version` gives another minor's."""

    versions: Versions = PINNED
    kubernetes: str = PINNED.kubernetes
    busybox: str = "1.35.0"
    """Debian bookworm's busybox-static; the build checks the binary says this version."""
    pause: str = SUPPORTED[-1].pause
    """kubeadm's pause tag for ``kubernetes`` (hashed through containerd's config, which names it)."""
    extra: dict[str, str] = field(default_factory=dict)
    """Anything else that should change the tag (e.g. a mirror override)."""

    @classmethod
    def for_version(cls, version: str | None = None) -> NodeImageSpec:
        """The recipe of the minor ``version`` (``1.36``, ``1.36.2``, …; None: the newest) at that
        minor's pinned patch, with its etcd, CoreDNS, pause and crictl (envtest.pins.MinorPins).
        The newest minor's equals the default recipe, so its tag does not move."""
        pins = SUPPORTED[-1] if version is None else for_minor(version)
        if pins is None:
            supported = ", ".join(p.minor for p in SUPPORTED)
            raise ConfigError(
                f"no offline kind node image for Kubernetes {version}: supported minors {supported}"
            )
        versions = replace(
            PINNED,
            kubernetes=pins.kubernetes,
            etcd=pins.etcd,
            kind_node_image=pins.kind_node_image,
            coredns=pins.coredns,
            cri_tools=pins.cri_tools,
        )
        return cls(versions=versions, kubernetes=pins.kubernetes, pause=pins.pause)

    # -- names ------------------------------------------------------------------------------------

    @property
    def busybox_image(self) -> str:
        """kind's storage helper image (local-path-provisioner's helper pods); preloaded."""
        return f"{LOCAL_PREFIX}busybox:{self.busybox}"

    @property
    def local_path_image(self) -> str:
        return f"{LOCAL_PREFIX}local-path-provisioner:v{self.versions.local_path_provisioner}"

    @property
    def base_image(self) -> str:
        return f"{LOCAL_PREFIX}debian:{self.versions.debian_suite}"

    def workload_images(self) -> list[str]:
        """Preloaded beside kubeadm's list: kind's default StorageClass and its helper."""
        return [self.local_path_image, self.busybox_image]

    def tag(self) -> str:
        return f"{REPOSITORY}:v{self.kubernetes}-{self.content_hash()}"

    def sandbox_image(self) -> str:
        """The pause image kubeadm lists for ``kubernetes``, set in containerd's config (checked
        against `kubeadm config images list` at build time)."""
        return f"registry.k8s.io/pause:{self.pause}"

    # -- content hash ------------------------------------------------------------------------------

    def content_hash(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(asdict(self.versions), sort_keys=True).encode())
        h.update(json.dumps([self.kubernetes, self.busybox], sort_keys=True).encode())
        h.update(json.dumps(self.extra, sort_keys=True).encode())
        for name, text in sorted(self.texts().items()):
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        return h.hexdigest()[:12]

    def texts(self) -> dict[str, str]:
        """Every text that goes into the image, by a stable name (hashed into the tag)."""
        out = {f"go/{k}": v for k, v in go_sources().items()}
        out["containerd/config.toml"] = containerd_config(self.sandbox_image())
        out["cni/conflist"] = cni_conflist()
        out.update({f"dockerfile/{k}": v for k, v in self.dockerfiles().items()})
        out["dockerfile/node-base"] = NODE_BASE_DOCKERFILE
        out["containerd/capwrap-dropin"] = CAPWRAP_DROPIN
        return out

    def dockerfiles(self) -> dict[str, str]:
        """Every pod image's Dockerfile by role (the node's own is NODE_BASE_DOCKERFILE).

        Written for the legacy builder (Debian's docker.io 20.10 has no BuildKit, so no
        ``COPY --chmod``: files get their mode in the build context). Images "FROM scratch" hold one
        static binary; those that need a userland (kube-proxy: iptables; busybox) start from the
        debootstrapped base. Debian's busybox-static is copied out of a throwaway stage, so the
        host needs no busybox package."""
        base = self.base_image
        wrapper = (data_dir() / "kube-proxy" / "kube-proxy-wrapper").read_text()
        return {
            "busybox": f"""FROM {base} AS debian
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
      busybox-static && /bin/busybox | head -1 | grep -q 'v{self.busybox}'
FROM scratch
COPY --from=debian /bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/usr/local/bin:/bin
CMD ["/bin/sh"]
""",
            "pause": """FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
""",
            "scratch": SCRATCH_ONE_BINARY,
            "local-path-provisioner": f"""FROM {self.busybox_image}
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


def go_sources() -> dict[str, str]:
    root = data_dir()
    return {
        f"{name}/{p.name}": p.read_text()
        for name in GO_SOURCES
        for p in sorted((root / name).iterdir())
        if p.suffix in (".go", ".mod")
    }


def is_offline_image(image: str) -> bool:
    return image.startswith(REPOSITORY + ":")


_OFFLINE_TAG = re.compile(r":v(\d+\.\d+\.\d+)-[0-9a-f]+$")


def offline_image_version(image: str) -> str | None:
    """``envtest.local/kind-node:v1.36.4-<hash>`` → ``1.36.4``; None for any other image."""
    m = _OFFLINE_TAG.search(image) if is_offline_image(image) else None
    return m.group(1) if m else None


# -- image recipes -------------------------------------------------------------------------------

SCRATCH_ONE_BINARY = """FROM scratch
COPY {name} /usr/local/bin/{name}
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENTRYPOINT ["/usr/local/bin/{name}"]
"""

NODE_BASE_DOCKERFILE = """# After sigs.k8s.io/kind images/base/Dockerfile ({kind}), on Debian {suite}
# (its systemd 252 still boots on cgroup v1).
FROM {base}
COPY files/ /
RUN chmod -R go-w /etc/systemd/system /etc/containerd /kind \\
 && DEBIAN_FRONTEND=noninteractive clean-install \\
      systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod \\
      libseccomp2 bash ca-certificates curl jq procps socat runc containernetworking-plugins \\
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \\
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
 && ln -sf /lib/systemd/systemd /sbin/init \\
 && mkdir -p /opt/cni && rm -rf /opt/cni/bin && ln -s /usr/lib/cni /opt/cni/bin
RUN HOOK=/kind/bin/mount-product-files.sh && ctr oci spec \\
      | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {{"path": "'"$HOOK"'"}}' \\
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \\
 && containerd --version && runc --version && kubelet --version \\
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
 && systemctl mask systemd-binfmt.service \\
 && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
"""

CAPWRAP_DROPIN = """[Service]
Environment=CAPWRAP_RUNC=/usr/sbin/runc
"""
"""Inside the node (Debian's runc is /usr/sbin/runc): containerd runs runc through capwrap."""


# -- rendered configuration ----------------------------------------------------------------------

CAPWRAP = "/usr/local/bin/capwrap"


def containerd_config(sandbox_image: str) -> str:
    """kind v0.33's /etc/containerd/config.toml without the fuse-overlayfs proxy plugin (rootless
    only), with runc behind capwrap and our pause tag. capwrap is a no-op where nothing is missing
    from the bounding set, so the image also runs on ordinary hosts."""
    runtime = """  runtime_type = "io.containerd.runc.v2"
  base_runtime_spec = "/etc/containerd/cri-base.json"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{name}.options]
    SystemdCgroup = true
    BinaryName = "{capwrap}"
"""
    parts = [
        "# kind's containerd config (v0.33.0) for envtest's offline node image; runc via capwrap.",
        "version = 2",
        "",
        '[plugins."io.containerd.grpc.v1.cri".containerd]',
        "  discard_unpacked_layers = true",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
    ]
    for name in ("runc", "test-handler"):  # test-handler: the handler name Kubernetes' e2e expects
        parts.append(f'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{name}]')
        parts.append(runtime.format(name=name, capwrap=CAPWRAP).rstrip("\n"))
    parts += [
        "",
        '[plugins."io.containerd.grpc.v1.cri"]',
        f'  sandbox_image = "{sandbox_image}"',
        "  tolerate_missing_hugepages_controller = true",
        # kubelet gives pod sandboxes -998; where that is refused capwrap clamps it instead (kept false so
        # behaviour matches kind's image everywhere else).
        "  restrict_oom_score_adj = false",
    ]
    return "\n".join(parts) + "\n"


def cni_conflist() -> str:
    """A static bridge for the single node: kindnetd is not on the Go module proxy, and one node
    needs no routes to other nodes' pod ranges, which is all kindnetd adds."""
    conf = {
        "cniVersion": "1.0.0",
        "name": "envtest-bridge",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": NODE_POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def kubeadm_patches(spec: NodeImageSpec) -> list[dict[str, Any]]:
    """Point kubeadm at the etcd and CoreDNS we preload, by their own versions (never relabelled)."""
    return [
        {
            "kind": "ClusterConfiguration",
            "etcd": {"local": {"imageTag": spec.versions.etcd}},
            "dns": {"imageTag": f"v{spec.versions.coredns}"},
        }
    ]


def kind_config(user_config: str, spec: NodeImageSpec) -> str:
    """The user's kind config with what the offline image needs: no default CNI (no kindnetd image;
    the static conflist is in the node), our pod subnet, and kubeadm's etcd/CoreDNS tags."""
    doc = yaml.safe_load(user_config) or {}
    networking = doc.setdefault("networking", {})
    networking["disableDefaultCNI"] = True
    networking["podSubnet"] = POD_SUBNET
    if len(doc.get("nodes") or [{}]) > 1:
        raise ValueError("the offline node image has a single-node CNI: use one node in the kind config")
    patches = list(doc.get("kubeadmConfigPatches") or [])
    patches += [yaml.safe_dump(p, sort_keys=False) for p in kubeadm_patches(spec)]
    doc["kubeadmConfigPatches"] = patches
    return "# rendered by envtest for its offline node image\n" + yaml.safe_dump(doc, sort_keys=False)
