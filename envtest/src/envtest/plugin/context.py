"""Per-test bookkeeping behind the fixtures: the test's namespaces, its operator, its artifacts,
and the order of teardown (artifacts → custom resources deleted with the operator still running →
operator stopped → namespace deleted without waiting)."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import secrets
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from envtest import objects, timeouts
from envtest.errors import ClusterScopedLeftover, EnvtestError, FinalizerStuck, HotLoop
from envtest.plane import streams
from envtest.plugin import (
    artifacts,
    cleanup,
    clusterscoped,
    following,
    grant_probes,
    isolation,
    rbac,
    recording,
)

if TYPE_CHECKING:
    import pytest

    from envtest.clusters import Cluster
    from envtest.faults import FaultProxy
    from envtest.plugin.releases import Releases
    from envtest.plugin.runner import OperatorRunner
    from envtest.plugin.settings import Settings

OPERATOR_SERVICE_ACCOUNT = "envtest-operator"
TEARDOWN_WAIT = 60.0
"""Seconds teardown waits for the operator to process the finalizers of the test's resources."""


T = TypeVar("T")
log = logging.getLogger(__name__)


class SessionView(Protocol):
    """What a test's context needs of the run's session (`envtest.plugin.session.ClusterSession`).
    A protocol, so that this module sits below the session in the plugin's layers (no import cycle)."""

    config: pytest.Config
    settings: Settings
    releases: Releases
    run_id: str
    worker: str
    cr_paths: list[str]
    cluster_cr_paths: list[str]
    operator_roles: list[dict[str, Any]]
    recording: recording.SessionRecord

    @property
    def labels(self) -> dict[str, str]: ...

    def operator_clusterrole(self) -> str | None: ...

    def cluster_scoped_rules(self, cluster: Cluster, clusterrole: str) -> list[dict[str, Any]]: ...

    def namespaced_rules(self, cluster: Cluster, clusterrole: str) -> list[dict[str, Any]]: ...

    def cluster(self) -> Cluster: ...

    @property
    def alone_in_run(self) -> bool: ...

    @property
    def isolation_dir(self) -> Path: ...


class TestContext:
    __test__ = False  # not a test class, whatever pytest's collection rules think of the name

    def __init__(
        self, session: SessionView, nodeid: str, *, clusterwide: bool = False, pod_exec: bool = False
    ) -> None:
        self.session = session
        self.nodeid = nodeid
        self.clusterwide = clusterwide
        """Cluster-wide mode: the test runs alone, its operators are bound cluster-wide and watch
        every namespace (`envtest_clusterwide` marker, `envtest_operator_scope = cluster`)."""
        self.pod_exec = pod_exec
        """Exec on the fake pods of this test's namespaces runs commands on this host."""
        self.hold: isolation.Hold | None = None
        """This test's hold on the run's isolation lock (see `isolation`), from `begin()`."""
        self._inventory: clusterscoped.Inventory | None = None  # cluster-scoped CRs when it began
        self._cluster_scoped_done = False  # they were dealt with (by stop_operator, or by finish)
        self._releases: list[Future[None]] = []  # this test's namespace releases
        self.namespaces: list[str] = []
        self.operator_logs: list[Path] = []
        self.extra_log_paths: dict[str, Path] = {}
        self.private: Cluster | None = None
        self.faults: FaultProxy | None = None
        """The test's fault proxy (the `faults` fixture): operators started later talk through it."""
        self.artifacts: Path | None = None
        self._clusters: dict[str, Cluster] = {}  # namespace → the cluster it lives on
        self._grants: dict[str, set[str]] = {}  # namespace → URLs of cluster-scoped grants made for it
        self.record = recording.TestRecord(session.recording, nodeid)
        """The requests of this test's operators (envtest.plugin.recording)."""

    # -- the test's place on the cluster -------------------------------------------------------------

    def begin(self) -> None:
        """Take the test's hold (exclusive in cluster-wide mode, shared otherwise; this may wait for
        other workers' tests) and note which cluster-scoped custom resources exist already."""
        self.hold = isolation.hold(self.session.isolation_dir, exclusive=self.clusterwide)
        try:
            if self.session.cluster_cr_paths:
                cluster = self.session.cluster()
                self._inventory = clusterscoped.take(
                    cluster.session, cluster.server, self.session.cluster_cr_paths
                )
        except BaseException:
            self.hold.release()
            raise

    def finish(self) -> None:
        """After every other fixture of the test: cluster-scoped leftovers of a test without an
        operator, then the hold, once the test's namespaces are released."""
        try:
            self._clean_cluster_scoped(wait=0.0)
        finally:
            hold, self.hold = self.hold, None
            if hold is not None:
                _release_after(self._releases, hold.release)

    def _clean_cluster_scoped(self, *, wait: float) -> None:
        """Delete the cluster-scoped custom resources this test made (see `clusterscoped`), waiting
        `wait` seconds for the operator to process their finalizers; label and report the rest."""
        if self._inventory is None or self._cluster_scoped_done:
            return
        self._cluster_scoped_done = True
        cluster = self.session.cluster()
        found = clusterscoped.appeared(cluster.session, cluster.server, self._inventory)
        if not found:
            return
        alone = self.clusterwide or self.session.alone_in_run
        agent = cluster.user_agent or ""
        mine, unknown = clusterscoped.split(found, alone=alone, manager=clusterscoped.manager_of(agent))
        left = clusterscoped.delete(cluster.session, cluster.server, mine, wait=wait)
        if left and wait > 0:
            warnings.warn(
                FinalizerStuck(
                    f"{self.nodeid}: still present {wait:.0f}s after delete with the operator running: "
                    f"{', '.join(item.label for item in left)}; finalizers will be stripped "
                    f"(artifacts: {self.collect_artifacts()})"
                ),
                stacklevel=1,
            )
        clusterscoped.unblock(cluster.session, cluster.server, left)
        if unknown:
            clusterscoped.label(cluster.session, cluster.server, unknown, self.session.labels)
            warnings.warn(
                ClusterScopedLeftover(
                    f"{self.nodeid}: cluster-scoped {', '.join(item.label for item in unknown)} appeared "
                    "while other workers' tests ran too, and were not written by this worker's clients: "
                    "left for the end-of-run sweep. Mark the test @pytest.mark.envtest_clusterwide to "
                    "run it alone (then whatever appears is its own)."
                ),
                stacklevel=1,
            )

    # -- namespaces -----------------------------------------------------------------------------------

    def create_namespace(self, cluster: Cluster) -> str:
        began = time.monotonic()
        name = self._make_namespace(cluster)
        _timing("namespace_create", began, self.nodeid)
        return name

    def _make_namespace(self, cluster: Cluster) -> str:
        test = self.nodeid.rsplit("::", 1)[-1]
        slug = re.sub(r"[^a-z0-9]+", "-", test.lower()).strip("-")[:40].strip("-") or "test"
        name = f"{slug}-{secrets.token_hex(3)}"
        body = {"metadata": {"name": name, "labels": self.session.labels}}
        resp = cluster.session.post(f"{cluster.server}/api/v1/namespaces", json=body, timeout=10)
        if resp.status_code != 201:
            raise EnvtestError(f"creating namespace {name}: {resp.status_code} {resp.text[:300]}")
        self.namespaces.append(name)
        self._clusters[name] = cluster
        if self.pod_exec and cluster.pods_dir is not None:
            streams.allow_exec(cluster.pods_dir, name)
        self.record.watch(cluster, name)
        if cluster.has_controllers:
            self._wait_default_service_account(cluster, name)
        return name

    def _wait_default_service_account(self, cluster: Cluster, name: str, timeout: float = 30.0) -> None:
        # Pods are rejected until the serviceaccount controller has made `default`.
        url = f"{cluster.server}/api/v1/namespaces/{name}/serviceaccounts/default"
        if not cleanup.wait_for_object(cluster.session, url, timeout):
            raise EnvtestError(f"namespace {name}: default ServiceAccount missing after {timeout:.0f}s")

    def release_namespace(self, cluster: Cluster, name: str) -> None:
        """Release `name` after the test. Nothing in it is seen by another test, nor needed by this
        one: on the session's cluster it goes in the background (see `envtest.plugin.releases`); on a
        private plane at once (the plane is about to stop)."""
        began = time.monotonic()
        if cluster.pods_dir is not None:  # what the test allowed ends with it
            streams.forbid_exec(cluster.pods_dir, name)
        if cluster is self.private:
            self._release(cluster, name)
        else:
            release = functools.partial(self._release, cluster, name)
            self._releases.append(self.session.releases.submit(self.nodeid, name, release))
        _timing("namespace_delete", began, self.nodeid)

    def _release(self, cluster: Cluster, name: str) -> None:
        began = time.monotonic()
        _concurrently(
            [
                # Background: nobody waits for this namespace to finalize. Meanwhile the namespace
                # controller deletes what is in it, as the call below does.
                functools.partial(
                    cluster.session.delete,
                    f"{cluster.server}/api/v1/namespaces/{name}",
                    json={"propagationPolicy": "Background"},
                    timeout=10,
                ),
                functools.partial(self._release_custom_resources, cluster, name),
                # The operator's cluster-wide grants made for it (see operator_kubeconfig): they
                # name a ServiceAccount of this namespace, which is going with it.
                *(
                    functools.partial(cluster.session.delete, url, timeout=10)
                    for url in self._grants.pop(name, ())
                ),
            ]
        )
        _timing("namespace_release", began, self.nodeid)  # not waited for by the test

    def _release_custom_resources(self, cluster: Cluster, name: str) -> None:
        # Whatever the operator fixture did not delete: nobody processes finalizers any more. Done
        # alongside the namespace's deletion: deleting and unblocking objects of a terminating
        # namespace is allowed, and it ends the same way, with nothing left.
        swept = cleanup.delete_custom_resources(cluster.session, cluster.server, name, self.session.cr_paths)
        cleanup.strip_finalizers(cluster.session, cluster.server, name, swept.remaining)

    # -- the operator ---------------------------------------------------------------------------------

    def start_operator(
        self, cluster: Cluster, namespace: str, factory: Any, name: str = "operator"
    ) -> OperatorRunner:
        from envtest.plugin.runner import OperatorRunner, api_factory_for

        began = time.monotonic()
        kubeconfig = identity = self.operator_kubeconfig(cluster, namespace)
        _timing("operator_identity", began, self.nodeid)  # a part of operator_start, for benchmarks
        if self.faults is not None and self.faults.fronts(cluster):
            # `name` labels this instance in the proxy's counters, rules and kill switch.
            proxied = self.log_dir() / f"{namespace}-{name}.proxy.kubeconfig"
            kubeconfig = self.faults.kubeconfig_for(kubeconfig, proxied, client=name)
        log_path = self.log_dir() / f"{name}-{len(self.operator_logs)}.log"
        self.operator_logs.append(log_path)
        runner = OperatorRunner(
            factory,
            api_factory_for(kubeconfig),
            namespace=None if self.clusterwide else namespace,  # the factory's scope
            home_namespace=namespace,
            kubeconfig=kubeconfig,
            following=following.follow_operator(
                self.session.config, identity, None if kubeconfig == identity else kubeconfig
            ),
            log_path=log_path,
            loggers=self.session.settings.operator_loggers or None,
        )
        runner.start()
        _timing("operator_start", began, self.nodeid)
        return runner

    def operator_kubeconfig(self, cluster: Cluster, namespace: str) -> Path:
        """ServiceAccount `envtest-operator` in `namespace`, granted only the operator's RBAC: its
        ClusterRole in `namespace`, that role's cluster-scoped rules cluster-wide, its Roles in
        `namespace` (see `envtest.plugin.rbac`).

        The ServiceAccount, its token and every binding are this test's; only the ClusterRole of the
        cluster-scoped rules, the same for every namespace, is shared by this process's tests on a
        cluster (made once, swept with the process's other leftovers). None of these writes needs
        another's result, so they go out together: the identity is ready after the slowest, not
        after their sum."""
        sa = {"service_account": OPERATOR_SERVICE_ACCOUNT, "namespace": namespace}
        docs: list[dict[str, Any]] = []
        # One request each grant allows: asked of the authorizer until it agrees (see grant_probes).
        probes: list[grant_probes.Probe | None] = []
        clusterrole = self.session.operator_clusterrole()
        if clusterrole is not None and self.clusterwide:
            # The whole ClusterRole, cluster-wide, as a cluster-wide deployment binds it: the test
            # runs alone (see begin()), so nobody else's namespace is there to be touched.
            rules = self.session.namespaced_rules(cluster, clusterrole)
            rules += self.session.cluster_scoped_rules(cluster, clusterrole)
            probes.append(grant_probes.probe(rules, None))
            labels = {**self.session.labels, rbac.NAMESPACE_LABEL: namespace}
            docs.append(
                rbac.binding(
                    "ClusterRoleBinding",
                    f"{OPERATOR_SERVICE_ACCOUNT}-{namespace}",
                    role_kind="ClusterRole",
                    role_name=clusterrole,
                    labels=labels,
                    **sa,
                )
            )
        elif clusterrole is not None:
            probes.append(grant_probes.probe(self.session.namespaced_rules(cluster, clusterrole), namespace))
            docs.append(
                rbac.binding(
                    "RoleBinding",
                    OPERATOR_SERVICE_ACCOUNT,
                    role_kind="ClusterRole",
                    role_name=clusterrole,
                    **sa,
                )
            )
            rules = self.session.cluster_scoped_rules(cluster, clusterrole)
            if rules:
                probes.append(grant_probes.probe(rules, None))
                # One per process and cluster, named and labelled for the process: its sweep finds it.
                shared = "-".join(
                    (OPERATOR_SERVICE_ACCOUNT, clusterrole, self.session.run_id, self.session.worker)
                )
                # Applied with every grant, not once: an apply of an unchanged role is cheap, and a
                # role swept away meanwhile (by anything) would leave the binding pointing at nothing.
                docs.append(rbac.cluster_role(shared, rules, self.session.labels))
                name = f"{OPERATOR_SERVICE_ACCOUNT}-{namespace}"
                labels = {**self.session.labels, rbac.NAMESPACE_LABEL: namespace}
                docs.append(
                    rbac.binding(
                        "ClusterRoleBinding",
                        name,
                        role_kind="ClusterRole",
                        role_name=shared,
                        labels=labels,
                        **sa,
                    )
                )
        for role in self.session.operator_roles:
            docs.append(rbac.role_in(role, namespace))
            probes.append(grant_probes.probe(role.get("rules") or [], namespace))
            role_name = role["metadata"]["name"]
            docs.append(
                rbac.binding(
                    "RoleBinding",
                    f"{OPERATOR_SERVICE_ACCOUNT}-{role_name}",
                    role_kind="Role",
                    role_name=role_name,
                    **sa,
                )
            )
        path = self.log_dir() / f"{namespace}.kubeconfig"
        calls: list[Callable[[], object]] = [
            # First: two round trips in a row (ServiceAccount, then its token), the longest path.
            functools.partial(cluster.identity_kubeconfig, namespace, OPERATOR_SERVICE_ACCOUNT, path)
        ]
        calls += [
            functools.partial(
                objects.apply, cluster.session, cluster.server, doc, url=rbac.url_of(cluster.server, doc)
            )
            for doc in docs
        ]
        # Recorded first: whatever part of the batch landed, release_namespace deletes it.
        self._grants.setdefault(namespace, set()).update(
            rbac.url_of(cluster.server, d) for d in docs if d["kind"] == "ClusterRoleBinding"
        )
        _concurrently(calls)
        grant_probes.wait_in_effect(
            cluster.session,
            cluster.server,
            grant_probes.service_account(namespace, OPERATOR_SERVICE_ACCOUNT),
            [p for p in probes if p is not None],
            # Ten seconds on the local plane (grants take effect in milliseconds), stretched like
            # every other wait for slower backends.
            timeout=timeouts.scaled(cluster, 10.0),
        )
        return path

    def stop_operator(self, cluster: Cluster, runner: OperatorRunner) -> None:
        """Failures found here (a finalizer never removed, a crash, an operator that will not stop)
        get their artifacts now, while the namespace still exists; the report names the folder."""
        began = time.monotonic()
        if self.faults is not None:
            self.faults.clear()  # the faults belong to the test body, not to the cleanup of its CRs
        try:
            if not runner.errors:
                self._delete_with_operator(cluster, runner)
        finally:
            try:
                runner.stop()
            except BaseException:
                self.collect_artifacts()
                raise
            finally:
                _timing("operator_teardown", began, self.nodeid)
        if runner.errors:
            self.collect_artifacts()
        runner.check()
        if runner.namespace:
            self._check_hot_loops(cluster, runner.namespace)

    def _check_hot_loops(self, cluster: Cluster, namespace: str) -> None:
        """After the operator stopped, its record is complete: a loop found warns now, while the
        namespace (artifacts) still exists. A warning, so suites choose, as with FinalizerStuck."""
        loops = self.record.hot_loops(cluster, namespace)
        if loops:
            found = "; ".join(loop.describe() for loop in loops)
            warnings.warn(
                HotLoop(f"{self.nodeid}: {found} (artifacts: {self.collect_artifacts()})"), stacklevel=1
            )

    def _delete_with_operator(self, cluster: Cluster, runner: OperatorRunner) -> None:
        """The test's custom resources deleted while `runner` still runs, so it processes their
        finalizers: those of its namespace (of every namespace of the test on that cluster, for a
        cluster-wide operator), and the cluster-scoped ones the test made."""
        if runner.namespace is not None:
            namespaces = [runner.namespace]
        else:
            namespaces = [ns for ns in self.namespaces if self._clusters.get(ns) is cluster]
        for namespace in namespaces:
            swept = cleanup.delete_custom_resources(
                cluster.session, cluster.server, namespace, self.session.cr_paths, wait=TEARDOWN_WAIT
            )
            if swept.left:
                # A warning, so suites choose: `filterwarnings = error::envtest.errors.FinalizerStuck`
                # makes it fail the test (this repo does), as the bug it usually is.
                warnings.warn(
                    FinalizerStuck(
                        f"{self.nodeid}: still present {TEARDOWN_WAIT:.0f}s after delete with the "
                        f"operator running: {', '.join(swept.left)}; finalizers will be stripped "
                        f"(artifacts: {self.collect_artifacts()})"
                    ),
                    stacklevel=1,
                )
        if self._inventory is not None and cluster is self.session.cluster():
            self._clean_cluster_scoped(wait=TEARDOWN_WAIT)

    # -- artifacts ------------------------------------------------------------------------------------

    def collect_artifacts(self) -> Path | None:
        if self.artifacts is not None or not self.namespaces:
            return self.artifacts
        cluster = self._clusters[self.namespaces[0]]
        logs = {**cluster.log_paths, **self.extra_log_paths}
        logs.update({p.stem: p for p in self.operator_logs if p.exists()})
        dest = self.session.settings.artifacts_dir / artifacts.sanitize(self.nodeid)
        pod_logs = streams.pod_logs(cluster.pods_dir, self.namespaces) if cluster.pods_dir else {}
        self.artifacts = artifacts.collect(
            dest,
            session=cluster.session,
            server=cluster.server,
            namespaces=self.namespaces,
            logs=logs,
            pod_logs=pod_logs,
            fake_pods=cluster.pods_dir is not None,
        )
        return self.artifacts

    def record_closing(self, cluster: Cluster) -> None:
        """`cluster` (a private plane) is about to stop: keep its record of this test."""
        self.record.closing(cluster)

    def finish_record(self) -> Path | None:
        """The test is over: its record counted for the run, and written into its artifacts when
        it failed (or `--envtest-record=all`); the folder written, if any."""
        dest = self.session.settings.artifacts_dir / artifacts.sanitize(self.nodeid)
        return self.record.finish(self._clusters, dest)

    def log_dir(self) -> Path:
        base = self.session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        path = base / "envtest-tests" / re.sub(r"[^A-Za-z0-9_.-]+", "-", self.nodeid)[-120:]
        path.mkdir(parents=True, exist_ok=True)
        return path


def _release_after(futures: list[Future[None]], release: Callable[[], None]) -> None:
    """Call `release` once every future is done (at once when none is pending), from whichever
    thread finishes last; its failures are the futures' business, reported by `Releases`."""
    pending = [future for future in futures if not future.done()]
    if not pending:
        release()
        return
    count, lock = [len(pending)], threading.Lock()

    def one_done(_: Future[None]) -> None:
        with lock:
            count[0] -= 1
            last = count[0] == 0
        if last:
            release()

    for future in pending:
        future.add_done_callback(one_done)


def _concurrently(calls: list[Callable[[], T]]) -> list[T]:
    """Run independent API calls at once (each is a round trip, mostly waiting); their results in
    order. Every call finishes before this returns; the first failure, in order, is raised.
    Not for calls that themselves call this: they could wait for threads they occupy."""
    if len(calls) < 2:
        return [call() for call in calls]
    futures = [_pool().submit(call) for call in calls]
    wait(futures)
    return [future.result() for future in futures]


@functools.cache
def _pool() -> ThreadPoolExecutor:
    # One for the process: starting fresh threads for every batch cost more than the batch saved
    # on a busy machine. Idle, its threads only wait on a queue.
    return ThreadPoolExecutor(max_workers=16, thread_name_prefix="envtest-api")


def _timing(what: str, began: float, test: str) -> None:
    """Per-test overhead, appended as JSON lines to $ENVTEST_TIMINGS (benchmarks read it; `test`
    lets them add up the parts of one test)."""
    target = os.environ.get("ENVTEST_TIMINGS")
    if target:
        record = {"what": what, "seconds": round(time.monotonic() - began, 4), "test": test}
        with open(target, "a") as fh:  # one short write per line: xdist workers may share the file
            fh.write(json.dumps(record) + "\n")
