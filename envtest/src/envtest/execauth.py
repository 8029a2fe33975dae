"""Credentials from a kubeconfig user's exec plugin (EKS, GKE, AKS, Teleport, …), fetched once per expiry.

pykube-ng runs the ``exec`` command of a kubeconfig user for every request it sends: against EKS that
is one ``aws eks get-token`` (a Python process and an STS call) per GET. client-go keeps the
ExecCredential until its ``status.expirationTimestamp`` and fetches a new one early, or after the
apiserver answered 401. This module does the same for the harness's pykube clients:

- `ExecCredentials`: one exec configuration's credential, fetched when first needed and again only
  when it nears its expiry or was refused (401); every client of that configuration shares it
  (`credentials_for`), and the fetch runs once even when many threads ask at the same moment.
- `ExecAuthAdapter`: pykube-ng's own transport adapter whose exec branch takes the credential from
  there; every other way of authenticating stays pykube-ng's.

The `kubernetes` client needs none of it: its loader keeps the credential and reruns the plugin only
once the expiry has passed (its ``refresh_api_key_hook``), so `Cluster.k8s` is left as it is.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shlex
import subprocess
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pykube
import requests
from pykube.http import KubernetesHTTPAdapter

from envtest import ownedtemp
from envtest.errors import ExecPluginError
from envtest.pki import write_private

__all__ = ["Credential", "ExecAuthAdapter", "ExecCredentials", "credentials_for"]

Clock = Callable[[], dt.datetime]

REFRESH_MARGIN = dt.timedelta(minutes=5)
"""A credential is replaced this long before its expirationTimestamp (or half its lifetime before,
if that is shorter): a request signed just before the expiry must not arrive just after it. The
`kubernetes` client and pykube-ng's own token refresh use the same 5 minutes."""

PLUGIN_TIMEOUT = 120.0
"""Seconds a plugin may take (cloud CLIs start slowly); one that hangs fails with its command named."""

API_VERSIONS = tuple(f"client.authentication.k8s.io/{v}" for v in ("v1", "v1beta1", "v1alpha1"))
EXEC_CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"
CERT_KIND = "exec-"
"""The temporary folder (`envtest.ownedtemp`) of the client certificates plugins print (requests
reads them from files)."""
_USED = "_envtest_exec_credential"  # set on each request: which credential it carried


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Credential:
    """One ExecCredential's status: a bearer token, or a client certificate written to 0600 files."""

    token: str | None
    cert_files: tuple[str, str] | None
    """(certificate, key) paths for requests' ``cert=``; None for a token."""
    expires: dt.datetime | None
    """status.expirationTimestamp; None: valid until the apiserver refuses it."""
    refresh_at: dt.datetime | None
    """When the next request fetches a new one instead (before `expires`); None: only after a 401."""


class ExecCredentials:
    """The credential of one exec configuration (``users[].user.exec`` of a kubeconfig).

    `get()` returns the cached credential, fetching a new one (running the plugin) only when there is
    none yet, when ``clock()`` has reached its `Credential.refresh_at`, or after `invalidate()`.
    `fetches` counts the plugin's runs.
    """

    def __init__(
        self,
        exec_config: Mapping[str, Any],
        *,
        cluster: Mapping[str, Any] | None = None,
        base_dir: Path | None = None,
        label: str = "kubeconfig user",
        clock: Clock = _utcnow,
        timeout: float = PLUGIN_TIMEOUT,
    ) -> None:
        self.label = label
        """Which kubeconfig user this is, for error messages."""
        command = exec_config.get("command")
        if not command or not isinstance(command, str):
            raise ExecPluginError(f"{label}: exec.command is missing")
        self.api_version = str(exec_config.get("apiVersion") or "")
        if self.api_version not in API_VERSIONS:
            raise ExecPluginError(
                f"{label}: exec.apiVersion {self.api_version!r} is not one of {', '.join(API_VERSIONS)}"
            )
        # As client-go: a command with a path separator but not absolute is relative to the
        # kubeconfig's folder; a bare name is looked up on PATH.
        if os.sep in command and not os.path.isabs(command) and base_dir is not None:
            command = str(Path(base_dir) / command)
        self.argv = [command, *(str(a) for a in exec_config.get("args") or [])]
        self._env = {str(e["name"]): str(e["value"]) for e in exec_config.get("env") or []}
        self._install_hint = str(exec_config.get("installHint") or "").strip()
        self._interactive = str(exec_config.get("interactiveMode") or "IfAvailable")
        spec: dict[str, Any] = {"interactive": False}  # stdin is never a terminal here
        if exec_config.get("provideClusterInfo") and cluster is not None:
            spec["cluster"] = dict(cluster)
        self._exec_info = json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec})
        self._clock = clock
        self._timeout = timeout
        self._lock = threading.Lock()  # held while fetching: concurrent callers wait for that one run
        self._current: Credential | None = None  # None before the first fetch and after invalidate()
        self._cert_dir: Path | None = None  # created on the first certificate credential
        self._previous_files: tuple[str, str] | None = None
        self.fetches = 0

    def get(self) -> Credential:
        """The current credential; runs the plugin only when there is none or it is due for renewal."""
        with self._lock:
            current = self._current
            if current is None or (current.refresh_at is not None and self._clock() >= current.refresh_at):
                current = self._current = self._fetch()
            return current

    def invalidate(self, credential: Credential) -> None:
        """The apiserver refused `credential` (401): the next `get()` fetches anew. A credential that
        was already replaced is left alone, so a burst of 401s causes one fetch, not one each."""
        with self._lock:
            if self._current is credential:
                self._current = None

    # -- running the plugin ----------------------------------------------------------------------

    def _fetch(self) -> Credential:
        if self._interactive == "Always":
            raise ExecPluginError(
                f"{self.label}: exec plugin {shlex.join(self.argv)} needs a terminal (interactiveMode: "
                "Always); log in once in a terminal so that it can answer without one"
            )
        fetched_at = self._clock()
        env = {**os.environ, **self._env, "KUBERNETES_EXEC_INFO": self._exec_info}
        try:
            proc = subprocess.run(
                self.argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=env,
                timeout=self._timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            raise ExecPluginError(self._failure(f"command {self.argv[0]!r} not found")) from exc
        except subprocess.TimeoutExpired as exc:
            raise ExecPluginError(self._failure(f"no answer after {self._timeout:.0f}s")) from exc
        except OSError as exc:
            raise ExecPluginError(self._failure(f"cannot run it: {exc}")) from exc
        self.fetches += 1
        if proc.returncode != 0:
            stderr = proc.stderr.decode(errors="replace").strip()[-2000:]
            raise ExecPluginError(self._failure(f"exited {proc.returncode}: {stderr or '(no stderr)'}"))
        return self._parse(proc.stdout, fetched_at)

    def _parse(self, stdout: bytes, fetched_at: dt.datetime) -> Credential:
        try:
            data = json.loads(stdout)
        except ValueError as exc:
            raise ExecPluginError(self._failure(f"printed no JSON ExecCredential: {exc}")) from exc
        if not isinstance(data, dict) or data.get("kind") != "ExecCredential":
            raise ExecPluginError(self._failure("printed JSON that is not an ExecCredential"))
        if data.get("apiVersion") != self.api_version:
            raise ExecPluginError(
                self._failure(f"answered apiVersion {data.get('apiVersion')!r}, not {self.api_version!r}")
            )
        status = data.get("status") or {}
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not token and not (cert and key):
            raise ExecPluginError(
                self._failure(
                    "printed neither status.token nor status.clientCertificateData and clientKeyData"
                )
            )
        expires = _expiry(status.get("expirationTimestamp"), self._failure)
        refresh_at = None
        if expires is not None:
            refresh_at = expires - min(REFRESH_MARGIN, max(expires - fetched_at, dt.timedelta(0)) / 2)
        files = None if token else self._write_cert(str(cert).encode(), str(key).encode())
        return Credential(token=token or None, cert_files=files, expires=expires, refresh_at=refresh_at)

    def _write_cert(self, cert: bytes, key: bytes) -> tuple[str, str]:
        # requests reads a client certificate from files only. The pair before the previous one is
        # removed: a connection being opened right now may still read the previous pair.
        if self._cert_dir is None:
            self._cert_dir = ownedtemp.make(CERT_KIND)  # 0700; those of killed processes are removed
            weakref.finalize(self, ownedtemp.remove_own, self._cert_dir)
        stem = self._cert_dir / f"credential-{self.fetches}"
        files = (f"{stem}.crt", f"{stem}.key")
        write_private(Path(files[0]), cert)
        write_private(Path(files[1]), key)
        if self._previous_files is not None:
            for old in self._previous_files:
                Path(old).unlink(missing_ok=True)
        self._previous_files = self._current.cert_files if self._current is not None else None
        return files

    def _failure(self, what: str) -> str:
        hint = f"\n{self._install_hint}" if self._install_hint else ""
        return f"{self.label}: exec plugin {shlex.join(self.argv)} {what}{hint}"


def _expiry(value: Any, failure: Callable[[str], str]) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ExecPluginError(failure(f"printed status.expirationTimestamp {value!r}, not RFC 3339")) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


# -- one cache per exec configuration, shared by every client --------------------------------------

_shared: dict[str, ExecCredentials] = {}
_shared_lock = threading.Lock()


def credentials_for(config: pykube.KubeConfig) -> ExecCredentials | None:
    """The shared credentials of `config`'s current user, or None when that user has no ``exec``.

    Keyed like client-go's cache: the exec configuration, plus the cluster when the plugin is given
    it (``provideClusterInfo``), plus the kubeconfig's folder (relative commands resolve there).
    """
    exec_config = config.user.get("exec")
    if not exec_config:
        return None
    context = config.contexts[config.current_context]
    cluster = (
        _cluster_info(config, context.get("cluster", "")) if exec_config.get("provideClusterInfo") else None
    )
    base_dir = config.kubeconfig_path.parent if config.kubeconfig_path else None
    key = json.dumps([exec_config, cluster, str(base_dir)], sort_keys=True, default=str)
    with _shared_lock:
        credentials = _shared.get(key)
        if credentials is None:
            where = f" in {config.kubeconfig_path}" if config.kubeconfig_path else ""
            credentials = _shared[key] = ExecCredentials(
                exec_config,
                cluster=cluster,
                base_dir=base_dir,
                label=f"user {context.get('user', '')!r}{where}",
            )
        return credentials


def _cluster_info(config: pykube.KubeConfig, name: str) -> dict[str, Any]:
    """The ExecCredential's ``spec.cluster`` (client-go's field names) for the kubeconfig cluster `name`."""
    raw = next(
        (c.get("cluster") or {} for c in config.doc.get("clusters") or [] if c.get("name") == name), {}
    )
    info: dict[str, Any] = {"server": raw.get("server", "")}
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if key in raw:
            info[key] = raw[key]
    ca = raw.get("certificate-authority-data")
    if not ca and raw.get("certificate-authority"):
        path = Path(raw["certificate-authority"])
        if not path.is_absolute() and config.kubeconfig_path:
            path = config.kubeconfig_path.parent / path
        ca = base64.b64encode(path.read_bytes()).decode()
    if ca:
        info["certificate-authority-data"] = ca
    for extension in raw.get("extensions") or []:
        if extension.get("name") == EXEC_CLUSTER_EXTENSION:
            info["config"] = extension.get("extension")
    return info


# -- the transport ---------------------------------------------------------------------------------


class ExecAuthAdapter(KubernetesHTTPAdapter):
    """pykube-ng's adapter, with the credential of an exec user taken from `ExecCredentials`.

    ``credentials`` fixes the cache to use (tests inject one with a fake clock); by default it is the
    one shared by every client of the same exec configuration. A request that already carries an
    Authorization header keeps it, as pykube-ng does.
    """

    def __init__(
        self, kube_config: pykube.KubeConfig, *, credentials: ExecCredentials | None = None, **kwargs: Any
    ) -> None:
        super().__init__(kube_config, **kwargs)
        self._credentials = credentials

    def _exec_credentials(self, config: pykube.KubeConfig) -> ExecCredentials | None:
        if not config.user.get("exec"):
            return None
        return self._credentials or credentials_for(config)

    def _setup_request_auth(
        self, config: pykube.KubeConfig, request: requests.PreparedRequest, kwargs: dict[str, Any]
    ) -> Any:
        credentials = self._exec_credentials(config)
        if credentials is None or "Authorization" in request.headers:
            return super()._setup_request_auth(config, request, kwargs)
        credential = credentials.get()
        if credential.token:
            request.headers["Authorization"] = f"Bearer {credential.token}"
        else:
            kwargs["cert"] = credential.cert_files
        setattr(request, _USED, (credentials, credential))
        return None  # no retry: as client-go, a 401 only makes the next request fetch anew

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        response: requests.Response = super().send(request, **kwargs)
        used = getattr(request, _USED, None)
        if used is not None and response.status_code == HTTPStatus.UNAUTHORIZED:
            credentials, credential = used
            credentials.invalidate(credential)
        return response
