"""Manager: runs controllers, their informers, leader election and the probe/metrics server.

Lifecycle, safe to drive from any thread (the test harness runs several managers per process):

    manager = Manager(api_factory, ManagerOptions(namespaces=("test-ns",)))
    manager.add(Controller("mysqlcluster", reconciler).for_(MySQLCluster).owns(StatefulSet))
    manager.start()          # returns once informers synced (or, with leader_elect, standing by)
    ...
    manager.stop()           # prompt; raises nothing; manager.errors says what crashed

A *term* is one stretch of running controllers: fresh queues, workers. Without leader election
there is one term from start() to stop(). With it, a term runs only while the lease is held.
Informers (the caches) start with the manager, leader or not, and sync before it stands by
(`warm_standby`, as controller-runtime starts its caches before leader election): a standby that
wins the lease starts its workers on caches already current, instead of listing every kind first.
Each term's controllers subscribe to them and get their contents replayed, so a new leader still
reconciles every object. With warm_standby=False informers live only during a term (the old path,
kept for comparison: benchmarks/bench_failover.py). Losing the lease either exits the process at once
(`exit_on_lost_lease`, what `python -m mysql_operator run` does, as controller-runtime does: no
graceful shutdown, the Deployment restarts the pod) or, in-process (tests, several managers per
process), ends the term: its writes are fenced at that instant (`fence.py`), workers finish the
reconcile in hand without being able to write, and the manager stands by for another term.
stop() lets in-flight reconciles finish for up to its timeout, then fences whatever is left, and
only then releases the lease.
No signal handlers here: signal.signal works only in the main thread; `__main__` owns them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import pykube
from prometheus_client import CollectorRegistry
from pykube.objects import NamespacedAPIObject

from .client import instrument, pin_environment
from .controller import Controller, Kind
from .fence import Fence
from .informer import Informer
from .leader import LeaderElector, NoElectionNamespace, PykubeLeaseStore, default_identity, election_namespace
from .metrics import Metrics, ProbeServer
from .multinamespace import AnyInformer, MultiNamespaceInformer

log = logging.getLogger(__name__)


WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
"""The verbs (rest_client_requests_total's `verb` label) that change something on the server."""


class ManagerError(Exception):
    """The manager could not start, or was used out of order."""


class Runnable(Protocol):
    """Something that runs beside the controllers for the manager's whole life, leader or not
    (controller-runtime's Runnable that does not need leader election), e.g. the Event sender."""

    def start(self) -> None: ...

    def stop(self, timeout: float) -> None: ...


@dataclass
class ManagerOptions:
    namespaces: tuple[str, ...] = ()
    """Scope every informer to these namespaces (one list and watch per namespace and kind, as a
    Role in each allows); empty = the whole cluster (which needs a ClusterRole)."""
    metrics_port: int | None = 0
    """Port of /metrics; None disables it; 0 picks a free port (see Manager.metrics_address)."""
    health_port: int | None = 0
    """Port of /healthz and /readyz; may equal metrics_port (both 0 = one server on one free port)."""
    bind_address: str = "127.0.0.1"
    """Interface of the probe/metrics server; a Deployment needs "0.0.0.0" for kubelet probes."""
    leader_elect: bool = False
    leader_election_namespace: str | None = None
    """Namespace of the Lease; None = $POD_NAMESPACE, else the pod's ServiceAccount namespace, else
    start() fails naming this option (see leader.election_namespace)."""
    leader_election_id: str = "mysql-operator-leader"
    """Name of the Lease."""
    identity: str | None = None
    """This candidate's holderIdentity; default hostname_pid_random."""
    lease_duration: float = 15.0
    """Seconds a standby waits after the last renewal before taking over."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it stops reconciling; < lease_duration."""
    retry_period: float = 2.0
    """Seconds between election steps (renewals, or a standby's tries); < renew_deadline."""
    exit_on_lost_lease: bool = False
    """Exit the process (status 1) the moment the lease is lost, as controller-runtime does. Off for
    in-process use, where the lost term's writes are fenced instead."""
    start_timeout: float = 60.0
    """Seconds start() waits for the informers' first list before it fails."""
    watch_timeout: float | None = None
    """Server-side timeoutSeconds of each watch request; None = random in [5, 10) min per watch, as
    client-go's reflector does. The client read timeout is 10 s above it."""
    denied_grace: float = 60.0
    """Seconds of 401/403 on an informer's list/watch or on the Lease, without a success, after which
    /healthz fails (and the kubelet restarts the pod, which reads its token anew). /readyz fails at
    the first 401/403 on the Lease."""
    warm_standby: bool = True
    """Run and sync the informers from start(), leader or not; False = only during a term."""

    def __post_init__(self) -> None:
        for field in ("metrics_port", "health_port"):
            port = getattr(self, field)
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"ManagerOptions.{field}: {port} is not a port number (0-65535 or None)")
        if self.leader_elect and not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                "ManagerOptions: leader election needs lease_duration > renew_deadline > retry_period > 0, "
                f"got {self.lease_duration} / {self.renew_deadline} / {self.retry_period}"
            )


class Manager:
    def __init__(
        self,
        api_factory: Callable[[], pykube.HTTPClient],
        options: ManagerOptions | None = None,
        *,
        exit_process: Callable[[int], None] = os._exit,
    ) -> None:
        self.options = options or ManagerOptions()
        self._exit_process = exit_process
        """os._exit: no cleanup that could still write, no waiting for threads."""
        self.registry = CollectorRegistry()
        """This manager's own registry: the global one raises on duplicates with several managers."""
        self.metrics = Metrics(self.registry)
        self.errors: list[BaseException] = []
        """Exceptions that escaped runtime threads (reconcile errors requeue and are not here)."""
        self.metrics_address: tuple[str, int] | None = None
        self.health_address: tuple[str, int] | None = None
        self.identity = self.options.identity or default_identity()
        self._api_factory = api_factory
        self._controllers: list[Controller] = []
        self._informer_options: dict[Kind, dict[str, object]] = {}  # kind -> extra Informer kwargs
        self._lock = threading.Lock()  # guards _state, _informers, _running, errors
        self._state = "new"  # new → starting → running → stopped (stop() may come at any point)
        self._informers: dict[Kind, AnyInformer] = {}  # the current term's; empty between terms
        self._in_term = False  # a term was begun (informers/queues exist) and not yet ended
        self._running = False  # the current term's workers run (informers synced)
        self._wake = threading.Event()  # the supervisor should look at leadership/stop again
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._started = threading.Event()  # start() may return: synced, or standing by
        self._start_news = threading.Event()  # start() should look again: started, crashed or stopping
        self._elected_once = threading.Event()  # the first election step has happened
        self._stop_lock = threading.Lock()  # serialises stop() from a crash and from the owner
        self._stop_deadline = 0.0
        self._elector: LeaderElector | None = None
        self.fence = Fence(self._holds_lease)
        """Refuses writes of threads whose term has ended (see fence.py)."""
        self._servers: list[ProbeServer] = []
        self._supervisor: threading.Thread | None = None
        self._election: threading.Thread | None = None
        self._runnables: list[Runnable] = []
        self._runnables_started: list[Runnable] = []

    # -- public ---------------------------------------------------------------------------------

    def new_client(self) -> pykube.HTTPClient:
        """A fresh client whose requests are counted (rest_client_requests_total) and whose writes
        from controller workers pass the term fence."""
        return instrument(pin_environment(self._api_factory()), self.metrics.count_request, fence=self.fence)

    def _holds_lease(self) -> bool:
        return self._elector is None or self._elector.holds_lease()

    def add(self, controller: Controller) -> None:
        with self._lock:
            if self._state != "new":
                raise ManagerError(f"add({controller.name!r}): controllers must be added before start()")
            controller.kinds  # noqa: B018 - fails now, with the controller's name, if for_() is missing
            self._controllers.append(controller)

    def configure_informer(
        self, kind: Kind, *, label_selector: str | None = None, metadata_only: bool = False
    ) -> None:
        """Watch `kind` only where `label_selector` matches, and/or as PartialObjectMetadata.

        Without a namespace the operator would otherwise cache every object of the kind in the
        cluster; the reconciler reads only its own children, and finds anything else by a GET.
        """
        with self._lock:
            if self._state != "new":
                raise ManagerError(f"configure_informer({kind.kind}): before start()")
            self._informer_options[kind] = {"label_selector": label_selector, "metadata_only": metadata_only}

    def add_runnable(self, runnable: Runnable) -> None:
        """Start `runnable` with the manager and stop it after the last term has ended."""
        with self._lock:
            if self._state != "new":
                raise ManagerError("add_runnable(): before start()")
            self._runnables.append(runnable)

    @property
    def controllers(self) -> list[Controller]:
        return list(self._controllers)

    @property
    def is_leader(self) -> bool:
        """Whether this manager reconciles: it holds the lease, or runs without leader election."""
        if self._elector is not None:
            return self._elector.is_leader
        return self._running

    def informer(self, kind: Kind) -> AnyInformer:
        """The running informer (cache) of `kind`: from start() on with warm_standby, else the
        current term's; LookupError when there is none."""
        with self._lock:
            informer = self._informers.get(kind)
        if informer is None:
            raise LookupError(f"no running informer for {kind.kind}")
        return informer

    def api_requests(
        self,
        verb: str | Iterable[str] | None = None,
        resource: str | None = None,
        code: str | None = None,
    ) -> float:
        """Sum of rest_client_requests_total over the samples matching every label given.

        `verb` may be several: `api_requests(verb=WRITE_VERBS)` counts every write.
        """
        wanted: dict[str, set[str]] = {}
        for label, value in (("verb", verb), ("resource", resource), ("code", code)):
            if value is not None:
                wanted[label] = {value} if isinstance(value, str) else set(value)
        total = 0.0
        for family in self.metrics.api_requests_total.collect():
            for sample in family.samples:
                labels = sample.labels
                if sample.name.endswith("_total") and all(labels.get(k) in v for k, v in wanted.items()):
                    total += sample.value
        return total

    def start(self) -> None:
        with self._lock:
            if self._state != "new":
                raise ManagerError(f"start() on a manager that is {self._state}")
            self._state = "starting"
        try:
            with self._stop_lock:  # a concurrent stop() waits until there is something to stop
                if self._stopping.is_set():
                    raise ManagerError("manager stopped during start()")
                self._start_servers()
                for runnable in self._runnables:
                    runnable.start()
                    self._runnables_started.append(runnable)
                if self.options.warm_standby:
                    self._start_informers()
                if self.options.leader_elect:
                    self._start_election()
                self._supervisor = threading.Thread(
                    target=self._supervise, name="manager-supervisor", daemon=True
                )
                self._supervisor.start()
            self._wait_started()
        except BaseException:
            self.stop()
            raise
        with self._lock:
            if self._state == "starting":
                self._state = "running"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop everything within about `timeout` seconds; never raises (see `errors`)."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self._stop_deadline = time.monotonic() + timeout
            self._stopping.set()
            self._wake.set()
            self._start_news.set()
            for thread in (self._supervisor, self._election):
                if thread is not None and thread is not threading.current_thread():
                    thread.join(self._remaining())
                    if thread.is_alive():
                        log.warning("manager: %s did not finish within %.1fs", thread.name, timeout)
            self._stop_term()  # when start() failed before the supervisor ran
            if self._elector is not None:
                # Only now that no worker runs: releasing earlier would let a standby overlap with us.
                self._elector.release()
            self._stop_informers()
            for runnable in self._runnables_started:
                try:
                    runnable.stop(self._remaining())
                except Exception as exc:  # stop always finishes
                    log.warning("manager: stopping %r failed: %s", runnable, exc)
            for server in self._servers:
                server.close()
            with self._lock:
                self._state = "stopped"
            self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the manager has stopped (by stop() or a crash); False on timeout."""
        return self._stopped.wait(timeout)

    def healthy(self) -> bool:
        return not self.health_problems()

    def health_problems(self) -> list[str]:
        """Why /healthz fails (empty: it passes): a crash, a stop, sustained 401/403."""
        problems = [f"crashed: {exc!r}" for exc in self.errors[:3]]
        if self._stopping.is_set():
            problems.append("stopping")
        problems.extend(f"list/watch of {kind} refused (401/403)" for kind in self.denied())
        elector = self._elector
        if elector is not None and elector.denied_for() > self.options.denied_grace:
            problems.append(elector.problem() or "lease refused (401/403)")
        return problems

    def denied(self) -> list[str]:
        """Kinds whose list/watch has been refused (401/403) for longer than `denied_grace`."""
        with self._lock:
            informers = dict(self._informers)
        return [k.kind for k, i in informers.items() if i.denied_for() > self.options.denied_grace]

    def ready(self) -> bool:
        """Started, healthy, and either reconciling or standing by able to take over."""
        return not self.readiness_problems()

    def readiness_problems(self) -> list[str]:
        """Why /readyz fails (empty: it passes). A standby is ready while it can reach the Lease
        (reading a lease someone else holds, or losing a race for it, counts) and its caches are
        synced; not when the Lease API refuses it or stays unreachable (leader.problem())."""
        problems = self.health_problems()
        if not self._started.is_set():
            problems.append("starting")
        elector = self._elector
        if elector is not None:
            lease = elector.problem()
            if lease and lease not in problems:
                problems.append(lease)
        standing_by = elector is not None and not elector.is_leader
        if not (self._running or standing_by):
            problems.append("controllers not running")
        with self._lock:
            unsynced = [k.kind for k, i in self._informers.items() if not i.has_synced()]
        problems.extend(f"cache of {kind} not synced" for kind in unsynced)
        return problems

    # -- startup --------------------------------------------------------------------------------

    def _start_servers(self) -> None:
        ports = {self.options.metrics_port, self.options.health_port} - {None}
        servers: dict[int | None, ProbeServer] = {}
        for port in sorted(p for p in ports if p is not None):
            server = ProbeServer(
                self.options.bind_address, port, self.registry, self.health_problems, self.readiness_problems
            )
            self._servers.append(server)
            servers[port] = server
            server.start()
        if self.options.metrics_port is not None:
            self.metrics_address = servers[self.options.metrics_port].address
        if self.options.health_port is not None:
            self.health_address = servers[self.options.health_port].address

    def _start_election(self) -> None:
        o = self.options
        try:
            namespace = election_namespace(o.leader_election_namespace)
        except NoElectionNamespace as exc:
            raise ManagerError(str(exc)) from None
        store = PykubeLeaseStore(
            self.new_client(),
            namespace,
            o.leader_election_id,
            # A hung request must not carry the leader past its lease: deadline + timeout < duration.
            timeout=max(min(5.0, o.lease_duration - o.renew_deadline), 0.5),
        )
        self._elector = LeaderElector(
            store,
            self.identity,
            namespace=namespace,
            name=o.leader_election_id,
            lease_duration=o.lease_duration,
            renew_deadline=o.renew_deadline,
            retry_period=o.retry_period,
            on_change=self._leadership_changed,
        )
        self.metrics.leader.labels(name=o.leader_election_id).set(0)
        self._election = threading.Thread(target=self._elect, name="manager-election", daemon=True)
        self._election.start()

    def _wait_started(self) -> None:
        # Woken by whatever settles it (synced, standing by, a crash, a stop): no poll to wait out.
        deadline = time.monotonic() + self.options.start_timeout
        while True:
            self._start_news.clear()  # before looking, so news that comes while we look is kept
            if self._started.is_set():
                return
            if self.errors:
                raise ManagerError("a runtime thread crashed during start()") from self.errors[0]
            if self._stopping.is_set():
                raise ManagerError("manager stopped during start()")
            remaining = deadline - time.monotonic()
            if remaining > 0:
                self._start_news.wait(remaining)
                continue
            with self._lock:
                pending = [k.kind for k, i in self._informers.items() if not i.has_synced()]
            raise ManagerError(
                f"manager not started after {self.options.start_timeout:.0f}s; "
                f"informers not synced: {', '.join(pending) or 'none'} (is the apiserver reachable, "
                "and may this identity list and watch them?)"
            )

    # -- runtime threads ------------------------------------------------------------------------

    def _elect(self) -> None:
        assert self._elector is not None
        try:
            while not self._stopping.is_set():
                self._elector.try_acquire_or_renew()
                self._elected_once.set()
                self._wake.set()
                if self._stopping.wait(self._elector.next_wait()):
                    break
        except BaseException as exc:
            self._crash(exc)

    def _leadership_changed(self, leading: bool) -> None:
        self.metrics.leader.labels(name=self.options.leader_election_id).set(1 if leading else 0)
        if not leading:
            # Before anything else: from this instant no write of the lost term leaves the process.
            self.fence.close()
        if not leading and not self._stopping.is_set():  # a release on stop is no news
            if self.options.exit_on_lost_lease:
                log.error("manager %s: leader election lost; exiting", self.identity)
                self._exit_process(1)
                return
            log.warning("manager %s: not the leader any more; stopping controllers", self.identity)
        self._wake.set()

    def _wanted(self) -> bool:
        return not self._stopping.is_set() and (self._elector is None or self._elector.is_leader)

    def _supervise(self) -> None:
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                wanted = self._wanted()
                if wanted and not self._in_term:
                    self._run_term()
                elif not wanted and self._in_term:
                    self._stop_term()
                if not wanted and self._elected_once.is_set() and self._caches_synced():
                    self._set_started()  # standing by (on warm caches) counts as started
                self._wake.wait(0.5)
        except BaseException as exc:
            self._crash(exc)
        finally:
            self._stop_term()

    def _new_informers(self) -> dict[Kind, AnyInformer]:
        informers: dict[Kind, AnyInformer] = {}
        for controller in self._controllers:
            for kind in controller.kinds:
                if kind not in informers:
                    informers[kind] = self._new_informer(kind)
        return informers

    def _new_informer(self, kind: Kind) -> AnyInformer:
        def one(namespace: str | None) -> Informer:
            return Informer(
                kind,
                self.new_client,
                namespace=namespace,
                watch_timeout=self.options.watch_timeout,
                on_crash=self._crash,
                on_sync=self._wake.set,
                on_handler_error=self._handler_failed,
                **self._informer_options.get(kind, {}),  # type: ignore[arg-type]
            )

        namespaces = self.options.namespaces
        if not namespaces or not issubclass(kind, NamespacedAPIObject):
            return one(None)
        if len(namespaces) == 1:
            return one(namespaces[0])
        return MultiNamespaceInformer(one(ns) for ns in namespaces)

    def _handler_failed(self, kind: str) -> None:
        self.metrics.handler_errors_total.labels(kind=kind).inc()

    def _start_informers(self) -> None:
        """The warm standby's caches: started once, kept across terms, stopped by stop()."""
        informers = self._new_informers()
        with self._lock:
            self._informers = informers
        for informer in informers.values():
            informer.start()

    def _stop_informers(self) -> None:
        with self._lock:
            informers, self._informers = self._informers, {}
        for informer in informers.values():
            informer.request_stop()  # signal every informer first, so their reads end in parallel
        for informer in informers.values():
            informer.stop(timeout=max(self._remaining(), 0.1))

    def _caches_synced(self) -> bool:
        with self._lock:
            return all(i.has_synced() for i in self._informers.values())

    def _run_term(self) -> None:
        if self.options.warm_standby:
            with self._lock:
                informers = dict(self._informers)
                self._in_term = True
        else:
            informers = self._new_informers()
            with self._lock:
                self._informers = informers
                self._in_term = True
            for informer in informers.values():
                informer.start()
        # Workers wait for a full cache, as in controller-runtime: a reconciler reading the cache
        # must not mistake "not listed yet" for "does not exist". Each informer's sync, a stop and
        # a change of leadership set _wake; the re-set below hands on a wake-up this loop consumed.
        try:
            while True:
                self._wake.clear()
                if all(i.has_synced() for i in informers.values()):
                    break
                if not self._wanted():
                    return
                self._wake.wait(1.0)
        finally:
            self._wake.set()
        for controller in self._controllers:
            controller.setup(informers, metrics=self.metrics, on_crash=self._crash, subscribe=False)
        term = self.fence.open()
        for controller in self._controllers:
            controller.start(term)
        # Subscribed only now, workers running: each synced informer replays its cache to the new
        # subscription, and the first keys are reconciled while the rest are still being replayed.
        for controller in self._controllers:
            controller.subscribe(informers)
        self._running = True
        self._set_started()
        log.info(
            "manager %s: %d controller(s) running, %d informer(s) synced",
            self.identity,
            len(self._controllers),
            len(informers),
        )

    def _stop_term(self) -> None:
        warm = self.options.warm_standby
        with self._lock:
            if not self._in_term:
                return
            informers = {} if warm else self._informers
            if not warm:
                self._informers = {}
            self._in_term = self._running = False
        timeout = self._remaining() if self._stopping.is_set() else 10.0
        for informer in informers.values():
            informer.request_stop()  # signal every informer first, so their reads end in parallel
        for informer in informers.values():
            informer.stop(timeout=max(timeout, 0.1))
        for controller in self._controllers:
            controller.stop(timeout=self._remaining() if self._stopping.is_set() else 10.0)
            controller.teardown()
        # Workers still reconciling after the timeout keep running, but can no longer write: only
        # now may the lease be released (stop()) or another term begin.
        self.fence.close()

    def _set_started(self) -> None:
        self._started.set()
        self._start_news.set()

    def _remaining(self) -> float:
        return max(self._stop_deadline - time.monotonic(), 0.0)

    def _crash(self, exc: BaseException) -> None:
        log.error("manager: %s crashed; stopping", threading.current_thread().name, exc_info=exc)
        with self._lock:
            self.errors.append(exc)
        self._start_news.set()
        if not self._stopping.is_set():
            # stop() joins the runtime threads, so it cannot run on the one that crashed.
            threading.Thread(target=self.stop, name="manager-crash-stop", daemon=True).start()
