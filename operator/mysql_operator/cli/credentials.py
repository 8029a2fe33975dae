"""The in-cluster ServiceAccount token, re-read when it rotates.

pykube-ng reads the projected token file once, when the KubeConfig is built; the kubelet rotates
that file (bound tokens expire after an hour by default, and are refreshed at 80% of their life), so
a long-running operator would start failing with 401 after the old token expires. client-go re-reads
the file at most once a minute; so does `TokenFile`, checked just before a request is sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pykube
import requests

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
REREAD_SECONDS = 60.0


class TokenFile:
    """Keeps `config.user["token"]` equal to the file's content, re-reading it every `interval` s."""

    def __init__(
        self,
        config: pykube.KubeConfig,
        path: Path = SERVICE_ACCOUNT_TOKEN,
        *,
        interval: float = REREAD_SECONDS,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.config, self.path, self.interval = config, path, interval
        self._monotonic = monotonic or time.monotonic
        self._lock = threading.Lock()
        self._read_at = self._monotonic()  # the KubeConfig was just built from the file

    def refresh(self) -> bool:
        """Re-read the file if `interval` has passed; True when the token changed."""
        now = self._monotonic()
        with self._lock:
            if now - self._read_at < self.interval:
                return False
            self._read_at = now
            try:
                token = self.path.read_text().strip()
            except OSError as exc:  # keep the old token: it may still be valid
                log.warning("token file %s unreadable: %s", self.path, exc)
                return False
            user = self.config.user
            if not token or token == user.get("token", "").strip():
                return False
            user["token"] = token
        log.info("service account token rotated; using the new one")
        return True

    def install(self, client: pykube.HTTPClient) -> pykube.HTTPClient:
        """Check the file before each request `client` sends (cheap: one clock read, mostly)."""
        send = client.session.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:
            self.refresh()
            return send(method, url, *args, **kwargs)

        client.session.request = request  # type: ignore[method-assign]
        return client


def in_cluster(config: pykube.KubeConfig) -> bool:
    """Whether `config` came from the ServiceAccount mount (pykube names that cluster "self")."""
    return config.filepath is None and config.current_context == "self"
