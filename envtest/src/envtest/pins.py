"""Every version the project pins, in one place: the local plane's binaries, kind and its node image.

The Makefile and CI read these through `python -m envtest.pins` (``NAME=value`` lines), so a
bump here is a bump everywhere; CI's cache keys hash this file.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Versions:
    """The versions envtest runs by default; the binary cache directory is keyed by ``kubernetes``."""

    kubernetes: str = "1.37.2"
    """kube-apiserver, kube-controller-manager, kube-scheduler, kubectl; ENVTEST_K8S_VERSION overrides."""
    etcd: str = "3.7.3"
    kwok: str = "0.8.0"
    kind: str = "0.33.0"
    """sigs.k8s.io/kind: the release downloaded in CI, or built from the Go module proxy."""
    kind_node_image: str = (
        "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
    )
    """The node image published with that kind release (kind's own default for it)."""
    # The offline node image (`envtest kind image build`), for where kind_node_image cannot be pulled.
    containerd: str = "2.4.2"
    """github.com/containerd/containerd/v2; kubelet >= 1.35 needs containerd 2.x (Debian has 1.6)."""
    cri_tools: str = "1.37.0"
    coredns: str = "1.15.0"
    """Preloaded and set in kind's kubeadm config (dns.imageTag), not relabelled as kubeadm's default."""
    local_path_provisioner: str = "0.0.30"
    debian_suite: str = "bookworm"
    """The node's base: systemd 252 still boots on cgroup v1 hosts (systemd >= 256 refuses them)."""


PINNED = Versions()


def main(argv: list[str] | None = None) -> int:
    pins = asdict(PINNED)
    parser = argparse.ArgumentParser(prog="python -m envtest.pins", description=__doc__)
    parser.add_argument("name", nargs="?", choices=sorted(pins), help="print only this pin's value")
    args = parser.parse_args(argv)
    if args.name:
        print(pins[args.name])
    else:
        for name, value in pins.items():
            print(f"{name.upper()}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
