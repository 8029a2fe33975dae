"""The namespaced install mode on a real apiserver: `--watch-namespaces a,b` under exactly what
operator/config/rbac_namespaced.yaml grants in a and b, and rbac_cluster_reads.yaml cluster-wide.

The operator's identity holds no right outside its two namespaces (no ClusterRole of namespaced rules),
so a single cluster-wide list or watch would be refused and show as a denied informer; clusters in
both namespaces converge, and one in a third namespace is never touched.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykube
import pytest
from mysqlkit import MySQLClusters, sample

from envtest import consistently
from mysql_operator import build_manager
from mysql_operator.controller.kinds import MySQLCluster, Secret, StatefulSet
from mysql_operator.manifests import rbac

RBAC = "apis/rbac.authorization.k8s.io/v1"
ACCOUNT = "namespaced-operator"


@pytest.fixture
def namespaces(envtest_context: Any, cluster: Any, namespace: str) -> Iterator[list[str]]:
    """The test's namespace and two more: the operator watches the first two."""
    more = [envtest_context.create_namespace(cluster) for _ in range(2)]
    yield [namespace, *more]
    for name in more:
        envtest_context.release_namespace(cluster, name)


def post(cluster: Any, path: str, body: dict[str, Any], timeouts: Any) -> None:
    resp = cluster.session.post(f"{cluster.server}/{path}", json=body, timeout=timeouts(10))
    assert resp.status_code == 201, f"{path}: {resp.status_code} {resp.text[:300]}"


@pytest.fixture
def identity(cluster: Any, namespaces: list[str], tmp_path: Path, timeouts: Any) -> Iterator[Path]:
    """A ServiceAccount granted the namespaced mode's documents as shipped, re-pointed at it."""
    home, watched = namespaces[0], namespaces[:2]
    subject = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": home}]
    role, binding = rbac.namespaced_role_docs()
    for ns in watched:
        namespaced_role = {**role, "metadata": {**role["metadata"], "namespace": ns}}
        post(cluster, f"{RBAC}/namespaces/{ns}/roles", namespaced_role, timeouts)
        bound = copy.deepcopy(binding)
        bound["metadata"]["namespace"], bound["subjects"] = ns, subject
        post(cluster, f"{RBAC}/namespaces/{ns}/rolebindings", bound, timeouts)
    reads, reads_binding = (copy.deepcopy(d) for d in rbac.cluster_reads_docs())
    unique = f"{reads['metadata']['name']}-{secrets.token_hex(3)}"  # cluster-scoped: one per test
    reads["metadata"]["name"] = reads_binding["metadata"]["name"] = reads_binding["roleRef"]["name"] = unique
    reads_binding["subjects"] = subject
    post(cluster, f"{RBAC}/clusterroles", reads, timeouts)
    post(cluster, f"{RBAC}/clusterrolebindings", reads_binding, timeouts)
    try:
        yield cluster.identity_kubeconfig(home, ACCOUNT, tmp_path / "namespaced.kubeconfig")
    finally:
        for kind in ("clusterrolebindings", "clusterroles"):
            cluster.session.delete(f"{cluster.server}/{RBAC}/{kind}/{unique}", timeout=timeouts(10))


def test_a_namespaced_operator_runs_both_namespaces_and_touches_no_other(
    api: Any, namespaces: list[str], identity: Path, timeouts: Any
) -> None:
    config = pykube.KubeConfig.from_file(str(identity))
    manager = build_manager(lambda: pykube.HTTPClient(config), namespaces=namespaces[:2])
    clusters = [MySQLClusters(api, ns, timeouts) for ns in namespaces]
    for each in clusters:
        each.create(sample("mysqlcluster_minimal.yaml"), name="db")
    manager.start()
    try:
        for each in clusters[:2]:
            each.wait_running("db")
        for kind in (MySQLCluster, StatefulSet, Secret):
            informer = manager.informer(kind)
            assert informer.has_synced() and informer.denied_for() == 0, kind.kind
        outside = clusters[2]

        def untouched() -> None:
            cr = outside.must_get("db")
            assert not cr.get("status") and not cr["metadata"].get("finalizers"), cr
            assert outside.child("statefulset", "db") is None

        consistently(untouched, duration=timeouts(3))
        assert manager.errors == []
        for each in clusters[:2]:  # while the operator runs: its finalizer comes off
            each.delete("db")
            each.wait_gone("db")
    finally:
        manager.stop(timeouts(30))
    outside.delete("db")
