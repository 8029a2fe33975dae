"""Per-test bookkeeping behind the fixtures: the test's namespaces, its operator, its artifacts,
and the order of teardown (artifacts → custom resources deleted with the operator still running →
operator stopped → namespace deleted without waiting)."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtest import objects
from envtest.errors import EnvtestError, FinalizerStuck
from envtest.plugin import artifacts, rbac

if TYPE_CHECKING:
    from envtest.clusters import Cluster
    from envtest.faults import FaultProxy
    from envtest.plugin.runner import OperatorRunner
    from envtest.plugin.session import ClusterSession

OPERATOR_SERVICE_ACCOUNT = "envtest-operator"
TEARDOWN_WAIT = 60.0
"""Seconds teardown waits for the operator to process the finalizers of the test's resources."""


class TestContext:
    __test__ = False  # not a test class, whatever pytest's collection rules think of the name

    def __init__(self, session: ClusterSession, nodeid: str) -> None:
        self.session = session
        self.nodeid = nodeid
        self.namespaces: list[str] = []
        self.operator_logs: list[Path] = []
        self.extra_log_paths: dict[str, Path] = {}
        self.private: Cluster | None = None
        self.faults: FaultProxy | None = None
        """The test's fault proxy (the `faults` fixture): operators started later talk through it."""
        self.artifacts: Path | None = None
        self._clusters: dict[str, Cluster] = {}  # namespace → the cluster it lives on

    # -- namespaces -----------------------------------------------------------------------------------

    def create_namespace(self, cluster: Cluster) -> str:
        began = time.monotonic()
        test = self.nodeid.rsplit("::", 1)[-1]
        slug = re.sub(r"[^a-z0-9]+", "-", test.lower()).strip("-")[:40].strip("-") or "test"
        name = f"{slug}-{secrets.token_hex(3)}"
        body = {"metadata": {"name": name, "labels": self.session.labels}}
        resp = cluster.session.post(f"{cluster.server}/api/v1/namespaces", json=body, timeout=10)
        if resp.status_code != 201:
            raise EnvtestError(f"creating namespace {name}: {resp.status_code} {resp.text[:300]}")
        self.namespaces.append(name)
        self._clusters[name] = cluster
        if cluster.has_controllers:
            self._wait_default_service_account(cluster, name)
        _timing("namespace_create", began)
        return name

    def _wait_default_service_account(self, cluster: Cluster, name: str, timeout: float = 30.0) -> None:
        # Pods are rejected until the serviceaccount controller has made `default`.
        url = f"{cluster.server}/api/v1/namespaces/{name}/serviceaccounts/default"
        deadline = time.monotonic() + timeout
        while cluster.session.get(url, timeout=10).status_code != 200:
            if time.monotonic() > deadline:
                raise EnvtestError(f"namespace {name}: default ServiceAccount missing after {timeout:.0f}s")
            time.sleep(0.05)

    def release_namespace(self, cluster: Cluster, name: str) -> None:
        began = time.monotonic()
        # Whatever the operator fixture did not delete: nobody processes finalizers any more.
        objects.delete_custom_resources(cluster.session, cluster.server, name, self.session.cr_paths)
        objects.strip_finalizers(cluster.session, cluster.server, name, self.session.cr_paths)
        # Background: the next test must not wait for this namespace to finalize.
        cluster.session.delete(
            f"{cluster.server}/api/v1/namespaces/{name}", json={"propagationPolicy": "Background"}, timeout=10
        )
        # The operator's cluster-wide grants made for this namespace (see operator_kubeconfig).
        rbac.delete_labelled(cluster.session, cluster.server, f"{rbac.NAMESPACE_LABEL}={name}")
        _timing("namespace_delete", began)

    # -- the operator ---------------------------------------------------------------------------------

    def start_operator(
        self, cluster: Cluster, namespace: str, factory: Any, name: str = "operator"
    ) -> OperatorRunner:
        from envtest.plugin.runner import OperatorRunner

        began = time.monotonic()
        kubeconfig = self.operator_kubeconfig(cluster, namespace)
        if self.faults is not None and self.faults.fronts(cluster):
            # `name` labels this instance in the proxy's counters, rules and kill switch.
            proxied = self.log_dir() / f"{namespace}-{name}.proxy.kubeconfig"
            kubeconfig = self.faults.kubeconfig_for(kubeconfig, proxied, client=name)
        log_path = self.log_dir() / f"{name}-{len(self.operator_logs)}.log"
        self.operator_logs.append(log_path)
        runner = OperatorRunner(
            factory,
            lambda: cluster.new_pykube_from(kubeconfig),
            namespace=namespace,
            log_path=log_path,
            loggers=self.session.settings.operator_loggers or None,
        )
        runner.start()
        _timing("operator_start", began)
        return runner

    def operator_kubeconfig(self, cluster: Cluster, namespace: str) -> Path:
        """ServiceAccount `envtest-operator` in `namespace`, granted only the operator's RBAC: its
        ClusterRole in `namespace`, that role's cluster-scoped rules cluster-wide, its Roles in
        `namespace` (see `envtest.plugin.rbac`)."""
        sa = {"service_account": OPERATOR_SERVICE_ACCOUNT, "namespace": namespace}
        docs: list[dict[str, Any]] = []
        clusterrole = self.session.operator_clusterrole()
        if clusterrole is not None:
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
                name = f"{OPERATOR_SERVICE_ACCOUNT}-{namespace}"
                labels = {**self.session.labels, rbac.NAMESPACE_LABEL: namespace}
                docs.append(rbac.cluster_role(name, rules, labels))
                docs.append(
                    rbac.binding(
                        "ClusterRoleBinding",
                        name,
                        role_kind="ClusterRole",
                        role_name=name,
                        labels=labels,
                        **sa,
                    )
                )
        for role in self.session.operator_roles:
            docs.append(rbac.role_in(role, namespace))
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
        for doc in docs:
            objects.apply(cluster.session, cluster.server, doc, url=rbac.url_of(cluster.server, doc))
        return cluster.identity_kubeconfig(
            namespace, OPERATOR_SERVICE_ACCOUNT, self.log_dir() / f"{namespace}.kubeconfig"
        )

    def stop_operator(self, cluster: Cluster, runner: OperatorRunner) -> None:
        """Failures found here (a finalizer never removed, a crash, an operator that will not stop)
        get their artifacts now, while the namespace still exists; the report names the folder."""
        began = time.monotonic()
        if self.faults is not None:
            self.faults.clear()  # the faults belong to the test body, not to the cleanup of its CRs
        try:
            if runner.namespace and not runner.errors:
                left = objects.delete_custom_resources(
                    cluster.session,
                    cluster.server,
                    runner.namespace,
                    self.session.cr_paths,
                    wait=TEARDOWN_WAIT,
                )
                if left:
                    # A warning, so suites choose: `filterwarnings = error::envtest.errors.FinalizerStuck`
                    # makes it fail the test (this repo does), as the bug it usually is.
                    warnings.warn(
                        FinalizerStuck(
                            f"{self.nodeid}: still present {TEARDOWN_WAIT:.0f}s after delete with the "
                            f"operator running: {', '.join(left)}; finalizers will be stripped "
                            f"(artifacts: {self.collect_artifacts()})"
                        ),
                        stacklevel=1,
                    )
        finally:
            try:
                runner.stop()
            except BaseException:
                self.collect_artifacts()
                raise
            finally:
                _timing("operator_teardown", began)
        if runner.errors:
            self.collect_artifacts()
        runner.check()

    # -- artifacts ------------------------------------------------------------------------------------

    def collect_artifacts(self) -> Path | None:
        if self.artifacts is not None or not self.namespaces:
            return self.artifacts
        cluster = self._clusters[self.namespaces[0]]
        logs = {**cluster.log_paths, **self.extra_log_paths}
        logs.update({p.stem: p for p in self.operator_logs if p.exists()})
        dest = self.session.settings.artifacts_dir / artifacts.sanitize(self.nodeid)
        self.artifacts = artifacts.collect(
            dest, session=cluster.session, server=cluster.server, namespaces=self.namespaces, logs=logs
        )
        return self.artifacts

    def log_dir(self) -> Path:
        base = self.session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        path = base / "envtest-tests" / re.sub(r"[^A-Za-z0-9_.-]+", "-", self.nodeid)[-120:]
        path.mkdir(parents=True, exist_ok=True)
        return path


def _timing(what: str, began: float) -> None:
    """Per-test overhead, appended as JSON lines to $ENVTEST_TIMINGS (benchmarks read it)."""
    target = os.environ.get("ENVTEST_TIMINGS")
    if target:
        with open(target, "a") as fh:
            fh.write(json.dumps({"what": what, "seconds": round(time.monotonic() - began, 4)}) + "\n")
