"""The `kind` binary: the user's own, else one built once from the Go module proxy at the pinned version.

Lookup order (first hit wins), used by the pytest backend, `envtest kind up|down` and the Makefile:

1. an explicit path (pytest-kind-ng's ``--kind-bin``, ``envtest kind --kind-bin``);
2. ``kind`` on PATH — whatever version the user installed; kind itself checks node-image compatibility;
3. the cache, ``${XDG_CACHE_HOME:-~/.cache}/envtest/kind/<pin>/bin/kind``;
4. ``GOBIN=<that dir> go install sigs.k8s.io/kind@v<pin>``.

Never pytest-kind-ng's own download: it fetches kind v0.17.0 for amd64 only, which is too old for
the pinned node image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from envtest.binaries.gobuild import find_go
from envtest.errors import BinaryNotFound, InstallError
from envtest.pins import PINNED

MODULE = "sigs.k8s.io/kind"


def cache_bin_dir(version: str = PINNED.kind) -> Path:
    """Where a built kind lives: beside the control-plane cache, keyed by kind's version."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "envtest" / "kind" / version / "bin"


def resolve(
    explicit: Path | str | None = None,
    *,
    install: bool = True,
    version: str = PINNED.kind,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The kind binary to run (see the module docstring for the order). Always a `Path`: pytest-kind-ng
    calls ``kind_path.exists()``, so a `str` there fails at the first fixture."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise BinaryNotFound(f"--kind-bin {path}: no such file")
        return path
    on_path = shutil.which("kind")
    if on_path:
        return Path(on_path)
    cached = cache_bin_dir(version) / "kind"
    if cached.is_file():
        return cached
    if not install:
        raise BinaryNotFound(f"kind: not on PATH and not built in {cached}")
    return build(version, progress=progress or _stderr)


def build(version: str = PINNED.kind, *, progress: Callable[[str], None] = print) -> Path:
    """``go install sigs.k8s.io/kind@v<version>`` into the cache (once, under a file lock)."""
    bin_dir = cache_bin_dir(version)
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / "kind"
    with FileLock(str(bin_dir.parent / ".install.lock")):
        if target.is_file():  # another process built it while we waited
            return target
        progress(f"building kind v{version} with go (GOBIN={bin_dir}; ~2 min on a cold cache)")
        env = {k: v for k, v in os.environ.items() if k != "GOFLAGS"}  # -mod=… is refused with pkg@version
        env.update({"GOBIN": str(bin_dir), "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"})
        # Outside any module, so a go.mod or go.work above the checkout cannot change what is built.
        with tempfile.TemporaryDirectory(prefix="envtest-kind-") as cwd:
            proc = subprocess.run(
                [find_go(), "install", f"{MODULE}@v{version}"],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                errors="replace",
            )
        if proc.returncode != 0 or not target.is_file():
            tail = "\n".join(f"    {line}" for line in proc.stderr.splitlines()[-20:])
            raise InstallError(f"`go install {MODULE}@v{version}` exited {proc.returncode}:\n{tail}")
    return target


def _stderr(message: str) -> None:
    print(f"envtest: {message}", file=sys.stderr, flush=True)
