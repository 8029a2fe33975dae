"""The final backup's archive script and the restore script, run for real (bash here; busybox sh in
the pods) on temp directories: one archive per cluster uid, however many Jobs run for one deletion;
a restore only into an empty datadir, once."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from mysql_operator.controller.children import resources
from mysql_operator.database import backup


def run_archive(tmp_path: Path, uid: str) -> subprocess.CompletedProcess[str]:
    script = backup.ARCHIVE_SCRIPT.replace("/backup", str(tmp_path / "backup")).replace(
        "/var/lib/mysql", str(tmp_path / "data")
    )
    return subprocess.run(
        ["bash", "--posix", "-c", script],
        env={"CLUSTER_UID": uid, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def datadir(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ibdata1").write_text("rows")
    (tmp_path / "backup").mkdir()
    return tmp_path


def test_a_second_job_for_the_same_cluster_finds_the_archive_and_writes_nothing(datadir: Path) -> None:
    first = run_archive(datadir, "uid-1")
    assert first.returncode == 0, first.stderr
    (archive,) = (datadir / "backup").glob("final-*-uid-1.tar.gz")
    with tarfile.open(archive) as tar:
        assert "./ibdata1" in tar.getnames()
    second = run_archive(datadir, "uid-1")
    assert second.returncode == 0 and "nothing to do" in second.stdout, second.stdout + second.stderr
    assert list((datadir / "backup").iterdir()) == [archive]


def test_another_cluster_of_the_same_name_archives_anew_and_partial_files_go(datadir: Path) -> None:
    assert run_archive(datadir, "uid-1").returncode == 0
    (datadir / "backup" / ".final-20260101T000000Z-uid-0.tar.gz").write_text("half")
    result = run_archive(datadir, "uid-2")
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in (datadir / "backup").iterdir())
    assert [n.rsplit("-", 2)[-2:] for n in names] == [["uid", "1.tar.gz"], ["uid", "2.tar.gz"]], names


def test_the_job_tells_the_script_its_cluster(datadir: Path) -> None:
    cluster = {
        "metadata": {"name": "db", "namespace": "ns", "uid": "uid-9"},
        "spec": {"replicas": 1, "storage": {"size": "1Gi"}},
    }
    job = resources.final_backup_job(cluster)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert {"name": "CLUSTER_UID", "value": "uid-9"} in container["env"]


def run_restore(tmp_path: Path, hostname: str = "copy-mysql-0") -> subprocess.CompletedProcess[str]:
    script = (
        backup.RESTORE_SCRIPT.replace("/var/lib/mysql", str(tmp_path / "data"))
        .replace("/restore", str(tmp_path / "source"))
        .replace("/dev/termination-log", str(tmp_path / "termination-log"))
    )
    env = {"HOSTNAME": hostname, "SOURCE_PVC": "db-backup", "SOURCE_CLUSTER": "db", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        ["bash", "--posix", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def archived(datadir: Path) -> Path:
    """`datadir` after the final backup: an archive of its data in `source/`, and an empty new datadir."""
    assert run_archive(datadir, "uid-1").returncode == 0
    (datadir / "backup").rename(datadir / "source")
    for f in (datadir / "data").iterdir():
        f.unlink()
    return datadir


def test_restore_unpacks_the_newest_archive_into_an_empty_datadir_once(archived: Path) -> None:
    first = run_restore(archived)
    assert first.returncode == 0, first.stderr
    assert (archived / "data" / "ibdata1").read_text() == "rows"
    assert (archived / "data" / ".restored-from").read_text().startswith("db final-")
    (archived / "data" / "ibdata1").write_text("rows written since")
    again = run_restore(archived)  # pod 0 restarted: its data stays
    assert again.returncode == 0 and "done before" in again.stdout, again.stdout + again.stderr
    assert (archived / "data" / "ibdata1").read_text() == "rows written since"


def test_restore_refuses_a_datadir_that_no_restore_filled(archived: Path) -> None:
    (archived / "data" / "ibdata1").write_text("a kept claim of an earlier cluster")
    refused = run_restore(archived)
    assert refused.returncode == 1 and "not restoring over it" in refused.stderr, refused.stderr
    assert "not restoring over it" in (archived / "termination-log").read_text()
    assert (archived / "data" / "ibdata1").read_text() == "a kept claim of an earlier cluster"


def test_restore_leaves_replicas_empty(archived: Path) -> None:
    replica = run_restore(archived, hostname="copy-mysql-1")
    assert replica.returncode == 0 and not list((archived / "data").iterdir())
