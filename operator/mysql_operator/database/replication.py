"""The database pod: pod 0 is the primary, every other ordinal a read-only replica of it.

`replicas: N` must not mean N unrelated databases behind one Service, so each pod is configured from
its ordinal (the StatefulSet gives every pod the same template). What must hold whatever happened
before — a killed init, a restart, a lost pod — is set on every start, never once:

* `configure` (init container) writes the server's my.cnf: `server-id = 100 + ordinal`, GTIDs and,
  on a replica, `read_only` (and MySQL's `super_read_only`), made active by the server's start.
* The server container's command (`start_script`) runs before the image's entrypoint on every start
  of the container, also when the kubelet restarts a crashed server without rerunning init
  containers. On a replica: a datadir whose one-time init ran to its end (the marker of the image's
  init phase) gets `read_only` at once, so the real server is read-only from its first start on,
  whether or not replication was ever set up (the init phase, networking off, runs without it: its
  own writes would fail); a datadir whose init was interrupted (no marker) is wiped to be
  initialised again: its data comes from the primary anyway, and a half-initialised datadir would
  otherwise come back without the root password, writable, unusable and never replicating. The
  primary's datadir is never wiped.
* `replication` (sidecar) waits for the local server, then on pod 0 ensures the replication account
  (REPLICATION SLAVE only, its own password), and on a replica that has no source points it at
  pod 0 with GTID auto-position (TLS when the primary has it) and starts it — at its start, and
  again when the server's start wiped the datadir (`WIPED_FLAG`). It never restarts a replication
  someone stopped and, while the pod runs, never re-adds a source someone removed: such a replica is
  unready, for a human to look at.
* Readiness is what clients rely on: the server answers an authenticated query (`mysqladmin ping`
  exits 0 even on "Access denied"), and a replica's IO and SQL threads both run.

Limits, on purpose for a reference operator: a new replica replays the primary's binlog from the
start (fine while the primary keeps all of it; a large or old primary needs a clone or a restored
backup), and there is no failover: if pod 0's volume is lost, promoting a replica is a human decision.
"""

from __future__ import annotations

from typing import Any

from .engines import Engine

Obj = dict[str, Any]

SERVER_ID_BASE = 100
"""server-id 0 refuses replication and 1 is many tools' default: start well clear of both."""
CONF_DIR = "/etc/mysql/conf.d"
INITDB_DIR = "/docker-entrypoint-initdb.d"
INITIALISED_MARKER = "mysql-operator-initialised"
"""Written into the datadir by the last init script: the image's one-time init ran to its end.
A plain file in the datadir's root is no schema to the server."""
LEGACY_INITIALISED = "mysqld-auto.cnf"
"""What earlier replica inits wrote last (SET PERSIST): a datadir with it finished its init too."""
RECHECK_SECONDS = 10
"""How often a replica's sidecar looks for `WIPED_FLAG`."""
WIPED_FLAG = "datadir-wiped"
"""Left in the conf volume by the server's start when it wiped a replica's datadir: the sidecar points
the new datadir at pod 0 and removes it. Only this re-points: a source a human removed (RESET REPLICA
ALL, the first step of a rebuild or a promotion) is left removed."""
ENTRYPOINT = "docker-entrypoint.sh"
"""The official images' entrypoint (on PATH), which the server container's command hands over to."""
REPLICATION_USER = "repl"
SIDECAR_RESOURCES = {"cpu": "20m", "memory": "32Mi"}
TERMINATION_GRACE_SECONDS = 120
"""mysqld shuts down cleanly on SIGTERM; the default 30 s can SIGKILL it mid-flush, and the final
backup relies on a cleanly stopped datadir (MyISAM tables and DDL are not crash-safe)."""


def configure_script(
    engine: Engine, data_dir: str, *, conf_dir: str = CONF_DIR, initdb_dir: str = INITDB_DIR
) -> str:
    """The `configure` init container's script. The directories are the pod's mount paths; they are
    parameters so the script can run outside a pod too (tests run it in a temporary directory)."""
    config = "\n".join(engine.gtid_config)
    replica = "\\n".join(engine.replica_config)
    pending, active = f"{conf_dir}/replica.cnf.pending", f"{conf_dir}/replica.cnf"  # only *.cnf is read
    return f"""set -eu
ordinal="${{HOSTNAME##*-}}"
{{
  echo '[mysqld]'
  echo "server-id=$(({SERVER_ID_BASE} + ordinal))"
  cat <<'EOF'
{config}
EOF
}} > {conf_dir}/server.cnf
# The last init script: marks the one-time init done and makes a replica read-only from the real
# server's first start on (not before: the init phase's own writes, e.g. the root password, would fail).
cat > {initdb_dir}/zz-initialised.sh <<'EOF'
touch {data_dir}/{INITIALISED_MARKER}
if [ -e {pending} ]; then cp {pending} {active}; fi
EOF
if [ "$ordinal" -gt 0 ]; then
  printf '[mysqld]\\n{replica}\\n' > {pending}
fi
"""


def start_script(engine: Engine, data_dir: str, *, conf_dir: str = CONF_DIR) -> str:
    """The server container's command: `sh -c <this> sh <server>`. It settles a replica's datadir on
    every start of the container, then hands over to the image's entrypoint with the server's name."""
    pending, active = f"{conf_dir}/replica.cnf.pending", f"{conf_dir}/replica.cnf"
    initialised = f"[ -e {data_dir}/{INITIALISED_MARKER} ] || [ -e {data_dir}/{LEGACY_INITIALISED} ]"
    return f"""set -eu
if [ -e {pending} ]; then
  if {initialised}; then
    cp {pending} {active}
  else
    # Read-only only once the init phase has run (again): its own writes would be refused.
    rm -f {active}
    if [ -n "$(ls -A {data_dir} | grep -v '^lost+found$')" ]; then
      echo "{engine.server}: the datadir's first init did not finish; clearing it to initialise it again"
      find {data_dir} -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {{}} +
      touch {conf_dir}/{WIPED_FLAG}
    fi
  fi
fi
# The official images' entrypoint is on PATH; some derived images keep it at the root.
exec "$(command -v {ENTRYPOINT} || echo /{ENTRYPOINT})" "$@"
"""


def probe_script(engine: Engine) -> str:
    """Exit 0 when the server answers an authenticated query and, on a replica, replicates."""
    return f"""ordinal="${{HOSTNAME##*-}}"
export MYSQL_PWD="$MYSQL_ROOT_PASSWORD"
if [ "$ordinal" -eq 0 ]; then
  exec {engine.client} -h 127.0.0.1 -u root -N -e 'SELECT 1' >/dev/null
fi
status="$({engine.client} -h 127.0.0.1 -u root -e '{engine.status_statement}')" || exit 1
for thread in IO SQL; do
  echo "$status" | grep -Eq "(Replica|Slave)_${{thread}}_Running: Yes" \\
    || {{ echo "$thread thread not running"; exit 1; }}
done
"""


def replication_script(engine: Engine, *, conf_dir: str = CONF_DIR) -> str:
    """The sidecar: idempotent set-up, then idle (exits at once on SIGTERM), pointing a replica again
    whenever its server's start wiped the datadir."""
    if engine.name == "mariadb":  # TLS when the primary has it (MariaDB ships without certificates)
        # Only an answer decides: until the primary's sidecar has made the account, the query fails,
        # and that is no reason to replicate in clear for good.
        tls = (
            f'ssl="$(MYSQL_PWD="$REPLICATION_PASSWORD" {engine.client} -h "$PRIMARY_HOST" '
            '-u "$REPLICATION_USER" -N -e \'SELECT @@have_ssl\' 2>/dev/null)" \\\n'
            '      && if [ "$ssl" = YES ]; then tls=1; else tls=0; fi'
        )
    else:  # MySQL generates its certificates at init
        tls = "tls=1"
    return f"""set -u
trap 'exit 0' TERM INT
# The password goes into SQL string literals: only what needs no quoting (generated ones are so).
case "$REPLICATION_PASSWORD" in
  '' | *[!A-Za-z0-9_-]*)
    echo "replication: the credentials Secret's replication-password must be non-empty [A-Za-z0-9_-]" >&2
    exit 1 ;;
esac
ordinal="${{HOSTNAME##*-}}"
export MYSQL_PWD="$MYSQL_ROOT_PASSWORD"
sql() {{ {engine.client} -h 127.0.0.1 -u root -N "$@"; }}
pause() {{ sleep "$1" & wait $!; }}
until sql -e 'SELECT 1' >/dev/null 2>&1; do pause 2; done
if [ "$ordinal" -eq 0 ]; then
  until sql -e "CREATE USER IF NOT EXISTS '$REPLICATION_USER'@'%' IDENTIFIED BY '$REPLICATION_PASSWORD';
      ALTER USER '$REPLICATION_USER'@'%' IDENTIFIED BY '$REPLICATION_PASSWORD';
      GRANT REPLICATION SLAVE ON *.* TO '$REPLICATION_USER'@'%';"; do pause 5; done
  echo "replication: account $REPLICATION_USER ready"
  while :; do pause 3600; done
fi
# A replica with no source is pointed at pod 0; one with a source, running or stopped, is left as it
# is. A server restarted alone (no new pod, so no new sidecar) on a datadir its start wiped has no
# source any more: its start leaves a flag, looked for every {RECHECK_SECONDS} s.
point() {{
  # A failed query is no answer: taken for "none configured", it would re-point (and restart) a
  # replication someone stopped.
  until status="$(sql -e '{engine.status_statement}')"; do pause 5; done
  [ -z "$status" ] || return 1
  until {tls} \\
    && sql -e "{engine.point_replica_sql()}"
  do pause 5; done
  echo "replication: replicating from $PRIMARY_HOST (tls=$tls)"
}}
point || echo "replication: already configured; left as it is"
while :; do
  pause {RECHECK_SECONDS}
  if [ -e {conf_dir}/{WIPED_FLAG} ]; then
    echo "replication: the server's start wiped the datadir; pointing it again"
    point || echo "replication: already configured; left as it is"
    rm -f {conf_dir}/{WIPED_FLAG}
  fi
done
"""


def mysql_pod_spec(
    *,
    engine: Engine,
    image: str,
    password_env: Obj,
    replication_password_env: Obj,
    primary_host: str,
    resources: Obj,
    data_volume: str,
    data_dir: str,
    port: int,
    first_init: tuple[Obj, ...] = (),
    volumes: tuple[Obj, ...] = (),
) -> Obj:
    """The pod template's spec: a `configure` init container, the server, the `replication` sidecar.
    `first_init` runs before `configure` (a restore fills the datadir first); `volumes` are theirs."""
    generated = [{"name": "conf", "mountPath": CONF_DIR}, {"name": "initdb", "mountPath": INITDB_DIR}]
    data = {"name": data_volume, "mountPath": data_dir}
    configure = {
        "name": "configure",
        "image": image,  # has sh; one image to pull per node
        "command": ["sh", "-c", configure_script(engine, data_dir)],
        "volumeMounts": [*generated, data],
    }
    server = {
        "name": "mysql",
        "image": image,
        "command": ["sh", "-c", start_script(engine, data_dir), "sh", engine.server],
        "ports": [{"name": "mysql", "containerPort": port}],
        "env": [password_env, {"name": "PRIMARY_HOST", "value": primary_host}],
        "resources": resources,
        # TCP on 127.0.0.1 answers only once the real server is up: the image's init phase runs a
        # temporary server with networking off.
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", probe_script(engine)]},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [data, *generated],
    }
    sidecar = {
        "name": "replication",
        "image": image,
        "command": ["sh", "-c", replication_script(engine)],
        "volumeMounts": [{"name": "conf", "mountPath": CONF_DIR}],  # for WIPED_FLAG
        "env": [
            password_env,
            replication_password_env,
            {"name": "REPLICATION_USER", "value": REPLICATION_USER},
            {"name": "PRIMARY_HOST", "value": primary_host},
        ],
        # Requests equal limits, as the server's: the sidecar never makes the pod less than Guaranteed.
        "resources": {"requests": SIDECAR_RESOURCES, "limits": SIDECAR_RESOURCES},
    }
    return {
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "initContainers": [*first_init, configure],
        "containers": [server, sidecar],
        "volumes": [{"name": "conf", "emptyDir": {}}, {"name": "initdb", "emptyDir": {}}, *volumes],
    }
