"""The plugin's behaviour around the operator and at the end of things, tested the way users run it:
pytester runs small projects in a subprocess against real control planes."""

from __future__ import annotations

import base64

import pytest
from mysqlkit import scaled
from widgetkit import CRD

from envtest import binaries
from envtest.clusters import Cluster

# Private planes and local binaries: skipped on other backends.
pytestmark = pytest.mark.envtest_local

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _real_binary_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester moves HOME, and with it ~/.cache: point the inner runs at the binaries we have.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))
    monkeypatch.setenv("ENVTEST_KWOK_STAGES", str(binaries.kwok_stages_dir()))


@pytest.mark.envtest_private(components="etcd,kube-apiserver,kube-controller-manager")
def test_worker_finishing_early_sweeps_only_its_own_namespaces(
    pytester: pytest.Pytester, private_cluster: Cluster
) -> None:
    # gw0 finishes at once — after gw1's namespace exists — and its session end sweeps; gw1 waits
    # until gw0's process is done, then checks its own namespace is still live.
    pytester.makeconftest(
        """
        import os, pathlib

        def pytest_unconfigure(config):  # after every sessionfinish, the sweep included
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            if worker:
                (pathlib.Path(__file__).parent / f"{worker}.done").write_text("")
        """
    )
    pytester.makepyfile(
        test_sweep="""
        import os, pathlib, time

        HERE = pathlib.Path(__file__).parent

        def wait_for(path):
            deadline = time.monotonic() + 120
            while not path.exists():
                assert time.monotonic() < deadline, f"{path.name} never appeared"
                time.sleep(0.1)

        def test_namespace_survives_a_sibling_session_end(namespace, cluster):
            if os.environ["PYTEST_XDIST_WORKER"] == "gw0":
                wait_for(HERE / "gw1.namespace")
                return
            (HERE / "gw1.namespace").write_text(namespace)
            wait_for(HERE / "gw0.done")
            live = cluster.session.get(f"{cluster.server}/api/v1/namespaces/{namespace}", timeout=10)
            assert live.status_code == 200, "a sibling's sweep deleted this namespace"
            assert "deletionTimestamp" not in live.json()["metadata"], "a sibling's sweep is deleting it"
        """
    )
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--dist",
        "each",
        "--envtest-backend=existing",
        f"--envtest-kubeconfig={private_cluster.kubeconfig}",
    )
    result.assert_outcomes(passed=2)
    # And nothing of the run is left live: every worker swept (or released) its own.
    resp = private_cluster.session.get(
        f"{private_cluster.server}/api/v1/namespaces",
        params={"labelSelector": "envtest.io/run"},
        timeout=scaled(private_cluster, 10),
    )
    left = [
        ns["metadata"]["name"] for ns in resp.json()["items"] if "deletionTimestamp" not in ns["metadata"]
    ]
    assert left == []


RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lister}
rules:
- {apiGroups: [""], resources: [namespaces, configmaps], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: lister-leader, namespace: lister-system}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [lister-leader]
  verbs: [get, update]
"""


def test_operator_gets_cluster_scoped_rules_cluster_wide_and_roles_in_its_namespace(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        """
        [pytest]
        envtest_operator = lister:factory
        envtest_operator_rbac = rbac.yaml
        """
    )
    (pytester.path / "rbac.yaml").write_text(RBAC)
    pytester.makepyfile(
        lister="""
        from envtest import ThreadOperator

        seen = {}

        def factory(api_factory, namespace):
            def run(stop):
                api = api_factory()
                def status(path):
                    return api.session.get(f"{api.url}/{path}", timeout=10).status_code
                leases = f"apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
                seen.update({
                    "list namespaces": status("api/v1/namespaces"),
                    "list configmaps here": status(f"api/v1/namespaces/{namespace}/configmaps"),
                    "list configmaps in default": status("api/v1/namespaces/default/configmaps"),
                    "get its lease": status(f"{leases}/lister-leader"),
                    "get another lease": status(f"{leases}/other"),
                })
                stop.wait()
            return ThreadOperator(run)
        """,
        test_rbac="""
        from envtest import eventually
        from lister import seen

        RBAC = "apis/rbac.authorization.k8s.io/v1"

        def test_operator_lists_namespaces_and_nothing_namespaced_elsewhere(operator):
            def all_seen():
                assert len(seen) == 5, seen

            eventually(all_seen, timeout=30)
            assert seen == {
                "list namespaces": 200,            # cluster-scoped rule, bound cluster-wide
                "list configmaps here": 200,       # namespaced rule, in the test namespace
                "list configmaps in default": 403, # ... and nowhere else
                "get its lease": 404,              # the Role, re-namespaced: allowed, not there
                "get another lease": 403,          # its resourceNames hold
            }

        def test_cluster_wide_grants_go_with_the_namespace_after_the_test(cluster):
            # Released in the background once the next test's body begins (envtest.plugin.ahead).
            def none_left():
                for plural in ("clusterrolebindings", "clusterroles"):
                    resp = cluster.session.get(
                        f"{cluster.server}/{RBAC}/{plural}",
                        params={"labelSelector": "envtest.io/namespace"},
                        timeout=10,
                    )
                    assert resp.json()["items"] == [], plural

            eventually(none_left, timeout=30)
        """,
    )
    result = pytester.runpytest_subprocess("--envtest-components=minimal", "-p", "no:randomly")
    result.assert_outcomes(passed=2)


PASSWORD = "s3cr3t-hunter2-value"


def test_teardown_failures_fail_the_test_with_artifacts_and_secrets_never_reach_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        """
        [pytest]
        envtest_crds = crd
        envtest_operator = idle:factory
        envtest_operator_clusterrole = system:aggregate-to-view
        filterwarnings = error::envtest.errors.FinalizerStuck
        """
    )
    (pytester.path / "crd").mkdir()
    (pytester.path / "crd" / "widgets.yaml").write_text(CRD)
    (pytester.path / "crd" / "kustomization.yaml").write_text("resources: [widgets.yaml]\n")
    pytester.makeconftest(
        """
        import envtest.plugin.context

        envtest.plugin.context.TEARDOWN_WAIT = 2.0  # the finalizer below is never removed: don't wait 60 s
        """
    )
    pytester.makepyfile(
        idle="""
        from envtest import ThreadOperator

        def factory(api_factory, namespace):
            return ThreadOperator(lambda stop: stop.wait())

        def crashing(api_factory, namespace):
            def run(stop):
                raise RuntimeError("operator blew up")
            return ThreadOperator(run)
        """,
        test_teardown=f"""
        import json, pytest

        def test_finalizer_never_removed(operator, namespace, kube):
            kube.session.post(
                f"{{kube.url}}/apis/example.com/v1/namespaces/{{namespace}}/widgets",
                json={{"apiVersion": "example.com/v1", "kind": "Widget",
                      "metadata": {{"name": "stuck", "finalizers": ["example.com/never"]}}}},
                timeout=10,
            ).raise_for_status()

        def test_secret_values_are_redacted(namespace, kube):
            secret = {{"apiVersion": "v1", "kind": "Secret", "metadata": {{"name": "creds"}},
                      "stringData": {{"password": "{PASSWORD}"}}}}
            secret["metadata"]["annotations"] = {{
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(secret)}}
            kube.session.post(f"{{kube.url}}/api/v1/namespaces/{{namespace}}/secrets", json=secret,
                              timeout=10).raise_for_status()
            assert False, "failing on purpose"

        class TestCrash:
            @pytest.fixture
            def envtest_operator_factory(self):
                from idle import crashing
                return crashing

            def test_operator_crashes(self, operator):
                import time
                time.sleep(0.5)
        """,
    )
    result = pytester.runpytest_subprocess("--envtest-components=minimal", "--envtest-artifacts-dir=out")
    result.assert_outcomes(passed=2, failed=1, errors=2)
    result.stdout.fnmatch_lines(["*FinalizerStuck*widgets/stuck*"])
    result.stdout.fnmatch_lines(
        ["*envtest: *crd: skipped 1 document(s) that are not CRDs: kustomization.yaml#1*"]
    )
    out = pytester.path / "out"
    stuck = out / "test_teardown.py-test_finalizer_never_removed"
    assert "example.com/never" in "".join(p.read_text() for p in stuck.rglob("widgets.*.yaml"))
    crash = out / "test_teardown.py-TestCrash-test_operator_crashes"
    assert list((crash / "logs").glob("operator-*.log")), "the crash found at teardown left artifacts"
    secret_dir = out / "test_teardown.py-test_secret_values_are_redacted"
    assert list(secret_dir.rglob("secrets.api_v1.yaml")), "the Secret itself is listed"
    encoded = base64.b64encode(PASSWORD.encode()).decode()
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert PASSWORD not in text and encoded not in text, f"secret value in {path}"
