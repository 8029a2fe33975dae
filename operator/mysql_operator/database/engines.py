"""The database servers the operator drives, and what differs between them.

MySQL and MariaDB share the protocol, the datadir layout and the official images' entrypoint contract
(``MYSQL_ROOT_PASSWORD``, ``/docker-entrypoint-initdb.d``), and differ where replication is set up:

=====================  =====================================  ========================================
                       mysql (8.0.23+, 8.4, 9.x)              mariadb (10.6+, 11.x)
=====================  =====================================  ========================================
GTIDs                  ``gtid-mode=ON`` + consistency         always on; ``gtid-strict-mode=ON``
point a replica        ``CHANGE REPLICATION SOURCE TO ...``   ``CHANGE MASTER TO ... MASTER_USE_GTID``
                       ``SOURCE_AUTO_POSITION=1``             ``=current_pos``
read-only server       ``read_only`` + ``super_read_only``    ``read_only`` (accounts with READ_ONLY
                       (refuses root too)                     ADMIN, root among them, still write)
GTID positions         ``gtid_executed`` (a set of            ``gtid_current_pos``, ``gtid_slave_pos``
                       ``uuid:intervals``)                    (``domain-server-seq`` per domain)
semi-sync              plugins ``semisync_source``,           built in (10.3+)
                       ``semisync_replica`` (8.0.26+)
programs               ``mysqld``, ``mysql``, ``mysqladmin``,  ``mariadbd``, ``mariadb``,
                       ``mysqldump``                          ``mariadb-admin``, ``mariadb-dump``
=====================  =====================================  ========================================

The versions are the oldest that have the syntax used: ``CHANGE REPLICATION SOURCE`` and
``START REPLICA`` came with MySQL 8.0.22/8.0.23 (``SOURCE_SSL`` naming with 8.0.23); the ``mariadb-*``
client names with MariaDB 10.5, and 10.6 is the oldest series still maintained.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

EngineName = Literal["mysql", "mariadb"]


@dataclass(frozen=True)
class Engine:
    name: EngineName
    default_version: str
    """The image tag used when spec.version is unset."""
    version_pattern: str
    """Image tags of versions the operator can drive (a CEL-compatible RE2 regex)."""
    supported: str
    """The same, in words, for error messages."""
    server: str
    """The server program, which the official images' entrypoint is given to start (their CMD)."""
    client: str
    dump: str
    gtid_config: tuple[str, ...]
    """my.cnf lines beyond server-id that give every server GTIDs, a binlog replicas can follow, and
    a replica that notices a silent source within 10 s (heartbeats every 5 s): a source whose network
    is gone sends no reset, and the default (60 s) would hold a failover up by a minute."""
    read_only_config: tuple[str, ...]
    """my.cnf lines every server starts with once its datadir is initialised: only a promotion makes
    one writable."""
    semi_sync_config: tuple[str, ...]
    """my.cnf lines with semi-synchronous replication on: the replica side always on (it must be on
    before the IO thread connects), the primary side switched on by promotion; lossless (AFTER_SYNC)."""
    status_statement: str
    """Prints the replica threads' state; empty output means no replication is configured."""
    read_only_sql: str
    """Fences a server: no account without the engine's bypass privilege may write."""
    writable_sql: str
    semi_sync_primary: str
    """Global variable that makes a server wait for a replica's receipt before a commit returns."""
    stop_io_sql: str
    """Stops receiving, keeps applying what was received."""
    reset_replication_sql: str
    """Ends replication for good: a promotion's first step."""
    restart_replication_sql: str
    """`%s`: the source host. Reconnects (to the Service, i.e. to whichever pod is primary now)."""
    wait_applied_function: str
    """SQL function(gtids, seconds) that returns 0 once those GTIDs are applied, else non-zero."""
    gtid_variables: tuple[str, ...]
    """Global variables holding the server's GTID positions, most inclusive first."""
    received_field: str
    """Field of the replica status with the GTIDs received (relay log), applied or not."""

    def supports(self, version: str) -> bool:
        return re.fullmatch(self.version_pattern, version) is not None

    def point_replica_format(self, ca_file: str) -> str:
        """A printf format: host, user and password (`%s`, in that order) fill it to the statements that
        point a replica at its source and start it. The password reaches the client through its stdin,
        never an argument. TLS verified against `ca_file`, the operator's CA; reconnecting every 2 s."""
        if self.name == "mysql":
            return (
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST='%s', SOURCE_PORT=3306, SOURCE_USER='%s', "
                "SOURCE_PASSWORD='%s', SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=2, SOURCE_SSL=1, "
                f"SOURCE_SSL_CA='{ca_file}', SOURCE_SSL_VERIFY_SERVER_CERT=1; START REPLICA;\\n"
            )
        # current_pos: a former primary's own transactions count too (they are in its binlog, not in
        # gtid_slave_pos); one the new primary lacks then stops replication, for a human to see.
        return (
            "CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=3306, MASTER_USER='%s', MASTER_PASSWORD='%s', "
            "MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=2, MASTER_SSL=1, "
            f"MASTER_SSL_CA='{ca_file}', MASTER_SSL_VERIFY_SERVER_CERT=1; START SLAVE;\\n"
        )


# Tags: 8, 8.0 (newest 8.0.x), 8.0.23 and later, 8.1-8.4, 9.x, with an optional suffix (-oracle).
_MYSQL = (
    r"^(8|8\.0|8\.0\.(2[3-9]|[3-9][0-9]|[1-9][0-9][0-9]+)|8\.[1-9][0-9]*(\.[0-9]+)?"
    r"|(9|[1-9][0-9]+)(\.[0-9]+){0,2})(-[a-z0-9]+)?$"
)
# Tags: 10 (newest 10.x), 10.6 and later, 11 and later, with an optional suffix (-jammy, -ubi).
_MARIADB = r"^(10|10\.([6-9]|[1-9][0-9])(\.[0-9]+)?|(1[1-9]|[2-9][0-9])(\.[0-9]+){0,2})(-[a-z0-9]+)?$"

MYSQL = Engine(
    name="mysql",
    default_version="8.4",
    version_pattern=_MYSQL,
    supported="8.0.23 or newer (8.0, 8.4, 9.x)",
    server="mysqld",
    client="mysql",
    dump="mysqldump",
    gtid_config=(
        "gtid-mode=ON",
        "enforce-gtid-consistency=ON",
        "loose-replica-net-timeout=10",  # 8.0.26+; the older name for older servers
        "loose-slave-net-timeout=10",
    ),
    read_only_config=("read-only=ON", "super-read-only=ON"),
    semi_sync_config=(
        "plugin-load-add=semisync_source.so",
        "plugin-load-add=semisync_replica.so",
        "loose-rpl-semi-sync-replica-enabled=ON",
        "loose-rpl-semi-sync-source-wait-point=AFTER_SYNC",
        "loose-rpl-semi-sync-source-timeout=10000",
    ),
    status_statement="SHOW REPLICA STATUS\\G",
    read_only_sql="SET GLOBAL super_read_only=ON",
    writable_sql="SET GLOBAL super_read_only=OFF; SET GLOBAL read_only=OFF",
    semi_sync_primary="rpl_semi_sync_source_enabled",
    stop_io_sql="STOP REPLICA IO_THREAD",
    reset_replication_sql="STOP REPLICA; RESET REPLICA ALL",
    restart_replication_sql="STOP REPLICA; CHANGE REPLICATION SOURCE TO SOURCE_HOST='%s'; START REPLICA",
    wait_applied_function="WAIT_FOR_EXECUTED_GTID_SET",
    gtid_variables=("gtid_executed",),
    received_field="Retrieved_Gtid_Set",
)
MARIADB = Engine(
    name="mariadb",
    default_version="10.11",
    version_pattern=_MARIADB,
    supported="10.6 or newer (10.6, 10.11, 11.x)",
    server="mariadbd",
    client="mariadb",
    dump="mariadb-dump",
    gtid_config=(
        "log-bin=mysql-bin",
        "log-slave-updates=ON",
        "gtid-strict-mode=ON",
        "binlog-format=ROW",
        "slave-net-timeout=10",
    ),
    read_only_config=("read-only=ON",),
    semi_sync_config=(
        "rpl-semi-sync-slave-enabled=ON",
        "rpl-semi-sync-master-wait-point=AFTER_SYNC",
        "rpl-semi-sync-master-timeout=10000",
    ),
    status_statement="SHOW SLAVE STATUS\\G",
    read_only_sql="SET GLOBAL read_only=ON",
    writable_sql="SET GLOBAL read_only=OFF",
    semi_sync_primary="rpl_semi_sync_master_enabled",
    stop_io_sql="STOP SLAVE IO_THREAD",
    reset_replication_sql="STOP SLAVE; RESET SLAVE ALL",
    restart_replication_sql="STOP SLAVE; CHANGE MASTER TO MASTER_HOST='%s'; START SLAVE",
    wait_applied_function="MASTER_GTID_WAIT",
    gtid_variables=("gtid_current_pos", "gtid_slave_pos", "gtid_binlog_pos"),
    received_field="Gtid_IO_Pos",
)
ENGINES: dict[str, Engine] = {e.name: e for e in (MYSQL, MARIADB)}


def engine(name: str) -> Engine:
    return ENGINES[name]
