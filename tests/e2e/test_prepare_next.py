"""The next test's namespace and operator identity are made while the current test runs
(`envtest.plugin.ahead`), tested as users run it: pytester runs a small project against a real plane."""

from __future__ import annotations

import pytest

from envtest import binaries

# Inner runs start local planes from the binary cache: skipped on other backends.
pytestmark = pytest.mark.envtest_local

pytest_plugins = ["pytester"]

INNER = """
import pytest
from envtest import eventually

LABEL = "envtest.io/run"


def namespaces(cluster):
    url = f"{cluster.server}/api/v1/namespaces"
    resp = cluster.session.get(url, params={"labelSelector": LABEL}, timeout=10)
    return [ns["metadata"]["name"] for ns in resp.json()["items"]]


def test_first(namespace, cluster):
    if AHEAD:
        # Made in the background while this body runs: named for the test after this one.
        eventually(lambda: [n for n in namespaces(cluster) if n.startswith("test-second-")], timeout=30)
    else:
        assert not [n for n in namespaces(cluster) if n.startswith("test-second-")]


def test_second(namespace, operator, cluster):
    assert namespace.startswith("test-second-")
    url = f"{cluster.server}/api/v1/namespaces/{namespace}/serviceaccounts/default"
    sa = cluster.session.get(url, timeout=10)
    assert sa.status_code == 200, "the default ServiceAccount exists before the test runs"
    grant = cluster.session.get(
        f"{cluster.server}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/envtest-operator-{namespace}",
        timeout=10,
    )
    assert grant.status_code == 200, "the operator's identity is the one made for this namespace"


@pytest.mark.skip(reason="nothing is made for a test that will not run")
def test_third(namespace):
    pass


def test_last(cluster):
    # Everything made ahead was taken or released: only test_second's namespace may still be going.
    def settled():
        left = namespaces(cluster)
        assert not [n for n in left if n.startswith("test-third-")]
        assert len([n for n in left if n.startswith("test-second-")]) <= 1
    eventually(settled, timeout=30)
"""

RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: watcher}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [namespaces], verbs: [list]}
"""

OPERATOR = """
from envtest import ThreadOperator

def factory(api_factory, namespace):
    return ThreadOperator(lambda stop: stop.wait())
"""


@pytest.fixture(autouse=True)
def _real_binary_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester moves HOME, and with it ~/.cache: point the inner runs at the binaries we have.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))
    monkeypatch.setenv("ENVTEST_KWOK_STAGES", str(binaries.kwok_stages_dir()))


@pytest.mark.parametrize("ahead", [True, False], ids=["on", "off"])
def test_the_next_tests_namespace_is_made_while_a_test_runs(pytester: pytest.Pytester, ahead: bool) -> None:
    pytester.makeini(
        f"""
        [pytest]
        envtest_operator = quiet:factory
        envtest_operator_rbac = rbac.yaml
        envtest_prepare_next = {str(ahead).lower()}
        """
    )
    (pytester.path / "rbac.yaml").write_text(RBAC)
    pytester.makepyfile(quiet=OPERATOR, test_inner=f"AHEAD = {ahead}\n" + INNER)
    result = pytester.runpytest_subprocess(
        "--envtest-components=etcd,kube-apiserver,kube-controller-manager", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=3, skipped=1)
