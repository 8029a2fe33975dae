"""`python -m envtest.binaries.nodeimage build|resolve|tag|host|env`: what `make kind-image` runs."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from envtest.binaries import nodeimage
from envtest.binaries.nodeimage.host import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envtest.binaries.nodeimage",
        description=nodeimage.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build", help="build the offline node image (cached by content); print its tag")
    sub.add_parser("resolve", help="the node image kind would use here (pulled, cached or built); print it")
    sub.add_parser("tag", help="print the offline image's tag without building")
    sub.add_parser("host", help="make docker usable: dockerd started, capwrap registered where needed")
    env = sub.add_parser(
        "env", help="print VAR=value for the stand-in images if the cluster runs the offline image"
    )
    env.add_argument("--name", default="envtest", help="kind cluster name")
    pyb = sub.add_parser("pybase", help="a python3 base image for offline docker builds (see pybase.py)")
    pyb.add_argument(
        "project", type=Path, help="directory with the pyproject.toml whose dependencies it carries"
    )
    args = parser.parse_args(argv)
    if args.action == "build":
        print(nodeimage.build())
    elif args.action == "resolve":
        print(nodeimage.resolve())
    elif args.action == "tag":
        print(nodeimage.NodeImageSpec().tag())
    elif args.action == "pybase":
        from envtest.binaries.nodeimage import pybase

        print(pybase.build(args.project.resolve(), progress=nodeimage._say))
    elif args.action == "host":
        nodeimage.ensure_host()
    else:
        r = run(["docker", "inspect", "-f", "{{.Config.Image}}", f"{args.name}-control-plane"])
        for key, value in nodeimage.stand_in_env(r.out.strip() if r.rc == 0 else "").items():
            print(f"{key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
