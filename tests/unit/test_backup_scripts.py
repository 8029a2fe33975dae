"""The backup scripts (database/backup.py) run for real on temp directories, under the shells and tools
the pods have: dash with this machine's tools (the database image's dump), and busybox sh with busybox's
own applets first on PATH (the backup image's archive and restore). `make script-shells` installs both;
a missing one fails the test naming that command.

What is pinned: one archive per cluster uid however many Jobs run for one deletion; an archive is synced,
checked and checksummed before the Job succeeds; at most two final archives are kept; a dump's password
never reaches an argv; a restore verifies, falls back to the archive before, and refuses another engine
or release; it fills only pod 0's empty datadir, once.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pod_shells
import pytest

from mysql_operator.controller.children import backups
from mysql_operator.database import backup

APPLETS = (
    "tar", "gzip", "sha256sum", "sync", "find", "ls", "grep", "sort", "tail", "tr", "cut", "du", "date",
    "mv", "rm", "touch", "tee", "sed", "cat", "basename",
)  # fmt: skip
FAKE_DUMP = """#!/bin/sh
printf '%s\\n' "$@" > "$ARGV_LOG"
cat "${1#--defaults-extra-file=}" > "$ARGV_LOG.login"
[ -z "${DUMP_FAILS:-}" ] || exit 3
echo "CREATE DATABASE shop;"
"""


class Shell:
    """One shell and the tools beside it; runs a script with the pod's paths mapped into `root`."""

    def __init__(self, name: str, root: Path) -> None:
        self.root, self.bin = root, root / "bin"
        self.bin.mkdir(parents=True)
        if name == "busybox":
            busybox = pod_shells.require("busybox")
            for applet in APPLETS:
                (self.bin / applet).symlink_to(busybox)
            self.argv = [busybox, "sh"]
        else:
            self.argv = [pod_shells.require("dash")]
        dump = self.bin / "fake-dump"
        dump.write_text(FAKE_DUMP)
        dump.chmod(0o755)
        for d in ("data", "backup", "source", "run"):
            (root / d).mkdir()

    def run(self, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        r = self.root
        for pod_path, here in (
            ("/var/lib/mysql", r / "data"),
            ("/backup", r / "backup"),
            ("/restore", r / "source"),
            ("/dev/termination-log", r / "termination-log"),
            ("/run/mysql-operator", r / "run"),
        ):
            script = script.replace(pod_path, str(here))
        base = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOSTNAME": "copy-mysql-0", "ARGV_LOG": str(r / "argv")}
        return subprocess.run(
            [*self.argv, "-c", script], env={**base, **env}, capture_output=True, text=True, timeout=60
        )

    def archive(self, uid: str) -> subprocess.CompletedProcess[str]:
        return self.run(backup.ARCHIVE_SCRIPT, CLUSTER_UID=uid)

    def restore(self, **env: str) -> subprocess.CompletedProcess[str]:
        base = {
            "SOURCE_PVC": "db-backup",
            "SOURCE_CLUSTER": "db",
            "ENGINE": "mariadb",
            "SERVER_VERSION": "10.11",
            "UPGRADE_FROM": "",
        }
        return self.run(backup.RESTORE_SCRIPT, **{**base, **env})

    def termination(self) -> str:
        path = self.root / "termination-log"
        return path.read_text() if path.exists() else ""


@pytest.fixture(params=["dash", "busybox"])
def sh(request: pytest.FixtureRequest, tmp_path: Path) -> Shell:
    return Shell(request.param, tmp_path / "pod")


def write_data(sh: Shell, identity: str | None = "engine=mariadb\nversion=10.11\n") -> None:
    (sh.root / "data" / "ibdata1").write_text("rows")
    if identity is not None:
        (sh.root / "data" / "mysql-operator-identity").write_text(identity)


def archives(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- the final archive ------------------------------------------------------------------------------


def test_an_archive_is_whole_checksummed_and_a_second_job_writes_nothing(sh: Shell) -> None:
    write_data(sh)
    first = sh.archive("uid-1")
    assert first.returncode == 0, first.stderr
    assert "synced, sha256" in first.stdout
    (archive,) = (sh.root / "backup").glob("final-*-uid-1.tar.gz")
    with tarfile.open(archive) as tar:
        assert {"./ibdata1", "./mysql-operator-identity"} <= set(tar.getnames())
    digest, name = (sh.root / "backup" / f"{archive.name}.sha256").read_text().split()
    assert (digest, name) == (hashlib.sha256(archive.read_bytes()).hexdigest(), archive.name)
    second = sh.archive("uid-1")
    assert second.returncode == 0 and "nothing to do" in second.stdout, second.stdout + second.stderr
    assert archives(sh.root / "backup") == [archive.name, f"{archive.name}.sha256"]


def test_partial_files_go_and_only_the_newest_earlier_archive_is_kept(sh: Shell) -> None:
    write_data(sh)
    for old in ("final-20260101T000000Z-uid-a.tar.gz", "final-20260201T000000Z-uid-b.tar.gz"):
        (sh.root / "backup" / old).write_text("old")
        (sh.root / "backup" / f"{old}.sha256").write_text("old")
    (sh.root / "backup" / ".final-20260301T000000Z-uid-x.tar.gz").write_text("half")
    result = sh.archive("uid-c")
    assert result.returncode == 0, result.stderr
    assert "pruned final-20260101T000000Z-uid-a.tar.gz" in result.stdout
    kept = [n for n in archives(sh.root / "backup") if n.endswith(".tar.gz")]
    assert len(kept) == backup.FINAL_ARCHIVES_KEPT
    assert kept[0] == "final-20260201T000000Z-uid-b.tar.gz" and kept[1].endswith("-uid-c.tar.gz")


def test_an_archive_that_tar_could_not_finish_fails_and_leaves_nothing(sh: Shell) -> None:
    (sh.root / "data").rmdir()  # the volume gone from under it: tar fails, gzip still ends well
    failed = sh.archive("uid-1")
    assert failed.returncode == 1 and "tar exited" in failed.stderr, failed.stderr
    assert archives(sh.root / "backup") == []


def test_the_job_tells_the_script_its_cluster() -> None:
    cluster = {
        "metadata": {"name": "db", "namespace": "ns", "uid": "uid-9"},
        "spec": {"replicas": 1, "storage": {"size": "1Gi"}},
    }
    (container,) = backups.final_backup_job(cluster)["spec"]["template"]["spec"]["containers"]
    assert {"name": "CLUSTER_UID", "value": "uid-9"} in container["env"]


# -- the dump -----------------------------------------------------------------------------------------


def test_a_dump_logs_in_by_option_file_and_is_checked_before_it_counts(sh: Shell) -> None:
    env = {
        "DB_PASSWORD": "s3cret-Pw",
        "DUMP": "fake-dump",
        "MYSQL_HOST": "db-primary.ns.svc",
        "RETENTION_DAYS": "3",
    }
    done = sh.run(backup.DUMP_SCRIPT, **env)
    assert done.returncode == 0, done.stderr
    (dump,) = (sh.root / "backup").glob("dump-*.sql.gz")
    assert gzip.decompress(dump.read_bytes()) == b"CREATE DATABASE shop;\n"
    argv = (sh.root / "argv").read_text()
    assert "s3cret-Pw" not in argv and argv.startswith(f"--defaults-extra-file={sh.root}/run/client.cnf")
    assert 'password="s3cret-Pw"' in (sh.root / "argv.login").read_text()
    assert (sh.root / "run" / "client.cnf").stat().st_mode & 0o777 == 0o600
    failed = sh.run(backup.DUMP_SCRIPT, **env, DUMP_FAILS="1")
    assert failed.returncode == 1 and "exited 3" in failed.stderr
    assert [p.name for p in (sh.root / "backup").iterdir()] == [dump.name], "a failed dump leaves nothing"


# -- restore ------------------------------------------------------------------------------------------


def archive_of(sh: Shell, name: str, identity: str | None = "engine=mariadb\nversion=10.11\n") -> Path:
    """A final archive in the source volume, as ARCHIVE_SCRIPT makes them (with its checksum)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        members = {"./ibdata1": f"rows of {name}".encode()}
        if identity is not None:
            members["./mysql-operator-identity"] = identity.encode()
        for member, content in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    path = sh.root / "source" / name
    path.write_bytes(buffer.getvalue())
    (sh.root / "source" / f"{name}.sha256").write_text(
        f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {name}\n"
    )
    return path


def test_restore_unpacks_the_newest_archive_into_an_empty_datadir_once(sh: Shell) -> None:
    archive_of(sh, "final-20260101T000000Z-uid-1.tar.gz")
    archive_of(sh, "final-20260201T000000Z-uid-2.tar.gz")
    first = sh.restore()
    assert first.returncode == 0, first.stderr
    assert (sh.root / "data" / "ibdata1").read_text() == "rows of final-20260201T000000Z-uid-2.tar.gz"
    assert (
        sh.termination().startswith("restored final-20260201T000000Z-uid-2.tar.gz")
        and "skipping" not in sh.termination()
    )
    (sh.root / "data" / "ibdata1").write_text("rows written since")
    again = sh.restore()  # pod 0 restarted: its data stays
    assert again.returncode == 0 and "done before" in again.stdout, again.stdout + again.stderr
    assert (sh.root / "data" / "ibdata1").read_text() == "rows written since"


@pytest.mark.parametrize("damage", ["checksum", "truncated"])
def test_restore_falls_back_to_the_archive_before_a_damaged_one_and_says_so(sh: Shell, damage: str) -> None:
    archive_of(sh, "final-20260101T000000Z-uid-1.tar.gz")
    newest = archive_of(sh, "final-20260201T000000Z-uid-2.tar.gz")
    if damage == "checksum":
        (sh.root / "source" / f"{newest.name}.sha256").write_text(f"{'0' * 64}  {newest.name}\n")
    else:
        newest.write_bytes(newest.read_bytes()[:-20])
        (sh.root / "source" / f"{newest.name}.sha256").unlink()  # killed before its checksum was renamed
    done = sh.restore()
    assert done.returncode == 0, done.stderr
    assert (sh.root / "data" / "ibdata1").read_text() == "rows of final-20260101T000000Z-uid-1.tar.gz"
    said = sh.termination()
    assert said.startswith("restored final-20260101T000000Z-uid-1.tar.gz") and "after skipping" in said
    assert newest.name in said and ("SHA-256" in said if damage == "checksum" else "gzip" in said)


def test_restore_with_no_whole_archive_fails_naming_each(sh: Shell) -> None:
    only = archive_of(sh, "final-20260101T000000Z-uid-1.tar.gz")
    only.write_bytes(b"not gzip")
    failed = sh.restore()
    assert failed.returncode == 1 and "no whole final-*.tar.gz" in sh.termination()
    assert only.name in sh.termination() and not list((sh.root / "data").iterdir())


@pytest.mark.parametrize(
    ("identity", "env", "named"),
    [
        ("engine=mysql\nversion=8.4\n", {}, "holds mysql data (8.4); this pod runs mariadb 10.11"),
        ("engine=mariadb\nversion=10.6\n", {}, "written by mariadb 10.6; this pod runs mariadb 10.11"),
        (
            None,
            {"ENGINE": "mysql", "SERVER_VERSION": "8.4"},
            None,
        ),  # old archive, no identity: no engine told
    ],
)
def test_restore_refuses_an_archive_of_another_engine_or_release(
    sh: Shell, identity: str | None, env: dict[str, str], named: str | None
) -> None:
    archive_of(sh, "final-20260101T000000Z-uid-1.tar.gz", identity)
    done = sh.restore(**env)
    if named is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 1 and named in sh.termination(), sh.termination()
    assert not [p for p in (sh.root / "data").iterdir()], "nothing unpacked"


def test_an_archive_of_the_release_an_upgrade_starts_from_is_restored(sh: Shell) -> None:
    archive_of(sh, "final-20260101T000000Z-uid-1.tar.gz", "engine=mariadb\nversion=10.6\n")
    assert sh.restore(UPGRADE_FROM="10.6").returncode == 0


def test_restore_refuses_a_datadir_that_no_restore_filled(sh: Shell) -> None:
    archive_of(sh, "final-20260101T000000Z-uid-1.tar.gz")
    (sh.root / "data" / "ibdata1").write_text("a kept claim of an earlier cluster")
    refused = sh.restore()
    assert refused.returncode == 1 and "not restoring over it" in sh.termination()
    assert (sh.root / "data" / "ibdata1").read_text() == "a kept claim of an earlier cluster"


def test_restore_leaves_replicas_empty(sh: Shell) -> None:
    archive_of(sh, "final-20260101T000000Z-uid-1.tar.gz")
    replica = sh.run(backup.RESTORE_SCRIPT, HOSTNAME="copy-mysql-1", SOURCE_PVC="x", SOURCE_CLUSTER="db")
    assert replica.returncode == 0 and not list((sh.root / "data").iterdir())
