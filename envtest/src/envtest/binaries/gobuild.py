"""Build the control-plane binaries with ``go build`` from the Go module proxy, in generated wrapper modules.

Used when no release download worked. Each build runs in a throwaway wrapper module so the user's
own go.mod and GOFLAGS never leak in, with the toolchain pinned to the local one (GOTOOLCHAIN=local:
a toolchain download would be a second, silent network dependency) and cgo off (static binaries,
no C compiler needed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import requests
import yaml

from envtest.errors import InstallError

Progress = Callable[[str], None]

GO_ENV = {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
GIT_COMMIT = "envtest-gobuild"
"""Stamped as gitCommit: these builds come from module zips, which carry no commit."""

KWOK_STAGE_KINDS = ("node", "pod", "volume")
THROTTLE_S = 2.0
"""At most one of go's stderr lines per this many seconds reaches progress; all are kept for errors."""
HEARTBEAT_S = 60.0
"""A cold kube build is silent for many minutes; say it is still alive this often."""

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$")


def split_version(version: str) -> tuple[int, int, int, str]:
    """'1.37.2' -> (1, 37, 2, ''); '1.38.0-rc.1' -> (1, 38, 0, '-rc.1')."""
    m = _VERSION_RE.match(version)
    if not m:
        raise InstallError(f"not a release version: {version!r}")
    return int(m[1]), int(m[2]), int(m[3]), m[4] or ""


def find_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise InstallError(
            "go is not on PATH, so nothing can be built from source (install Go, or see below)"
        )
    return go


def run_go(
    args: list[str],
    *,
    cwd: Path | None,
    progress: Progress,
    throttle: float = THROTTLE_S,
    heartbeat: float = HEARTBEAT_S,
) -> str:
    """Run ``go <args>``; stream stderr to progress (throttled); return stdout. Non-zero exit -> InstallError
    with the exit code and go's last 30 stderr lines."""
    env = {**os.environ, **GO_ENV}
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        [find_go(), *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe,
        text=True, errors="replace",  # a stray non-UTF-8 byte in go's output must not kill the pump
    )  # fmt: skip
    tail: deque[str] = deque(maxlen=30)
    out: list[str] = []

    def pump_stderr() -> None:
        assert proc.stderr is not None
        last = float("-inf")
        for line in proc.stderr:
            tail.append(line.rstrip())
            now = time.monotonic()
            if now - last >= throttle:
                progress(f"  | {line.rstrip()}")
                last = now

    def pump_stdout() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())

    pumps = [threading.Thread(target=f, daemon=True) for f in (pump_stderr, pump_stdout)]
    for t in pumps:
        t.start()
    started = time.monotonic()
    try:
        while True:
            try:
                rc = proc.wait(timeout=heartbeat)
                break
            except subprocess.TimeoutExpired:
                progress(f"  still running go {args[0]} ({(time.monotonic() - started) / 60:.0f} min so far)")
    finally:
        if proc.poll() is None:  # interrupted: a stray compiler would hold the build cache lock for minutes
            proc.kill()
            proc.wait()
    for t in pumps:
        t.join()
    if rc != 0:
        lines = "\n".join(f"    {line}" for line in tail)
        raise InstallError(f"`go {' '.join(args)}` exited {rc} in {cwd}; last lines:\n{lines}")
    return "".join(out)


def _go_env(*names: str) -> list[str]:
    return run_go(["env", *names], cwd=None, progress=lambda _: None).splitlines()


def _escape_module(path: str) -> str:
    # The module cache and proxy protocol spell upper-case letters as '!' + lower-case.
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), path)


def upstream_go_mod(module: str, version: str, *, timeout: tuple[float, float] = (5.0, 60.0)) -> str:
    """The go.mod text of ``module@v<version>``: from the module cache, else GOPROXY's first URL entry,
    else ``go mod download`` (which also honours GOPROXY=direct and private settings)."""
    modcache, goproxy = [*_go_env("GOMODCACHE", "GOPROXY"), "", ""][:2]
    rel = f"{_escape_module(module)}/@v/v{version}.mod"
    cached = Path(modcache, "cache", "download", rel)
    if modcache and cached.is_file():
        return cached.read_text()
    first = re.split(r"[,|]", goproxy)[0].strip()
    if first.startswith(("https://", "http://")):
        try:
            resp = requests.get(f"{first.rstrip('/')}/{rel}", timeout=timeout)
            if resp.status_code == 200:
                return resp.text
        except requests.RequestException:
            pass  # go mod download below reports the real reason, with go's own retries and fallbacks
    info = json.loads(
        run_go(["mod", "download", "-json", f"{module}@v{version}"], cwd=None, progress=lambda _: None)
    )
    return Path(info["GoMod"]).read_text()


_STAGING_RE = re.compile(
    r"^\s*(?:replace\s+)?(k8s\.io/[\w.-]+)\s*=>\s*\./staging/src/k8s\.io/[\w.-]+\s*$", re.M
)
_GO_LINE_RE = re.compile(r"^go\s+(\S+)\s*$", re.M)
_GODEBUG_RE = re.compile(r"^godebug\s*\(.*?^\)|^godebug\s+[^(\s][^\n]*$", re.M | re.S)


def staging_modules(upstream: str) -> list[str]:
    """Every k8s.io module that k8s.io/kubernetes replaces with its own ./staging copy."""
    return _STAGING_RE.findall(re.sub(r"//.*", "", upstream))


def wrapper_go_mod(upstream: str, version: str) -> str:
    """go.mod for a module that builds k8s.io/kubernetes v<version> from the proxy.

    k8s.io/kubernetes requires its staging modules at v0.0.0 and points them at ./staging, which a
    dependent module cannot see; each is published on its own as v0.<minor>.<patch>, so the wrapper
    replaces every one with that. The list is read from the release's own go.mod because it changes
    between releases and one missing entry breaks the build.
    """
    _, minor, patch, pre = split_version(version)
    modules = staging_modules(upstream)
    go_line = _GO_LINE_RE.search(upstream)
    if not modules or not go_line:
        raise InstallError(f"k8s.io/kubernetes v{version}'s go.mod has no go line or no staging replaces")
    parts = ["module envtest.local/k8sbuild", f"go {go_line.group(1)}"]
    parts += [m.group(0).strip() for m in _GODEBUG_RE.finditer(upstream)]
    parts.append(f"require k8s.io/kubernetes v{version}")
    staged = "\n".join(f"\t{m} => {m} v0.{minor}.{patch}{pre}" for m in modules)
    parts.append(f"replace (\n{staged}\n)")
    return "\n\n".join(parts) + "\n"


def _check_toolchain(required: str, what: str) -> None:
    have = _go_env("GOVERSION")[0].removeprefix("go")

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])

    if key(have) < key(required):
        raise InstallError(
            f"{what} needs go >= {required}, but the go on PATH is go{have} (GOTOOLCHAIN=local)"
        )


def kube_ldflags(version: str, build_date: str) -> str:
    """The -ldflags that make `kube-apiserver --version` (and /version) report v<version>."""
    major, minor, _, _ = split_version(version)
    values = {
        "gitVersion": f"v{version}",
        "gitMajor": str(major),
        "gitMinor": str(minor),
        "gitCommit": GIT_COMMIT,
        "gitTreeState": "clean",
        "buildDate": build_date,
    }
    # client-go keeps its own copy of the version variables; kubectl and clients report from it.
    pkgs = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    return " ".join(["-s", "-w", *(f"-X {p}.{k}={v}" for p in pkgs for k, v in values.items())])


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _wrapper(name: str, go_mod: str) -> tempfile.TemporaryDirectory[str]:
    tmp = tempfile.TemporaryDirectory(prefix=f"envtest-{name}-")
    Path(tmp.name, "go.mod").write_text(go_mod)
    return tmp


def build_kube(names: Iterable[str], version: str, out_dir: Path, progress: Progress) -> None:
    """Build the named k8s.io/kubernetes commands into out_dir in ONE go build, so they share the compile."""
    names = list(names)
    pkgs = [f"k8s.io/kubernetes/cmd/{n}" for n in names]
    upstream = upstream_go_mod("k8s.io/kubernetes", version)
    go_mod = wrapper_go_mod(upstream, version)
    go_line = _GO_LINE_RE.search(go_mod)
    assert go_line is not None  # wrapper_go_mod refuses to write one without it
    _check_toolchain(go_line.group(1), f"k8s.io/kubernetes v{version}")
    progress(f"building {', '.join(names)} v{version} with go (cold cache: ~20 min, warm: ~1 min)")
    with _wrapper("k8sbuild", go_mod) as wd:
        run_go(["get", *(f"{p}@v{version}" for p in pkgs)], cwd=Path(wd), progress=progress)
        ldflags = kube_ldflags(version, _utc_now())
        # A trailing separator makes -o a directory, so each command lands under its own name.
        run_go(
            ["build", "-ldflags", ldflags, "-o", f"{out_dir}{os.sep}", *pkgs], cwd=Path(wd), progress=progress
        )


def build_etcd(version: str, out_dir: Path, progress: Progress) -> None:
    progress(f"building etcd v{version} with go (cold cache: ~3 min)")
    pkg = "go.etcd.io/etcd/server/v3"
    with _wrapper("etcdbuild", "module envtest.local/etcdbuild\n") as wd:
        run_go(["get", f"{pkg}@v{version}"], cwd=Path(wd), progress=progress)
        ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA={GIT_COMMIT}"
        # Named explicitly: left to itself go would call a binary built from .../server/v3 "server".
        run_go(
            ["build", "-ldflags", ldflags, "-o", str(out_dir / "etcd"), pkg], cwd=Path(wd), progress=progress
        )


PATCHES_DIR = Path(__file__).with_name("patches")
KWOK_STAMP = "kwok.build"
"""Beside a cached kwok: the build id (kwok_build_id) it was built as. A kwok without it, or with
another id, is not reused: an unpatched kwok from an older envtest must never pass for a patched one."""


def kwok_patches(version: str) -> list[Path]:
    """The patches envtest applies to kwok v<version> before building it, in order (none: upstream as is).

    They live in ``patches/kwok-v<version>/`` beside this module, versioned with the pin; each says
    in its message what it fixes."""
    return sorted((PATCHES_DIR / f"kwok-v{version}").glob("*.patch"))


def kwok_build_id(version: str) -> str:
    """``v<version>`` for upstream kwok; ``v<version>+envtest.<hash of the patches>`` for a patched one."""
    patches = kwok_patches(version)
    if not patches:
        return f"v{version}"
    digest = hashlib.sha256()
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes() + b"\0")
    return f"v{version}+envtest.{digest.hexdigest()[:12]}"


def _apply_patches(module_dir: Path, patches: list[Path], progress: Progress) -> None:
    patch_tool = shutil.which("patch")
    if patch_tool is None:
        raise InstallError(
            "`patch` is not on PATH; it applies envtest's kwok patches (install it: apt-get install patch)"
        )
    for patch in patches:
        progress(f"  applying {patch.name}")
        proc = subprocess.run(
            [patch_tool, "-p1", "--batch", "--forward", "--silent", "-i", str(patch)],
            cwd=module_dir, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if proc.returncode != 0:
            raise InstallError(f"{patch} does not apply to {module_dir.name}:\n{proc.stdout}{proc.stderr}")


def build_kwok(version: str, out_dir: Path, stages_dir: Path, progress: Progress) -> None:
    """Build kwok into out_dir (with envtest's patches, kwok_patches) and copy the module's own stage
    YAMLs into stages_dir; KWOK_STAMP in out_dir records the build id."""
    progress(f"building kwok {kwok_build_id(version)} with go (cold cache: ~3 min)")
    info = json.loads(
        run_go(["mod", "download", "-json", f"sigs.k8s.io/kwok@v{version}"], cwd=None, progress=progress)
    )
    if info.get("Error"):
        raise InstallError(f"go mod download sigs.k8s.io/kwok@v{version}: {info['Error']}")
    with tempfile.TemporaryDirectory(prefix="envtest-kwokbuild-") as wd:
        # A writable copy of the module (the module cache is read-only), patched and built as the main
        # module, so its own go.mod and go.sum pin every dependency exactly as upstream's release does.
        src = Path(wd, "kwok")
        shutil.copytree(info["Dir"], src)
        for path in [src, *src.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        _apply_patches(src, kwok_patches(version), progress)
        ldflags = f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v{version}"
        run_go(
            ["build", "-ldflags", ldflags, "-o", str(out_dir / "kwok"), "./cmd/kwok"],
            cwd=src,
            progress=progress,
        )
    (out_dir / KWOK_STAMP).write_text(kwok_build_id(version) + "\n")
    copy_kwok_stages(Path(info["Dir"]), stages_dir, version)


def fetch_kwok_stages(version: str, stages_dir: Path, progress: Progress) -> None:
    """Copy kwok's stage YAMLs from its module (downloaded and checksum-verified by go) into stages_dir."""
    progress(f"fetching kwok v{version} stage definitions with go mod download")
    info = json.loads(
        run_go(["mod", "download", "-json", f"sigs.k8s.io/kwok@v{version}"], cwd=None, progress=progress)
    )
    if info.get("Error"):
        raise InstallError(f"go mod download sigs.k8s.io/kwok@v{version}: {info['Error']}")
    copy_kwok_stages(Path(info["Dir"]), stages_dir, version)


# Stages, and the default StorageClass the volume stages provision for (PVCs stay Pending without one).
KWOK_KINDS = ("Stage", "StorageClass")


def _is_stage_file(path: Path) -> bool:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError:
        return False
    return bool(docs) and all(isinstance(d, dict) and d.get("kind") in KWOK_KINDS for d in docs)


def copy_kwok_stages(module_dir: Path, stages_dir: Path, version: str) -> None:
    """Copy the Stage YAMLs under kustomize/stage/{node,pod,volume} keeping relative paths, plus SOURCE.

    Taken from kwok's own module rather than written by hand so the stages match the kwok binary.
    Copied: files of Stages and the volume stages' StorageClass. Skipped: kustomization.yaml, testdata
    (sample Pods and Nodes) and RBAC (ours runs with an admin kubeconfig). SOURCE is written last.
    """
    root = module_dir / "kustomize" / "stage"
    copied = 0
    for kind in KWOK_STAGE_KINDS:
        for src in sorted((root / kind).rglob("*.yaml")):
            if src.name == "kustomization.yaml" or not _is_stage_file(src):
                continue
            dst = stages_dir / src.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)  # not copy2: module cache files are read-only, ours must be removable
            copied += 1
    if copied == 0:
        raise InstallError(f"no kwok Stage YAMLs under {root}")
    dirs, kinds = ",".join(KWOK_STAGE_KINDS), ", ".join(KWOK_KINDS)
    (stages_dir / "SOURCE").write_text(
        f"sigs.k8s.io/kwok v{version}\nkustomize/stage/{{{dirs}}}\n{copied} files ({kinds})\n"
    )
