"""Every version the project pins, in one place: the local plane's binaries, kind and its node image.

The Makefile and CI read these through `python -m envtest.pins` (``NAME=value`` lines), so a
bump here is a bump everywhere; CI's cache keys hash this file. `python -m envtest.pins supported`
prints the pinned patch of each supported Kubernetes minor (``--verbose``: with its etcd, kwok and
kind node image; ``--json``: as a list, for a CI matrix).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

KWOK = "0.8.0"
"""sigs.k8s.io/kwok for every minor: it only talks to the apiserver, through a client-go that
tolerates the skew, so one release serves them all."""


@dataclass(frozen=True)
class MinorPins:
    """What one supported Kubernetes minor runs with. Its binaries live in their own cache
    directory (keyed by ``kubernetes``), so minors sit side by side."""

    kubernetes: str
    """The patch installed for this minor: ``1.36``, ``1.36.x`` and (for the newest) ``latest`` pick it."""
    etcd: str
    """The etcd this release names (its build/dependencies.yaml; kubeadm's DefaultEtcdVersion)."""
    kind_node_image: str
    """kind's node image for this minor, digest-pinned, from the notes of the pinned kind release
    (kind supports an image only with the release that built it; the tag alone can move)."""
    coredns: str
    """CoreDNS in the offline node image (set as kubeadm's dns.imageTag, so any release kubeadm's
    Corefile runs on will do); kubeadm's CoreDNSVersion (cmd/kubeadm/app/constants) unless noted."""
    pause: str
    """The sandbox image kubeadm lists for this release (its PauseVersion): containerd's config must
    name the same one, or kubelet pulls a second pause (the build checks both agree)."""
    cri_tools: str
    """crictl in the offline node image; the release's build/dependencies.yaml unless noted."""
    kwok: str = KWOK

    @property
    def minor(self) -> str:
        return minor_of(self.kubernetes)


# Oldest first; upstream supports the newest three minors. Each patch is the one kind (see
# Versions.kind) publishes a node image for where its k8s.io/kubernetes module is on the Go module
# proxy (the build path needs it), so a minor runs the same patch locally and on kind.
SUPPORTED: tuple[MinorPins, ...] = (
    MinorPins(
        kubernetes="1.35.8",
        etcd="3.6.6",
        kind_node_image=(
            "kindest/node:v1.35.8@sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0"
        ),
        coredns="1.13.1",
        pause="3.10.1",
        cri_tools="1.34.0",
    ),
    MinorPins(
        kubernetes="1.36.4",
        etcd="3.6.8",
        kind_node_image=(
            "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
        ),
        coredns="1.14.2",
        pause="3.10.2",
        # dependencies.yaml names crictl 1.35.0, which the Go module proxy does not serve (403, "not
        # available"): the offline image takes 1.37.0, the newest one served, as the 1.37 image does.
        cri_tools="1.37.0",
    ),
    # 1.37.2 names etcd 3.7.0; 3.7.3 is a patch release of it, pinned before this table existed
    # and kept so the caches and offline images built with it stay valid. kind v0.33.0 publishes
    # 1.37.0 only: the kind backend runs that patch of the minor. For the same reason CoreDNS and
    # crictl stay at the releases pinned before this table (kubeadm names 1.14.6, dependencies.yaml
    # crictl 1.36.0): the offline 1.37 image keeps its tag.
    MinorPins(
        kubernetes="1.37.2",
        etcd="3.7.3",
        kind_node_image=(
            "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
        ),
        coredns="1.15.0",
        pause="3.10.2",
        cri_tools="1.37.0",
    ),
)
_NEWEST = SUPPORTED[-1]


def minor_of(version: str) -> str:
    """``v1.36.4`` → ``1.36`` (no validation: see envtest.binaries.versions for the grammar)."""
    return ".".join(version.strip().removeprefix("v").split(".")[:2])


def for_minor(version: str) -> MinorPins | None:
    """The pins of the minor ``version`` (``1.36`` or any ``1.36.z``) belongs to, None if unsupported."""
    minor = minor_of(version)
    return next((p for p in SUPPORTED if p.minor == minor), None)


@dataclass(frozen=True)
class Versions:
    """The versions envtest runs by default; the binary cache directory is keyed by ``kubernetes``."""

    kubernetes: str = _NEWEST.kubernetes
    """kube-apiserver, kube-controller-manager, kube-scheduler, kubectl; ENVTEST_K8S_VERSION overrides."""
    etcd: str = _NEWEST.etcd
    kwok: str = _NEWEST.kwok
    kind: str = "0.33.0"
    """sigs.k8s.io/kind: the release downloaded in CI, or built from the Go module proxy."""
    kind_node_image: str = _NEWEST.kind_node_image
    """The node image published with that kind release (kind's own default for it)."""
    # The offline node image (`envtest kind image build`), for where kind_node_image cannot be pulled;
    # the newest minor's (another minor's: envtest.binaries.nodespec.NodeImageSpec.for_version).
    containerd: str = "2.4.2"
    """github.com/containerd/containerd/v2; kubelet >= 1.35 needs containerd 2.x (Debian has 1.6)."""
    cri_tools: str = _NEWEST.cri_tools
    coredns: str = _NEWEST.coredns
    """Preloaded and set in kind's kubeadm config (dns.imageTag), not relabelled as kubeadm's default."""
    local_path_provisioner: str = "0.0.30"
    debian_suite: str = "bookworm"
    """The node's base: systemd 252 still boots on cgroup v1 hosts (systemd >= 256 refuses them)."""


PINNED = Versions()


def main(argv: list[str] | None = None) -> int:
    pins = asdict(PINNED)
    parser = argparse.ArgumentParser(
        prog="python -m envtest.pins",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "name",
        nargs="?",
        choices=[*sorted(pins), "supported"],
        help="print only this pin's value; supported: each supported minor's patch, comma-separated",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="supported: one line per minor with all its pins"
    )
    parser.add_argument("--json", action="store_true", help="supported: a JSON list of the patches")
    args = parser.parse_args(argv)
    if (args.verbose or args.json) and args.name != "supported":
        parser.error("--verbose and --json go with `supported`")
    if args.name == "supported":
        _print_supported(verbose=args.verbose, as_json=args.json)
    elif args.name:
        print(pins[args.name])
    else:
        for name, value in pins.items():
            print(f"{name.upper()}={value}")
    return 0


def _print_supported(*, verbose: bool, as_json: bool) -> None:
    if as_json:
        print(json.dumps([p.kubernetes for p in SUPPORTED], separators=(",", ":")))
    elif verbose:
        for p in SUPPORTED:
            print(
                f"{p.minor}\tkubernetes={p.kubernetes}\tetcd={p.etcd}\tkwok={p.kwok}"
                f"\tkind_node_image={p.kind_node_image}\tcoredns={p.coredns}\tpause={p.pause}"
                f"\tcri_tools={p.cri_tools}"
            )
    else:
        print(",".join(p.kubernetes for p in SUPPORTED))


if __name__ == "__main__":
    sys.exit(main())
