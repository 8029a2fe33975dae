"""The MySQL pod: pod 0 is the primary, every other ordinal a read-only replica of it.

`replicas: N` must not mean N unrelated databases behind one Service, so each pod is configured from
its ordinal by an init container (the StatefulSet gives every pod the same template):

* every pod: `server-id = 100 + ordinal`, GTIDs on (so a replica needs no binlog coordinates);
* ordinal > 0: an init script for the image's entrypoint (`/docker-entrypoint-initdb.d`, run once,
  when the datadir is first initialised) points the replica at pod 0 with GTID auto-position,
  persists `read_only`/`super_read_only` (SET PERSIST lands in the datadir's mysqld-auto.cnf, so it
  survives restarts and is applied only after the entrypoint created its users) and starts it.

Limits, on purpose for a reference operator: a new replica replays the primary's binlog from the
start (fine while the primary keeps all of it; a large or old primary needs the clone plugin), and
there is no failover: if pod 0's volume is lost, promoting a replica is a human decision.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

SERVER_ID_BASE = 100
"""server-id 0 refuses replication and 1 is many tools' default: start well clear of both."""
CONF_DIR = "/etc/mysql/conf.d"
INITDB_DIR = "/docker-entrypoint-initdb.d"
TERMINATION_GRACE_SECONDS = 120
"""mysqld shuts down cleanly on SIGTERM; the default 30 s can SIGKILL it mid-flush, and the final
backup relies on a cleanly stopped datadir (MyISAM tables and DDL are not crash-safe)."""

# $PRIMARY_HOST and $MYSQL_ROOT_PASSWORD expand when the entrypoint sources replica.sh, not here
# (quoted heredoc), so the password is never written to the emptyDir.
CONFIGURE_SCRIPT = f"""set -eu
ordinal="${{HOSTNAME##*-}}"
cat > {CONF_DIR}/server.cnf <<EOF
[mysqld]
server-id=$(({SERVER_ID_BASE} + ordinal))
gtid-mode=ON
enforce-gtid-consistency=ON
EOF
if [ "$ordinal" -gt 0 ]; then
  cat > {INITDB_DIR}/replica.sh <<'EOF'
docker_process_sql <<SQL
CHANGE REPLICATION SOURCE TO SOURCE_HOST='$PRIMARY_HOST', SOURCE_PORT=3306, SOURCE_USER='root',
  SOURCE_PASSWORD='$MYSQL_ROOT_PASSWORD', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1;
SET PERSIST read_only = ON;
SET PERSIST super_read_only = ON;
START REPLICA;
SQL
EOF
fi
"""

PROBE_COMMAND = 'MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysqladmin ping -h 127.0.0.1 -u root'


def mysql_pod_spec(
    *,
    image: str,
    password_env: Obj,
    primary_host: str,
    resources: Obj,
    data_volume: str,
    data_dir: str,
    port: int,
) -> Obj:
    """The pod template's spec: a `configure` init container, then mysqld."""
    generated = [{"name": "conf", "mountPath": CONF_DIR}, {"name": "initdb", "mountPath": INITDB_DIR}]
    configure = {
        "name": "configure",
        "image": image,  # has sh; one image to pull per node
        "command": ["sh", "-c", CONFIGURE_SCRIPT],
        "volumeMounts": generated,
    }
    mysql = {
        "name": "mysql",
        "image": image,
        "ports": [{"name": "mysql", "containerPort": port}],
        "env": [password_env, {"name": "PRIMARY_HOST", "value": primary_host}],
        "resources": resources,
        # TCP on 127.0.0.1 answers only once the real server is up: the image's init phase runs a
        # temporary server with networking off.
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", PROBE_COMMAND]},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [{"name": data_volume, "mountPath": data_dir}, *generated],
    }
    return {
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "initContainers": [configure],
        "containers": [mysql],
        "volumes": [{"name": "conf", "emptyDir": {}}, {"name": "initdb", "emptyDir": {}}],
    }
