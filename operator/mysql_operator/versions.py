"""Which image tag a cluster's database runs, and the one change of it the operator refuses.

An unset `spec.version` means the engine's default *when the cluster was created*: afterwards the tag
the StatefulSet runs is kept, so an operator release that raises a default (8.0 → 8.4) never upgrades
a running database behind its owner's back. Upgrading is setting `spec.version`.

A `spec.version` older, by major.minor, than the tag the pods run is refused and the pods keep theirs:
neither MySQL nor MariaDB opens a datadir a newer release has upgraded (a downgrade is a dump restored
into a new cluster). Patch releases are not compared: both allow going back within a release series
far more often than not, and blocking a patch rollback would be worse than the rare refusal from the
server itself.
"""

from __future__ import annotations

import re
from typing import Any

from .api import MySQLClusterSpec

Obj = dict[str, Any]

SERVER_CONTAINER = "mysql"
VERSION_DOWNGRADE = "VersionDowngrade"
_RELEASE = re.compile(r"^([0-9]+)(?:\.([0-9]+))?")


def image_tag(image: str) -> str | None:
    """The tag of an image reference (`registry:5000/mysql:8.4@sha256:…` → `8.4`), None without one."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def running_tag(sts: Obj | None) -> str | None:
    """The tag of the database server in a StatefulSet's pod template; None without one."""
    containers = ((((sts or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    server = next((c for c in containers or [] if c.get("name") == SERVER_CONTAINER), None)
    image = (server or {}).get("image")
    return image_tag(image) if isinstance(image, str) else None


def release(tag: str) -> tuple[int, ...]:
    """(major, minor), or (major,) for a tag that names only a major (`8`); () when not numeric."""
    m = _RELEASE.match(tag)
    if not m:
        return ()
    return tuple(int(part) for part in m.groups() if part is not None)


def older(wanted: str, running: str) -> bool:
    """`wanted` is an older release than `running`, compared on the parts both name (`8` vs `8.4`:
    equal, since `8` is the newest 8.x)."""
    a, b = release(wanted), release(running)
    n = min(len(a), len(b))
    return n > 0 and a[:n] < b[:n]


def choose(spec: MySQLClusterSpec, sts: Obj | None) -> tuple[str, str | None]:
    """The tag to run, and why the spec's own was refused (None: it was not)."""
    running = running_tag(sts)
    if spec.version is None:
        return running or spec.image_tag, None
    if running is not None and older(spec.version, running):
        why = (
            f"spec.version {spec.version!r} is older than {running!r}, which the pods run: a datadir "
            f"cannot be downgraded, so they keep {running!r}. Set {running!r} or newer; to go back, "
            "restore a dump into a new cluster"
        )
        return running, why
    return spec.version, None


def with_version(cluster: Obj, tag: str) -> Obj:
    """`cluster` with `spec.version` set to `tag` (a shallow copy: the children are built from it)."""
    return {**cluster, "spec": {**(cluster.get("spec") or {}), "version": tag}}
