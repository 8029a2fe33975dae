"""One Cluster interface, three backends: a local ControlPlane (in-process or shared across
processes), a kind cluster, or an existing cluster from a kubeconfig.

Every backend gives the same things: a kubeconfig path, admin clients for pykube-ng and the
`kubernetes` package, and `identity_kubeconfig()` — a kubeconfig for a ServiceAccount token, the
identity an operator under test runs as (so its RBAC is exercised on every backend alike).
"""

from __future__ import annotations

import copy
import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from envtest.errors import ConfigError, EnvtestError
from envtest.kubeconfig import keep_pykube_pems_private, write_kubeconfig
from envtest.loopback import no_proxy_for_loopback, no_proxy_for_loopback_config

if TYPE_CHECKING:  # heavy imports stay out of `pytest --help`
    import kubernetes.client
    import pykube
    import requests

    from envtest.plane.controlplane import ControlPlane
    from envtest.plane.reset import ResetPoint, ResetReport


class Cluster:
    """A running cluster the harness may use. Subclasses set `backend`, `kubeconfig` and `name`."""

    backend: str = "?"
    version: str = "?"

    def __init__(self, kubeconfig: Path, *, name: str, context: str | None = None) -> None:
        if not Path(kubeconfig).is_file():
            raise ConfigError(f"kubeconfig {kubeconfig} does not exist")
        self.kubeconfig = Path(kubeconfig)
        self.name = name
        self.context = context
        self.log_paths: dict[str, Path] = {}
        self.pods_dir: Path | None = None
        """Where kwok's fake pods keep their logs, sandboxes and port targets (local plane with kwok only)."""
        """Control-plane component logs, where the backend has them (artifacts copy these)."""
        self.has_controllers = True
        """Whether kube-controller-manager runs (default ServiceAccounts, GC, namespace deletion)."""
        self.audit_log: Path | None = None
        """kube-apiserver's audit log as this host reads it (the record: envtest.record); None when
        the harness has none to read, for the reason `audit_note` gives."""
        self.audit_note = f"the {self.backend} backend gives the harness no audit log to read"
        self.user_agent: str | None = None
        """User-Agent of the admin clients (`set_user_agent`); the apiserver names their writes'
        field manager after it, so objects they create can be told apart from others'."""

    def set_user_agent(self, user_agent: str) -> None:
        """The admin clients' User-Agent, for the clients built already and those built later."""
        self.user_agent = user_agent
        if "pykube" in self.__dict__:
            self.pykube.session.headers["User-Agent"] = user_agent
        if "k8s" in self.__dict__:
            self.k8s.user_agent = user_agent

    @functools.cached_property
    def pykube(self) -> pykube.HTTPClient:
        """The admin client behind `session` (its own connections: nothing an operator's client uses)."""
        client = self.new_pykube()
        if self.user_agent:
            client.session.headers["User-Agent"] = self.user_agent
        return client

    def new_pykube(self, timeout: float = 30.0) -> pykube.HTTPClient:
        return self.new_pykube_from(self.kubeconfig, context=self.context, timeout=timeout)

    @staticmethod
    def new_pykube_from(
        kubeconfig: Path, *, context: str | None = None, timeout: float = 30.0
    ) -> pykube.HTTPClient:
        """A fresh client (own session) for `kubeconfig`; pykube's 10 s default timeout is too short."""
        import pykube

        config = pykube.KubeConfig.from_file(str(kubeconfig))
        if context:
            config.set_current_context(context)
        return Cluster.pykube_client(config, timeout=timeout)

    @staticmethod
    def pykube_client(config: pykube.KubeConfig, *, timeout: float = 30.0) -> pykube.HTTPClient:
        """A client for a loaded kubeconfig; loopback traffic never goes through a proxy. An exec-plugin
        user (EKS, GKE, …) runs its plugin once per credential, not per request as pykube-ng would."""
        import pykube

        keep_pykube_pems_private(config)  # else a private key lands world-readable in /tmp
        adapter = None
        if config.user.get("exec"):
            from envtest.execauth import ExecAuthAdapter

            adapter = ExecAuthAdapter(config)
        client = pykube.HTTPClient(config, timeout=timeout, http_adapter=adapter)
        no_proxy_for_loopback(client.session, str(client.url))
        return client

    @functools.cached_property
    def k8s(self) -> kubernetes.client.ApiClient:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            str(self.kubeconfig), context=self.context, client_configuration=configuration
        )
        no_proxy_for_loopback_config(configuration)
        api = client.ApiClient(configuration)
        if self.user_agent:
            api.user_agent = self.user_agent
        return api

    @property
    def server(self) -> str:
        return str(self.pykube.url)

    @property
    def session(self) -> requests.Session:
        """An authenticated requests session for raw calls (`session.get(f"{cluster.server}/…")`)."""
        return self.pykube.session

    def identity_kubeconfig(
        self, namespace: str, service_account: str, path: Path, *, expiration_seconds: int = 3600
    ) -> Path:
        """A kubeconfig for `service_account` (created if missing) using a TokenRequest token."""
        base = f"{self.server}/api/v1/namespaces/{namespace}/serviceaccounts"
        resp = self.session.post(base, json={"metadata": {"name": service_account}}, timeout=10)
        if resp.status_code not in (201, 409):
            raise EnvtestError(f"creating ServiceAccount {namespace}/{service_account}: {resp.text[:300]}")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        resp = _retry_not_found(
            lambda: self.session.post(f"{base}/{service_account}/token", json=body, timeout=10)
        )
        if resp.status_code != 201:
            raise EnvtestError(f"TokenRequest for {namespace}/{service_account}: {resp.text[:300]}")
        cluster = copy.deepcopy(self._kubeconfig_cluster)
        user = f"system:serviceaccount:{namespace}:{service_account}"
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [cluster],
            "users": [{"name": user, "user": {"token": resp.json()["status"]["token"]}}],
            "contexts": [
                {
                    "name": "identity",
                    "context": {"cluster": cluster["name"], "user": user, "namespace": namespace},
                }
            ],
            "current-context": "identity",
        }
        return write_kubeconfig(path, config)

    @functools.cached_property
    def _kubeconfig_cluster(self) -> dict[str, Any]:
        """The `clusters` entry of the admin kubeconfig's context: the server and its CA, which every
        identity kubeconfig repeats (read once: parsing it cost a few ms per operator start)."""
        admin = yaml.safe_load(self.kubeconfig.read_text())
        context_name = self.context or admin["current-context"]
        context = next(c["context"] for c in admin["contexts"] if c["name"] == context_name)
        return next(c for c in admin["clusters"] if c["name"] == context["cluster"])

    def close(self) -> None:
        if "pykube" in self.__dict__:
            self.pykube.session.close()
        if "k8s" in self.__dict__:
            self.k8s.close()

    def describe(self) -> str:
        return f"backend={self.backend} cluster={self.name} k8s={self.version} server={self.server}"


def _retry_not_found(call: Any, attempts: int = 50) -> Any:
    # A ServiceAccount just created may not be visible to the token subresource for a moment.
    for _ in range(attempts):
        resp = call()
        if resp.status_code != 404:
            return resp
        time.sleep(0.1)
    return resp


class LocalCluster(Cluster):
    """A ControlPlane owned by this process (stopped by `close()`), or one recorded in a state file
    by another process (`owned=False`: shared under xdist, or kept with --keep-cluster)."""

    backend = "local"

    def __init__(
        self,
        kubeconfig: Path,
        *,
        name: str,
        version: str,
        components: list[str],
        log_paths: dict[str, Path],
        plane: ControlPlane | None = None,
        pods_dir: Path | None = None,
        audit_log: Path | None = None,
        etcd_url: str = "",
    ) -> None:
        super().__init__(kubeconfig, name=name)
        self.etcd_url = etcd_url
        """The plane's etcd; "" for a plane recorded by an older envtest (it cannot be reset)."""
        self._reset_point: ResetPoint | None = None
        """A recorded plane's reset point (a plane of this process keeps its own)."""
        self.version = version
        self.components = components
        self.log_paths = dict(log_paths)
        self.pods_dir = pods_dir
        self.has_controllers = "kube-controller-manager" in components
        self.plane = plane
        self.audit_log = audit_log
        self.audit_note = (
            f"control plane {name!r} runs without an audit log (started with the record off, or by an "
            "older envtest): stop it to get the record"
        )

    @classmethod
    def from_plane(cls, plane: ControlPlane, name: str = "envtest") -> LocalCluster:
        return cls(
            plane.kubeconfig,
            name=name,
            version=plane.version,
            components=list(plane.components),
            log_paths=plane.log_paths,
            plane=plane,
            pods_dir=plane.pods_dir if plane.pods_dir.is_dir() else None,
            audit_log=plane.audit_log,
            etcd_url=plane.etcd_url,
        )

    def restart(self, component: str) -> None:
        if self.plane is None:
            raise EnvtestError("restart() needs a control plane owned by this process (not a shared one)")
        self.plane.restart(component)

    def mark_reset_point(self) -> None:
        """Make what the plane holds now the state `reset()` puts back (after a session's own setup:
        objects it makes are then kept by every reset)."""
        if self.plane is not None:
            self.plane.mark_reset_point()
            return
        if not self.etcd_url:
            raise EnvtestError(
                f"control plane {self.name!r} was started by an older envtest and cannot be reset: stop it"
            )
        from envtest.plane import reset

        self._reset_point = reset.ResetPoint.settled(self.etcd_url)

    def reset(self) -> ResetReport:
        """Put the plane back to its reset point in place (envtest.plane.reset): for a plane of this
        process, how it was when ready unless marked since; for a recorded one, where it was marked."""
        if self.plane is not None:
            return self.plane.reset()
        if self._reset_point is None:
            raise EnvtestError(
                "reset() needs a reset point: call mark_reset_point() once the plane is set up"
            )
        from envtest.plane import reset

        return reset.reset_to(self.etcd_url, self._reset_point)

    def close(self) -> None:
        super().close()
        if self.plane is not None:
            self.plane.stop()


class ExistingCluster(Cluster):
    """Whatever KUBECONFIG (and optionally a context) points at. Nothing is started or stopped."""

    backend = "existing"

    def __init__(self, kubeconfig: Path, *, context: str | None = None) -> None:
        super().__init__(kubeconfig, name=context or "current-context", context=context)
        self.audit_note = (
            "an existing cluster's audit log (if its apiserver writes one) is not the harness's to read"
        )
        try:
            info = self.session.get(f"{self.server}/version", timeout=10).json()
            self.version = str(info.get("gitVersion", "?")).lstrip("v")
        except Exception as exc:
            raise EnvtestError(f"cannot reach the cluster of {kubeconfig}: {exc}") from exc


class KindCluster(Cluster):
    """A kind cluster through pytest-kind-ng (optional `[kind]` extra, GPL-3.0): reused when it runs,
    created (or re-created, when stale) otherwise, and ready for a suite when this returns.

    `delete_on_close`: delete it in `close()` if this object created it. A cluster found running
    (`make kind-up`) is left as found; under xdist the workers never delete, the controller does.
    """

    backend = "kind"

    def __init__(
        self,
        *,
        name: str,
        config_file: Path | None,
        delete_on_close: bool,
        kind_path: Path | str | None = None,
        image: str | None = None,
        kubeconfig: Path | None = None,
        ready_timeout: float = 300.0,
        progress: Any = None,
        version: str | None = None,
        record: bool = True,
        record_bodies: bool = False,
    ) -> None:
        from envtest import kind
        from envtest.binaries import kind as kind_binary

        report = progress or (lambda _m: None)
        self.kind_path = kind_binary.resolve(kind_path, progress=report)
        self._kind, self.created = kind.open_cluster(
            name,
            kind_path=self.kind_path,
            kubeconfig=kubeconfig,
            config_file=config_file,
            image=image,
            version=version,  # its minor picks the node image; a running cluster must be at it
            progress=report,
            record=record,  # a cluster created here writes the record's audit log (kind.audit_dir)
            record_bodies=record_bodies,
        )
        self._delete_on_close = delete_on_close
        super().__init__(Path(self._kind.kubeconfig_path), name=name)
        self.audit_log, self.audit_note = kind.audit_log(name)
        kind.wait_ready(kind.getter(self.session, self.server), name=name, timeout=ready_timeout)
        self.version = str(
            self.session.get(f"{self.server}/version", timeout=10).json().get("gitVersion", "?")
        ).lstrip("v")

    def close(self) -> None:
        super().close()
        if self._delete_on_close and self.created:
            self._kind.delete()
