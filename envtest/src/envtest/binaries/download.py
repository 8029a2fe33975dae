"""Official release downloads of the control-plane binaries, each verified against its published sha256.

Every failure raises InstallError with a one-line reason; binaries.install() records it and falls
through to ``go build``, so nothing here retries. Base URLs come from the environment so tests (and
mirrors) can point them elsewhere:

- ``ENVTEST_K8S_RELEASE_URL``  (default https://dl.k8s.io/release)
- ``ENVTEST_ETCD_RELEASE_URL`` (default https://github.com/etcd-io/etcd/releases/download)
- ``ENVTEST_KWOK_RELEASE_URL`` (default https://github.com/kubernetes-sigs/kwok/releases/download)
- ``ENVTEST_KWOK_API_URL``     (default https://api.github.com/repos/kubernetes-sigs/kwok/releases/tags)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import requests

from envtest.errors import InstallError

KUBE_NAMES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 60.0)
"""(connect, read) seconds per request. Module-level so tests can shrink it; read is per socket read."""

_CHUNK = 1 << 20
_HEX64 = re.compile(r"\b([0-9a-fA-F]{64})\b")


class Checksum(Enum):
    """How the expected sha256 is published next to an artifact."""

    SINGLE = "single"  # a file holding just the digest (dl.k8s.io's <name>.sha256)
    SUMS = "sums"  # sha256sum output, one "<digest>  <file>" line per artifact (etcd's SHA256SUMS)
    GITHUB_DIGEST = "github-digest"  # GitHub's release JSON, assets[].digest = "sha256:…" (kwok)


@dataclass(frozen=True)
class Artifact:
    """Where one binary is published and how to check it."""

    name: str
    """The binary's name once installed."""
    url: str
    """The file to fetch: the binary itself or an archive holding it."""
    checksum_url: str
    checksum: Checksum
    checksum_key: str
    """The file name the checksum list is keyed by (the last segment of url)."""
    member: str | None = None
    """Path of the binary inside the archive, or None when url is the binary."""


def _base(env: str, default: str) -> str:
    return (os.environ.get(env) or default).rstrip("/")


def artifact_for(name: str, version: str, os_name: str, arch: str) -> Artifact:
    """The release artifact for ``name`` at ``version`` (the Kubernetes version for kube binaries,
    etcd's or kwok's own version for those), for one os/arch."""
    if name in KUBE_NAMES:
        url = f"{_base('ENVTEST_K8S_RELEASE_URL', 'https://dl.k8s.io/release')}/v{version}/bin/{os_name}/{arch}/{name}"
        return Artifact(name, url, url + ".sha256", Checksum.SINGLE, name)
    if name == "etcd":
        base = _base("ENVTEST_ETCD_RELEASE_URL", "https://github.com/etcd-io/etcd/releases/download")
        stem = f"etcd-v{version}-{os_name}-{arch}"
        # etcd ships zips for darwin and tarballs for linux.
        archive = f"{stem}.zip" if os_name == "darwin" else f"{stem}.tar.gz"
        return Artifact(
            name,
            f"{base}/v{version}/{archive}",
            f"{base}/v{version}/SHA256SUMS",
            Checksum.SUMS,
            archive,
            f"{stem}/etcd",
        )
    if name == "kwok":
        base = _base("ENVTEST_KWOK_RELEASE_URL", "https://github.com/kubernetes-sigs/kwok/releases/download")
        api = _base("ENVTEST_KWOK_API_URL", "https://api.github.com/repos/kubernetes-sigs/kwok/releases/tags")
        asset = f"kwok-{os_name}-{arch}"
        # kwok's release script uploads bare binaries and no sums file; GitHub's release API publishes
        # each asset's sha256 digest, which is the only checksum there is to verify against.
        return Artifact(
            name, f"{base}/v{version}/{asset}", f"{api}/v{version}", Checksum.GITHUB_DIGEST, asset
        )
    raise InstallError(f"no release download is known for {name!r}")


def _host(url: str) -> str:
    return urlsplit(url).netloc


def _reason(exc: requests.RequestException) -> str:
    # requests nests urllib3's errors three deep ("Max retries exceeded … Caused by …"); the innermost
    # one says what happened ("Failed to resolve 'github.com'", "Read timed out").
    inner: object = exc.args[0] if exc.args else exc
    inner = getattr(inner, "reason", inner)
    text = re.sub(r"^\w+\(host=[^)]*\):\s*", "", str(inner))
    return f"{type(exc).__name__}: {text[-300:]}"


class Downloader:
    """Fetches artifacts with one session, remembering hosts that could not be reached.

    One unreachable host fails every later request to it at once: without this, a blackholed
    github.com costs a connect timeout per binary before the go build can start.
    """

    def __init__(
        self, *, timeout: tuple[float, float] | None = None, session: requests.Session | None = None
    ):
        self.timeout = timeout or DEFAULT_TIMEOUT
        self._session = session or requests.Session()
        self._dead_hosts: dict[str, str] = {}  # host -> the connection error that condemned it

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Downloader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, url: str) -> requests.Response:
        host = _host(url)
        if host in self._dead_hosts:
            raise InstallError(f"{url}: skipped, {host} was unreachable ({self._dead_hosts[host]})")
        try:
            resp = self._session.get(url, stream=True, timeout=self.timeout)
        except (requests.ConnectionError, requests.Timeout) as exc:
            self._dead_hosts[host] = _reason(exc)
            raise InstallError(f"{url}: {_reason(exc)}") from exc
        except requests.RequestException as exc:
            raise InstallError(f"{url}: {_reason(exc)}") from exc
        if resp.status_code != 200:
            resp.close()
            raise InstallError(f"{url}: HTTP {resp.status_code}")
        return resp

    def _text(self, url: str) -> str:
        with self._get(url) as resp:
            try:
                return resp.text
            except requests.RequestException as exc:
                raise InstallError(f"{url}: {_reason(exc)}") from exc

    def expected_sha256(self, art: Artifact) -> str:
        """The published digest for ``art``, lower-case hex."""
        body = self._text(art.checksum_url)
        if art.checksum is Checksum.SINGLE:
            match = _HEX64.search(body)
            if match:
                return match.group(1).lower()
        elif art.checksum is Checksum.SUMS:
            for line in body.splitlines():
                parts = line.split()
                if (
                    len(parts) == 2
                    and parts[1].lstrip("*") == art.checksum_key
                    and _HEX64.fullmatch(parts[0])
                ):
                    return parts[0].lower()
        else:
            try:
                assets = json.loads(body).get("assets", [])
            except (ValueError, AttributeError) as exc:
                raise InstallError(f"{art.checksum_url}: not a GitHub release JSON document") from exc
            for asset in assets:
                digest = asset.get("digest") or ""
                if asset.get("name") == art.checksum_key and digest.startswith("sha256:"):
                    return digest.removeprefix("sha256:").lower()
        raise InstallError(f"{art.checksum_url}: no sha256 for {art.checksum_key}")

    def fetch(self, art: Artifact, dest: Path) -> None:
        """Download ``art``, verify it, and write the (extracted) binary to ``dest`` with mode 0755."""
        expected = self.expected_sha256(art)
        digest = hashlib.sha256()
        with tempfile.TemporaryFile(dir=dest.parent) as raw, self._get(art.url) as resp:
            try:
                for chunk in resp.iter_content(_CHUNK):
                    digest.update(chunk)
                    raw.write(chunk)
            except requests.RequestException as exc:
                raise InstallError(f"{art.url}: {_reason(exc)}") from exc
            if digest.hexdigest() != expected:
                raise InstallError(
                    f"{art.url}: sha256 mismatch (got {digest.hexdigest()}, published {expected})"
                )
            raw.seek(0)
            with open(dest, "wb") as out:
                _extract(art, raw, out)
                out.flush()
                os.fsync(out.fileno())
        dest.chmod(0o755)


def _extract(art: Artifact, raw: IO[bytes], out: IO[bytes]) -> None:
    if art.member is None:
        _copy(raw, out)
        return
    try:
        if art.url.endswith(".zip"):
            with zipfile.ZipFile(raw) as zf, zf.open(art.member) as member:
                _copy(member, out)
            return
        with tarfile.open(fileobj=raw, mode="r:*") as tf:
            member = tf.extractfile(art.member)
            if member is None:
                raise KeyError(art.member)
            _copy(member, out)
    except (KeyError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise InstallError(f"{art.url}: no {art.member} in the archive ({exc})") from exc


def _copy(src: IO[bytes], dst: IO[bytes]) -> None:
    while chunk := src.read(_CHUNK):
        dst.write(chunk)


def download_all(
    artifacts: list[Artifact],
    dest_dir: Path,
    *,
    progress: Callable[[str], None],
    timeout: tuple[float, float] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Fetch each artifact into ``dest_dir/<name>``. Returns (names fetched, {name: why not})."""
    fetched: list[str] = []
    failed: dict[str, str] = {}
    with Downloader(timeout=timeout) as dl:
        for art in artifacts:
            progress(f"downloading {art.name} from {art.url}")
            try:
                dl.fetch(art, dest_dir / art.name)
            except InstallError as exc:
                (dest_dir / art.name).unlink(missing_ok=True)
                failed[art.name] = str(exc)
                progress(f"download of {art.name} failed: {exc}")
            else:
                fetched.append(art.name)
    return fetched, failed
