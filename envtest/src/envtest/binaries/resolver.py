"""Find, or install once into a per-version cache, the control-plane binaries.

Environment variables read by this module:

- ``TEST_ASSET_<NAME>``: path of one binary, e.g. TEST_ASSET_KUBE_APISERVER (wins over everything).
- ``KUBEBUILDER_ASSETS``: a directory holding binaries (as controller-runtime's envtest reads it).
- ``ENVTEST_K8S_VERSION``: a version selector (``1.36``, ``1.36.x``, ``~1.36.2``, ``1.36.2``, ``latest``,
  ``latest-on-disk``; see envtest.binaries.versions) to use instead of the newest pin.
- ``ENVTEST_OFFLINE=1``: never try release downloads; build with go from the module proxy straight away.
- ``ENVTEST_KWOK_STAGES``: a directory of kwok Stage YAMLs to use instead of the installed ones.
- ``XDG_CACHE_HOME``: the cache lives in ``${XDG_CACHE_HOME:-~/.cache}/envtest/k8s/<ver>-<os>-<arch>/``.
- download base URLs: see envtest.binaries.download.

Versions are pinned in envtest.pins: a Kubernetes patch per supported minor, with that minor's etcd
and kwok. Each version's binaries live in their own cache directory, side by side.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from filelock import FileLock, Timeout

from envtest.binaries import download, gobuild, kwokrelease, versions
from envtest.binaries.cache import INSTALL_LOCK, cache_root, parse_dir, platform_tag, versions_on_disk
from envtest.binaries.cache import executable as _executable
from envtest.errors import BinaryNotFound, ConfigError, InstallError
from envtest.pins import PINNED, SUPPORTED, MinorPins, for_minor

COMPONENT_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
CLIENT_BINARIES = ("kubectl",)  # not a plane component; installed with the plane so printed commands work
KNOWN_BINARIES = COMPONENT_BINARIES + CLIENT_BINARIES
DEFAULT_INSTALL = KNOWN_BINARIES
"""What `envtest binaries install` (and so `make setup`) installs: one pin, one build for all kube names."""
KWOK_STAGES = "kwok-stages"

Progress = Callable[[str], None]

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
_ADVICE = (
    "To use binaries you already have, set KUBEBUILDER_ASSETS=<dir with the binaries> or "
    "TEST_ASSET_<NAME>=<path> (e.g. TEST_ASSET_KUBE_APISERVER); to build them, put Go on PATH with "
    "network access to the Go module proxy and retry."
)


def _print_progress(line: str) -> None:
    print(f"envtest: {line}", file=sys.stderr, flush=True)


def k8s_version(version: str | None = None, *, source: str = "version") -> str:
    """The exact Kubernetes release (no leading 'v') a selector names: the argument, else
    ENVTEST_K8S_VERSION, else the newest pin. Selectors: envtest.binaries.versions; an exact release
    resolves to itself, so resolving twice is harmless. A bad one is a ConfigError naming ``source``
    (the option it came from) or ENVTEST_K8S_VERSION."""
    if version is None:
        version, source = os.environ.get("ENVTEST_K8S_VERSION") or PINNED.kubernetes, "ENVTEST_K8S_VERSION"
    try:
        return versions.select(version, on_disk=versions_on_disk, where=str(cache_root()))
    except ConfigError as exc:
        raise ConfigError(f"{source}={version!r}: {exc}") from None


def minor_pins(version: str) -> MinorPins:
    """The pins of the minor of ``version`` (an exact release); the newest pin's for a minor without
    one, which only a version that bypassed k8s_version() can have."""
    return for_minor(version) or SUPPORTED[-1]


def _offline_from_env() -> bool:
    value = os.environ.get("ENVTEST_OFFLINE", "").strip().lower()
    if value not in _TRUE + _FALSE:
        raise ConfigError(f"ENVTEST_OFFLINE={value!r}: use one of 1, true, yes, on, 0, false, no, off")
    return value in _TRUE


def cache_dir(version: str | None = None) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/envtest/k8s/<ver>-<os>-<arch>/`` (not created)."""
    os_name, arch = platform_tag()
    return cache_root() / f"{k8s_version(version)}-{os_name}-{arch}"


def kwok_stages_dir(
    version: str | None = None, *, install: bool = True, progress: Progress | None = None
) -> Path:
    """The directory of kwok Stage YAMLs (subdirectories node/, pod/, volume/ and a SOURCE file).

    Order: ``ENVTEST_KWOK_STAGES`` → ``$KUBEBUILDER_ASSETS/kwok-stages`` → the cache → install kwok.
    """
    env = os.environ.get("ENVTEST_KWOK_STAGES")
    if env:
        if not Path(env).is_dir():
            raise ConfigError(f"ENVTEST_KWOK_STAGES={env!r} is not a directory")
        return Path(env).absolute()
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and (Path(assets) / KWOK_STAGES).is_dir():
        return (Path(assets) / KWOK_STAGES).absolute()
    stages = cache_dir(version) / KWOK_STAGES
    if not _has_stages(stages.parent):
        if not install:
            raise BinaryNotFound(f"no kwok stages in ENVTEST_KWOK_STAGES, KUBEBUILDER_ASSETS or {stages}")
        _install(["kwok"], version, progress, None)
    return stages


def _env_name(name: str) -> str:
    return "TEST_ASSET_" + name.upper().replace("-", "_")


def _lookup(name: str, version: str, looked: list[str]) -> Path | None:
    """Steps 1-3 of resolve(); appends a line per place that did not have ``name`` to ``looked``."""
    var = _env_name(name)
    value = os.environ.get(var)
    if value:
        path = Path(value).expanduser().absolute()
        if not _executable(path):
            problem = "is not an executable file" if path.exists() else "does not exist"
            raise ConfigError(f"{var}={value!r}: {path} {problem}")
        return path
    looked.append(f"{var} (unset)")
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        path = Path(assets).expanduser().absolute() / name
        if _executable(path):
            return path
        looked.append(f"KUBEBUILDER_ASSETS: {path} (not an executable file)")
    else:
        looked.append("KUBEBUILDER_ASSETS (unset)")
    path = cache_dir(version) / name
    if _cached(path.parent, name, version):
        return path
    if _executable(path):
        looked.append(
            f"cache: {path} (not built as {gobuild.kwok_build_id(_component_version(name, version))})"
        )
    else:
        looked.append(f"cache: {path} (missing)")
    return None


def _cached(dest: Path, name: str, version: str) -> bool:
    """Whether the cache directory ``dest`` (of Kubernetes ``version``) holds a usable ``name``: kwok
    only as the build envtest wants (its KWOK_STAMP names the current patches)."""
    if not _executable(dest / name):
        return False
    if name != "kwok":
        return True
    stamp = dest / gobuild.KWOK_STAMP
    kwok = _component_version(name, version)
    built = stamp.read_text().strip() if stamp.is_file() else None
    if built == gobuild.kwok_build_id(kwok):
        return True
    # The official release stands in only while the patched build is impossible: once go is on
    # PATH the next resolve builds the patched kwok in its place.
    return built == kwokrelease.release_id(kwok) and not _go_available()


def _go_available() -> bool:
    try:
        gobuild.find_go()
    except InstallError:
        return False
    return True


def _build_only(name: str, version: str) -> bool:
    """A kwok that envtest patches is built while go is there to build it: its release download is
    upstream's, without the patches. With no go on PATH the release is downloaded instead."""
    patched = name == "kwok" and bool(gobuild.kwok_patches(_component_version(name, version)))
    return patched and _go_available()


def _check_names(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))  # dedupe, keep order
    unknown = [n for n in names if n not in KNOWN_BINARIES]
    if unknown:
        raise ConfigError(f"unknown binary {', '.join(unknown)}; known: {', '.join(KNOWN_BINARIES)}")
    return names


def resolve(
    name: str, *, version: str | None = None, install: bool = True, progress: Progress | None = None
) -> Path:
    """The path of the binary ``name``, looked up in this order:

    1. ``TEST_ASSET_<NAME>`` (upper-cased, '-' → '_', e.g. TEST_ASSET_KUBE_APISERVER): that file. If it is
       set but missing or not executable, ConfigError names the variable; nothing further is tried.
    2. ``$KUBEBUILDER_ASSETS/<name>``.
    3. The cache, ``cache_dir(version)/<name>``.
    4. With ``install=True``: install(name) — a verified release download, else ``go build`` — into the cache.

    ``version`` (default ENVTEST_K8S_VERSION, else the pinned one) picks the cache directory; 1 and 2 are
    taken as given. With ``install=False`` a miss raises BinaryNotFound listing every place looked.
    """
    return resolve_all([name], version=version, install=install, progress=progress)[name]


def resolve_all(
    names: Iterable[str] = COMPONENT_BINARIES,
    *,
    version: str | None = None,
    install: bool = True,
    progress: Progress | None = None,
) -> dict[str, Path]:
    """resolve() for each name; missing ones are installed together, so the kube binaries share one build."""
    names = _check_names(names)
    ver = k8s_version(version)
    found: dict[str, Path] = {}
    looked: dict[str, list[str]] = {}
    for name in names:
        looked[name] = []
        path = _lookup(name, ver, looked[name])
        if path is not None:
            found[name] = path
    missing = [n for n in names if n not in found]
    if missing and not install:
        places = "\n".join(f"  {n}:\n" + "\n".join(f"    {p}" for p in looked[n]) for n in missing)
        raise BinaryNotFound(
            f"{', '.join(missing)} not found; looked in:\n{places}\n"
            f"Run `envtest binaries install` or resolve with install=True. {_ADVICE}"
        )
    if missing:
        found.update(_install(missing, ver, progress, None))
    return {n: found[n] for n in names}


def _has_stages(directory: Path) -> bool:
    # SOURCE is written last, so its presence means the copy is complete.
    return (directory / KWOK_STAGES / "SOURCE").is_file()


def _complete(dest: Path, names: list[str], version: str) -> bool:
    return ("kwok" not in names or _has_stages(dest)) and all(_cached(dest, n, version) for n in names)


def install(
    names: Iterable[str] = DEFAULT_INSTALL,
    *,
    version: str | None = None,
    progress: Progress | None = None,
    offline: bool | None = None,
    force: bool = False,
) -> dict[str, Path]:
    """Install the named binaries (and, with kwok, its stages) into cache_dir(version); return their paths.

    Already-cached binaries are left alone, so a second call does nothing. Each missing one is first
    downloaded from its official release (unless ``offline``, default ENVTEST_OFFLINE) and checked against
    the published sha256; whatever that did not deliver is built with go. A FileLock on
    ``<cache>/.install.lock`` makes concurrent processes (xdist workers) build once: the others wait.
    Binaries appear in the cache only complete (built elsewhere, fsynced, renamed in). ``force`` installs
    again even what is cached (the old files are replaced only once the new ones are ready).
    """
    return _install(names, version, progress, offline, force)


def _install(
    names: Iterable[str],
    version: str | None,
    progress: Progress | None,
    offline: bool | None,
    force: bool = False,
) -> dict[str, Path]:
    # install()'s body; resolve() calls it by this name because its own `install` flag shadows install().
    names = _check_names(names)
    ver = k8s_version(version)
    dest = cache_dir(ver)
    result = {n: dest / n for n in names}
    if not force and _complete(dest, names, ver):
        return result
    report = progress or _print_progress
    skip_download = _offline_from_env() if offline is None else offline
    dest.mkdir(parents=True, exist_ok=True)
    lock = FileLock(dest / INSTALL_LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        report(f"waiting for another process installing into {dest}")
        lock.acquire()
    try:
        if force or not _complete(dest, names, ver):  # the process we waited for may have done it
            extra = _companions(names, dest)
            _install_locked(names + extra, ver, dest, report, skip_download, force, optional=extra)
    finally:
        lock.release()
    return result


def _companions(names: list[str], dest: Path) -> list[str]:
    """kubectl, when a build of the plane's kube binaries runs anyway: it shares that compile for a few
    seconds more, so the plane's kubectl comes with the plane. Its failure only earns a note."""
    if not any(n in download.KUBE_NAMES and not _executable(dest / n) for n in names):
        return []
    return [n for n in CLIENT_BINARIES if n not in names and not _executable(dest / n)]


def _install_locked(
    names: list[str],
    ver: str,
    dest: Path,
    report: Progress,
    offline: bool,
    force: bool,
    optional: list[str] | tuple[str, ...] = (),
) -> None:
    missing = [n for n in names if force or not _cached(dest, n, ver)]
    wanted = missing + (["kwok stages"] if "kwok" in names and (force or not _has_stages(dest)) else [])
    installed: set[str] = set()
    tried: list[tuple[str, str]] = []  # (what, why it failed), in the order tried
    # Inside the cache's parent so os.replace() into place never crosses a filesystem.
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
    try:
        if missing and offline:
            tried.append((", ".join(missing), "download: skipped (offline: ENVTEST_OFFLINE or offline=True)"))
        elif missing:
            os_name, arch = platform_tag()
            for name in [n for n in missing if _build_only(n, ver)]:
                tried.append((name, "download: skipped (envtest builds kwok with its patches)"))
            arts = [
                download.artifact_for(n, _component_version(n, ver), os_name, arch)
                for n in missing
                if not _build_only(n, ver)
            ]
            fetched, failed = download.download_all(arts, staging, progress=report)
            if "kwok" in fetched:
                _release_kwok(staging, dest, ver, report)
            _publish(staging, dest, fetched)
            installed.update(fetched)
            tried += [(n, f"download: {why}") for n, why in failed.items()]
            if fetched:
                report(f"installed {', '.join(fetched)} from release downloads into {dest}")
        left = [w for w in wanted if w not in installed]
        if "kwok stages" in left and not offline and _executable(dest / "kwok") and not _go_available():
            # A release kwok came without go: its stages come from the module zip, verified.
            try:
                kwokrelease.fetch_stages(minor_pins(ver).kwok, staging / KWOK_STAGES, report)
                _publish_dir(staging / KWOK_STAGES, dest / KWOK_STAGES)
                installed.add("kwok stages")
            except InstallError as exc:
                tried.append(("kwok stages", f"module zip: {exc}"))
            left = [w for w in left if w != "kwok stages"]
        if left:
            try:
                gobuild.find_go()
            except InstallError as exc:  # said once, not once per build
                tried.append((", ".join(left), f"go build: {exc}"))
                left = []
        for group, build in _builders([n for n in left if n in names], ver, staging):
            try:
                build(report)
            except InstallError as exc:
                tried.append((", ".join(group), f"go build: {exc}"))
                continue
            _publish(staging, dest, group)
            if "kwok" in group:  # the stamp after the binary: a stamp without its kwok is never read
                _publish(staging, dest, [gobuild.KWOK_STAMP], mode=0o644)
            installed.update(group)
            report(f"installed {', '.join(group)} into {dest}")
        # Stages only make sense beside a kwok binary; a kwok build brings them along, a download does not.
        if "kwok stages" in left and _executable(dest / "kwok"):
            try:
                if not _has_stages(staging):
                    gobuild.fetch_kwok_stages(minor_pins(ver).kwok, staging / KWOK_STAGES, report)
                _publish_dir(staging / KWOK_STAGES, dest / KWOK_STAGES)
                installed.add("kwok stages")
            except InstallError as exc:
                tried.append(("kwok stages", f"go mod download: {exc}"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    failed_names = [w for w in wanted if w not in installed and w not in optional]
    for name in optional:
        if name not in installed:
            report(
                f"note: {name} was not installed with the plane; `envtest binaries install {name}` retries"
            )
    if failed_names:
        lines = "\n".join(f"  {what}: {why}" for what, why in tried)
        raise InstallError(
            f"could not install {', '.join(failed_names)} (Kubernetes v{ver}) into {dest}; tried:\n"
            f"{lines}\n{_ADVICE}"
        )


def _release_kwok(staging: Path, dest: Path, ver: str, report: Progress) -> None:
    """Stamp a downloaded kwok as the official release (before the binary is published: until then
    the stamp sits beside no binary, or beside an older kwok that can do at least as much)."""
    kwok = _component_version("kwok", ver)
    (staging / gobuild.KWOK_STAMP).write_text(kwokrelease.release_id(kwok) + "\n")
    _publish(staging, dest, [gobuild.KWOK_STAMP], mode=0o644)
    if gobuild.kwok_patches(kwok):
        report(
            f"kwok v{kwok} is the official release: go is not on PATH to build envtest's patched "
            f"kwok, so {kwokrelease.LOST}; with go on PATH the next run builds it"
        )


def _component_version(name: str, k8s: str) -> str:
    """etcd and kwok come in their own versions, the ones pinned for the minor of ``k8s``."""
    pins = minor_pins(k8s)
    return {"etcd": pins.etcd, "kwok": pins.kwok}.get(name, k8s)


Build = tuple[list[str], Callable[[Progress], None]]  # (names one build delivers, the build)


def _builders(names: list[str], ver: str, staging: Path) -> list[Build]:
    """One build per source module: every kube name shares a single ``go build``."""
    builds: list[Build] = []
    kube = [n for n in names if n in download.KUBE_NAMES]
    if kube:
        builds.append((kube, lambda p: gobuild.build_kube(kube, ver, staging, p)))
    if "etcd" in names:
        etcd = _component_version("etcd", ver)
        builds.append((["etcd"], lambda p: gobuild.build_etcd(etcd, staging, p)))
    if "kwok" in names:
        stages, kwok = staging / KWOK_STAGES, _component_version("kwok", ver)
        builds.append((["kwok"], lambda p: gobuild.build_kwok(kwok, staging, stages, p)))
    return builds


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(staging: Path, dest: Path, names: Iterable[str], mode: int = 0o755) -> None:
    """Move finished binaries from staging into the cache, each durable before it becomes visible."""
    for name in names:
        src = staging / name
        src.chmod(mode)
        with open(src, "rb") as f:
            os.fsync(f.fileno())
        os.replace(src, dest / name)
    _fsync_dir(dest)


def _publish_dir(src: Path, dst: Path) -> None:
    for path in src.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    if dst.exists():  # an incomplete copy (no SOURCE) from an older envtest
        shutil.rmtree(dst)
    os.replace(src, dst)
    _fsync_dir(dst.parent)


def list_installed() -> list[tuple[str, Path]]:
    """Every cached version directory and its binaries, as (directory name, binary path) pairs, oldest
    release first (1.36.10 after 1.36.4).

    The directory name is ``<ver>-<os>-<arch>``; half-finished installs (hidden temp dirs) are skipped.
    """
    root = cache_root()
    if not root.is_dir():
        return []

    def order(d: Path) -> tuple[object, ...]:
        parsed = parse_dir(d)
        return (versions.sort_key(parsed[0]) or (), d.name) if parsed else ((), d.name)

    return [
        (d.name, d / name)
        for d in sorted(root.iterdir(), key=order)
        if d.is_dir() and not d.name.startswith(".")
        for name in KNOWN_BINARIES
        if _executable(d / name)
    ]
