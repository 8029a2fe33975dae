"""What the offline node image contains, named and hashed before anything is built.

The tag is a hash of the pins and of every text that goes into the image (our Go sources, the
rendered containerd config, CNI conflist, Dockerfiles), so an unchanged recipe finds its image in
seconds and any change to it builds a new one. Python code that only moves things around does not
change the tag.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from envtest.pins import PINNED, Versions

REPOSITORY = "envtest.local/kind-node"
"""Never a registry: `envtest.local` cannot resolve, so nothing ever tries to pull these."""
LOCAL_PREFIX = "envtest.local/"
GO_SOURCES = ("capwrap", "pause", "mysqlstandin")
"""Our own small Go programs, shipped as package data (envtest/binaries/nodeimage/data/<name>)."""

POD_SUBNET = "10.244.0.0/16"
NODE_POD_CIDR = "10.244.0.0/24"
"""kube-controller-manager gives the only node the first /24 of the pod subnet; the static CNI
config must hand out addresses from that same range."""


@dataclass(frozen=True)
class StandIn:
    """A preloaded image that replaces one a workload would pull, and the variable that selects it."""

    image: str
    env: str
    """The operator's environment variable that takes this image (or repository, see `repository_only`)."""
    repository_only: bool = False


@dataclass(frozen=True)
class NodeImageSpec:
    versions: Versions = PINNED
    kubernetes: str = PINNED.kubernetes
    busybox: str = "1.35.0"
    """Debian bookworm's busybox-static; the build checks the binary says this version."""
    mysql_versions: tuple[str, ...] = ("8.0", "8.4")
    """Tags of the MySQL stand-in: the reference operator uses spec.version as the tag, and the
    E2E tests run 8.0 and upgrade to 8.4."""
    extra: dict[str, str] = field(default_factory=dict)
    """Anything else that should change the tag (e.g. a mirror override)."""

    # -- names ------------------------------------------------------------------------------------

    @property
    def busybox_image(self) -> str:
        return f"{LOCAL_PREFIX}busybox:{self.busybox}"

    @property
    def mysql_repository(self) -> str:
        return f"{LOCAL_PREFIX}mysql-standin"

    @property
    def local_path_image(self) -> str:
        return f"{LOCAL_PREFIX}local-path-provisioner:v{self.versions.local_path_provisioner}"

    @property
    def base_image(self) -> str:
        return f"{LOCAL_PREFIX}debian:{self.versions.debian_suite}"

    def stand_ins(self) -> list[StandIn]:
        """The reference operator's images on an offline node (MYSQL_OPERATOR_* variables)."""
        return [
            StandIn(self.mysql_repository, "MYSQL_OPERATOR_MYSQL_IMAGE", repository_only=True),
            StandIn(self.busybox_image, "MYSQL_OPERATOR_BACKUP_IMAGE"),
        ]

    def workload_images(self) -> list[str]:
        """Preloaded beside kubeadm's list: storage, its helper, the operator's images."""
        mysql = [f"{self.mysql_repository}:{v}" for v in self.mysql_versions]
        return [self.local_path_image, self.busybox_image, *mysql]

    def tag(self) -> str:
        return f"{REPOSITORY}:v{self.kubernetes}-{self.content_hash()}"

    # -- content hash ------------------------------------------------------------------------------

    def content_hash(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(asdict(self.versions), sort_keys=True).encode())
        h.update(json.dumps([self.kubernetes, self.busybox, self.mysql_versions], sort_keys=True).encode())
        h.update(json.dumps(self.extra, sort_keys=True).encode())
        for name, text in sorted(self.texts().items()):
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        return h.hexdigest()[:12]

    def texts(self) -> dict[str, str]:
        """Every text that goes into the image, by a stable name (hashed into the tag)."""
        # Dockerfiles live beside their build code.
        from envtest.binaries.nodeimage import assemble, images

        out = {f"go/{k}": v for k, v in go_sources().items()}
        out["containerd/config.toml"] = containerd_config(self.sandbox_image())
        out["cni/conflist"] = cni_conflist()
        out.update({f"dockerfile/{k}": v for k, v in images.dockerfiles(self).items()})
        out["dockerfile/node-base"] = assemble.NODE_BASE_DOCKERFILE
        out["containerd/capwrap-dropin"] = assemble.CAPWRAP_DROPIN
        return out

    def sandbox_image(self) -> str:
        """The pause image kubeadm v1.37 lists, set in containerd's config (checked against
        `kubeadm config images list` at build time)."""
        return "registry.k8s.io/pause:3.10.2"


def data_dir() -> Path:
    return Path(str(resources.files("envtest.binaries.nodeimage") / "data"))


def go_sources() -> dict[str, str]:
    root = data_dir()
    return {
        f"{name}/{p.name}": p.read_text()
        for name in GO_SOURCES
        for p in sorted((root / name).iterdir())
        if p.suffix in (".go", ".mod")
    }


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
        # kubelet gives sandboxes -998; where that is refused capwrap clamps it instead (kept false so
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
    return "# rendered by envtest.binaries.nodeimage for its offline node image\n" + yaml.safe_dump(
        doc, sort_keys=False
    )


def is_offline_image(image: str) -> bool:
    return image.startswith(REPOSITORY + ":")
