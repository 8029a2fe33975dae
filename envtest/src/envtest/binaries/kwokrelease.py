"""kwok without Go: the official release binary, and kwok's stage definitions from its module zip.

envtest builds kwok from source with its patches (``gobuild.build_kwok``), which needs ``go``. Where
``go`` is not on PATH, the resolver downloads kwok's official release binary instead (verified by the
sha256 digest GitHub's release API publishes, ``download.artifact_for``) and takes the stage YAMLs
from the module's zip on the Go module proxy, checked against the module's go.sum hash pinned here —
the same files and the same check ``go mod download`` makes, without the toolchain.

What that kwok cannot do is serve fake pods' logs, exec, attach and port-forward the way the plane
needs (envtest's patches add the per-pod sandboxes, client certificates, exec exit codes and stdin
EOF), so a plane on it runs without pod streams and says so (``LOST``).

Environment: ``GOPROXY`` (its first http(s) entry; default https://proxy.golang.org), as go reads it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import requests

from envtest.binaries import download, gobuild
from envtest.errors import InstallError

MODULE = "sigs.k8s.io/kwok"
MODULE_SUMS: dict[str, str] = {
    # go.sum's hash of the module zip (`go mod download -json sigs.k8s.io/kwok@v0.8.0` → "Sum").
    "0.8.0": "h1:OTIOTwgROqPMovcTwxICx2eYQ4AwLpSx5EpjbDKF4SQ=",
}
DEFAULT_PROXY = "https://proxy.golang.org"
STAGE_PREFIX = "kustomize/stage/"

LOST = (
    "fake pods serve no logs, exec, attach or port-forward, so no exit codes of exec either "
    "(that takes envtest's patched kwok)"
)
"""What a plane on the official kwok release goes without, said once when it starts."""


def release_id(version: str) -> str:
    """The stamp (``gobuild.KWOK_STAMP``) of an official release kwok: its version, no build suffix."""
    return f"v{version}"


def is_release(binary: Path) -> bool:
    """Whether ``binary`` is a kwok envtest installed from the official release (its stamp names a
    plain version), as opposed to envtest's patched build or a kwok from elsewhere (no stamp)."""
    stamp = binary.parent / gobuild.KWOK_STAMP
    if not stamp.is_file():
        return False
    return re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", stamp.read_text().strip()) is not None


def proxy_url() -> str:
    """The first http(s) entry of GOPROXY; an InstallError when GOPROXY names none (off, direct)."""
    value = os.environ.get("GOPROXY") or DEFAULT_PROXY
    for entry in re.split(r"[,|]", value):
        entry = entry.strip()
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    raise InstallError(f"GOPROXY={value!r} names no proxy URL to fetch {MODULE} from without go")


def module_hash(zip_path: Path) -> str:
    """go.sum's ``h1:`` hash of a module zip (golang.org/x/mod/sumdb/dirhash.HashZip): sha256 over
    the sorted lines ``<sha256 hex of the file>  <name in the zip>``, base64."""
    summary = hashlib.sha256()
    with zipfile.ZipFile(zip_path) as zf:
        for name in sorted(n for n in zf.namelist() if not n.endswith("/")):
            if "\n" in name:
                raise InstallError(f"{zip_path}: file name with a newline in the module zip")
            with zf.open(name) as member:
                digest = hashlib.file_digest(member, "sha256").hexdigest()
            summary.update(f"{digest}  {name}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


def fetch_stages(
    version: str,
    stages_dir: Path,
    progress: Callable[[str], None],
    *,
    timeout: tuple[float, float] | None = None,
) -> None:
    """kwok v<version>'s stage YAMLs into ``stages_dir``, from its module zip on the Go module proxy,
    verified against MODULE_SUMS. Any failure is an InstallError with a one-line reason."""
    expected = MODULE_SUMS.get(version)
    if expected is None:
        raise InstallError(f"no go.sum hash of {MODULE}@v{version} is pinned, so its zip cannot be verified")
    url = f"{proxy_url()}/{MODULE}/@v/v{version}.zip"
    progress(f"fetching kwok v{version} stage definitions from {url}")
    with tempfile.TemporaryDirectory(prefix="envtest-kwokzip-") as wd:
        archive = Path(wd, "module.zip")
        try:
            with requests.get(url, stream=True, timeout=timeout or download.DEFAULT_TIMEOUT) as resp:
                if resp.status_code != 200:
                    raise InstallError(f"{url}: HTTP {resp.status_code}")
                with open(archive, "wb") as out:
                    for chunk in resp.iter_content(1 << 20):
                        out.write(chunk)
        except requests.RequestException as exc:
            raise InstallError(f"{url}: {type(exc).__name__}: {str(exc)[-300:]}") from exc
        try:
            got = module_hash(archive)
        except zipfile.BadZipFile as exc:
            raise InstallError(f"{url}: not a zip ({exc})") from exc
        if got != expected:
            raise InstallError(f"{url}: module hash mismatch (got {got}, go.sum pins {expected})")
        prefix = f"{MODULE}@v{version}/"
        module_dir = Path(wd, "module")
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.startswith(prefix + STAGE_PREFIX) and name.endswith(".yaml"):
                    target = module_dir / name.removeprefix(prefix)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
        gobuild.copy_kwok_stages(module_dir, stages_dir, version)
