"""The operator drives a MySQLCluster to its spec and then leaves it alone.

Against the shared control plane: kube-controller-manager runs the StatefulSet controller, the
scheduler places pods, kwok plays kubelet (pods become Ready, claims are bound), so every child the
operator writes is acted on the way a cluster would.
"""

from __future__ import annotations

from typing import Any

import pytest
from mysqlkit import RETAINED, MySQLClusters, controller_ref, reconciles, sample, writes

from envtest import OperatorRunner, assert_matches, consistently, eventually
from mysql_operator.database import images

MINIMAL = sample("mysqlcluster_minimal.yaml")
FULL = sample("mysqlcluster_full.yaml")


def owned_by(cr: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference every owned child must carry: ours, the controlling one, blocking."""
    return {
        "apiVersion": "db.example.com/v1",
        "kind": "MySQLCluster",
        "name": cr["metadata"]["name"],
        "uid": cr["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def assert_converged(mysql: MySQLClusters, name: str, *, replicas: int, version: str) -> dict[str, Any]:
    """Status Running for the current generation, and the StatefulSet's pods all really there,
    ready and on the spec's image (status alone could be a lie the operator tells)."""
    cr = mysql.wait_running(name)
    image = images.current().mysql(version)  # a stand-in on the offline kind image
    assert_matches(
        mysql.child("statefulset", name),
        {
            "spec": {
                "replicas": replicas,
                # The server and its replication sidecar, both on the engine's image.
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "mysql", "image": image},
                            {"name": "replication", "image": image},
                        ]
                    }
                },
            },
            "status": {"readyReplicas": replicas, "updatedReplicas": replicas},
        },
    )

    def pods_follow() -> None:
        pods = mysql.database_pods(name)
        seen = sorted(
            (p["metadata"]["name"], p["spec"]["containers"][0]["image"]) for p in pods
        )  # the server
        assert seen == [(f"{name}-mysql-{i}", image) for i in range(replicas)], seen

    eventually(pods_follow, timeout=mysql.timeouts(60))
    return cr


def assert_quiet(
    mysql: MySQLClusters, runner: OperatorRunner, name: str, duration: float | None = None
) -> None:
    """No write by the operator and no change of the cluster (status churn included) for `duration`
    seconds, already scaled (default: 5 on the local plane)."""
    before = writes(runner.operator)
    version = mysql.must_get(name)["metadata"]["resourceVersion"]

    def unchanged() -> None:
        assert writes(runner.operator) == before, f"operator wrote {writes(runner.operator) - before} times"
        cr = mysql.must_get(name)
        assert cr["metadata"]["resourceVersion"] == version, f"cluster changed: status {cr.get('status')}"

    consistently(unchanged, duration=mysql.timeouts(5.0) if duration is None else duration, interval=0.5)


@pytest.mark.kind_smoke  # on kind: the operator on the host, a real kubelet running the pod
def test_minimal_sample_gets_owned_children_and_runs(mysql: MySQLClusters, operator: OperatorRunner) -> None:
    cr = mysql.create(MINIMAL)
    ns, ref = mysql.namespace, owned_by(cr)

    cr = assert_converged(mysql, "sample", replicas=1, version="8.4")  # no version: mysql's default
    eventually(
        lambda: assert_matches(mysql.must_get("sample"), {"status": {"version": "8.4"}}),
        timeout=mysql.timeouts(30),
    )

    secret = mysql.child("secret", "sample")
    assert_matches(secret, {"metadata": {"annotations": {RETAINED: "true"}}, "data": {"root-password": str}})
    assert secret is not None and "ownerReferences" not in secret["metadata"], "retained, not owned"
    assert_matches(
        mysql.child("service", "sample"),
        {
            "metadata": {"ownerReferences": [ref]},
            "spec": {"clusterIP": "None", "ports": [{"name": "mysql", "port": 3306}]},
        },
    )
    the_primary = {"db.example.com/role": "primary", "app.kubernetes.io/instance": "sample"}
    assert_matches(
        mysql.child("primary-service", "sample"),
        {
            "metadata": {"ownerReferences": [ref]},
            "spec": {"selector": the_primary, "ports": [{"port": 3306}]},
        },
    )
    # The label that Service selects is the operator's: pod 0 is the primary a cluster starts with.
    pod_zero = mysql.api.get(f"api/v1/namespaces/{ns}/pods/sample-mysql-0")
    assert pod_zero["metadata"]["labels"]["db.example.com/role"] == "primary"
    password_ref = {"secretKeyRef": {"name": "sample-credentials", "key": "root-password"}}
    replication_ref = {"secretKeyRef": {"name": "sample-credentials", "key": "replication-password"}}
    primary_host = {"name": "PRIMARY_HOST", "value": f"sample-primary.{ns}.svc"}
    assert_matches(
        mysql.child("statefulset", "sample"),
        {
            "metadata": {"ownerReferences": [ref]},
            "spec": {
                "serviceName": "sample-headless",
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "mysql", "env": [{"valueFrom": password_ref}]},
                            {
                                "name": "replication",
                                "env": [{"valueFrom": replication_ref}, dict, primary_host, dict],
                            },
                        ]
                    }
                },
            },
        },
    )
    assert mysql.child("cronjob", "sample") is None, "backups are off in the minimal sample"
    assert_matches(
        cr,
        {
            "metadata": {"finalizers": ["db.example.com/final-backup"]},
            "status": {
                "readyReplicas": 1,
                "primaryEndpoint": f"sample-primary.{ns}.svc:3306",
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "AllReplicasReady"},
                    {"type": "Progressing", "status": "False"},
                    {"type": "Degraded", "status": "False"},
                ],
            },
        },
        unordered=["status.conditions"],
    )


def test_every_pod_follows_a_version_change(mysql: MySQLClusters, operator: OperatorRunner) -> None:
    # kwok runs no kubelet, but the StatefulSet controller's RollingUpdate still deletes and
    # recreates each pod (highest ordinal first), and kwok makes each new one Ready.
    mysql.create(FULL, skip_final_backup=True)
    assert_converged(mysql, "sample-full", replicas=3, version="8.0")
    uids = {p["metadata"]["uid"] for p in mysql.database_pods("sample-full")}

    mysql.patch("sample-full", {"spec": {"version": "8.4"}})

    assert_converged(mysql, "sample-full", replicas=3, version="8.4")
    replaced = {p["metadata"]["uid"] for p in mysql.database_pods("sample-full")}
    assert not uids & replaced, "a pod kept running the old image"


def test_converged_cluster_reconciles_without_a_write(mysql: MySQLClusters, operator: OperatorRunner) -> None:
    mysql.create(MINIMAL)
    assert_converged(mysql, "sample", replicas=1, version="8.4")
    manager = operator.operator
    writes_before, reconciles_before = writes(manager), reconciles(manager)
    assert writes_before > 0, "the write counter missed the operator's creates"

    # A change the operator must look at (its watch wakes it) but has nothing to do about.
    mysql.patch("sample", {"metadata": {"annotations": {"example.com/note": "unrelated"}}})

    def reconciled_again() -> None:
        assert reconciles(manager) > reconciles_before, "the annotation did not wake the operator"

    eventually(reconciled_again, timeout=mysql.timeouts(30))
    assert_quiet(mysql, operator, "sample", duration=mysql.timeouts(2.0))
    assert writes(manager) == writes_before


def test_spec_changes_converge_then_stay_quiet(mysql: MySQLClusters, operator: OperatorRunner) -> None:
    manifest = {**FULL, "spec": {**FULL["spec"], "backup": {"enabled": False}}}
    cr = mysql.create(manifest, name="life", skip_final_backup=True)
    assert_converged(mysql, "life", replicas=3, version="8.0")

    mysql.patch("life", {"spec": {"replicas": 5}})
    assert_converged(mysql, "life", replicas=5, version="8.0")
    assert mysql.data_pvcs("life") == [f"data-life-mysql-{i}" for i in range(5)]

    mysql.patch("life", {"spec": {"version": "8.4"}})
    assert_converged(mysql, "life", replicas=5, version="8.4")

    mysql.patch("life", {"spec": {"backup": {"enabled": True, "schedule": {"cron": "30 3 * * *"}}}})
    mysql.wait_running("life")

    upgraded = images.current().mysql("8.4")  # a stand-in on the offline kind image

    def backups_scheduled() -> None:
        cronjob = mysql.child("cronjob", "life")
        assert cronjob is not None, "no CronJob"
        assert controller_ref(cronjob) == owned_by(cr)
        assert_matches(
            cronjob,
            {
                "spec": {
                    "schedule": "30 3 * * *",
                    "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"image": upgraded}]}}}},
                }
            },
        )
        assert mysql.child("backup-pvc", "life") is not None, "no backup PVC"

    eventually(backups_scheduled, timeout=mysql.timeouts(30))

    mysql.patch("life", {"spec": {"backup": {"enabled": False}}})
    mysql.wait_running("life")

    def backups_off() -> None:
        assert mysql.child("cronjob", "life") is None, "CronJob still there"

    eventually(backups_off, timeout=mysql.timeouts(30))
    # Backups outlive the schedule that made them.
    assert mysql.child("backup-pvc", "life") is not None, "the backup PVC went with the CronJob"

    assert_quiet(mysql, operator, "life", duration=mysql.timeouts(5.0))
