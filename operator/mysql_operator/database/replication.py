"""The database pod's scripts: one primary, chosen by the operator's label, and read-only replicas of it.

Which pod is the primary is not its ordinal but its label `db.example.com/role` (`primary` or `replica`),
set by the operator and read by the pod through a downward API file: a failover or a switchover moves
the label, and the Service `<name>-primary` (which selects it) with it. What must hold whatever happened
before — a killed init, a restart, a lost pod, a moved label — is settled on every start, never once:

* `configure` (init container) first refuses data another engine or release wrote (`identity.py`),
  then writes the server's my.cnf (GTIDs, the
  TLS files, semi-sync when asked) and the clients' option file (root's password, 0600, on a memory
  volume: no password is ever an argument of a process). **Every server starts read-only** once its
  datadir is initialised (not during the image's init phase, whose own writes would be refused).
* The server container's command (`start_script`) runs before the image's entrypoint on every start;
  it writes the datadir's server-id (`SERVER_ID_BASE`).
  A datadir whose one-time init was cut short (no marker from its last init script) is wiped to be
  initialised again, but only on a pod labelled replica: its data comes from the primary anyway, and a
  half-initialised datadir would otherwise come back without the root password, unusable.
* A datadir the image's init made is *fresh* (`FRESH_MARKER`) until it holds the cluster's data: it
  replicated from a source, or it was made writable as a new cluster's first primary, or the operator
  promoted it. Once the cluster has run (`RAN_ANNOTATION` on a pod labelled since, or this pod's datadir
  held the cluster's data before: `HELD_FLAG`), a fresh datadir is never made writable: a primary whose
  volume was emptied in place comes back empty under its old label and stays read-only.
* `replication` (sidecar) follows the label every `RECHECK_SECONDS`: labelled primary and replicating
  from nobody (the operator's promotion ended that), unless fresh in a cluster that ran, it turns
  semi-sync on when asked, makes the server writable and ensures the replication account (REPLICATION
  SLAVE only, TLS required); anything else
  — a replica, or a pod not labelled yet — is read-only, and a replica that has no source (new, wiped,
  or the primary it was until now) is pointed at the primary Service with GTID auto-position over TLS
  verified against the cluster's CA. It never restarts a replication someone stopped and never re-adds
  a source someone removed while the pod keeps its role: such a replica is unready, for a human to see.
* Readiness is what clients rely on: the primary answers and is writable; a replica's IO and SQL
  threads both run.

The operator's own steps — reading GTID positions, fencing, promoting — run through `kubectl exec`-style
calls into the sidecar (`database.actions`); the sidecar never promotes anything by itself.
"""

from __future__ import annotations

import re

from .engines import Engine
from .identity import IDENTITY_FILE
from .identity import functions as identity_functions

SERVER_ID_BASE = 100
"""server-id 0 refuses replication and 1 is many tools' default: start well clear of both. A datadir
from before server-ids were the datadir's keeps `SERVER_ID_BASE + ordinal`; a new one gets
`SERVER_ID_BASE + ordinal + 1000 * n` (n random, 1..65536), recorded in its identity: a replica skips
the events of its own server-id, so a datadir made anew on a pod must not share the id of the events
its predecessor wrote, which it has to replicate back."""
DATA_DIR = "/var/lib/mysql"
"""The official images' datadir, where the data volume is mounted (in the server and the sidecar)."""
CONF_DIR = "/etc/mysql/conf.d"
INITDB_DIR = "/docker-entrypoint-initdb.d"
RUN_DIR = "/run/mysql-operator"
"""A memory-backed emptyDir: the clients' option file and the TLS files the server reads."""
PODINFO_DIR = "/etc/podinfo"
"""The downward API's view of the pod's labels (`labels`) and annotations (`annotations`), refreshed by
the kubelet when they change."""
TLS_SOURCE_DIR = "/etc/mysql-operator/tls"
"""The cluster's TLS Secret, mounted into `configure` only (which copies it for the server's user)."""
ROLE_LABEL = "db.example.com/role"
PRIMARY, REPLICA = "primary", "replica"
INITIALISED_MARKER = "mysql-operator-initialised"
"""Written into the datadir by the last init script: the image's one-time init ran to its end.
A plain file in the datadir's root is no schema to the server."""
LEGACY_INITIALISED = "mysqld-auto.cnf"
"""What earlier replica inits wrote last (SET PERSIST): a datadir with it finished its init too."""
RECHECK_SECONDS = 3
"""How often the sidecar looks at its role label and its server."""
FRESH_MARKER = "mysql-operator-fresh"
"""Written into the datadir by the last init script with the identity: this datadir holds nothing of the
cluster yet. Removed once it does: by the sidecar (it replicates from a source, or it was made writable as
the first primary) or by the operator's promotion; until then, a pod labelled primary in a cluster that
has run is never writable. To serve a fresh datadir on purpose (a restore by hand), remove it."""
RAN_ANNOTATION = "db.example.com/cluster-has-run"
"""Value "true" on each database pod the operator labels once the cluster has run (a primary recorded,
or kept claims of an earlier cluster), in the same patch as the label: read by the sidecar through the
downward API, where a fresh datadir (`FRESH_MARKER`) under a primary label then means a datadir emptied
in place, not a cluster starting. A pod labelled before knows by itself (`HELD_FLAG`)."""
HELD_FLAG = "datadir-held-cluster-data"
"""Left in the conf volume (the pod's life) by the sidecar once it saw its server up on a datadir that is
not fresh: a fresh one seen later in this pod was emptied in place, the annotation or not."""
WIPED_FLAG = "datadir-wiped"
"""Left in the conf volume by the server's start when it wiped a replica's datadir: the sidecar points
the new datadir at the primary and removes it."""
ENTRYPOINT = "docker-entrypoint.sh"
"""The official images' entrypoint (on PATH), which the server container's command hands over to."""
REPLICATION_USER = "repl"


def client_cnf(run_dir: str = RUN_DIR) -> str:
    return f"{run_dir}/client.cnf"


def tls_dir(run_dir: str = RUN_DIR) -> str:
    return f"{run_dir}/tls"


SERVER_ID_CNF = "server-id.cnf"
"""The server's server-id, written by the server container's start (every start: a datadir emptied in
place gets a new one without the pod being made anew)."""
SERVER_USER_PREFIX = "server-user="
"""How `configure`'s termination message, once it succeeded, names the image's `mysql` user as uid:gid:
the datadir's owner, whom the backup pods run as (`status.datadirOwner`)."""
_SERVER_USER = re.compile(rf"^{SERVER_USER_PREFIX}([1-9][0-9]*:[0-9]+)$", re.MULTILINE)


def server_user(message: str | None) -> str | None:
    """uid:gid from `configure`'s termination message; None when it names none (an image without a
    `mysql` user, a pod made before `configure` said it, a fake pod) or names root."""
    found = _SERVER_USER.search(message or "")
    return found.group(1) if found else None


def _server_id_function(data_dir: str) -> str:
    """Shell: `server_id_of` prints the datadir's server-id (`SERVER_ID_BASE`): the one its identity
    records; else, for data already there, the ordinal's as it always was; else (a datadir about to be
    initialised) a new one. Needs $ordinal."""
    identity = f"{data_dir}/{IDENTITY_FILE}"
    return f"""server_id_of() {{
  recorded="$(sed -n 's/^server-id=\\([0-9][0-9]*\\)$/\\1/p' {identity} 2>/dev/null || true)"
  if [ -n "$recorded" ] && [ $((recorded % 1000)) -eq $(({SERVER_ID_BASE} + ordinal)) ]; then
    echo "$recorded"
  elif [ -z "$recorded" ] && [ -n "$(ls -A {data_dir} | grep -v '^lost+found$')" ]; then
    echo $(({SERVER_ID_BASE} + ordinal))
  else
    # Made anew, or another ordinal's data (a volume copied from another pod): a new id of its own.
    n="$(od -An -N2 -tu2 /dev/urandom)" && [ -n "$n" ] \\
      || {{ echo "no random number for a server-id" >&2; exit 1; }}
    echo $(({SERVER_ID_BASE} + ordinal + 1000 * ($n + 1)))
  fi
}}"""


def _role(podinfo_dir: str) -> str:
    """Shell: the pod's role label's value, empty when it has none (yet)."""
    key = ROLE_LABEL.replace(".", "\\.").replace("/", "\\/")
    return f"sed -n 's/^{key}=\"\\(.*\\)\"$/\\1/p' {podinfo_dir}/labels 2>/dev/null || true"


def configure_script(
    engine: Engine,
    data_dir: str,
    *,
    conf_dir: str = CONF_DIR,
    initdb_dir: str = INITDB_DIR,
    run_dir: str = RUN_DIR,
    tls_source_dir: str = TLS_SOURCE_DIR,
    termination_log: str = "/dev/termination-log",
) -> str:
    """The `configure` init container's script. The directories are the pod's mount paths; they are
    parameters so the script can run outside a pod too (tests run it in a temporary directory)."""
    config = "\n".join(engine.gtid_config)
    semi_sync = "\n".join(engine.semi_sync_config)
    read_only = "\\n".join(engine.read_only_config)
    pending, active = f"{conf_dir}/readonly.cnf.pending", f"{conf_dir}/readonly.cnf"  # only *.cnf is read
    tls = tls_dir(run_dir)
    identity = f"{data_dir}/{IDENTITY_FILE}"
    server_id_cnf = f"{conf_dir}/{SERVER_ID_CNF}"
    return f"""set -eu
ordinal="${{HOSTNAME##*-}}"
ENGINE={engine.name}
umask 022
{identity_functions(termination_log)}
{_server_id_function(data_dir)}
server_id="$(server_id_of)"  # recorded with kept data below; the server's comes from its start
# Data already there (kept, restored, or this pod's own) must be this engine's and release's (identity.py).
if [ -n "$(ls -A {data_dir} | grep -v '^lost+found$')" ]; then
  identify {data_dir}
  judge "pod $HOSTNAME's datadir"
  [ -z "$had_engine" ] || record {data_dir}
fi
{{
  echo '[mysqld]'
  cat <<'EOF'
{config}
ssl-ca={tls}/ca.crt
ssl-cert={tls}/tls.crt
ssl-key={tls}/tls.key
EOF
  if [ "${{SEMI_SYNC:-off}}" = on ]; then
    cat <<'EOF'
{semi_sync}
EOF
  fi
}} > {conf_dir}/server.cnf
# Read-only from the real server's first start on, whatever the ordinal: only a promotion makes a
# server writable. Not during the init phase: its own writes (the root password) would be refused.
printf '[mysqld]\\n{read_only}\\n' > {pending}
cat > {initdb_dir}/zz-initialised.sh <<EOF
touch {data_dir}/{FRESH_MARKER}
touch {data_dir}/{INITIALISED_MARKER}
printf 'engine=%s\\nversion=%s\\ncluster=%s\\ncluster-uid=%s\\nserver-id=%s\\n' '$ENGINE' \\
  '$SERVER_VERSION' '$CLUSTER_NAME' '$CLUSTER_UID' "\\$(sed -n 's/^server-id=//p' {server_id_cnf})" \\
  > {identity}
cp {pending} {active}
EOF
# The server reads its key as its own user; certificates are public.
mkdir -p -m 755 {tls}
cp {tls_source_dir}/ca.crt {tls_source_dir}/tls.crt {tls_source_dir}/tls.key {tls}/
chmod 644 {tls}/ca.crt {tls}/tls.crt
chmod 600 {tls}/tls.key
if id mysql >/dev/null 2>&1; then chown mysql {tls}/tls.key; fi
# The clients' login: an option file only root reads; a password is never an argument of a process.
case "$MYSQL_ROOT_PASSWORD" in
  '' | *'"'* | *'\\'*)
    echo "configure: the root password must be non-empty, without \\" or \\\\" >&2
    exit 1 ;;
esac
if [ "$(printf '%s' "$MYSQL_ROOT_PASSWORD" | wc -l)" -ne 0 ]; then
  echo "configure: the root password must be one line" >&2
  exit 1
fi
umask 077
printf '[client]\\nuser=root\\npassword="%s"\\nhost=127.0.0.1\\n' "$MYSQL_ROOT_PASSWORD" \\
  > {client_cnf(run_dir)}
# The datadir's owner, for the backup pods: the operator reads it off this container's status, with no
# exec into the pod.
if id mysql >/dev/null 2>&1; then
  printf '{SERVER_USER_PREFIX}%s:%s\\n' "$(id -u mysql)" "$(id -g mysql)" > {termination_log} || :
fi
"""


def start_script(
    engine: Engine, data_dir: str, *, conf_dir: str = CONF_DIR, podinfo_dir: str = PODINFO_DIR
) -> str:
    """The server container's command: `sh -c <this> sh <server>`. It settles the datadir on every start
    of the container, then hands over to the image's entrypoint with the server's name."""
    pending, active = f"{conf_dir}/readonly.cnf.pending", f"{conf_dir}/readonly.cnf"
    initialised = f"[ -e {data_dir}/{INITIALISED_MARKER} ] || [ -e {data_dir}/{LEGACY_INITIALISED} ]"
    return f"""set -eu
role="$({_role(podinfo_dir)})"
if [ -n "$(ls -A {data_dir} | grep -v '^lost+found$')" ]; then
  if ! {{ {initialised}; }} && [ "$role" = {REPLICA} ]; then
    echo "{engine.server}: the datadir's first init did not finish; clearing it to initialise it again"
    find {data_dir} -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {{}} +
    touch {conf_dir}/{WIPED_FLAG}
    rm -f {active}
  else
    cp {pending} {active}
  fi
else
  # An empty datadir is initialised by the image first; its last init script turns read-only on.
  rm -f {active}
fi
ordinal="${{HOSTNAME##*-}}"
{_server_id_function(data_dir)}
server_id="$(server_id_of)"
printf '[mysqld]\\nserver-id=%s\\n' "$server_id" > {conf_dir}/{SERVER_ID_CNF}
# The official images' entrypoint is on PATH; some derived images keep it at the root.
exec "$(command -v {ENTRYPOINT} || echo /{ENTRYPOINT})" "$@"
"""


def probe_script(engine: Engine, *, run_dir: str = RUN_DIR, podinfo_dir: str = PODINFO_DIR) -> str:
    """Exit 0 when the server answers an authenticated query and, labelled primary, is writable, or,
    otherwise, replicates."""
    login = f"--defaults-extra-file={client_cnf(run_dir)}"
    return f"""role="$({_role(podinfo_dir)})"
if [ "$role" = {PRIMARY} ]; then
  read_only="$({engine.client} {login} -N -e 'SELECT @@global.read_only')" || exit 1
  [ "$read_only" = 0 ] || {{ echo "labelled primary, still read-only"; exit 1; }}
  exit 0
fi
status="$({engine.client} {login} -e '{engine.status_statement}')" || exit 1
for thread in IO SQL; do
  echo "$status" | grep -Eq "(Replica|Slave)_${{thread}}_Running: Yes" \\
    || {{ echo "$thread thread not running"; exit 1; }}
done
"""


IO_CONNECTED = "(Replica|Slave)_IO_Running: Yes"
"""An extended regular expression for the replica status of a connected IO thread."""


def _ran(podinfo_dir: str) -> str:
    """Shell: true when the pod carries `RAN_ANNOTATION`="true"."""
    return f"grep -qx '{RAN_ANNOTATION}=\"true\"' {podinfo_dir}/annotations 2>/dev/null"


def replication_script(
    engine: Engine,
    *,
    data_dir: str = DATA_DIR,
    conf_dir: str = CONF_DIR,
    run_dir: str = RUN_DIR,
    podinfo_dir: str = PODINFO_DIR,
) -> str:
    """The sidecar: waits for the local server, then follows the role label (see the module docstring)."""
    login = f"--defaults-extra-file={client_cnf(run_dir)}"
    point = engine.point_replica_format(f"{tls_dir(run_dir)}/ca.crt")
    account = (
        "CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s' REQUIRE SSL;\\n"
        "ALTER USER '%s'@'%%' IDENTIFIED BY '%s' REQUIRE SSL;\\n"
        "GRANT REPLICATION SLAVE ON *.* TO '%s'@'%%';\\n"
    )
    return f"""set -u
trap 'exit 0' TERM INT
# The password goes into SQL string literals: only what needs no quoting (generated ones are so).
case "$REPLICATION_PASSWORD" in
  '' | *[!A-Za-z0-9_-]*)
    echo "replication: the credentials Secret's replication-password must be non-empty [A-Za-z0-9_-]" >&2
    exit 1 ;;
esac
sql() {{ {engine.client} {login} -N "$@"; }}
pause() {{ sleep "$1" & wait $!; }}
role() {{ {_role(podinfo_dir)}; }}
ran() {{ {_ran(podinfo_dir)}; }}
fresh() {{ [ -e {data_dir}/{FRESH_MARKER} ]; }}
held() {{ [ -e {conf_dir}/{HELD_FLAG} ]; }}
# Statements carrying a password go through the client's stdin (printf is the shell's own).
account() {{
  printf "{account}" "$REPLICATION_USER" "$REPLICATION_PASSWORD" "$REPLICATION_USER" \\
    "$REPLICATION_PASSWORD" "$REPLICATION_USER" | sql
}}
point() {{
  # A failed query is no answer: taken for "none configured", it would re-point (and restart) a
  # replication someone stopped.
  until status="$(sql -e '{engine.status_statement}')"; do pause 5; done
  [ -z "$status" ] || return 1
  until printf "{point}" "$PRIMARY_HOST" "$REPLICATION_USER" "$REPLICATION_PASSWORD" | sql; do pause 5; done
  echo "replication: replicating from $PRIMARY_HOST (TLS, server certificate verified)"
}}
read_only() {{ sql -e 'SELECT @@global.read_only'; }}
until sql -e 'SELECT 1' >/dev/null 2>&1; do pause 2; done
was=none
while :; do
  now="$(role)"
  held || fresh || ! sql -e 'SELECT 1' >/dev/null 2>&1 || touch {conf_dir}/{HELD_FLAG}
  if [ "$now" = {PRIMARY} ]; then
    if status="$(sql -e '{engine.status_statement}')" && [ -z "$status" ]; then
      if fresh && {{ ran || held; }}; then
        # Initialised anew (emptied in place) after the cluster ran: never served; the operator fails over.
        [ "$(read_only)" = 1 ] || sql -e '{engine.read_only_sql}' || :
        if [ -z "${{refused:-}}" ]; then
          refused=1
          echo "replication: labelled primary, but its datadir was initialised anew after the cluster \
ran (emptied in place?): never writable"
        fi
      else
        refused=""
        [ "${{SEMI_SYNC:-off}}" != on ] || sql -e 'SET GLOBAL {engine.semi_sync_primary}=ON' || :
        if [ "$(read_only)" != 0 ] && sql -e '{engine.writable_sql}'; then
          echo "replication: writable: this pod is labelled primary"
        fi
        # The first primary: from now on its datadir is the cluster's.
        if fresh && [ "$(read_only)" = 0 ] && rm -f {data_dir}/{FRESH_MARKER}; then
          echo "replication: the first primary's datadir holds the cluster's data"
        fi
        if [ -z "${{account_ready:-}}" ] && account; then
          account_ready=1
          echo "replication: account $REPLICATION_USER ready"
        fi
      fi
    elif [ -n "${{status:-}}" ] && [ "$was" != {PRIMARY} ]; then
      echo "replication: labelled primary but still replicating: waiting for the operator's promotion"
    fi
  else
    if [ "$(read_only)" != 1 ] && sql -e '{engine.read_only_sql}'; then
      echo "replication: read-only: this pod is not labelled primary"
    fi
    [ "${{SEMI_SYNC:-off}}" != on ] || sql -e 'SET GLOBAL {engine.semi_sync_primary}=OFF' || :
    # Pointed when it becomes a replica (new, or the primary it was), and after its datadir was wiped.
    if [ "$now" = {REPLICA} ] && {{ [ "$was" != {REPLICA} ] || [ -e {conf_dir}/{WIPED_FLAG} ]; }}; then
      point || echo "replication: already configured; left as it is"
      rm -f {conf_dir}/{WIPED_FLAG}
    fi
    # A fresh datadir replicating from the cluster holds (or is receiving) the cluster's data.
    # (Field names: without -N, which prints a vertical row's values only.)
    if [ "$now" = {REPLICA} ] && fresh && {engine.client} {login} -e '{engine.status_statement}' \
        | grep -Eq '{IO_CONNECTED}'; then
      rm -f {data_dir}/{FRESH_MARKER}
      echo "replication: the datadir replicates the cluster's data"
    fi
  fi
  was="${{now:-none}}"
  pause {RECHECK_SECONDS}
done
"""
