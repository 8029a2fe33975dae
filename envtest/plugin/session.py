"""The cluster of one pytest session (or of one xdist worker) and its lifecycle."""

from __future__ import annotations

import os
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from envtest import crds, objects
from envtest.clusters import Cluster, ExistingCluster, KindCluster, LocalCluster
from envtest.errors import ConfigError
from envtest.plane import supervisor
from envtest.plane.controlplane import ControlPlane
from envtest.plugin.settings import Settings

SHARED_DIR = "envtest-shared"
RUN_LABEL = "envtest.io/run"


def run_id(config: pytest.Config) -> str:
    """One id for the whole run, the same in every xdist worker (labels what the run creates)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "testrunuid" in workerinput:
        return str(workerinput["testrunuid"])[:12]
    if not hasattr(config, "_envtest_run_id"):
        config._envtest_run_id = os.environ.get("ENVTEST_RUN_ID", uuid.uuid4().hex[:12])  # type: ignore[attr-defined]
    return str(config._envtest_run_id)  # type: ignore[attr-defined]


def base_temp(config: pytest.Config) -> Path:
    """The run's base temp dir, shared by the controller and all xdist workers."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return base.parent if hasattr(config, "workerinput") else base


def _local_from_state(state: supervisor.PlaneState) -> LocalCluster:
    return LocalCluster(
        Path(state.kubeconfig),
        name=state.name,
        version=state.version,
        components=state.components,
        log_paths={k: Path(v) for k, v in state.logs.items()},
    )


class ClusterSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.run_id = run_id(config)
        self._cluster: Cluster | None = None
        self._crd_docs = [doc for _, doc in crds.load(settings.crds)] if settings.crds else []
        self.cr_paths = objects.custom_resource_paths(self._crd_docs)
        """API paths of the custom resources the tests' CRDs define (deleted at test teardown)."""

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def is_xdist_controller(self) -> bool:
        return not self.is_xdist_worker and bool(getattr(self.config.option, "numprocesses", 0))

    # -- the session's cluster -------------------------------------------------------------------

    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = self._open()
        return self._cluster

    def _open(self) -> Cluster:
        s = self.settings
        lock = FileLock(str(base_temp(self.config) / "envtest.lock"))
        if s.backend == "existing":
            path = s.kubeconfig or Path(os.environ.get("KUBECONFIG", "~/.kube/config")).expanduser()
            cluster: Cluster = ExistingCluster(path, context=s.context)
        elif s.backend == "kind":
            config_file = self.config.rootpath / "kind-config.yaml"
            with lock:  # one worker creates it; the others find it
                cluster = KindCluster(
                    name=s.cluster_name,
                    config_file=config_file if config_file.exists() else None,
                    keep=s.keep or self.is_xdist_worker,
                    kind_path=self.config.getoption("kind_bin", default=None),
                )
        elif s.keep:
            cluster = self._detached(supervisor.clusters_root() / s.cluster_name, owner=None)
        elif self.is_xdist_worker:
            # The controller's pid: if pytest dies hard, the plane stops itself.
            cluster = self._detached(base_temp(self.config) / SHARED_DIR, owner=os.getppid())
        else:
            plane = ControlPlane(
                s.components,
                version=s.version,
                crds=s.crds,
                job_pods=s.job_pods,  # type: ignore[arg-type]
                progress=self._progress,
            )
            plane.start()
            cluster = LocalCluster.from_plane(plane)
        with lock:
            self._prepare(cluster)
        return cluster

    def _detached(self, state_dir: Path, owner: int | None) -> LocalCluster:
        s = self.settings
        with FileLock(str(state_dir.parent / f".{state_dir.name}.lock")):
            state = supervisor.read_state(state_dir)
            if state is None:
                self._progress(f"starting a shared control plane (log: {state_dir / 'supervisor.log'})")
                state = supervisor.launch(
                    state_dir,
                    name=state_dir.name,
                    components=s.components,
                    version=s.version,
                    crds=s.crds,
                    job_pods=s.job_pods,
                    owner_pid=owner,
                )
        return _local_from_state(state)

    def _prepare(self, cluster: Cluster) -> None:
        """CRDs (local planes install them themselves, before the controller-manager) and RBAC."""
        if self.settings.crds and not isinstance(cluster, LocalCluster):
            crds.install(cluster.session, cluster.server, self.settings.crds)
        for source, doc in objects.load_manifests(self.settings.operator_rbac):
            objects.apply(cluster.session, cluster.server, doc, source=source)

    def private_cluster(self, *, components: str | None = None, job_pods: str | None = None) -> LocalCluster:
        s = self.settings
        plane = ControlPlane(
            components or s.components,
            version=s.version,
            crds=s.crds,
            job_pods=job_pods or s.job_pods,  # type: ignore[arg-type]
            progress=self._progress,
        )
        plane.start()
        cluster = LocalCluster.from_plane(plane, name="private")
        try:
            self._prepare(cluster)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def operator_clusterrole(self) -> str:
        if self.settings.operator_clusterrole:
            return self.settings.operator_clusterrole
        for _, doc in objects.load_manifests(self.settings.operator_rbac):
            if doc.get("kind") == "ClusterRole":
                return str(doc["metadata"]["name"])
        raise ConfigError(
            "the operator fixture needs a ClusterRole: set envtest_operator_rbac (files) "
            "or envtest_operator_clusterrole (name) in the pytest ini"
        )

    # -- end of session ---------------------------------------------------------------------------

    def finish(self) -> None:
        if self.is_xdist_controller and self.settings.backend == "local" and not self.settings.keep:
            supervisor.stop(base_temp(self.config) / SHARED_DIR)
        if self._cluster is not None:
            if self.settings.keep or self.settings.backend != "local":
                self._sweep(self._cluster)
            self._cluster.close()

    def _sweep(self, cluster: Cluster) -> None:
        """On clusters that outlive the run, leave no namespace of ours behind (even a stuck one)."""
        resp = cluster.session.get(
            f"{cluster.server}/api/v1/namespaces",
            params={"labelSelector": f"{RUN_LABEL}={self.run_id}"},
            timeout=10,
        )
        for ns in resp.json().get("items", []) if resp.ok else []:
            name = ns["metadata"]["name"]
            objects.strip_finalizers(cluster.session, cluster.server, name, self.cr_paths)
            cluster.session.delete(f"{cluster.server}/api/v1/namespaces/{name}", timeout=10)

    def summary_lines(self) -> list[str]:
        s = self.settings
        if not s.keep or self.is_xdist_worker or s.backend != "local":
            return []
        state = supervisor.read_state(supervisor.clusters_root() / s.cluster_name)
        if state is None:
            return []
        lines = [
            f"envtest: kept control plane {s.cluster_name!r} ({state.server}); stop it with "
            f"`envtest down --name {s.cluster_name}`",
            f"  export KUBECONFIG={shlex.quote(state.kubeconfig)}",
        ]
        if s.operator_cli:
            lines.append(
                f"  attach the operator: {s.operator_cli} --kubeconfig {shlex.quote(state.kubeconfig)}"
            )
        return lines

    def _progress(self, message: str) -> None:
        reporter: Any = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and not self.is_xdist_worker:
            reporter.write_line(f"envtest: {message}")
