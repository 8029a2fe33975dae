"""`python -m envtest.binaries.nodeimage build|tag|host|pybase`: the builder's own entry point, kept
for scripts; `envtest kind image build|tag|pybase` and `envtest kind host-setup` are the same."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envtest.binaries import nodeimage
from envtest.binaries.nodespec import NodeImageSpec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envtest.binaries.nodeimage",
        description=nodeimage.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser(
        "build", help="set up the host, build the offline node image (cached by content); print its tag"
    )
    tag = sub.add_parser("tag", help="print the offline image's tag without building")
    for p in (build, tag):
        p.add_argument(
            "--k8s-version", help="its Kubernetes minor (default: ENVTEST_K8S_VERSION, else the newest)"
        )
    host = sub.add_parser("host", help="the same as `envtest kind host-setup`")
    host.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    pyb = sub.add_parser("pybase", help="a python3 base image for offline docker builds (see pybase.py)")
    pyb.add_argument(
        "project", type=Path, help="directory with the pyproject.toml whose dependencies it carries"
    )
    args = parser.parse_args(argv)
    if args.action in ("build", "tag"):
        from envtest.binaries import k8s_version

        spec = NodeImageSpec.for_version(k8s_version(args.k8s_version, source="--k8s-version"))
        print(nodeimage.build(spec) if args.action == "build" else spec.tag())
    elif args.action == "pybase":
        from envtest.binaries.nodeimage import pybase

        print(pybase.build(args.project.resolve(), progress=nodeimage._say))
    else:
        nodeimage.host_setup(dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
