"""The binary cache on disk: where it is, which releases it holds, and what `cleanup` may remove.

Layout: ``${XDG_CACHE_HOME:-~/.cache}/envtest/k8s/<ver>-<os>-<arch>/`` per release, side by side;
installs stage into hidden ``.tmp-<ver>-<os>-<arch>-<random>`` directories beside them and hold
``<ver>-<os>-<arch>/.install.lock`` while they run (see envtest.binaries.resolver).
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock, Timeout

from envtest.binaries import versions
from envtest.pins import SUPPORTED

INSTALL_LOCK = ".install.lock"
_REMOVING = ".rm-"

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le"}


def platform_tag() -> tuple[str, str]:
    """(os, arch) the way Go and the release URLs spell them, e.g. ('linux', 'amd64')."""
    machine = platform.machine().lower()
    return platform.system().lower(), _ARCH.get(machine, machine)


def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "envtest" / "k8s"


def executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def parse_dir(directory: Path) -> tuple[str, str] | None:
    """(release, "<os>-<arch>") of a cache directory ``<ver>-<os>-<arch>``; None for anything else
    (hidden staging directories, stray files, names that hold no release)."""
    if directory.name.startswith(".") or not directory.is_dir():
        return None
    parts = directory.name.rsplit("-", 2)  # a pre-release has dashes; os and arch never do
    if len(parts) != 3 or versions.sort_key(parts[0]) is None:
        return None
    return parts[0], f"{parts[1]}-{parts[2]}"


def versions_on_disk() -> list[str]:
    """The releases whose kube-apiserver is cached for this os/arch, oldest first: a directory
    holding only a kubectl or an etcd cannot start a plane, so `latest-on-disk` must not pick it."""
    root = cache_root()
    if not root.is_dir():
        return []
    here = "-".join(platform_tag())
    found = [
        parsed[0]
        for d in root.iterdir()
        if (parsed := parse_dir(d)) and parsed[1] == here and executable(d / "kube-apiserver")
    ]
    return sorted(found, key=lambda v: versions.sort_key(v) or ())


def pinned_versions() -> frozenset[str]:
    """The releases envtest.pins names, one per supported minor: what cleanup always keeps."""
    return frozenset(p.kubernetes for p in SUPPORTED)


def unpinned_dirs(keep: Iterable[str] = ()) -> list[Path]:
    """What `envtest binaries cleanup` removes, sorted: each os/arch's directory of a release no pin
    names (nor ``keep``), and staging directories an install died with (their target's install lock
    is free; a live install holds it for as long as its staging directory exists)."""
    root = cache_root()
    if not root.is_dir():
        return []
    wanted = pinned_versions() | {k.removeprefix("v") for k in keep}
    found = []
    for d in sorted(root.iterdir()):
        parsed = parse_dir(d)
        if parsed is not None:
            unpinned = parsed[0] not in wanted
        elif d.is_dir() and d.name.startswith(".tmp-"):
            unpinned = not install_running(_staging_target(d))
        else:  # a cleanup that died half-way
            unpinned = d.is_dir() and d.name.startswith(_REMOVING)
        if unpinned:
            found.append(d)
    return found


def _staging_target(staging: Path) -> Path:
    # mkdtemp(prefix=".tmp-<dest>-") appends [a-z0-9_] only, so the last dash ends the target's name.
    return staging.parent / staging.name.removeprefix(".tmp-").rsplit("-", 1)[0]


def install_running(dest: Path) -> bool:
    """Whether an install into the cache directory ``dest`` holds its lock right now."""
    if not (dest / INSTALL_LOCK).exists():
        return False
    lock = FileLock(dest / INSTALL_LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def remove_dir(directory: Path) -> bool:
    """Delete one directory unpinned_dirs() returned, never under a running install: False (nothing
    deleted) when an install holds the lock of that release (or of a staging directory's target)."""
    if directory.name.startswith(_REMOVING):
        shutil.rmtree(directory, ignore_errors=True)
        return True
    if directory.name.startswith(".tmp-"):
        if install_running(_staging_target(directory)):
            return False
        shutil.rmtree(directory, ignore_errors=True)
        return True
    lock = FileLock(directory / INSTALL_LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    try:
        # Moved out of its name first, so nothing ever resolves a binary from a half-deleted release.
        doomed = Path(tempfile.mkdtemp(prefix=f"{_REMOVING}{directory.name}-", dir=directory.parent))
        os.replace(directory, doomed / directory.name)
    finally:
        lock.release()
    shutil.rmtree(doomed, ignore_errors=True)
    return True
