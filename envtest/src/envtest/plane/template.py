"""Plane templates: etcd's data directory of a freshly bootstrapped plane, kept per binaries and flags.

kube-apiserver spends most of its start in post-start hooks that write the objects every cluster
begins with. Two of them wait a full second before their first try (`wait.Poll`): RBAC's default
roles and bindings, and the system priority classes. A plane whose etcd starts from a copy of a
bootstrapped plane's data already holds what those hooks write, so readiness need not wait them
out: the hooks still run and reconcile (they create or update only what is missing or differs),
and every other readiness check is still waited for.

The template is the etcd data of a plane that started with the same etcd and kube-apiserver
binaries and default flags, stopped as soon as `/readyz` was ok with every check: no CRD, no
object of a test, no audit log. It is made once per binaries (one ordinary start, under a lock so
parallel workers make it once) and kept beside the binaries' cache.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import requests
from filelock import FileLock

from envtest.binaries import cache_root
from envtest.loopback import direct_session
from envtest.plane.etcdkv import b64, prefix_end

FORMAT = 3
"""Changes whenever what a template holds or how it is made changes, so older ones are not used."""

STAGING_ABANDONED_AFTER = 3600.0
"""Seconds after which a hidden staging folder is taken for one a killed process left (making a
template takes seconds)."""

COMPLETE = "envtest-template.json"
"""Written last into a template, with what it was made from: a directory without it is not one."""

SKIPPED_HOOKS: tuple[str, ...] = (
    # Both begin with wait.Poll(1 s, …) and only write objects the template holds: the default
    # ClusterRoles, ClusterRoleBindings, Roles and RoleBindings, and the two system
    # PriorityClasses. tests/e2e/test_template_planes.py proves a template plane holds the same
    # ones as a fresh plane when it reports ready.
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/scheduling/bootstrap-system-priority-classes",
)


PER_PLANE_KEYS: tuple[str, ...] = (
    # Written by the template's kube-apiserver with its own CA; a later one merges its CA into an
    # existing bundle, so the template's would stay trusted: removed, each plane writes its own.
    "/registry/configmaps/kube-system/extension-apiserver-authentication",
    # Records the day legacy token tracking began: the plane's own day, as on a fresh plane.
    "/registry/configmaps/kube-system/kube-apiserver-legacy-service-account-token-tracking",
)
"""Keys a bootstrapped plane always holds that are its own: removed (exactly one each)."""

PER_PLANE_PREFIXES: tuple[str, ...] = (
    # The `kubernetes` Service and what goes with it, if the template's apiserver made them before
    # it stopped: they would carry its port, and the controller never updates an existing Service.
    "/registry/services/specs/default/kubernetes",
    "/registry/services/endpoints/default/kubernetes",
    "/registry/endpointslices/default/kubernetes",
    "/registry/ipaddresses/",
    # The template apiserver's identity Lease (a plane has its own), and any Event it recorded.
    "/registry/leases/",
    "/registry/events/",
)
"""Keys a bootstrapped plane may hold by the time it stops, depending on timing: removed if there."""

WRITTEN_AT_START: tuple[str, ...] = (
    # PER_PLANE_KEYS, which a fresh plane holds when /readyz is ok: a template plane is ready once
    # it has written them again. (Not the `kubernetes` Service: its controller waits for the whole
    # /readyz, which waits for the skipped hooks, so a fresh plane may report ready without it too.)
    "api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
    "api/v1/namespaces/kube-system/configmaps/kube-apiserver-legacy-service-account-token-tracking",
)


ENV = "ENVTEST_PLANE_TEMPLATE"


def wanted() -> bool:
    """Templates are on unless ENVTEST_PLANE_TEMPLATE says 0 or false (inherited by supervised planes)."""
    return os.environ.get(ENV, "").strip().lower() not in ("0", "false", "no", "off")


def readyz_path(from_template: bool) -> str:
    """The readiness URL path: with a template, every check but the hooks whose work it holds."""
    if not from_template:
        return "/readyz"
    return "/readyz?" + "&".join(f"exclude={hook}" for hook in SKIPPED_HOOKS)


def written(session: requests.Session, server: str) -> bool:
    """Whether a template plane has written what a fresh one holds at ready (WRITTEN_AT_START)."""
    return all(session.get(f"{server}/{path}", timeout=2).status_code == 200 for path in WRITTEN_AT_START)


def forget_per_plane_keys(etcd_url: str) -> None:
    """Delete PER_PLANE_KEYS and PER_PLANE_PREFIXES from a plane's etcd whose apiserver has stopped
    (JSON gateway, keys in base64), then compact its history so no old revision still holds them."""
    revision = 0
    with direct_session() as session:
        for key, exact in [(k, True) for k in PER_PLANE_KEYS] + [(p, False) for p in PER_PLANE_PREFIXES]:
            body = {"key": b64(key.encode())}
            if not exact:  # every key with this prefix
                body["range_end"] = b64(prefix_end(key.encode()))
            resp = session.post(f"{etcd_url}/v3/kv/deleterange", json=body, timeout=10)
            resp.raise_for_status()
            answer = resp.json()
            if exact and answer.get("deleted") != "1":
                raise RuntimeError(f"the bootstrapped plane holds no {key}: this kube-apiserver differs")
            revision = max(revision, int(answer["header"]["revision"]))
        compact = {"revision": str(revision), "physical": True}
        session.post(f"{etcd_url}/v3/kv/compaction", json=compact, timeout=30).raise_for_status()


def root(apiserver: Path | None = None) -> Path:
    """Beside the envtest binaries cache that holds ``apiserver`` (so runs with another
    XDG_CACHE_HOME but the same binaries share its templates), else in this user's cache."""
    if apiserver is not None:
        release_dir = Path(apiserver).resolve().parent
        if release_dir.parent.name == cache_root().name and release_dir.parent.parent.name == "envtest":
            return release_dir.parent.parent / "templates"
    return cache_root().parent / "templates"


def identity(
    version: str, binaries: Mapping[str, Path], flags: Mapping[str, Mapping[str, str | None]]
) -> dict[str, object]:
    """What a template depends on: the binaries (path, size, mtime: a rebuild or an upgrade makes a
    new one without hashing 100 MB at every start) and the flags that shape what is stored."""
    return {"format": FORMAT, "version": version, "binaries": _files(binaries), "flags": flags}


def _files(binaries: Mapping[str, Path]) -> dict[str, dict[str, object]]:
    files: dict[str, dict[str, object]] = {}
    for name, path in sorted(binaries.items()):
        real = Path(path).resolve()
        st = real.stat()
        files[name] = {"path": str(real), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return files


def directory(ident: Mapping[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    files = ident["binaries"]
    apiserver = files.get("kube-apiserver", {}).get("path") if isinstance(files, dict) else None
    return root(Path(apiserver) if apiserver else None) / f"{ident['version']}-{digest}"


def ensure(
    ident: Mapping[str, object], make: Callable[[Path], None], *, lock_timeout: float = -1
) -> tuple[Path, bool]:
    """The template's directory, made by ``make(data_dir)`` if there is none yet; and whether it was
    made now. ``make`` fills a fresh directory with a stopped etcd's data. Waiting for another
    process that makes it raises filelock.Timeout after ``lock_timeout`` seconds (< 0: no limit)."""
    target = directory(ident)
    if (target / COMPLETE).is_file():
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=lock_timeout):
        if (target / COMPLETE).is_file():  # made by another process while this one waited
            return target, False
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            make(staging / "etcd")
            (staging / COMPLETE).write_text(json.dumps(ident, indent=2, sort_keys=True) + "\n")
            shutil.rmtree(target, ignore_errors=True)  # an incomplete one left by a killed process
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target, True


def stale(root_dir: Path | None = None) -> list[Path]:
    """Templates whose binaries are gone or changed since (rebuilt, upgraded, cleaned up): never used
    again, so `envtest binaries cleanup` removes them."""
    found = []
    for target in sorted((root_dir or root()).glob("*")):
        record = target / COMPLETE
        if target.name.startswith(".") and target.is_dir():
            if time.time() - target.stat().st_mtime > STAGING_ABANDONED_AFTER:
                found.append(target)  # left by a process killed while it made a template
            continue
        if not target.is_dir() or not record.is_file():
            continue
        try:
            made = json.loads(record.read_text())
            if made["format"] != FORMAT:
                found.append(target)  # made by another envtest: never matches this one's identity
                continue
            files = made["binaries"]
            current = _files({name: Path(f["path"]) for name, f in files.items()})
        except (OSError, ValueError, KeyError, TypeError):
            found.append(target)  # unreadable record or a binary gone
            continue
        if current != files:
            found.append(target)
    return found


def copy_data(source: Path, data_dir: Path) -> None:
    """A copy of etcd's data directory (etcd writes its files in place, so never a link) in which
    runs of zeros are holes: its write-ahead log is a 64 MB file preallocated with zeros, which a
    plain copy would write out to disk for every plane."""
    shutil.copytree(source, data_dir, symlinks=True, copy_function=sparse_copy)
    data_dir.chmod(0o700)  # etcd refuses a data directory others may read


def copy_into(template: Path, data_dir: Path) -> None:
    """etcd's data for a new plane, from a template: copied beside it and renamed into place, so
    an interrupted copy never leaves a data directory a later start would take for the plane's own."""
    staging = data_dir.with_name(f".{data_dir.name}-copying")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        copy_data(template / "etcd", staging)
        os.replace(staging, data_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


CHUNK = 1 << 20
ZEROS = bytes(CHUNK)


def sparse_copy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy only what is not zeros: the source's data extents (SEEK_DATA/SEEK_HOLE, so a sparse
    template is read in microseconds), and within them no chunk of zeros either."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        offset = 0
        while offset < size:
            try:
                offset = os.lseek(src.fileno(), offset, os.SEEK_DATA)
                end = os.lseek(src.fileno(), offset, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole is left
                    break
                end = size  # a filesystem without SEEK_DATA: read all of what is left
            src.seek(offset)
            while offset < end:
                chunk = src.read(min(CHUNK, end - offset))
                if not chunk:  # shorter than it said (changed under us): the rest reads as zeros
                    break
                if chunk != ZEROS[: len(chunk)]:
                    dst.seek(offset)
                    dst.write(chunk)
                offset += len(chunk)
        dst.truncate(size)  # the size, also when the file ends in a hole
    shutil.copymode(source, target)
