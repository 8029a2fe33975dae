"""The scripts of the backup and restore containers, run by `sh` in the pods (busybox ash or dash).

`DUMP_SCRIPT` (the CronJob's logical dump of the primary), `ARCHIVE_SCRIPT` (the final backup Job's copy
of a stopped datadir) and `RESTORE_SCRIPT` (an init container unpacking a final archive into an empty
datadir). Each is a plain POSIX script with its inputs in the environment, so tests run it as it is
under the shells the images have (tests/unit/test_backup_scripts.py).
"""

from __future__ import annotations

# Both scripts stream: the dump or the tar goes through a pipe into `gzip -1` (fast, and memory is
# the pipe's buffer and gzip's window, whatever the size), under a dot-name renamed when complete, so
# a half-written file is never taken for a good one. Each run first deletes the partial files of its
# own kind left by a killed earlier run (runs of one kind never overlap: the CronJob forbids it, and
# there is one final backup Job), which would otherwise fill the volume.
# A pipeline's status is its last command's: the dump runs in the database image, whose /bin/sh may
# be dash (no pipefail), so the dump's status is carried out in a file; busybox ash has pipefail.
# find rounds ages down to whole days: -mtime +(N-1) matches files at least N days old.
DUMP_SCRIPT = """set -eu
find /backup -maxdepth 1 -name '.dump-*' -exec rm -f {} +
stamp=$(date -u +%Y%m%dT%H%M%SZ)
partial="/backup/.dump-$stamp.sql.gz"
failed="/backup/.dump-$stamp.failed"
{ "$DUMP" -h "$MYSQL_HOST" -u root --all-databases --single-transaction --routines --events \
  --triggers || echo "$?" > "$failed"; } | gzip -1 > "$partial"
if [ -e "$failed" ]; then
  echo "dump: $DUMP exited $(cat "$failed")" >&2
  rm -f "$failed" "$partial"
  exit 1
fi
mv "$partial" "/backup/dump-$stamp.sql.gz"
find /backup -maxdepth 1 -name 'dump-*.sql.gz' -mtime "+$((RETENTION_DAYS - 1))" -delete
"""

# Named by the cluster's uid: a second Job for the same deletion (the first one's success unrecorded,
# e.g. the operator down past the Job's TTL) finds the archive and succeeds without archiving twice.
ARCHIVE_SCRIPT = """set -eu
set -o pipefail
done_already=$(ls /backup | grep -E "^final-.*-$CLUSTER_UID[.]tar[.]gz$" || true)
if [ -n "$done_already" ]; then
  echo "archive: $done_already is this cluster's final backup already; nothing to do"; exit 0
fi
find /backup -maxdepth 1 -name '.final-*' -exec rm -f {} +
stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="final-$stamp-$CLUSTER_UID.tar.gz"
start=$(date +%s)
tar -cf - -C /var/lib/mysql . | gzip -1 > "/backup/.$name"
mv "/backup/.$name" "/backup/$name"
kib=$(du -sk /var/lib/mysql | cut -f1)
echo "archive: $name: $kib KiB of data in $(($(date +%s) - start)) s"
"""

# Runs before `configure`. Only pod 0, only into an empty datadir (a restarted pod keeps what it has);
# a marker, removed last, makes an unpacking interrupted half-way start again from a clean datadir.
RESTORE_SCRIPT = """set -eu
set -o pipefail
data=/var/lib/mysql
incomplete="$data/.restore-incomplete"
restored="$data/.restored-from"
fail() { echo "restore: $*" | tee /dev/termination-log >&2; exit 1; }
if [ "${HOSTNAME##*-}" -ne 0 ]; then
  echo "restore: a replica starts empty and replicates from pod 0"; exit 0
fi
if [ -e "$incomplete" ]; then
  echo "restore: an earlier restore did not finish; starting it again"
  find "$data" -mindepth 1 -maxdepth 1 ! -name lost+found ! -name .restore-incomplete -exec rm -rf {} +
elif [ -n "$(ls -A "$data" | grep -v '^lost+found$')" ]; then
  if [ -e "$restored" ]; then
    echo "restore: done before ($(cat "$restored")); left as it is"; exit 0
  fi
  fail "pod 0's datadir holds data no restore put there (a data PersistentVolumeClaim kept from an \
earlier cluster of this name?): not restoring over it; delete that claim, or restore into another name"
fi
archive=$(ls /restore | grep -E '^final-.*[.]tar[.]gz$' | sort | tail -n 1 || true)
[ -n "$archive" ] || fail "no final-*.tar.gz in PersistentVolumeClaim $SOURCE_PVC (was $SOURCE_CLUSTER \
deleted with backup enabled, and did its final backup succeed?)"
archive="/restore/$archive"
touch "$incomplete"
start=$(date +%s)
gzip -dc "$archive" | tar -xf - -C "$data" || fail "unpacking $archive from $SOURCE_PVC failed"
echo "$SOURCE_CLUSTER $(basename "$archive")" > "$restored"
rm "$incomplete"
echo "restore: $archive from $SOURCE_PVC unpacked in $(($(date +%s) - start)) s"
"""
