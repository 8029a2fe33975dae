"""A real Kubernetes control plane as local processes: etcd, kube-apiserver and, optionally,
kube-controller-manager, kube-scheduler and kwok (a fake Node that runs pods without containers).

    with ControlPlane(crds=["api/crd"]) as cp:
        api = pykube.HTTPClient(pykube.KubeConfig.from_file(cp.kubeconfig))

Start order: etcd (from a plane template, envtest.plane.template) → kube-apiserver → CRDs (before
the controller-manager, whose garbage collector re-reads discovery only every 30 s) → scheduler, kwok
with its Node, and the controller-manager once kube-apiserver's /healthz passes, side by side → ready.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import requests
import urllib3
import yaml

from envtest import binaries, crds, ownedtemp
from envtest.binaries import gobuild, kwokrelease
from envtest.errors import ConfigError, CRDError, ProcessError, StartTimeout, StopError
from envtest.kubeconfig import kubeconfig_dict, write_kubeconfig
from envtest.loopback import direct_session
from envtest.pki import CertificateAuthority, private_dir, service_account_key, write_private
from envtest.plane import flags, kwok, streams, template
from envtest.plane.ports import free_port
from envtest.plane.process import ManagedProcess
from envtest.plane.reset import ResetPoint, ResetReport, reset_to
from envtest.record import policy
from envtest.wait import poll_pause

log = logging.getLogger(__name__)

ETCD, APISERVER, KCM, SCHEDULER, KWOK = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)
ALL_COMPONENTS: tuple[str, ...] = (ETCD, APISERVER, KCM, SCHEDULER, KWOK)
MINIMAL_COMPONENTS: tuple[str, ...] = (ETCD, APISERVER)
ADMIN_USER = "envtest-admin"
# Component identities: system:masters keeps the plane simple; RBAC is exercised by the users
# tests create (the operator runs bound to its own ClusterRole, never as one of these).
MASTERS = ("system:masters",)


def parse_components(value: str | Iterable[str]) -> tuple[str, ...]:
    """`"all"`, `"minimal"`, or names (comma-separated or a list); etcd and the apiserver are implied."""
    if isinstance(value, str):
        if value in ("all", ""):
            return ALL_COMPONENTS
        if value == "minimal":
            return MINIMAL_COMPONENTS
        value = [v.strip() for v in value.split(",") if v.strip()]
    names = set(value) | set(MINIMAL_COMPONENTS)
    unknown = names - set(ALL_COMPONENTS)
    if unknown:
        raise ConfigError(
            f"unknown component(s) {sorted(unknown)}; valid: {', '.join(ALL_COMPONENTS)}, 'all', 'minimal'"
        )
    return tuple(c for c in ALL_COMPONENTS if c in names)


class ControlPlane:
    """Start undoes itself on failure; stop always finishes and reports every error together."""

    def __init__(
        self,
        components: str | Iterable[str] = ALL_COMPONENTS,
        *,
        version: str | None = None,
        crds: Sequence[str | Path] = (),
        workdir: Path | None = None,
        job_pods: kwok.JobPods = "complete",
        start_timeout: float = 90.0,
        stop_grace: float = 2.0,
        node_capacity: Mapping[str, str] | None = None,
        extra_args: Mapping[str, Mapping[str, str | None]] | None = None,
        binary_paths: Mapping[str, Path] | None = None,
        progress: Callable[[str], None] | None = None,
        cert_valid_days: int = 7,
        pod_streams: bool = True,
        pod_exec: bool = False,
        record: bool = True,
        record_bodies: bool = False,
        use_template: bool | None = None,
    ) -> None:
        self.components = parse_components(components)
        self.version = binaries.k8s_version(version)  # a selector (`1.36`, `latest`) → its exact release
        self.crd_paths = [Path(p) for p in crds]
        self.job_pods = job_pods
        self.start_timeout = start_timeout
        """Seconds each component may take to become ready."""
        self.stop_grace = stop_grace
        """Seconds between SIGTERM and SIGKILL for each component. A test plane's data is throwaway, and
        kube-apiserver ignores SIGTERM while watches are open (it would use all of a 10 s grace). A plane
        that owns its workdir (none given) deletes it at stop and gives no grace at all."""
        self.cert_valid_days = cert_valid_days
        """Days the plane's CA and every certificate it issues are valid. A test's plane lives minutes;
        a kept one (`envtest up`, --envtest-keep) may live for months, so its supervisor asks for more."""
        self.pod_streams = pod_streams
        """Serve `kubectl logs`, `exec`, `attach`, `port-forward` on kwok's pods (envtest.plane.streams)."""
        self.pod_exec = pod_exec
        """With pod_streams: exec runs commands on this host in every namespace (False: only in those
        allowed with `allow_exec`; elsewhere an exec request fails, naming the pod)."""
        self.record = record
        """kube-apiserver writes its audit log (`audit_log`) with envtest's policy (envtest.record)."""
        self.record_bodies = record_bodies
        """With record: request and response bodies of the operators' requests (never credentials')."""
        self.use_template = template.wanted() if use_template is None else use_template
        """etcd starts from a copy of a bootstrapped plane's data (envtest.plane.template), made once
        per binaries; ignored with extra_args for etcd or kube-apiserver, which may change what it holds.
        None: unless ENVTEST_PLANE_TEMPLATE is 0 or false."""
        self.from_template = False
        """Whether this start's etcd began from a template."""
        self.template_dir: Path | None = None
        """The plane template this start's etcd was copied from, if any."""
        self.node_capacity = dict(node_capacity or {})
        """Overrides of the fake Node's capacity (kwok.NODE_CAPACITY), e.g. {"pods": "110"}."""
        self.extra_args = {k: dict(v) for k, v in (extra_args or {}).items()}
        unknown = set(self.extra_args) - set(ALL_COMPONENTS)
        if unknown:
            raise ConfigError(f"extra_args: unknown component(s) {sorted(unknown)}")
        self._binary_paths = dict(binary_paths or {})
        self._progress = progress or (lambda msg: log.info("%s", msg))
        self._warn = progress or (lambda msg: log.warning("%s", msg))
        self._owns_workdir = workdir is None
        # A plane's own workdir names its process, so the next one removes it if this one is SIGKILLed.
        self.workdir = Path(workdir) if workdir else ownedtemp.make()
        self.processes: dict[str, ManagedProcess] = {}
        self.api_port = 0
        self.etcd_url = ""
        self.ca: CertificateAuthority | None = None
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.pods_dir = self.workdir / "pods"
        """Root of the fake pods' log files, sandboxes and port targets (envtest.plane.streams)."""
        self._kwok_port = 0
        self._admin: requests.Session | None = None
        self.reset_point: ResetPoint | None = None
        """What `reset()` puts back: the plane as it was when `mark_reset_point()` was last called."""

    # -- public API --------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def audit_log(self) -> Path | None:
        """kube-apiserver's audit log (the record), None when the plane runs without it."""
        return self.workdir / "audit" / policy.LOG_FILE if self.record else None

    @property
    def log_paths(self) -> dict[str, Path]:
        return {name: proc.log_path for name, proc in self.processes.items()}

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        began = time.monotonic()
        try:
            # Keys, kubeconfigs and etcd's data live here: the owner's alone (mkdtemp's are already).
            private_dir(self.workdir)
            paths = self._resolve_binaries()
            self._seed_etcd(paths)
            # etcd needs no certificates: it starts while the PKI is written, and kube-apiserver starts
            # beside it (it retries etcd by itself); then both are waited for.
            self._start_etcd(paths[ETCD], wait=False)
            self._write_pki()
            self._start_apiserver(paths[APISERVER], wait=False)
            self.processes[ETCD].wait_ready()
            self._install_crds_early()
            # The rest only talk to the apiserver: they start side by side, then each is waited for.
            if SCHEDULER in self.components:
                self._start_scheduler(paths[SCHEDULER])
            if KWOK in self.components:
                self._start_kwok(paths[KWOK])
            if KCM in self.components:
                self._start_controller_manager(paths[KCM])
            for name in (KCM, SCHEDULER, KWOK):
                if name in self.processes:
                    self.processes[name].wait_ready()
            self._wait_cluster_ready()
        except BaseException:
            # Start undoes itself: nothing half-started outlives the error (KeyboardInterrupt included).
            self.stop()
            raise
        self._progress(
            f"control plane ready in {time.monotonic() - began:.1f}s: {', '.join(self.components)} "
            f"(v{self.version}) at {self.server}; KUBECONFIG={self.kubeconfig}"
        )

    def stop(self) -> None:
        errors: list[str] = []
        # A plane whose workdir goes with it keeps nothing: its processes get no grace (kube-apiserver
        # takes over a second to shut down gracefully, and nothing it would flush is read again).
        discard = self._owns_workdir
        # Reverse start order: the apiserver must outlive its clients, etcd must outlive the apiserver.
        for name in reversed(list(self.processes)):
            try:
                if discard:
                    self.processes[name].stop_timeout = 0.0
                self.processes[name].stop()
            except Exception as exc:
                errors.append(f"{name}: {exc}")
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if errors:
            raise StopError("failed to stop: " + "; ".join(errors))

    def restart(self, component: str) -> None:
        """Stop and start one component with the same flags, ports and data (fault tests)."""
        if component not in self.processes:
            raise ConfigError(f"{component!r} is not running; running: {', '.join(self.processes)}")
        self.processes[component].restart()

    def mark_reset_point(self) -> ResetPoint:
        """Make what the plane holds now the state `reset()` puts back: call it after start and after a
        suite's own setup. Waits until the components are done with their start (ResetPoint.settled:
        under a second after start, nothing on a plane that has run a while)."""
        if self.extra_args.get(APISERVER, {}).get("etcd-prefix") not in (None, "/registry"):
            raise ConfigError("mark_reset_point(): a plane started with --etcd-prefix cannot be reset")
        self.reset_point = ResetPoint.settled(self.etcd_url)
        return self.reset_point

    def reset(self) -> ResetReport:
        """Put every object back to the reset point, in place: what was made since is deleted, what
        was changed or deleted is written back, and every process keeps running (envtest.plane.reset).
        Stop what still writes (an operator) first, or it may undo the reset."""
        if self.reset_point is None:
            raise ConfigError("reset() needs a reset point: call mark_reset_point() once the plane is set up")
        return reset_to(self.etcd_url, self.reset_point)

    def add_user(self, name: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig for a client-certificate user (CN=name, O=groups); RBAC decides what it may do."""
        assert self.ca is not None, "start() first"
        path = self.workdir / "users" / f"{name}.kubeconfig"
        cfg = kubeconfig_dict(
            server=self.server, ca_pem=self.ca.cert_pem, client=self.ca.issue_client(name, groups), user=name
        )
        return write_kubeconfig(path, cfg)

    def admin_session(self) -> requests.Session:
        """A requests session authenticated as the admin user (system:masters)."""
        if self._admin is None:
            session = requests.Session()
            # REQUESTS_CA_BUNDLE and proxy variables would override `verify` and route loopback traffic.
            session.trust_env = False
            session.verify = str(self.workdir / "pki" / "ca.crt")
            session.cert = (str(self.workdir / "pki" / "admin.crt"), str(self.workdir / "pki" / "admin.key"))
            self._admin = session
        return self._admin

    # -- start-up steps ------------------------------------------------------------------------------

    def _resolve_binaries(self) -> dict[str, Path]:
        needed = [c for c in self.components if c not in self._binary_paths]
        found = binaries.resolve_all(needed, version=self.version, progress=self._progress) if needed else {}
        paths = {**found, **self._binary_paths}
        kwok_binary = paths.get(KWOK)
        if self._serves_pod_streams and kwok_binary is not None:
            if kwokrelease.is_release(kwok_binary):
                # Installed without go: the plane starts all the same, without what kwok cannot serve.
                self.pod_streams = False
                line = f"kwok at {kwok_binary} is the official release, so {kwokrelease.LOST}"
                self._warn(line)
            else:
                _check_patched_kwok(kwok_binary)
        return paths

    def _seed_etcd(self, paths: Mapping[str, Path]) -> None:
        self.from_template, self.template_dir = False, None
        if not self.use_template or self.extra_args.get(ETCD) or self.extra_args.get(APISERVER):
            return
        if (self.workdir / "etcd").exists():
            return  # a kept plane's own data, started again: never replaced
        ident = template.identity(
            self.version,
            {ETCD: paths[ETCD], APISERVER: paths[APISERVER]},
            {ETCD: flags.ETCD_FLAGS, APISERVER: flags.APISERVER_FLAGS},
        )
        began = time.monotonic()
        try:
            found, made = template.ensure(
                ident, lambda data: self._make_template(paths, data), lock_timeout=2 * self.start_timeout
            )
        except Exception as exc:  # the plane still starts, as it would without templates
            self._warn(
                f"starting without a plane template: making one failed ({str(exc).splitlines()[0]}); "
                f"{template.ENV}=0 stops trying"
            )
            return
        if made:
            took = time.monotonic() - began
            self._progress(f"plane template made in {took:.1f}s (once for these binaries)")
        template.copy_into(found, self.workdir / "etcd")
        self.from_template, self.template_dir = True, found

    def _make_template(self, paths: Mapping[str, Path], data_dir: Path) -> None:
        """An ordinary start of etcd and kube-apiserver alone, stopped once /readyz is ok with every
        check; etcd's data is copied once both have exited."""
        seed = ControlPlane(
            MINIMAL_COMPONENTS,
            version=self.version,
            binary_paths={ETCD: paths[ETCD], APISERVER: paths[APISERVER]},
            start_timeout=self.start_timeout,
            record=False,
            use_template=False,
            progress=lambda _msg: None,
        )
        try:
            seed.start()
            seed.processes[APISERVER].stop()
            template.forget_per_plane_keys(seed.etcd_url)
            seed.processes[ETCD].stop()
            template.copy_data(seed.workdir / "etcd", data_dir)
        finally:
            seed.stop()

    def _write_pki(self) -> None:
        pki = private_dir(self.workdir / "pki")
        self.ca = CertificateAuthority.create("envtest-ca", valid_days=self.cert_valid_days)
        self.ca.write(pki, "ca")
        self.api_port = free_port()
        self.ca.issue_serving(
            "kube-apiserver",
            [
                "127.0.0.1",
                "localhost",
                "10.96.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
        ).write(pki, "apiserver")
        self.ca.issue_client(ADMIN_USER, MASTERS).write(pki, "admin")
        if self._serves_pod_streams:
            # kwok's server stands in for the kubelet: the apiserver verifies its serving certificate
            # against the plane's CA and proves itself with a client certificate of the same CA.
            self._kwok_port = free_port()
            self.ca.issue_serving("kwok", ["127.0.0.1"]).write(pki, "kwok")
            self.ca.issue_client("kube-apiserver-kubelet-client", MASTERS).write(
                pki, "apiserver-kubelet-client"
            )
        for component in (KCM, SCHEDULER):
            if component in self.components:
                # Left to itself, each makes a self-signed one at every start: two RSA keys, a few
                # hundred ms of CPU taken from the start of the plane, which waits for them.
                self.ca.issue_serving(component, ["127.0.0.1", "localhost"]).write(
                    pki, f"{component}-serving"
                )
        private, public = service_account_key()
        write_private(pki / "sa.key", private)  # 0600 from creation, not chmod-ed after the write
        (pki / "sa.pub").write_bytes(public)
        write_kubeconfig(
            self.kubeconfig,
            kubeconfig_dict(
                server=self.server,
                ca_pem=self.ca.cert_pem,
                client=self.ca.issue_client(ADMIN_USER, MASTERS),
                user=ADMIN_USER,
            ),
        )

    def _component_kubeconfig(self, name: str) -> Path:
        assert self.ca is not None
        cfg = kubeconfig_dict(
            server=self.server,
            ca_pem=self.ca.cert_pem,
            client=self.ca.issue_client(f"system:{name}", MASTERS),
            user=name,
        )
        return write_kubeconfig(self.workdir / f"{name}.kubeconfig", cfg)

    def _launch(
        self,
        name: str,
        binary: Path,
        args: dict[str, str | None],
        ready: Callable[[], bool],
        *,
        wait: bool = True,
    ) -> ManagedProcess:
        argv = [str(binary), *flags.render(flags.DEFAULT_FLAGS[name], args, self.extra_args.get(name, {}))]
        proc = ManagedProcess(
            name,
            argv,
            log_path=self.workdir / "logs" / f"{name}.log",
            env=flags.environment(name, os.environ),
            ready=ready,
            start_timeout=self.start_timeout,
            stop_timeout=self.stop_grace,
        )
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.processes[name] = proc
        self._progress(f"starting {name}")
        proc.start() if wait else proc.spawn()
        return proc

    def _start_etcd(self, binary: Path, *, wait: bool = True) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        args = {
            "data-dir": str(self.workdir / "etcd"),
            "listen-client-urls": self.etcd_url,
            "advertise-client-urls": self.etcd_url,
            "listen-peer-urls": peer_url,
            "initial-advertise-peer-urls": peer_url,
            "initial-cluster": f"envtest={peer_url}",
        }
        self._launch(ETCD, binary, args, ready=lambda: _http_ok(f"{self.etcd_url}/health"), wait=wait)

    def _start_apiserver(self, binary: Path, *, wait: bool = True) -> None:
        pki = self.workdir / "pki"
        args = {
            "secure-port": str(self.api_port),
            "etcd-servers": self.etcd_url,
            "tls-cert-file": str(pki / "apiserver.crt"),
            "tls-private-key-file": str(pki / "apiserver.key"),
            "client-ca-file": str(pki / "ca.crt"),
            "service-account-issuer": self.server,
            "service-account-key-file": str(pki / "sa.pub"),
            "service-account-signing-key-file": str(pki / "sa.key"),
            "cert-dir": str(pki),
        }
        if self.audit_log is not None:
            policy_file = policy.write(self.audit_log.parent, bodies=self.record_bodies)
            args |= policy.apiserver_flags(policy_file, self.audit_log)
        if self._serves_pod_streams:
            args |= {
                "kubelet-client-certificate": str(pki / "apiserver-kubelet-client.crt"),
                "kubelet-client-key": str(pki / "apiserver-kubelet-client.key"),
                "kubelet-certificate-authority": str(pki / "ca.crt"),
                "kubelet-preferred-address-types": "InternalIP",  # kwok's --node-ip, 127.0.0.1
            }
        self._launch(APISERVER, binary, args, ready=self._apiserver_ready, wait=wait)

    def _apiserver_ready(self) -> bool:
        session = self.admin_session()
        url = self.server + template.readyz_path(self.from_template)
        if session.get(url, timeout=2).status_code != 200:
            return False
        return not self.from_template or template.written(session, self.server)

    def _apiserver_serves_crds(self) -> bool:
        url = f"{self.server}/{crds.CRD_API}?limit=1"
        return self.admin_session().get(url, timeout=2).status_code == 200

    def _install_crds_early(self) -> None:
        """kube-apiserver serves CRDs about 1.5 s before /readyz: its post-start hooks (RBAC's
        bootstrap roles, priority classes) run after it listens, and the admin (system:masters)
        needs none of them. CRDs created then are named and established meanwhile, so the start
        waits for the later of the two instead of their sum; ready still means the apiserver ready
        (/readyz ok, but for the hooks a template holds the work of) and every CRD Established and
        served by discovery."""
        apiserver = self.processes[APISERVER]
        if not self.crd_paths:
            apiserver.wait_ready()
            return
        apiserver.wait_ready(until=self._apiserver_serves_crds)
        session = self.admin_session()
        try:
            applied = crds.apply(session, self.server, self.crd_paths)
        except CRDError as exc:
            if exc.status is None or exc.status < 500:
                raise  # the CRD itself is refused: the same answer after /readyz
            apiserver.wait_ready()  # not quite serving yet (5xx): the ordinary order
            applied = crds.apply(session, self.server, self.crd_paths)
        apiserver.wait_ready()
        crds.wait_all_ready(session, self.server, applied, timeout=30.0)

    def _wait_healthz(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not self._answers_ok("/healthz"):
            self._check_running(APISERVER, waiting_for="/healthz passed")
            if time.monotonic() > deadline:
                raise StartTimeout(
                    f"kube-apiserver's /healthz not ok after {self.start_timeout:.0f}s; its log:\n"
                    f"{self.processes[APISERVER].log_tail()}"
                )
            time.sleep(0.01)  # what follows waits on this to the moment: a cheap local GET

    def _check_running(self, *names: str, waiting_for: str) -> None:
        """A component that exited while the start waits on it fails the start at once, with its log."""
        for name in names:
            proc = self.processes[name]
            if not proc.running:
                raise ProcessError(
                    f"{name} exited (code {proc.returncode}) before {waiting_for}; "
                    f"last log lines:\n{proc.log_tail()}"
                )

    def _answers_ok(self, path: str) -> bool:
        """Whether kube-apiserver answers `path` with 200; a refused or timed-out request is a no."""
        try:
            return self.admin_session().get(f"{self.server}{path}", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def _serving_flags(self, component: str) -> dict[str, str]:
        """The serving certificate `_write_pki` issued for a component's secure port."""
        pki = self.workdir / "pki"
        return {
            "tls-cert-file": str(pki / f"{component}-serving.crt"),
            "tls-private-key-file": str(pki / f"{component}-serving.key"),
        }

    def _start_controller_manager(self, binary: Path) -> None:
        # It checks /healthz once a second before it starts its controllers; started once /healthz
        # passes (on a template plane that is later than the /readyz the start waits for), its first
        # check passes instead of missing the last post-start hook by a fraction of that second.
        self._wait_healthz()
        kubeconfig, pki, port = self._component_kubeconfig(KCM), self.workdir / "pki", free_port()
        args = {
            "kubeconfig": str(kubeconfig),
            "authentication-kubeconfig": str(kubeconfig),
            "authorization-kubeconfig": str(kubeconfig),
            "secure-port": str(port),
            **self._serving_flags(KCM),
            "cert-dir": str(self.workdir / "kcm-certs"),  # used when extra_args remove the two above
            "root-ca-file": str(pki / "ca.crt"),  # published as kube-root-ca.crt for projected tokens
            "service-account-private-key-file": str(pki / "sa.key"),
            "cluster-signing-cert-file": str(pki / "ca.crt"),
            "cluster-signing-key-file": str(pki / "ca.key"),
        }
        self._launch(
            KCM, binary, args, ready=lambda: _https_ok(f"https://127.0.0.1:{port}/healthz"), wait=False
        )

    def _start_scheduler(self, binary: Path) -> None:
        kubeconfig, port = self._component_kubeconfig(SCHEDULER), free_port()
        args = {
            "kubeconfig": str(kubeconfig),
            "authentication-kubeconfig": str(kubeconfig),
            "authorization-kubeconfig": str(kubeconfig),
            "secure-port": str(port),
            **self._serving_flags(SCHEDULER),
            "cert-dir": str(self.workdir / "scheduler-certs"),  # used when extra_args remove the two above
        }
        self._launch(
            SCHEDULER, binary, args, ready=lambda: _https_ok(f"https://127.0.0.1:{port}/healthz"), wait=False
        )

    def allow_exec(self, namespace: str) -> None:
        """Let `kubectl exec` into `namespace`'s fake pods run commands on this host (see
        envtest.plane.streams); a no-op where exec is allowed everywhere already."""
        streams.allow_exec(self.pods_dir, namespace)

    def _start_kwok(self, binary: Path) -> None:
        stages_dir = binaries.kwok_stages_dir(self.version)
        config = self.workdir / "kwok-stages.yaml"
        binder = KCM in self.components and flags.runs_pv_binder(
            flags.CONTROLLER_MANAGER_FLAGS, self.extra_args.get(KCM, {})
        )
        text = kwok.stage_config(stages_dir, self.job_pods, binder=binder)
        if self._serves_pod_streams:
            text += "---\n" + yaml.safe_dump_all(
                streams.rules(self.pods_dir, exec_=self.pod_exec), sort_keys=False
            )
        config.write_text(text)
        _, objects = kwok.load_stage_documents(stages_dir)
        for obj in [*objects, kwok.fake_node(capacity=self.node_capacity)]:
            self._create(obj)
        argv = kwok.kwok_args(kubeconfig=self._component_kubeconfig(KWOK), config=config)
        if self._serves_pod_streams:
            pki = self.workdir / "pki"
            self.pods_dir.mkdir(exist_ok=True)
            argv += kwok.server_args(
                port=self._kwok_port, cert=pki / "kwok.crt", key=pki / "kwok.key", client_ca=pki / "ca.crt"
            )
        proc = ManagedProcess(
            KWOK,
            [str(binary), *argv, *flags.render(self.extra_args.get(KWOK, {}))],
            log_path=self.workdir / "logs" / "kwok.log",
            ready=self._kwok_ready,
            start_timeout=self.start_timeout,
            stop_timeout=self.stop_grace,
        )
        self.processes[KWOK] = proc
        self._progress("starting kwok")
        proc.spawn()

    @property
    def _serves_pod_streams(self) -> bool:
        return self.pod_streams and KWOK in self.components

    def _kwok_ready(self) -> bool:
        # Ready means a test's first `kubectl logs` or `exec` finds kwok's server listening. envtest's
        # kwok opens its socket before its controllers start (patch 0006), so this check is free there;
        # an upstream kwok listens only some 0.2-0.4 s after the Node turned Ready.
        return self._node_ready() and (not self._serves_pod_streams or _listening(self._kwok_port))

    def _node_ready(self) -> bool:
        resp = self.admin_session().get(f"{self.server}/api/v1/nodes/{kwok.NODE_NAME}", timeout=2)
        if resp.status_code != 200:
            return False
        conditions = resp.json().get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _create(self, obj: dict[str, Any]) -> None:
        url = _collection_url(self.server, obj)
        resp = self.admin_session().post(url, json=obj, timeout=10)
        if resp.status_code not in (201, 409):
            raise ConfigError(
                f"creating {obj['kind']}/{obj['metadata']['name']} failed: "
                f"{resp.status_code} {resp.text[:300]}"
            )

    def _wait_cluster_ready(self) -> None:
        """Ready means ready for tests: the default ServiceAccount exists (pods are rejected until the
        serviceaccount controller makes it) and kwok's Node is Ready (checked by kwok's probe)."""
        if KCM not in self.components:
            return
        deadline = time.monotonic() + self.start_timeout
        polls = 0
        while not self._answers_ok("/api/v1/namespaces/default/serviceaccounts/default"):
            self._check_running(APISERVER, KCM, waiting_for="the default ServiceAccount was made")
            if time.monotonic() > deadline:
                raise StartTimeout(
                    f"default ServiceAccount not created after {self.start_timeout:.0f}s; "
                    f"kube-controller-manager log:\n{self.processes[KCM].log_tail()}"
                )
            time.sleep(poll_pause(polls))
            polls += 1


def _collection_url(server: str, obj: Mapping[str, Any]) -> str:
    api_version = obj["apiVersion"]
    base = f"{server}/api/v1" if api_version == "v1" else f"{server}/apis/{api_version}"
    plural = {"StorageClass": "storageclasses", "Node": "nodes"}[obj["kind"]]
    return f"{base}/{plural}"


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def _http_ok(url: str) -> bool:
    # Not requests.get: with HTTP(S)_PROXY set and no NO_PROXY it would ask the proxy for 127.0.0.1.
    with direct_session() as session:
        return session.get(url, timeout=2).status_code == 200


def _https_ok(url: str) -> bool:
    # The controller-manager's and scheduler's serving certificates are the plane CA's unless
    # extra_args replace or remove them; a liveness probe on loopback needs no verification.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        with direct_session() as session:
            return session.get(url, timeout=2, verify=False).status_code == 200


def _check_patched_kwok(path: Path) -> None:
    """Serving logs/exec/attach/port-forward takes envtest's kwok build (its flags and fixes); a kwok
    from elsewhere (TEST_ASSET_KWOK, KUBEBUILDER_ASSETS, an explicit path) would die on an unknown
    flag with nothing pointing here."""
    if not (path.parent / gobuild.KWOK_STAMP).is_file():
        raise ConfigError(
            f"kwok at {path} is not envtest's build (no {gobuild.KWOK_STAMP} beside it), which serving "
            "logs, exec, attach and port-forward on fake pods needs: let envtest build it (unset the "
            "variable that points there), or turn the streams off (ini envtest_pod_streams = false, "
            "--envtest-pod-streams=false, `envtest up --no-pod-streams`, ControlPlane(pod_streams=False))"
        )
