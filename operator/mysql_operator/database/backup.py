"""The scripts of the backup and restore containers, run by `sh` in the pods (busybox ash or dash).

`DUMP_SCRIPT` (the CronJob's logical dump of the primary), `ARCHIVE_SCRIPT` (the final backup Job's copy
of a stopped datadir) and `RESTORE_SCRIPT` (an init container unpacking a final archive into an empty
datadir). Each is a plain POSIX script with its inputs in the environment, so tests run it as it is
under the shells the images have (tests/unit/test_backup_scripts.py).

What a backup promises before its Job succeeds: the file is complete (written under a dot-name, renamed
when done), on disk (`sync`) and whole (`gzip -t`, and for archives a SHA-256 beside it). A restore
checks the same before it trusts an archive, and falls back to the previous one when the newest fails.
"""

from __future__ import annotations

from .identity import IDENTITY_FILE, functions

FINAL_ARCHIVES_KEPT = 2
"""Final archives kept in a backup volume: the newest, and the one before as a restore's fallback. The
older ones are pruned before a new archive is written (so a failed write never costs the last good one),
which bounds the volume to two archives and the dumps (`controller.children.backups.backup_size`)."""
OPTION_FILE = "/run/mysql-operator/client.cnf"
"""The dump's login, written from the environment to a memory volume: no password in argv."""

# Both scripts stream: the dump or the tar goes through a pipe into `gzip -1` (fast, and memory is
# the pipe's buffer and gzip's window, whatever the size), under a dot-name renamed when complete, so
# a half-written file is never taken for a good one. Each run first deletes the partial files of its
# own kind left by a killed earlier run (runs of one kind never overlap: the CronJob forbids it, and
# there is one final backup Job), which would otherwise fill the volume.
# A pipeline's status is its last command's, and dash (the /bin/sh of Debian's and Ubuntu's images) has
# no pipefail: the first command's status is carried out in a file. No -delete either (busybox's find
# lacks it): -exec rm. find rounds ages down to whole days: -mtime +(N-1) matches files at least N days old.
DUMP_SCRIPT = f"""set -eu
case "$DB_PASSWORD" in
  '' | *'"'* | *'\\'*) echo "dump: the root password must be non-empty, without \\" or \\\\" >&2; exit 1 ;;
esac
(umask 077 && printf '[client]\\nuser=root\\npassword="%s"\\n' "$DB_PASSWORD" > {OPTION_FILE})
find /backup -maxdepth 1 -name '.dump-*' -exec rm -f {{}} +
stamp=$(date -u +%Y%m%dT%H%M%SZ)
partial="/backup/.dump-$stamp.sql.gz"
failed="/backup/.dump-$stamp.failed"
{{ "$DUMP" --defaults-extra-file={OPTION_FILE} -h "$MYSQL_HOST" --all-databases --single-transaction \\
  --routines --events --triggers || echo "$?" > "$failed"; }} | gzip -1 > "$partial"
if [ -e "$failed" ]; then
  echo "dump: $DUMP exited $(cat "$failed")" >&2
  rm -f "$failed" "$partial"
  exit 1
fi
sync
gzip -t "$partial" || {{ echo "dump: $partial is not a whole gzip stream" >&2; rm -f "$partial"; exit 1; }}
mv "$partial" "/backup/dump-$stamp.sql.gz"
sync
find /backup -maxdepth 1 -name 'dump-*.sql.gz' -mtime "+$((RETENTION_DAYS - 1))" -exec rm -f {{}} +
echo "dump: dump-$stamp.sql.gz written, synced and checked"
"""

# Named by the cluster's uid: a second Job for the same deletion (the first one's success unrecorded,
# e.g. the operator down past the Job's TTL) finds the archive and succeeds without archiving twice.
# The checksum is renamed after the archive: an archive without one (a run killed in between) is still
# checked by gzip -t when restored.
ARCHIVE_SCRIPT = f"""set -eu
archives() {{ {{ ls /backup | grep -E '^final-.*[.]tar[.]gz$' || true; }} | sort; }}
done_already=$(ls /backup | grep -E "^final-.*-$CLUSTER_UID[.]tar[.]gz$" || true)
if [ -n "$done_already" ]; then
  echo "archive: $done_already is this cluster's final backup already; nothing to do"; exit 0
fi
find /backup -maxdepth 1 -name '.final-*' -exec rm -f {{}} +
keep=" $(archives | tail -n {FINAL_ARCHIVES_KEPT - 1} | tr '\\n' ' ')"
for old in $(archives); do
  case "$keep" in
    *" $old "*) ;;
    *) rm -f "/backup/$old" "/backup/$old.sha256"; echo "archive: pruned $old" ;;
  esac
done
stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="final-$stamp-$CLUSTER_UID.tar.gz"
start=$(date +%s)
failed="/backup/.final-$stamp.failed"
{{ tar -cf - -C /var/lib/mysql . || echo "$?" > "$failed"; }} | gzip -1 > "/backup/.$name"
if [ -e "$failed" ]; then
  echo "archive: tar exited $(cat "$failed")" >&2
  rm -f "$failed" "/backup/.$name"
  exit 1
fi
sync
gzip -t "/backup/.$name"
sum=$(sha256sum < "/backup/.$name" | cut -d' ' -f1)
printf '%s  %s\\n' "$sum" "$name" > "/backup/.$name.sha256"
mv "/backup/.$name" "/backup/$name"
mv "/backup/.$name.sha256" "/backup/$name.sha256"
sync
kib=$(du -sk /var/lib/mysql | cut -f1)
echo "archive: $name: $kib KiB of data in $(($(date +%s) - start)) s, synced, sha256 $sum"
"""

# Runs before `configure`. Only pod 0, only into an empty datadir (a restarted pod keeps what it has);
# a marker, removed last, makes an unpacking interrupted half-way start again from a clean datadir.
# The unpacking pipeline's last command is tar, whose status is what counts; the archive was checked
# whole (gzip -t) just before.
RESTORE_SCRIPT = (
    """set -eu
data=/var/lib/mysql
incomplete="$data/.restore-incomplete"
restored="$data/.restored-from"
fail() { echo "restore: $*" | tee /dev/termination-log >&2; exit 1; }
"""
    + functions()
    + f"""
whole() {{  # $1: an archive's name; sets why when it is not
  if [ -e "/restore/$1.sha256" ] && ! (cd /restore && sha256sum -c "$1.sha256" >/dev/null 2>&1); then
    why="$1: its SHA-256 does not match"; return 1
  fi
  gzip -t "/restore/$1" 2>/dev/null || {{ why="$1: not a whole gzip stream"; return 1; }}
}}
if [ "${{HOSTNAME##*-}}" -ne 0 ]; then
  echo "restore: a replica starts empty and replicates from pod 0"; exit 0
fi
if [ -e "$incomplete" ]; then
  echo "restore: an earlier restore did not finish; starting it again"
  find "$data" -mindepth 1 -maxdepth 1 ! -name lost+found ! -name .restore-incomplete -exec rm -rf {{}} +
elif [ -n "$(ls -A "$data" | grep -v '^lost+found$')" ]; then
  if [ -e "$restored" ]; then
    echo "restore: done before ($(cat "$restored")); left as it is"; exit 0
  fi
  fail "pod 0's datadir holds data no restore put there (a data PersistentVolumeClaim kept from an \\
earlier cluster of this name?): not restoring over it; delete that claim, or restore into another name"
fi
archive=""; skipped=""
for candidate in $(ls /restore | grep -E '^final-.*[.]tar[.]gz$' | sort -r); do
  if whole "$candidate"; then archive="$candidate"; break; fi
  echo "restore: $why; trying the one before"
  skipped="$skipped; $why"
done
[ -n "$archive" ] || fail "no whole final-*.tar.gz in PersistentVolumeClaim $SOURCE_PVC (was \\
$SOURCE_CLUSTER deleted with backup enabled, and did its final backup succeed?)$skipped"
# Its engine and version, as a start would judge them (identity.py): never restored into another server.
info="$(gzip -dc "/restore/$archive" | tar -xOf - ./{IDENTITY_FILE} 2>/dev/null || true)"
had_engine="$(echo "$info" | sed -n 's/^engine=//p')"; had_version="$(echo "$info" | sed -n 's/^version=//p')"
if [ -z "$had_engine" ]; then
  names="$(gzip -dc "/restore/$archive" | tar -tf - 2>/dev/null || true)"
  if echo "$names" | grep -qx './aria_log_control'; then had_engine=mariadb
  elif echo "$names" | grep -qx './mysql.ibd'; then had_engine=mysql; fi
fi
judge "the archive $archive of $SOURCE_CLUSTER"
touch "$incomplete"
start=$(date +%s)
gzip -dc "/restore/$archive" | tar -xf - -C "$data" || fail "unpacking $archive from $SOURCE_PVC failed"
echo "$SOURCE_CLUSTER $archive" > "$restored"
rm "$incomplete"
took=$(($(date +%s) - start))
echo "restored $archive from $SOURCE_PVC in $took s${{skipped:+, after skipping}}$skipped" \\
  | tee /dev/termination-log
"""
)
