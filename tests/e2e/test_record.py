"""The record on real apiservers: each test's operator requests from kube-apiserver's own audit log,
hot loops caught (and legitimate convergence left alone), the run's RBAC report under xdist, and a
log that rotates or holds garbage failing nothing.

The plugin's parts run as users run them: pytester projects in a subprocess, with tiny operators
written against the raw API (a status writer that triggers itself is five lines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from widgetkit import CRD

from envtest import binaries
from envtest.clusters import Cluster, LocalCluster
from envtest.plane.controlplane import ControlPlane
from envtest.record.book import RecordBook
from envtest.record.events import operator_user

pytestmark = pytest.mark.envtest_local
pytest_plugins = ["pytester"]

RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widget-operator}
rules:
- {apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch]}
- {apiGroups: [example.com], resources: [widgets/status], verbs: [patch]}
- {apiGroups: [""], resources: [configmaps], verbs: [list, create]}
- {apiGroups: [""], resources: [secrets], verbs: [list]}
"""
OPERATORS = '''
"""Tiny operators on the raw API: each watches its namespace's widgets."""
import json, time
from envtest import ThreadOperator

def _events(api, namespace, stop):
    path = f"{api.url}/apis/example.com/v1/namespaces/{namespace}/widgets"
    while not stop.is_set():
        params = {"watch": "1", "timeoutSeconds": "2"}
        with api.session.get(path, params=params, stream=True, timeout=10) as r:
            if r.status_code != 200:  # say, a grant not in the authorizer's cache yet: ask again
                stop.wait(0.2)
                continue
            for line in r.iter_lines():
                if stop.is_set():
                    return
                event = json.loads(line) if line else {}
                if event.get("type") in ("ADDED", "MODIFIED"):
                    yield event["object"]

def _patch_status(api, namespace, name, status):
    url = f"{api.url}/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status"
    api.session.patch(url, json={"status": status}, timeout=10,
                      headers={"Content-Type": "application/merge-patch+json"})

def counter(api_factory, namespace):
    """Counts its own reconciles into the status: each write triggers the next. A hot loop."""
    def run(stop):
        api = api_factory()
        for obj in _events(api, namespace, stop):
            count = (obj.get("status") or {}).get("count", 0)
            _patch_status(api, namespace, obj["metadata"]["name"], {"count": count + 1})
            time.sleep(0.02)
    return ThreadOperator(run)

def steady(api_factory, namespace):
    """Reports the spec's value once per change: as many writes as the test makes changes."""
    def run(stop):
        api = api_factory()
        for obj in _events(api, namespace, stop):
            want = obj["spec"]["value"]
            if (obj.get("status") or {}).get("observed") != want:
                _patch_status(api, namespace, obj["metadata"]["name"], {"observed": want})
    return ThreadOperator(run)

def poller(api_factory, namespace):
    """Requeues every 50 ms and reads the widget afresh each time, writing nothing."""
    def run(stop):
        api = api_factory()
        while not stop.wait(0.05):
            api.session.get(f"{api.url}/apis/example.com/v1/namespaces/{namespace}/widgets/w", timeout=10)
    return ThreadOperator(run)

def nosy(api_factory, namespace):
    """Lists configmaps (granted) and creates a secret (not granted: 403), once."""
    def run(stop):
        api = api_factory()
        api.session.get(f"{api.url}/api/v1/namespaces/{namespace}/configmaps", timeout=10)
        body = {"metadata": {"name": "creds"}, "stringData": {"password": "hunter2-not-logged"}}
        api.session.post(f"{api.url}/api/v1/namespaces/{namespace}/secrets", json=body, timeout=10)
        stop.wait()
    return ThreadOperator(run)
'''
TESTS = """
import pytest
from envtest import eventually

def widget(kube, namespace, **spec):
    url = f"{kube.url}/apis/example.com/v1/namespaces/{namespace}/widgets"
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}
    kube.session.post(url, json=body, timeout=10).raise_for_status()
    return f"{url}/w"

def status(kube, url):
    return kube.session.get(url, timeout=10).json().get("status") or {}

@pytest.fixture
def envtest_operator_factory(request):
    # A test picks its operator with indirect parametrization; the ini's is the default.
    import operators
    name = getattr(request, "param", None) or request.config.getini("envtest_operator").split(":")[1]
    return getattr(operators, name)
"""


@pytest.fixture(autouse=True)
def _real_binary_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester moves HOME, and with it ~/.cache: point the inner runs at the binaries we have.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))
    monkeypatch.setenv("ENVTEST_KWOK_STAGES", str(binaries.kwok_stages_dir()))


def _project(pytester: pytest.Pytester, *, operator: str = "counter", tests: str) -> None:
    pytester.makeini(
        f"""
        [pytest]
        envtest_crds = crd
        envtest_operator = operators:{operator}
        envtest_operator_rbac = rbac.yaml
        filterwarnings = error::envtest.errors.HotLoop
        """
    )
    (pytester.path / "crd").mkdir()
    (pytester.path / "crd" / "widgets.yaml").write_text(CRD)
    (pytester.path / "rbac.yaml").write_text(RBAC)
    (pytester.path / "operators.py").write_text(OPERATORS)
    (pytester.path / "conftest.py").write_text(TESTS)
    pytester.makepyfile(test_inner=tests)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--envtest-components=minimal", "--envtest-artifacts-dir=out", *args)


def _requests(pytester: pytest.Pytester, test: str) -> list[dict[str, Any]]:
    path = pytester.path / "out" / f"test_inner.py-{test}" / "record" / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_status_write_that_triggers_itself_is_a_hot_loop_with_its_record_in_the_artifacts(
    pytester: pytest.Pytester,
) -> None:
    _project(
        pytester,
        tests="""
        from conftest import widget, status
        from envtest import eventually

        def test_counter_runs_away(operator, namespace, kube):
            url = widget(kube, namespace, value=1)
            def counted_a_lot():
                assert status(kube, url).get("count", 0) >= 30
            eventually(counted_a_lot, timeout=60)
        """,
    )
    result = _run(pytester)
    result.assert_outcomes(passed=1, errors=1)  # the test passed; its teardown found the loop
    result.stdout.fnmatch_lines(
        ["*HotLoop*the operator wrote widgets.example.com *-*/w * times*patch/status x*"]
    )
    requests = _requests(pytester, "test_counter_runs_away")
    assert [r["received"] for r in requests] == sorted(r["received"] for r in requests)
    patches = [r for r in requests if r["verb"] == "patch"]
    assert len(patches) > 20 and {r["subresource"] for r in patches} == {"status"}
    # 404s: after teardown deleted the widget, the loop's last patches find it gone
    assert {r["code"] for r in patches} <= {200, 404} and all(r["latency_ms"] >= 0 for r in patches)
    assert any(r["verb"] == "watch" and r["stage"] == "ResponseStarted" for r in requests)
    timeline = pytester.path / "out" / "test_inner.py-test_counter_runs_away" / "record" / "timeline.txt"
    text = timeline.read_text()
    assert "watch open" in text and "«" in text and "patch" in text  # the test's create is in it too


def test_slow_legitimate_convergence_and_a_requeue_storm(pytester: pytest.Pytester) -> None:
    _project(
        pytester,
        tests="""
        import pytest, time
        from conftest import widget, status
        from envtest import eventually

        @pytest.mark.parametrize("envtest_operator_factory", ["steady"], indirect=True)
        def test_each_change_answered_once(envtest_operator_factory, operator, namespace, kube):
            url = widget(kube, namespace, value=0)
            for value in range(1, 26):  # more status writes than the limit (20), each explained
                kube.session.patch(url, json={"spec": {"value": value}}, timeout=10,
                                   headers={"Content-Type": "application/merge-patch+json"})
                def observed(value=value):
                    assert status(kube, url).get("observed") == value
                eventually(observed, timeout=30)

        @pytest.mark.parametrize("envtest_operator_factory", ["poller"], indirect=True)
        def test_requeue_storm(envtest_operator_factory, operator, namespace, kube):
            widget(kube, namespace, value=0)
            time.sleep(2)  # 20 reads a second, nothing else happening: > 5/s over a 5 s window
        """,
    )
    result = _run(pytester, "-rA")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_requeue_storm*", "*HotLoop*requests on widgets*get x*"]
    )
    result.stdout.no_fnmatch_line("*test_each_change_answered_once*HotLoop*")
    report = json.loads((pytester.path / "out" / "rbac-usage.json").read_text())
    assert report["hot_loops"]["found"] == 1
    peaks = report["hot_loops"]["peaks"]
    # 25 status writes in all, but in a row without a change to explain them only the few a naive
    # watcher makes from events that were already stale when it read them (at most a handful)
    assert peaks["writes"][0] <= 5 and peaks["writes"][1].endswith("test_each_change_answered_once[steady]")


def test_xdist_workers_records_merge_into_one_report_of_unused_and_denied_grants(
    pytester: pytest.Pytester, timeouts: Any
) -> None:
    _project(
        pytester,
        operator="nosy",
        tests="""
        import time

        def test_one(operator):
            time.sleep(1)

        def test_two(operator):
            time.sleep(1)
            assert False, "failing on purpose: its record lands in its artifacts"
        """,
    )
    result = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "envtest: record: * operator requests in 2 tests; * rule(s) with unused grants; 2 denied *",
            "*unused: ClusterRole/widget-operator rule 2 (core): create configmaps*",
            "*denied: test_inner.py::test_* create secrets test-* x1",
        ]
    )
    report = json.loads((pytester.path / "out" / "rbac-usage.json").read_text())
    assert sorted(d["test"] for d in report["denied"]) == [
        "test_inner.py::test_one",
        "test_inner.py::test_two",
    ]
    unused = {u["rule"]: u["unused"] for u in report["unused"]}
    assert unused[2] == ["create configmaps"] and unused[3] == ["list secrets"]
    # Only the failed test's artifacts hold its record (mode `failed`); no Secret value anywhere.
    assert not (pytester.path / "out" / "test_inner.py-test_one" / "record").exists()
    assert {(r["verb"], r["resource"], r["code"]) for r in _requests(pytester, "test_two")} >= {
        ("list", "configmaps", 200),
        ("create", "secrets", 403),
    }
    for path in (pytester.path / "out").rglob("*"):
        assert path.is_dir() or b"hunter2-not-logged" not in path.read_bytes(), path
    suggested = subprocess.run(
        [
            sys.executable,
            "-m",
            "envtest.cli",
            "rbac",
            "suggest",
            str(pytester.path / "out" / "rbac-usage.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeouts(60),
    ).stdout
    assert "- configmaps" in suggested and "- secrets" in suggested and "- create" in suggested


def test_the_record_off_starts_no_audit_log_and_an_existing_cluster_says_so_once(
    pytester: pytest.Pytester, private_cluster: Cluster
) -> None:
    _project(
        pytester,
        tests="""
        def test_one(operator, cluster):
            assert cluster.audit_log is None  # neither backend gives the harness a log to read

        def test_two(operator, cluster):
            assert cluster.audit_log is None
        """,
    )
    result = _run(
        pytester, "--envtest-backend=existing", f"--envtest-kubeconfig={private_cluster.kubeconfig}"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["envtest: record unavailable: an existing cluster's audit log *"])
    assert result.stdout.str().count("record unavailable") == 1
    result = _run(pytester, "--envtest-record=off")
    result.assert_outcomes(passed=2)
    assert "envtest: record" not in result.stdout.str()
    assert not (pytester.path / "out" / "rbac-usage.json").exists()


def test_a_rotating_log_with_garbage_in_it_loses_no_request(tmp_path: Path, timeouts: Any) -> None:
    # A real apiserver that rotates its audit log every megabyte; the operator's identity makes
    # enough requests to fill several files while the book follows, and garbage lands in between.
    plane = ControlPlane(
        ["etcd", "kube-apiserver"],
        workdir=tmp_path / "plane",
        extra_args={"kube-apiserver": {"audit-log-maxsize": "1", "audit-log-maxbackup": "10"}},
    )
    with plane:
        cluster = LocalCluster.from_plane(plane)
        assert cluster.audit_log is not None
        namespace = "rotating"
        cluster.session.post(
            f"{cluster.server}/api/v1/namespaces",
            json={"metadata": {"name": namespace}},
            timeout=timeouts(10),
        )
        book = RecordBook()
        book.watch(cluster.audit_log, namespace)
        kubeconfig = cluster.identity_kubeconfig(namespace, "envtest-operator", tmp_path / "op.kubeconfig")
        operator = Cluster.new_pykube_from(kubeconfig)
        url = f"{operator.url}/api/v1/namespaces/{namespace}/configmaps/none"  # no grant: 403, still recorded
        made = 0
        for batch in range(4):
            for _ in range(500):
                operator.session.get(url, timeout=timeouts(10))
                made += 1
            with open(cluster.audit_log, "a") as fh:  # a torn or foreign line: skipped, counted
                fh.write(f'{{"kind": "Event", "garbage {namespace} {batch}\n')

            def ping(path: str) -> object:
                return cluster.session.get(f"{cluster.server}{path}", timeout=timeouts(10))

            assert book.sync(cluster.audit_log, ping)
        got = book.take(namespace)
        operator.session.close()
        assert len(got) == made
        assert {r.user for r in got} == {operator_user(namespace)} and {r.code for r in got} == {403}
        assert book.rotations() >= 1, os.listdir(cluster.audit_log.parent)
        assert book.malformed >= 1
