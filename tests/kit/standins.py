"""The reference operator's images on an offline kind cluster: stand-ins built here, loaded into the
cluster, and the variables that point the operator at them. Part of the operator's test kit, not of
the harness: envtest's offline node image preloads Kubernetes' own images only.

A cluster from that image (`envtest kind image build`) cannot pull Docker Hub's mysql or busybox, so:

- ``envtest.local/mysql-standin:<v>`` for every MySQL version the E2E suite asks for: a static Go
  program (tests/kit/mysqlstandin) that does what the operator's pods ask of mysqld, mysql,
  mysqladmin and mysqldump, on the node's busybox;
- the backup image: the node's own ``envtest.local/busybox:<v>`` (kind's storage helper, preloaded);
- the real database: ``envtest.local/mariadb:10.11``, MariaDB from Debian's packages
  (``engineimage.py``), for clusters with ``engine: mariadb`` (the `real_database` E2E set).

A cluster from a published node image needs none of this (the real images are pulled): `load` does
nothing there and `env` prints nothing.

    python tests/kit/standins.py build            # the stand-in images in docker (go, docker build)
    python tests/kit/standins.py load --name N    # built and `kind load`ed into cluster N, if it needs them
    python tests/kit/standins.py env --name N     # VAR=value lines for the operator (none if N needs none)
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import engineimage

from envtest.binaries import kind as kind_binary
from envtest.binaries.nodeimage import builds, images
from envtest.binaries.nodespec import NodeImageSpec, is_offline_image
from envtest.errors import EnvtestError
from mysql_operator.database.images import BACKUP_ENV, MARIADB_ENV, MYSQL_ENV

Progress = Callable[[str], None]

SOURCE = Path(__file__).resolve().parent / "mysqlstandin"
REPOSITORY = "envtest.local/mysql-standin"
"""Never a registry (`envtest.local` does not resolve): the operator's tag is spec.version, and
Kubernetes defaults a tagged image to IfNotPresent, so the loaded image is used as is."""
MYSQL_VERSIONS = ("8.0", "8.4")
"""The E2E suite runs 8.0 and upgrades to 8.4 (test_convergence)."""

DOCKERFILE = """FROM {busybox}
COPY mysqlstandin /usr/local/bin/mysqlstandin
RUN echo 'mysql:x:999:999:MySQL Server:/var/lib/mysql:/bin/false' >> /etc/passwd \\
 && echo 'mysql:x:999:' >> /etc/group \\
 && mkdir -p /var/lib/mysql /etc/mysql/conf.d /docker-entrypoint-initdb.d \\
 && chown 999:999 /var/lib/mysql \\
 && for c in mysqld mysqladmin mysqldump mysql; do ln -s mysqlstandin /usr/local/bin/$c; done \\
 && printf '#!/bin/sh\\nexec "$@"\\n' > /usr/local/bin/docker-entrypoint.sh \\
 && chmod 755 /usr/local/bin/docker-entrypoint.sh
EXPOSE 3306
CMD ["mysqld"]
"""


class KitError(EnvtestError):
    """The stand-ins cannot be built or loaded; the message says what to run."""


def _say(message: str) -> None:
    print(f"standins: {message}", file=sys.stderr, flush=True)


def busybox_image() -> str:
    """The offline node image's busybox: preloaded in the node, in docker wherever that image was built."""
    return NodeImageSpec().busybox_image


def mysql_images() -> list[str]:
    return [f"{REPOSITORY}:{v}" for v in MYSQL_VERSIONS]


def binary(progress: Progress = _say) -> Path:
    """The stand-in built with go from tests/kit/mysqlstandin (cached by the hash of its sources)."""
    return builds.go_program(SOURCE, "mysqlstandin", progress)


def build(progress: Progress = _say) -> list[str]:
    """The stand-in images in docker; their tags."""
    base = busybox_image()
    if not images.exists(base):
        raise KitError(
            f"docker has no {base}, the stand-ins' base: it is built with the offline node image "
            "(`envtest kind image build`, `make kind-image`)"
        )
    first, *others = mysql_images()
    progress(f"image {first}")
    images.docker_build(first, DOCKERFILE.format(busybox=base), {"mysqlstandin": binary(progress)})
    for tag in others:  # the same stand-in under every version tag the operator may ask for
        images.check(images.run(["docker", "tag", first, tag]), f"docker tag {first} {tag}")
    return [*mysql_images(), engineimage.build(progress)]


def node_image(name: str) -> str:
    """The image the cluster's control-plane node runs (the container CLI kind uses)."""
    cli = os.environ.get("KIND_EXPERIMENTAL_PROVIDER") or "docker"
    r = images.run([cli, "inspect", "-f", "{{.Config.Image}}", f"{name}-control-plane"])
    if r.rc != 0:
        raise KitError(f"no kind cluster {name!r} ({r.err.strip()[-200:]}): create it with `make kind-up`")
    return r.out.strip()


def needed(name: str) -> bool:
    """True when the cluster runs envtest's offline node image (no registry: stand-ins needed)."""
    return is_offline_image(node_image(name))


def env(name: str) -> dict[str, str]:
    """The operator's image variables for cluster `name`; empty when it pulls the real images."""
    if not needed(name):
        return {}
    return {MYSQL_ENV: REPOSITORY, MARIADB_ENV: engineimage.REPOSITORY, BACKUP_ENV: busybox_image()}


def load(name: str, progress: Progress = _say) -> list[str]:
    """Build the stand-ins and `kind load` them into cluster `name` (kind skips what it has)."""
    if not needed(name):
        progress(f"kind cluster {name!r} runs a published node image: it pulls the real images")
        return []
    tags = build(progress)
    kind = kind_binary.resolve(progress=progress)
    progress(f"kind load docker-image {' '.join(tags)} --name {name}")
    proc = subprocess.run(
        [str(kind), "load", "docker-image", *tags, "--name", name],
        capture_output=True,
        text=True,
        timeout=1800,  # images of hundreds of MB into each node on a busy machine: minutes, never hours
    )
    if proc.returncode != 0:
        raise KitError(f"kind load exited {proc.returncode}:\n{proc.stderr.strip()[-1500:]}")
    return tags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tests/kit/standins.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build", help="build the stand-in images in docker; print their tags")
    for action, text in (("load", "build and load them into a kind cluster"), ("env", "print VAR=value")):
        sub.add_parser(action, help=text).add_argument("--name", default="envtest", help="kind cluster")
    args = parser.parse_args(argv)
    try:
        if args.action == "build":
            print("\n".join(build()))
        elif args.action == "load":
            load(args.name)
        else:
            for key, value in env(args.name).items():
                print(f"{key}={shlex.quote(value)}")
    except EnvtestError as exc:
        print(f"standins: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
