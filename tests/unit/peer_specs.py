"""The specs the benchmark peers' builders are pinned against the reference's with, and the cluster
around a spec: one table for both peers (tests/unit/test_gomysql_peer.py, test_bench_scale.py), so a
spec added for one builder change checks every peer."""

from __future__ import annotations

from typing import Any

from mysql_operator.controller.children import backups, resources

SPECS: dict[str, dict[str, Any]] = {
    "minimal": {"replicas": 1, "storage": {"size": "1Gi"}},
    "full": {
        "replicas": 3,
        "version": "8.4.3",
        "storage": {"size": "20Gi", "storageClassName": "fast"},
        "resources": {"cpu": "500m", "memory": "1Gi"},
        "backup": {
            "enabled": True,
            "schedule": {"cron": "@daily", "timeZone": "Europe/Berlin"},
            "retentionDays": 3,
        },
    },
    "mariadb": {"replicas": 2, "engine": "mariadb", "storage": {"size": "1Gi"}, "backup": {"enabled": True}},
    "mariadb-versioned": {"replicas": 1, "engine": "mariadb", "version": "11.4", "storage": {"size": "2Gi"}},
    # No whole MiB multiple (and in canonical form, as Go and the apiserver write it): the backup size
    # and the final backup's deadline round up.
    "restored": {"replicas": 2, "storage": {"size": "1500M"}, "restore": {"fromCluster": "old-db"}},
}


def reference(builder: str) -> Any:
    """The reference's builder of that name (the children in `resources`, the backup ones in `backups`)."""
    return getattr(resources, builder, None) or getattr(backups, builder)


BUILDERS = [
    "headless_service",
    "primary_service",
    "statefulset",
    "backup_pvc",
    "backup_cronjob",
    "final_backup_job",
]


def cluster(spec: dict[str, Any]) -> dict[str, Any]:
    """A MySQLCluster as the apiserver returns it, with `spec`."""
    meta = {"name": "db", "namespace": "ns", "uid": "u-1", "generation": 1}
    return {"apiVersion": resources.API_VERSION, "kind": "MySQLCluster", "metadata": meta, "spec": spec}
