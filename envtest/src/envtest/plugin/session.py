"""The cluster of one pytest session (or of one xdist worker) and its lifecycle."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any, TextIO

import pytest
from filelock import FileLock, Timeout

from envtest import binaries, commands, crds, objects, runs
from envtest.clusters import Cluster, ExistingCluster, KindCluster, LocalCluster
from envtest.errors import ConfigError, CRDError, EnvtestError, UsageProblem
from envtest.plane import supervisor
from envtest.plane.controlplane import ControlPlane
from envtest.plugin import clusterscoped, endpoint, pointing, rbac, recording, sweep
from envtest.plugin import settings as settings_mod
from envtest.plugin.releases import Releases
from envtest.plugin.settings import Settings
from envtest.plugin.state import SESSION_KEY, SHARED_DIR
from envtest.webhooks import conversion

DETACHED_START_TIMEOUT = 300.0
"""Seconds for a detached plane to report ready once its binaries are installed (≈ 5 s normally;
generous for a loaded 2-core CI machine). A first-time build happens before, without this limit."""
KIND_CREATED = "envtest-kind-created"
"""Written by the xdist worker that created the kind cluster (it holds the kind path used)."""
RUN_LABEL = sweep.RUN_LABEL
RELEASE_FAILURES = "envtest_release_failures"
"""Key of `config.workeroutput` under which an xdist worker hands its failed releases to the controller."""


RUN_ID_KEY = "envtest_run_id"
"""Key of `workerinput` under which the xdist controller hands its run id to every worker."""


def run_id(config: pytest.Config) -> str:
    """One id for the whole run, the same in the xdist controller and every worker (labels what the
    run creates; the controller's end-of-run sweep selects it): ENVTEST_RUN_ID when set, else the
    controller's own, handed to each worker as it starts (`pytest_configure_node`)."""
    if os.environ.get("ENVTEST_RUN_ID"):
        return runs.check_run_id(os.environ["ENVTEST_RUN_ID"])
    workerinput = getattr(config, "workerinput", None)
    if workerinput and RUN_ID_KEY in workerinput:
        return str(workerinput[RUN_ID_KEY])
    if workerinput and "testrunuid" in workerinput:  # a controller without a session of its own
        return str(workerinput["testrunuid"])[:12]
    if not hasattr(config, "_envtest_run_id"):
        config._envtest_run_id = uuid.uuid4().hex[:12]  # type: ignore[attr-defined]
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
        pods_dir=pods if (pods := Path(state.workdir) / "pods").is_dir() else None,
        audit_log=Path(state.audit_log) if state.audit_log else None,
        etcd_url=state.etcd_url,
    )


class ClusterSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.run_id = run_id(config)
        self._cluster: Cluster | None = None
        self.worker = sweep.worker_id(config)
        self.notes: list[str] = []
        """Things worth a line in the report header (CRD-folder documents skipped)."""
        self._crd_docs = (
            [doc for _, doc in crds.load(settings.crds, notes=self.notes)] if settings.crds else []
        )
        self.cr_paths = objects.custom_resource_paths(self._crd_docs)
        """API paths of the namespaced custom resources the tests' CRDs define (deleted at teardown)."""
        self.cluster_cr_paths = objects.custom_resource_paths(self._crd_docs, scope="Cluster")
        """API paths of the cluster-scoped ones (what a test made is deleted at its teardown too)."""
        try:
            manifests = objects.load_manifests(settings.operator_rbac)
        except ConfigError as exc:
            raise UsageProblem(f"envtest_operator_rbac: {exc}") from None
        self._session_rbac, roles = rbac.split_manifests(manifests)
        self.operator_roles = [doc for _, doc in roles]
        """Roles of the operator, created and bound in each test namespace (not at session start)."""
        self.recording = recording.SessionRecord(settings.record)
        """The record of the operators' requests (envtest.plugin.recording)."""
        for role in self.operator_roles:
            self.recording.grants[f"Role/{role['metadata']['name']}"] = list(role.get("rules") or [])
        self._role_rules: dict[tuple[str, str], tuple[list[rbac.Rule], list[rbac.Rule]]] = {}
        self.releases = Releases()
        """Test namespaces being released after their tests (drained by `finish`)."""
        self._release_failures: list[str] = []
        self._record_lines: list[str] = []
        """The record's summary (written by `finish` where the run's report is)."""
        """Failed namespace releases (this process's, and on the xdist controller its workers')."""
        self._record: runs.RunRecord | None = None
        """This process's run record on a persistent cluster (`envtest.runs`), renewed until finish."""
        self._reset_module: str | None = None
        """The test file of the last test set up (or of the last reset that succeeded), with
        `envtest_reset = module`."""
        self._conversion: tuple[conversion.ConversionServer, str, bytes] | None = None
        """This process's own conversion server (in-process planes, private planes, kind/existing with
        ``-n 0``): server, URL, CA; stopped last in `finish()`."""

    @property
    def labels(self) -> dict[str, str]:
        """Labels of what this process creates on a cluster: the sweep finds exactly these."""
        return sweep.labels(self.run_id, self.worker)

    def header_lines(self) -> list[str]:
        return [self.settings.header(), *(f"envtest: {note}" for note in self.notes)]

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def is_xdist_controller(self) -> bool:
        return not self.is_xdist_worker and bool(getattr(self.config.option, "numprocesses", 0))

    # -- the session's cluster -------------------------------------------------------------------

    def cluster(self) -> Cluster:
        if self._cluster is None:
            cluster = self._open()
            # Writes of this worker's admin clients are told apart by their field manager (see
            # envtest.plugin.clusterscoped).
            cluster.set_user_agent(clusterscoped.user_agent(self.run_id, self.worker))
            pointing.point_at_cluster(self.config, cluster.kubeconfig, cluster.context)
            self._cluster = cluster
        return self._cluster

    @property
    def own_plane(self) -> bool:
        """Whether this xdist worker runs a plane of its own (`envtest_reset`) instead of the shared one."""
        return self.is_xdist_worker and self.settings.reset != "none"

    @property
    def isolation_dir(self) -> Path:
        """Where the run's isolation lock lives (shared by the xdist workers that share a cluster, see
        `isolation`; a worker with a plane of its own has its own)."""
        if self.own_plane:
            own = base_temp(self.config) / f"envtest-isolation-{self.worker}"
            own.mkdir(exist_ok=True)
            return own
        return base_temp(self.config)

    @property
    def alone_in_run(self) -> bool:
        """Whether no other xdist worker runs tests beside this process on its cluster."""
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
        return not self.is_xdist_worker or workers <= 1 or self.own_plane

    def opened_cluster(self) -> Cluster | None:
        """The session's cluster if it has been opened, without opening it."""
        return self._cluster

    def _open(self) -> Cluster:
        s = self.settings
        lock = FileLock(str(base_temp(self.config) / "envtest.lock"))
        if s.backend == "existing":
            path = s.kubeconfig or Path("~/.kube/config").expanduser()  # settings read KUBECONFIG
            cluster: Cluster = ExistingCluster(path, context=s.context)
        elif s.backend == "kind":
            from envtest import kind

            # The project's own kind config at its rootdir, else the one shipped in the package.
            config_file = self.config.rootpath / "kind-config.yaml"
            with lock:  # one worker creates it; the others find it
                cluster = KindCluster(
                    name=s.cluster_name,
                    config_file=config_file if config_file.exists() else kind.DEFAULT_CONFIG,
                    delete_on_close=not (s.keep or self.is_xdist_worker),
                    kind_path=s.kind_bin,
                    image=s.kind_image,
                    kubeconfig=s.kubeconfig,
                    progress=self._progress,
                    version=s.version,
                    record=s.record.on,
                    record_bodies=s.record.bodies,
                )
                if cluster.created and self.is_xdist_worker:  # for the controller's finish()
                    (base_temp(self.config) / KIND_CREATED).write_text(str(cluster.kind_path))
        elif s.keep:
            cluster = self._detached(supervisor.clusters_root() / s.cluster_name, owner=None)
        elif self.is_xdist_worker and not self.own_plane:
            # The controller's pid: if pytest dies hard, the plane stops itself.
            cluster = self._detached(base_temp(self.config) / SHARED_DIR, owner=os.getppid())
        else:
            plane = ControlPlane(
                s.components,
                version=s.version,
                crds=self._plane_crds(),
                job_pods=s.job_pods,  # type: ignore[arg-type]
                progress=self._progress,
                pod_streams=s.pod_streams,
                pod_exec=s.pod_exec,
                record=s.record.on,
                record_bodies=s.record.bodies,
            )
            plane.start()  # the conversion server, if any, outlives a failed start: finish() stops it
            cluster = LocalCluster.from_plane(plane)
        with lock:
            self._prepare(cluster)
        self.recording.log_of(cluster)  # a backend without the record says so once, in the summary
        if self.persistent:
            self._start_record(cluster)
        if s.reset != "none":  # what a reset puts back: the plane as this session set it up
            assert isinstance(cluster, LocalCluster)  # settings allow a reset on local planes only
            cluster.mark_reset_point()
        return cluster

    def reset_before(self, item: pytest.Item) -> None:
        """With `envtest_reset = module`: at the first test of each module (test file) after the first
        that ran on the cluster, the releases of the last module's namespaces are drained and the plane
        is reset. A failed reset fails the test, and the module's next test tries again: no test of it
        runs on a plane that was not reset."""
        module = item.nodeid.split("::")[0]
        previous = self._reset_module
        self._reset_module = module
        if self._cluster is None or previous is None or module == previous:
            return
        self.releases.drain()  # their deletes must not land after the reset
        cluster = self._cluster
        assert isinstance(cluster, LocalCluster)
        try:
            if self.persistent:  # a kept plane: another run on it would lose what it made
                others = runs.sweep_dead(
                    cluster.session, cluster.server, keep_runs=[self.run_id], dry_run=True
                )
                if others.live:
                    who = ", ".join(f"{v.owner[0]}/{v.owner[1]} ({v.why})" for v in others.live)
                    raise EnvtestError(
                        f"another run uses this kept plane, and a reset would delete its objects: {who}"
                    )
            report = cluster.reset()
        except EnvtestError as exc:
            self._reset_module = previous
            raise EnvtestError(f"envtest_reset = module: resetting the plane failed: {exc}") from None
        self._progress(f"plane reset before {module}: {report.summary()}")

    @property
    def persistent(self) -> bool:
        """Whether the cluster outlives the run (kind, existing, a kept plane): then runs record
        themselves on it, and each process sweeps what dead runs left (see `envtest.runs`)."""
        return self.settings.keep or self.settings.backend != "local"

    def _start_record(self, cluster: Cluster) -> None:
        # Dead runs' leftovers first (never a live run's: see envtest.runs), then our own record,
        # before this process creates anything that carries our labels.
        report = runs.sweep_dead(cluster.session, cluster.server, keep_runs=[self.run_id])
        for owner in report.removed:
            self.notes.append(f"swept what dead run {owner[0]} ({owner[1]}) left")
        self._record = runs.RunRecord(cluster.session, cluster.server, self.run_id, self.worker)
        self._record.start()

    def _detached(self, state_dir: Path, owner: int | None) -> LocalCluster:
        """The plane recorded in `state_dir`, started (detached) if none runs. A running one is reused
        only with the same settings; a kept one gets the CRDs applied again (they may have changed)."""
        s = self.settings
        version = binaries.k8s_version(s.version)
        state_dir.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(state_dir.parent / f".{state_dir.name}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            self._progress("waiting for another process starting the control plane")
            lock.acquire()
        try:
            state = supervisor.read_state(state_dir)
            if state is None:
                # Binaries first, here, under the install lock and with progress the user sees: the
                # supervisor's log reaches nobody, and its timeout should not have to cover a build.
                binaries.resolve_all(s.components, version=version, progress=self._progress)
                if "kwok" in s.components:
                    binaries.kwok_stages_dir(version, progress=self._progress)
                self._progress(f"starting a control plane (log: {state_dir / 'supervisor.log'})")
                state = supervisor.launch(
                    state_dir,
                    name=state_dir.name,
                    components=s.components,
                    version=version,
                    crds=s.crds,
                    job_pods=s.job_pods,
                    owner_pid=owner,
                    conversion=self._supervised_conversion(),
                    timeout=DETACHED_START_TIMEOUT,
                    pod_streams=s.pod_streams,
                    pod_exec=s.pod_exec,
                    record=s.record.on,
                    record_bodies=s.record.bodies,
                )
                reused = False
            else:
                supervisor.check_reusable(
                    state,
                    version=version,
                    components=s.components,
                    job_pods=s.job_pods,
                    conversion=s.conversion_webhook or "",
                    pod_streams=s.pod_streams,
                    pod_exec=s.pod_exec,
                )
                reused = True
        except UsageProblem as exc:
            raise pytest.UsageError(str(exc)) from None
        finally:
            lock.release()
        cluster = _local_from_state(state)
        if reused and s.keep and s.crds:  # a shared plane of this run got them from its supervisor
            if state.conversion_url:  # a plain re-apply replaces spec, conversion included
                conversion.install_crds(
                    cluster.session,
                    cluster.server,
                    self._crd_docs,
                    state.conversion_url,
                    state.conversion_ca.encode(),
                )
            else:
                crds.install(cluster.session, cluster.server, s.crds)
        return cluster

    def _supervised_conversion(self) -> supervisor.Conversion | None:
        s = self.settings
        if not s.conversion_webhook:
            return None
        return supervisor.Conversion(s.conversion_webhook, s.conversion_path, python_path=self._import_path())

    def _import_path(self) -> tuple[str, ...]:
        # A detached process imports the factory: give it our import path (rootdir first, as pytest's
        # rootdir conftest insertion would), or `pkg.module` may not resolve there.
        entries = [str(self.config.rootpath), *(p or os.getcwd() for p in sys.path)]
        return tuple(dict.fromkeys(entries))

    def _in_process_conversion(self, host: str) -> tuple[str, bytes]:
        """This process's own endpoint (URL, CA), started on first use; `finish()` stops it."""
        s = self.settings
        assert s.conversion_webhook
        if self._conversion is None:
            factory = conversion.load_factory(s.conversion_webhook)
            tmp = self.config._tmp_path_factory.mktemp("envtest-conversion")  # type: ignore[attr-defined]
            self._conversion = conversion.start_endpoint(
                factory, tmp / "certs", host=host, path=s.conversion_path
            )
            self._progress(f"conversion webhook {s.conversion_webhook} serving at {self._conversion[1]}")
        _, url, ca = self._conversion
        return url, ca

    def _run_conversion(self, cluster: Cluster) -> tuple[str, bytes] | None:
        """URL and CA of the run's endpoint on a kind or existing cluster (see envtest.plugin.endpoint);
        None without ``envtest_conversion_webhook``. Called under the run's lock."""
        s = self.settings
        if not s.conversion_webhook:
            return None
        try:
            host = endpoint.reachable_host(cluster.backend, endpoint.explicit_host(self.config))
        except ConfigError as exc:
            raise ConfigError(f"envtest_conversion_webhook: {exc}") from None
        if not self.is_xdist_worker:
            return self._in_process_conversion(host)
        state = endpoint.shared(
            base_temp(self.config) / endpoint.STATE_DIR,
            factory=s.conversion_webhook,
            path=s.conversion_path,
            host=host,
            owner_pid=os.getppid(),  # the xdist controller: its finish() stops it, its death too
            python_path=self._import_path(),
            progress=self._progress,
        )
        return state.url, state.ca.encode()

    def _plane_crds(self) -> list[Path]:
        """CRD paths for a plane this process starts: rewritten to convert through this process's
        own endpoint when one is configured (started here, once, before any plane that needs it)."""
        s = self.settings
        if not (s.conversion_webhook and s.crds):
            return list(s.crds)
        url, ca = self._in_process_conversion("127.0.0.1")
        dest = self.config._tmp_path_factory.mktemp("envtest-crds")  # type: ignore[attr-defined]
        return [conversion.write_crds(s.crds, url, ca, dest)]

    def _prepare(self, cluster: Cluster) -> None:
        """CRDs (local planes install them themselves, before the controller-manager) and RBAC."""
        if self.settings.crds and not isinstance(cluster, LocalCluster):
            run_endpoint = self._run_conversion(cluster)
            if run_endpoint is None:
                crds.install(cluster.session, cluster.server, self.settings.crds)
            else:  # every run, every worker: a reused cluster's CRDs point at an endpoint that is gone
                url, ca = run_endpoint
                conversion.install_crds(cluster.session, cluster.server, self._crd_docs, url, ca)
        for source, doc in self._session_rbac:
            objects.apply(cluster.session, cluster.server, doc, source=source)

    def private_cluster(
        self,
        *,
        components: str | None = None,
        job_pods: str | None = None,
        pod_exec: bool | None = None,
    ) -> LocalCluster:
        """A plane for one test, with its `envtest_private` marker's settings; the run's for the rest."""
        s = self.settings
        plane = ControlPlane(
            components or s.components,
            version=s.version,
            crds=self._plane_crds(),
            job_pods=job_pods or s.job_pods,  # type: ignore[arg-type]
            progress=self._progress,
            pod_streams=s.pod_streams,
            pod_exec=s.pod_exec if pod_exec is None else pod_exec,
            record=s.record.on,
            record_bodies=s.record.bodies,
        )
        plane.start()
        cluster = LocalCluster.from_plane(plane, name="private")
        try:
            self._prepare(cluster)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def operator_clusterrole(self) -> str | None:
        """The operator's ClusterRole; None when its manifests hold only Roles."""
        if self.settings.operator_clusterrole:
            return self.settings.operator_clusterrole
        for _, doc in self._session_rbac:
            if doc.get("kind") == "ClusterRole":
                return str(doc["metadata"]["name"])
        if self.operator_roles:
            return None
        raise ConfigError(
            "the operator fixture needs a ClusterRole or Role: set envtest_operator_rbac (files) "
            "or envtest_operator_clusterrole (name) in the pytest ini"
        )

    def cluster_scoped_rules(self, cluster: Cluster, clusterrole: str) -> list[dict[str, Any]]:
        """The ClusterRole's rules a RoleBinding cannot grant (see `rbac`)."""
        return self._role_parts(cluster, clusterrole)[1]

    def namespaced_rules(self, cluster: Cluster, clusterrole: str) -> list[dict[str, Any]]:
        """The ClusterRole's rules its RoleBinding grants in a test namespace (see `rbac`)."""
        return self._role_parts(cluster, clusterrole)[0]

    def _role_parts(self, cluster: Cluster, clusterrole: str) -> tuple[list[rbac.Rule], list[rbac.Rule]]:
        """(namespaced, cluster-scoped) rules of the ClusterRole, read from the live role (it may be
        aggregated or installed by the user) once per cluster and session."""
        key = (cluster.server, clusterrole)
        if key not in self._role_rules:
            resp = cluster.session.get(
                f"{cluster.server}/{rbac.RBAC_API}/clusterroles/{clusterrole}", timeout=10
            )
            rules = resp.json().get("rules") or [] if resp.ok else []
            self.recording.grants.setdefault(f"ClusterRole/{clusterrole}", list(rules))
            groups = {g for rule in rules for g in rule.get("apiGroups") or []}
            scopes = rbac.discover_scopes(cluster.session, cluster.server, groups) if groups else {}
            self._role_rules[key] = (
                rbac.namespaced_rules(rules, scopes),
                rbac.cluster_scoped_rules(rules, scopes),
            )
        return self._role_rules[key]

    # -- end of session ---------------------------------------------------------------------------

    def finish(self) -> None:
        # First: a release still deleting must finish before the sweep and before the plane goes.
        self._release_failures += self.releases.drain()
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # a worker's summary reaches nobody: the controller reports it
            workeroutput[RELEASE_FAILURES] = list(self._release_failures)
            workeroutput[recording.WORKER_KEY] = self.recording.to_json()
        else:  # the controller (its workers' shares merged by now), or a run without xdist
            self._record_lines = self.recording.finish(self.settings.artifacts_dir)
        if self.is_xdist_controller and self.settings.backend == "local" and not self.settings.keep:
            supervisor.stop(base_temp(self.config) / SHARED_DIR)
        if self.is_xdist_controller and self.settings.backend != "local":
            endpoint.stop_shared(base_temp(self.config))  # kept or not: the cluster may stay, it may not
        created = base_temp(self.config) / KIND_CREATED
        if self.is_xdist_controller and self.settings.backend == "kind" and created.exists():
            if not self.settings.keep:  # workers never delete: one would pull it from under the others
                from envtest import kind

                kind.delete_cluster(self.settings.cluster_name, kind_path=Path(created.read_text()))
            created.unlink()
        if self.is_xdist_controller and self.persistent:
            self._sweep_run()  # a crashed worker swept nothing: everything of the run goes now
        try:
            if self._cluster is not None:
                try:
                    if self.persistent:
                        self._sweep(self._cluster)
                finally:
                    if self._record is not None:
                        self._record.stop()
                    self._cluster.close()
        finally:
            if self._conversion is not None:  # after the plane: nothing may call it once it is gone
                self._conversion[0].stop()
                self._conversion = None

    def _sweep(self, cluster: Cluster) -> None:
        """On clusters that outlive the run, leave nothing of this process behind (even a stuck
        namespace) — and nothing of its xdist siblings touched: they may still be running tests."""
        runs.remove(cluster.session, cluster.server, runs.selector(self.run_id, self.worker), self.cr_paths)

    def _sweep_run(self) -> None:
        """The xdist controller, once every worker has ended: whatever any worker of this run left
        (a worker that crashed never reached its own sweep), records included."""
        kubeconfig = self._persistent_kubeconfig()
        if kubeconfig is None:
            return
        try:
            cluster = ExistingCluster(kubeconfig, context=self.settings.context)
        except Exception as exc:  # the cluster is gone (a kind cluster deleted above), or unreachable
            self._progress(f"run sweep skipped: {exc}")
            return
        try:
            selector = runs.selector(self.run_id)
            runs.remove(
                cluster.session,
                cluster.server,
                selector,
                runs.all_custom_resource_paths(cluster.session, cluster.server),
            )
            cluster.session.delete(
                f"{cluster.server}/{runs.LEASES}", params={"labelSelector": selector}, timeout=10
            )
        finally:
            cluster.close()

    def _persistent_kubeconfig(self) -> Path | None:
        s = self.settings
        if s.backend == "existing":
            return s.kubeconfig or Path("~/.kube/config").expanduser()
        if s.backend == "kind":
            from envtest import kind

            path = s.kubeconfig or kind.kubeconfig_path(s.cluster_name)
            return path if path.exists() else None
        state = supervisor.read_state(supervisor.clusters_root() / s.cluster_name)
        return Path(state.kubeconfig) if state is not None else None

    def worker_finished(self, workeroutput: dict[str, Any]) -> None:
        """The xdist controller's view of a worker that ended: its failed releases join the summary."""
        self._release_failures += workeroutput.get(RELEASE_FAILURES, [])
        self.recording.merge(workeroutput.get(recording.WORKER_KEY))

    def summary_lines(self) -> list[str]:
        failed = [f"envtest: {failure}" for failure in self._release_failures]
        return failed + self._record_lines + self._kept_lines()

    def _kept_lines(self) -> list[str]:
        s = self.settings
        if s.keep and not self.is_xdist_worker and s.backend == "kind":
            from envtest import kind

            kubeconfig = s.kubeconfig or kind.kubeconfig_path(s.cluster_name)
            lines = [
                f"envtest: kept kind cluster {s.cluster_name!r}; delete it with "
                f"`{commands.envtest('kind', 'down', '--name', s.cluster_name)}`",
                f"  export KUBECONFIG={shlex.quote(str(kubeconfig))}",
            ]
            if s.conversion_webhook:
                lines.append(
                    "  its CRDs' conversion endpoint stopped with this run: reads at a non-storage "
                    "version fail until the next run re-points them"
                )
            return lines
        if not s.keep or self.is_xdist_worker or s.backend != "local":
            return []
        state = supervisor.read_state(supervisor.clusters_root() / s.cluster_name)
        if state is None:
            return []
        # Absolute paths throughout: pasted into another shell, a bare `envtest`, `python` or
        # `kubectl` is not this virtualenv's (or the plane's version), if it is on PATH at all.
        lines = [
            f"envtest: kept control plane {s.cluster_name!r} ({state.server}); stop it with "
            f"`{commands.down(s.cluster_name)}`",
            f"  export KUBECONFIG={shlex.quote(state.kubeconfig)}",
            f"  {commands.kubectl(state.version)} get namespaces",
        ]
        if s.operator_cli:
            lines.append(
                f"  attach the operator: {commands.with_this_python(s.operator_cli)} "
                f"--kubeconfig {shlex.quote(state.kubeconfig)}"
            )
        return lines

    def _progress(self, message: str) -> None:
        # Capture is suspended so the line shows while a test's setup runs (a first binary build is
        # long). An xdist worker's stdout never reaches the terminal; its inherited stderr does.
        capman: Any = self.config.pluginmanager.get_plugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            reporter: Any = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None and not self.is_xdist_worker:
                reporter.write_line(f"envtest: {message}")
            elif sys.__stderr__ is not None:
                write_line(sys.__stderr__, f"envtest: {message}")


def write_line(stream: TextIO, line: str) -> None:
    """One write per line: xdist workers (run with `python -u`) share the stderr pipe, and print's
    separate write of the newline let another worker's line land in between (two lines as one)."""
    stream.write(f"{line}\n")
    stream.flush()


def stop_shared_plane(config: pytest.Config) -> None:
    """The xdist controller's half of a shared local plane that workers started on their own."""
    supervisor.stop(base_temp(config) / SHARED_DIR)


def cluster_session(config: pytest.Config) -> ClusterSession:
    """The run's ClusterSession. A configured project gets it in pytest_configure (so mistakes are
    usage errors before any test runs); an unconfigured one that uses a fixture anyway gets it here,
    on first use, with the defaults."""
    if SESSION_KEY not in config.stash:
        config.stash[SESSION_KEY] = new_session(config)
    return config.stash[SESSION_KEY]  # type: ignore[no-any-return]


def new_session(config: pytest.Config) -> ClusterSession:
    """Resolve the settings and load the files they name; every mistake is a pytest.UsageError."""
    try:
        return ClusterSession(config, settings_mod.resolve(config))
    except CRDError as exc:
        raise pytest.UsageError(f"envtest_crds: {exc}") from None
    except ConfigError as exc:  # UsageProblem included: its message names the option already
        raise pytest.UsageError(str(exc)) from None
