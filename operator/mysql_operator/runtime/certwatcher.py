"""The serving certificate, re-read when its files change: controller-runtime's certwatcher idea.

cert-manager renews a webhook certificate 30 days before it expires, and a CA rotation replaces key,
certificate and CA at once; a Secret volume shows the new files within a minute (the kubelet swaps a
symlink, so both files change in one step). A server that loaded them once keeps presenting the old
certificate: after the caBundle moves to the new CA, every new connection from the apiserver fails
verification, and with ``failurePolicy: Fail`` every MySQLCluster write fails until the pod restarts.

Here the check is made where it matters, once per new connection, before its handshake: read both
files and compare them with the pair that is loaded (a few KB; a TLS handshake costs far more). No
thread, no clock, no missed change (an mtime can repeat within a tick and a rewrite can keep the
size). Connections already open keep the context they were made with, as in Go.

A pair that does not load — the certificate written and the key not yet, a truncated file, a key that
belongs to another certificate — is never served: the previous context stays until both files load
together, and that broken pair is reported once rather than on every connection.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

Pair = tuple[bytes, bytes]
"""(certificate PEM, key PEM) exactly as read from the files."""


class CertLoadError(ValueError):
    """The certificate and key files could not be loaded; the message names both files and why."""


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A TLS server context for the pair; TLS 1.2 at least, as the apiserver's own client requires."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class CertWatcher:
    """``context()`` is the SSLContext for the next connection: the newest pair that loads."""

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        configure: Callable[[ssl.SSLContext], None] | None = None,
    ) -> None:
        """Load the pair now; CertLoadError if it does not load (a server must not start without).

        ``configure`` is applied to every context made (the server's ALPN protocols, say), so a
        reload never loses a setting.
        """
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self._configure = configure
        self._lock = threading.Lock()  # one reload at a time; readers never wait for it
        try:
            pair = self._read()
            context = self._load(pair)
        except (OSError, ValueError, _Changed) as exc:
            raise CertLoadError(
                f"serving certificate {self.cert_file} / key {self.key_file}: {_reason(exc)}"
            ) from exc
        self._context, self._loaded = context, pair  # swapped together, under _lock
        self._rejected: Pair | str | None = None
        """The last pair that failed to load (or the read error): not retried, not reported again,
        until the files change."""
        self.reloads = 0
        """Times a changed pair replaced the loaded one (for logs and metrics)."""

    def context(self) -> ssl.SSLContext:
        """The context to wrap a new connection with, reloading first if the files changed."""
        try:
            pair = self._read()
        except OSError as exc:  # a file missing for a moment (a swap in progress): keep serving
            self._reject(f"{type(exc).__name__}: {exc}", exc)
            return self._context
        if pair == self._loaded:
            return self._context
        with self._lock:
            if pair == self._loaded or pair == self._rejected:
                return self._context
            try:
                context = self._load(pair)
            except _Changed:
                return self._context  # written to while we loaded: the next connection tries again
            except (OSError, ValueError) as exc:
                self._reject(pair, exc)
                return self._context
            self._context, self._loaded, self._rejected = context, pair, None
            self.reloads += 1
        log.info(
            "serving certificate reloaded",
            extra={"cert": str(self.cert_file), "sha256": hashlib.sha256(pair[0]).hexdigest()[:16]},
        )
        return context

    def _read(self) -> Pair:
        return self.cert_file.read_bytes(), self.key_file.read_bytes()

    def _load(self, pair: Pair) -> ssl.SSLContext:
        """The context for ``pair``, loaded from the files; _Changed if they no longer hold ``pair``.

        ssl loads a chain from paths only, so the files are read again after loading: what was
        loaded is then known to be what was compared, not a later write.
        """
        context = server_context(self.cert_file, self.key_file)
        if self._configure is not None:
            self._configure(context)
        if self._read() != pair:
            raise _Changed
        return context

    def _reject(self, what: Pair | str, exc: BaseException) -> None:
        if what == self._rejected:
            return
        self._rejected = what
        log.warning(
            "serving certificate not reloaded; still serving the previous one",
            extra={"cert": str(self.cert_file), "key": str(self.key_file), "error": _reason(exc)},
        )


class _Changed(Exception):
    """The files changed between reading and loading them."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _Changed):
        return "the files changed while they were being loaded"
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}"
    return str(exc) or type(exc).__name__
