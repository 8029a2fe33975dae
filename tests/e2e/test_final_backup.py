"""The final backup is a consistent copy: the database is stopped before anything is archived.

A finalizer on pod 0 stands in for a slow mysqld shutdown (on kind the pod's real
terminationGracePeriodSeconds does the same): the cluster's Job must not appear while the pod is
still terminating. Job pods are held Running on this plane (kwok runs no container), so the test
ends the archive itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from mysqlkit import FINALIZER, MySQLClusters, sample

from envtest import OperatorRunner, assert_matches, consistently, eventually

# kwok-held Job pods: local plane only.
pytestmark = pytest.mark.envtest_local

FULL = sample("mysqlcluster_full.yaml")
BACKED_UP = {**FULL, "spec": {**FULL["spec"], "replicas": 1}}
HOLD = "example.com/hold-shutdown"


def pod_path(mysql: MySQLClusters, name: str) -> str:
    return f"api/v1/namespaces/{mysql.namespace}/pods/{name}"


def test_job_is_created_only_after_the_database_pods_are_gone(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(BACKED_UP)
    mysql.wait_running("sample-full")
    (pod,) = mysql.database_pods("sample-full")
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 60, "mysqld needs time for a clean shutdown"
    mysql.api.patch(pod_path(mysql, pod["metadata"]["name"]), {"metadata": {"finalizers": [HOLD]}})

    assert mysql.delete("sample-full") == 200

    def stopping() -> None:
        sts = mysql.child("statefulset", "sample-full")
        assert sts is not None and sts["spec"]["replicas"] == 0, "not scaled down"
        (terminating,) = mysql.database_pods("sample-full")
        assert terminating["metadata"].get("deletionTimestamp"), "pod 0 not terminating yet"
        assert_matches(mysql.must_get("sample-full"), {"status": {"finalBackup": {"phase": "Stopping"}}})

    eventually(stopping, timeout=mysql.timeouts(30))

    def no_job_while_mysqld_may_run() -> None:
        assert mysql.child("job", "sample-full") is None, "archived a volume mysqld may still write"
        assert mysql.must_get("sample-full")["metadata"]["finalizers"] == [FINALIZER]

    # Longer than the operator's 5 s poll: it looked and kept waiting.
    consistently(no_job_while_mysqld_may_run, duration=mysql.timeouts(7.0), interval=0.5)

    mysql.api.patch(pod_path(mysql, pod["metadata"]["name"]), {"metadata": {"finalizers": None}})

    def job_after_pods() -> dict[str, Any]:
        job = mysql.child("job", "sample-full")
        assert job is not None, "no Job yet"
        return job

    job = eventually(job_after_pods, timeout=mysql.timeouts(30))
    assert mysql.database_pods("sample-full") == []
    archive = mysql.final_backup_pod("sample-full")
    mysql.finish_pod(archive, succeeded=True)
    mysql.wait_gone("sample-full", timeout=mysql.timeouts(60))
    kept = mysql.child("job", "sample-full")
    assert kept is not None and kept["metadata"]["uid"] == job["metadata"]["uid"], (
        "one archive, kept for its TTL"
    )


def test_failed_attempts_are_counted_in_status_and_backed_off(
    mysql: MySQLClusters, operator: OperatorRunner
) -> None:
    mysql.create(BACKED_UP)
    mysql.wait_running("sample-full")
    assert mysql.delete("sample-full") == 200

    first = mysql.final_backup_pod("sample-full")
    mysql.finish_pod(first, succeeded=False)

    def counted() -> None:
        assert_matches(
            mysql.must_get("sample-full"), {"status": {"finalBackup": {"phase": "Failed", "attempts": 1}}}
        )

    eventually(counted, timeout=mysql.timeouts(30))

    # The retry waits out the backoff (10 s after the first failure): no Job is created at once.
    failed_job = first["metadata"]["ownerReferences"][0]["uid"]

    def backing_off() -> None:
        job = mysql.child("job", "sample-full")
        assert job is None or job["metadata"]["uid"] == failed_job, "retried without waiting out the backoff"

    consistently(backing_off, duration=mysql.timeouts(5.0), interval=0.5)
    retry = mysql.final_backup_pod("sample-full", timeout=mysql.timeouts(30))
    assert retry["metadata"]["uid"] != first["metadata"]["uid"]
    mysql.finish_pod(retry, succeeded=True)
    mysql.wait_gone("sample-full", timeout=mysql.timeouts(60))
