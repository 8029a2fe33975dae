"""Restore at size: a cluster with a dataset of 200 MiB or more is deleted (its final backup archives
the data volume, streamed through gzip), and a new cluster created with `spec.restore.fromCluster`
starts on that archive: the rows are on its primary and, replicated, on its replica.

kind only (a kubelet runs the server and the Jobs). Engine from E2E_DATABASE, as test_real_database.
The measurements (archive MiB/s, restore time) are printed (`pytest -s`) and quoted in operator/README.md.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

import kubernetes
import pytest
from dbkit import ENGINE, VERSION, Sql, manifest, pod_ready, wait_all_ready
from mysqlkit import MySQLClusters, Timeouts

from envtest import OperatorRunner, eventually

pytestmark = [pytest.mark.real_database, pytest.mark.usefixtures("kind_only")]

DATASET_MIB = 200
"""The dataset's size on disk (the table's InnoDB file), at least."""
BATCH_ROWS = 131072
"""Rows per INSERT ... SELECT: each statement stays short, however large the table grows."""


def kib(sql: Sql, pod: str, path: str) -> int:
    return int(sql.shell(pod, f"du -sk {path} | cut -f1"))


def seconds_between(start: str, end: str) -> float:
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return (datetime.strptime(end, fmt) - datetime.strptime(start, fmt)).total_seconds()


def test_a_cluster_restored_from_a_200_mib_final_backup_has_the_rows_on_its_primary_and_replica(
    mysql: MySQLClusters,
    operator: OperatorRunner,
    core: kubernetes.client.CoreV1Api,
    timeouts: Timeouts,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ns = mysql.namespace
    sql = Sql(core, ns, timeouts)
    mysql.create(manifest("source", 1, storage="2Gi", backup={"enabled": True}))
    wait_all_ready(mysql, "source", 1, timeouts)

    # The dataset: a row to look for, and a table of random-ish strings (hex: it compresses as data
    # does, not as a run of one byte would), doubled until its file has DATASET_MIB.
    primary = "source-mysql-0"
    sql.ok(
        primary,
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(32));"
        " INSERT INTO shop.orders VALUES (1, 'first');"
        " CREATE TABLE shop.bulk (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload VARCHAR(256));"
        " INSERT INTO shop.bulk (payload) VALUES (REPEAT('x', 256));",
    )
    payload = "CONCAT(" + ", ".join(["MD5(RAND())"] * 8) + ")"
    while kib(sql, primary, "/var/lib/mysql/shop") < DATASET_MIB * 1024:
        sql.ok(primary, f"INSERT INTO shop.bulk (payload) SELECT {payload} FROM shop.bulk LIMIT {BATCH_ROWS}")
    rows = sql.ok(primary, "SELECT COUNT(*) FROM shop.bulk")
    datadir_kib = kib(sql, primary, "/var/lib/mysql")

    # Deleting the cluster takes the final backup; its Job is kept (TTL) after the finalizer is off.
    assert mysql.delete("source") == 200
    mysql.wait_gone("source", timeout=timeouts(120))
    job = mysql.child("job", "source")
    assert job is not None and (job.get("status") or {}).get("succeeded") == 1, job
    archive_seconds = seconds_between(job["status"]["startTime"], job["status"]["completionTime"])
    (job_pod,) = mysql.api.items(f"api/v1/namespaces/{ns}/pods", f"job-name={job['metadata']['name']}")
    log = core.read_namespaced_pod_log(job_pod["metadata"]["name"], ns)
    said = re.search(r"final-\S+\.tar\.gz: (\d+) KiB of data in (\d+) s", log)
    assert said, log

    started = time.monotonic()
    mysql.create(manifest("copy", 2, storage="2Gi", restore={"fromCluster": "source"}))

    def primary_ready() -> None:
        assert pod_ready(mysql, "copy-mysql-0"), "copy-mysql-0 not ready"

    eventually(
        primary_ready,
        timeout=timeouts(120),
        description="copy-mysql-0 ready on the restored data",
    )
    restore_seconds = time.monotonic() - started
    wait_all_ready(mysql, "copy", 2, timeouts)

    def restored() -> None:
        cr = mysql.must_get("copy")
        assert (cr.get("status") or {}).get("restoredFrom") == "source", cr.get("status")
        assert any(e["reason"] == "Restored" for e in mysql.events("copy")), "no Restored event"

    eventually(restored, timeout=timeouts(30), description="copy reports the restore")

    # Restored: the next pass drops the restore step and the source's claim from the template, and
    # the pods roll once; the rows are looked for on the rolled pods.
    def rolled_without_the_restore_step() -> None:
        sts = mysql.child("statefulset", "copy")
        assert sts is not None
        pod = sts["spec"]["template"]["spec"]
        assert "restore" not in [c["name"] for c in pod["initContainers"]], "restore step still there"
        status = sts.get("status") or {}
        assert status.get("observedGeneration") == sts["metadata"]["generation"], status
        assert status.get("updateRevision") == status.get("currentRevision"), status
        assert status.get("readyReplicas") == 2 and status.get("updatedReplicas") == 2, status

    eventually(rolled_without_the_restore_step, timeout=timeouts(240), description="copy rolled")
    all_ready_seconds = time.monotonic() - started

    for pod in ("copy-mysql-0", "copy-mysql-1"):
        eventually(
            lambda pod=pod: sql.answers(pod, "SELECT item FROM shop.orders WHERE id = 1", "first"),
            timeout=timeouts(60),
            description=f"the row on {pod}",
        )
        eventually(
            lambda pod=pod: sql.answers(pod, "SELECT COUNT(*) FROM shop.bulk", rows),
            timeout=timeouts(60),
            description=f"all {rows} bulk rows on {pod}",
        )
    source_secret = mysql.api.get(f"api/v1/namespaces/{ns}/secrets/source-credentials")
    copy_secret = mysql.api.get(f"api/v1/namespaces/{ns}/secrets/copy-credentials")
    assert copy_secret["data"] == source_secret["data"]

    mib = datadir_kib / 1024
    step_kib, step_seconds = int(said.group(1)), max(int(said.group(2)), 1)
    lines = [
        f"engine {ENGINE}:{VERSION}, datadir {mib:.0f} MiB ({rows} bulk rows)",
        f"final backup Job, start to completion: {archive_seconds:.0f} s = "
        f"{mib / max(archive_seconds, 1):.1f} MiB/s",
        f"archive step alone: {step_seconds} s = {step_kib / 1024 / step_seconds:.1f} MiB/s",
        f"restore: pod 0 ready {restore_seconds:.0f} s after create; both pods, rolled without the "
        f"restore step, {all_ready_seconds:.0f} s",
    ]
    with capsys.disabled():
        print("\nmeasured: " + "\n measured: ".join(lines))
