"""Which engine and image tag a cluster's database runs, and the changes of them the operator refuses.

An unset `spec.version` means the engine's default *when the cluster was created*: afterwards the tag
the StatefulSet runs is kept (else `status.version`, recorded once a rollout has completed),
so an operator release that raises a default (8.0 → 8.4) never upgrades a running database behind its
owner's back. Upgrading is setting `spec.version`.

A `spec.version` older, by major.minor, than the newest tag that ran is refused and the pods keep that
one: neither MySQL nor MariaDB opens a datadir a newer release has upgraded (going back is a dump
restored into a new cluster). "Ran" is `status.version` and the tag of every pod whose server
container has started; not the StatefulSet's template, so an upgrade to a tag that no pod started (a
typo, an image that cannot be pulled) can be taken back. Patch releases are not compared: both allow
going back within a release series far more often than not.

`spec.engine` is immutable in the CRD; a request through v1alpha1, which has no engine field, can
still change it, so the operator refuses too when the StatefulSet runs the other server.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..api.v1 import MySQLClusterSpec
from ..database import images
from ..database.engines import ENGINES, engine

Obj = dict[str, Any]

SERVER_CONTAINER = "mysql"
VERSION_DOWNGRADE = "VersionDowngrade"
ENGINE_IMMUTABLE = "EngineImmutable"
_RELEASE = re.compile(r"^([0-9]+)(?:\.([0-9]+))?")


@dataclass(frozen=True)
class Choice:
    """What the children are built with, and why the spec's own was refused (None: it was not)."""

    engine: str
    tag: str
    reason: str | None = None
    message: str | None = None


def image_tag(image: str) -> str | None:
    """The tag of an image reference (`registry:5000/mysql:8.4@sha256:…` → `8.4`), None without one."""
    return images.split_reference(image)[1]


def _named(items: list[Obj] | None) -> Obj:
    return next((c for c in items or [] if c.get("name") == SERVER_CONTAINER), None) or {}


def _server(sts: Obj | None) -> Obj:
    return _named(
        ((((sts or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    )


def started_tags(pods: list[Obj]) -> list[str]:
    """The server tags of pods whose server container has started (running now, or ran before): their
    datadirs may have been upgraded by that release. A pod waiting for its image ran nothing."""
    tags = []
    for pod in pods:
        status = _named((pod.get("status") or {}).get("containerStatuses"))
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if "running" not in state and "terminated" not in state and "terminated" not in last:
            continue
        image = _named((pod.get("spec") or {}).get("containers")).get("image")
        tag = image_tag(image) if isinstance(image, str) else None
        if tag:
            tags.append(tag)
    return tags


def running_tag(sts: Obj | None) -> str | None:
    """The tag of the database server in a StatefulSet's pod template; None without one."""
    image = _server(sts).get("image")
    return image_tag(image) if isinstance(image, str) else None


def running_engine(sts: Obj | None) -> str | None:
    """The engine a StatefulSet's pod template runs: its server program (the command's last word),
    else its image's repository; None when neither tells."""
    server = _server(sts)
    command = server.get("command") or []
    by_program = {e.server: e.name for e in ENGINES.values()}
    if command and command[-1] in by_program:
        return by_program[command[-1]]
    image = server.get("image")
    if not isinstance(image, str):
        return None
    repository = images.split_reference(image)[0]
    configured = images.current()
    if configured.mysql_repository == configured.mariadb_repository:
        return None  # one repository for both: the image cannot tell
    found = {configured.mysql_repository: "mysql", configured.mariadb_repository: "mariadb"}
    return found.get(repository)


def release(tag: str) -> tuple[float, float] | None:
    """(major, minor); a tag naming only a major (`8`, the newest 8.x) has minor +inf; None when the
    tag is not numeric (`lts`)."""
    m = _RELEASE.match(tag)
    if not m:
        return None
    return float(m.group(1)), float(m.group(2)) if m.group(2) is not None else math.inf


def older(wanted: str, ran: str) -> bool:
    """`wanted` is an older release than `ran`. `8` after `8.0` is not older; `8.0` after `8` is
    (that `8` may have been 8.4), and so is `8.4` after `8`: a pin must name what ran or newer."""
    a, b = release(wanted), release(ran)
    return a is not None and b is not None and a < b


def rolls_back(spec: MySQLClusterSpec, sts: Obj | None) -> bool:
    """`spec.version` is older than the StatefulSet's template: allowed only if no pod started that."""
    template = running_tag(sts)
    return spec.version is not None and template is not None and older(spec.version, template)


def _newest(tags: list[str]) -> str | None:
    return max(tags, key=lambda t: release(t) or (-math.inf, -math.inf), default=None)


def choose(
    spec: MySQLClusterSpec, sts: Obj | None, recorded: str | None, started: list[str] | tuple[str, ...] = ()
) -> Choice:
    """The engine and tag to build with. `recorded` is status.version (the tag every pod ran at the last
    completed rollout), `started` the tags of pods whose server has started (`started_tags`)."""
    ran_engine = running_engine(sts)
    template = running_tag(sts)
    if ran_engine is not None and ran_engine != spec.engine:
        other = engine(ran_engine)
        kept = _newest([t for t in (template, recorded, *started) if t and other.supports(t)])
        kept = kept or other.default_version
        message = (
            f"spec.engine {spec.engine!r}: the pods run {ran_engine} and a datadir belongs to one server, "
            f"so they keep {ran_engine} {kept}. Set spec.engine back to {ran_engine!r}"
        )
        return Choice(ran_engine, kept, ENGINE_IMMUTABLE, message)
    # Only tags this engine can run: a drifted or foreign one must not become the cluster's.
    server = engine(spec.engine)
    ran = _newest([t for t in (recorded, *started) if t and server.supports(t)])
    asked = template if template and server.supports(template) else None
    if spec.version is None:
        # What the StatefulSet asks (a rollout under way goes on), unless it is older than what ran
        # (`kubectl rollout undo` after an upgrade): then what ran.
        if asked is not None and (ran is None or not older(asked, ran)):
            return Choice(spec.engine, asked)
        return Choice(spec.engine, ran or spec.image_tag)
    ran = ran or asked
    if ran is not None and older(spec.version, ran):
        message = (
            f"spec.version {spec.version!r} is older than {ran!r}, which the pods ran: a datadir cannot be "
            f"downgraded, so they keep {ran!r}. Set {ran!r} or newer; to go back, restore a dump into a "
            "new cluster"
        )
        return Choice(spec.engine, ran, VERSION_DOWNGRADE, message)
    return Choice(spec.engine, spec.version)


def upgrade_record(cluster: Obj, choice: Choice) -> Obj:
    """`{"upgradeFrom": tag}` when the chosen tag upgrades what the pods ran (`status.version`, an older
    release): the datadirs may then be opened by the newer release (`database.identity`). Empty
    otherwise: the record stays as it was, so the pods' template changes only when an upgrade begins."""
    ran = (cluster.get("status") or {}).get("version")
    if ran and choice.reason is None and older(ran, choice.tag) and release(ran) != release(choice.tag):
        return {"upgradeFrom": ran}
    return {}


def building(cluster: Obj, choice: Choice, records: Obj | None = None) -> Obj:
    """`cluster` with the chosen engine and tag in its spec, and `records` over its status (a shallow
    copy the children are built from; the object itself is never written back)."""
    spec = {**(cluster.get("spec") or {}), "engine": choice.engine, "version": choice.tag}
    status = {**(cluster.get("status") or {}), **(records or {})}
    return {**cluster, "spec": spec, "status": status}
