"""A datadir's identity: which engine and version wrote it, for which cluster; and the check that keeps
a server from starting on data that is not its own.

The identity is a file in the datadir's root (`IDENTITY_FILE`; a plain file there is no schema to the
server), written by the last script of the image's one-time init and rewritten by every later start
that the check lets through:

    engine=mariadb
    version=10.11
    cluster=db
    cluster-uid=5b0c…
    server-id=4711100

`server-id` is the datadir's, not the pod's: chosen when the datadir is initialised, kept for its life
(`replication.configure_script`).

Before every start (`configure`) and before every restore, the data's engine and version are compared
with the pod's (`ENGINE`, `SERVER_VERSION`; versions by major.minor):

* another engine: refused, always (a datadir belongs to one server);
* the same release: fine;
* an older release: fine only when it is the release the cluster ran before an upgrade it was asked for
  (`UPGRADE_FROM`, from `status.upgradeFrom`); otherwise refused — a re-created cluster without a pinned
  version must not upgrade kept data behind its owner's back;
* a newer release: refused (no engine opens data a newer release has upgraded).

A refusal writes one line naming both sides to the termination log and exits 1: the operator reports it
(`Degraded`, reason `DatadirMismatch`). A datadir from before identities existed is recognised by its
files (MariaDB's `aria_log_control`, MySQL's `mysql.ibd`); its version is then unknown and not checked.
"""

from __future__ import annotations

IDENTITY_FILE = "mysql-operator-identity"
FAIL = "DatadirMismatch"
"""The reason the operator reports a refusal with."""


def functions(termination_log: str = "/dev/termination-log") -> str:
    """Shell functions: `release V` (major.minor), `identify DIR_OR_FILE` (sets had_engine,
    had_version), `judge WHAT` (refuses, exiting 1, or returns), `record DIR` (writes the identity)."""
    major_minor = "s/^\\([0-9][0-9]*\\)\\(\\.[0-9][0-9]*\\)\\{0,1\\}.*$/\\1\\2/p"
    return f"""release() {{ echo "$1" | sed -n '{major_minor}'; }}
refuse() {{ echo "$*" | tee {termination_log} >&2; exit 1; }}
newer() {{  # release $1 after release $2 (a minor of none counts as 0)
  a="${{1%%.*}}"; b="${{2%%.*}}"; am="${{1#"$a"}}"; bm="${{2#"$b"}}"; am="${{am#.}}"; bm="${{bm#.}}"
  [ "$a" -gt "$b" ] || {{ [ "$a" -eq "$b" ] && [ "${{am:-0}}" -gt "${{bm:-0}}" ]; }}
}}
identify_file() {{
  had_engine="$(sed -n 's/^engine=//p' "$1")"
  had_version="$(sed -n 's/^version=//p' "$1")"
}}
identify() {{
  had_engine=""; had_version=""
  if [ -e "$1/{IDENTITY_FILE}" ]; then identify_file "$1/{IDENTITY_FILE}"
  elif [ -e "$1/aria_log_control" ]; then had_engine=mariadb
  elif [ -e "$1/mysql.ibd" ]; then had_engine=mysql
  fi
}}
judge() {{
  [ -n "$had_engine" ] || return 0
  if [ "$had_engine" != "$ENGINE" ]; then
    refuse "{FAIL}: $1 holds $had_engine data${{had_version:+ ($had_version)}}; this pod runs $ENGINE \\
$SERVER_VERSION: a datadir belongs to one server; set spec.engine to $had_engine"
  fi
  [ -n "$had_version" ] || return 0
  had="$(release "$had_version")"; want="$(release "$SERVER_VERSION")"
  [ "$had" != "$want" ] || return 0
  if newer "$had" "$want"; then
    refuse "{FAIL}: $1 was written by $had_engine $had_version, newer than this pod's $SERVER_VERSION: no \\
release opens data a newer one has upgraded; set spec.version to $had_version or newer"
  fi
  for allowed in ${{UPGRADE_FROM:-}}; do
    if [ "$had" = "$(release "$allowed")" ]; then
      echo "$1: $ENGINE $had_version data, upgraded by $SERVER_VERSION as asked (spec.version)"
      return 0
    fi
  done
  refuse "{FAIL}: $1 was written by $had_engine $had_version; this pod runs $ENGINE $SERVER_VERSION: \\
set spec.version to $had_version to run it as it is (upgrade later by changing spec.version)"
}}
record() {{  # $server_id: the datadir's own (see replication.configure_script)
  printf 'engine=%s\\nversion=%s\\ncluster=%s\\ncluster-uid=%s\\nserver-id=%s\\n' "$ENGINE" \\
    "$SERVER_VERSION" "$CLUSTER_NAME" "$CLUSTER_UID" "$server_id" > "$1/{IDENTITY_FILE}"
}}"""
